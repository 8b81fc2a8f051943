"""Which ready replica gets the next request: the one with the fewest requests in flight from this proxy.

Ties go round robin (the scan starts one replica further each time), so idle replicas share sequential
traffic evenly. The in-flight counts are also what draining waits on: a draining replica is marked drained
once its count is zero. Everything here runs on the event loop, with no await between a pick and its
`acquire`, so a replica's count is exact at every table swap.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from gateway.routing_table import Replica, Service


class Balancer:
    def __init__(self) -> None:
        self._in_flight: dict[str, int] = {}
        self._turn = 0
        self.on_idle: Callable[[str], None] | None = None  # called when a replica's count drops to zero

    def pick(self, service: Service, exclude: Collection[str] = ()) -> Replica | None:
        """The ready replica for the next request (not one of `exclude`), or None if there is none."""
        ready = service.ready
        count = len(ready)
        if count == 1:
            only = ready[0]
            return None if only.id in exclude else only
        if count == 0:
            return None
        self._turn += 1
        start = self._turn % count
        in_flight = self._in_flight
        best: Replica | None = None
        best_load = 0
        for offset in range(count):
            replica = ready[(start + offset) % count]
            if replica.id in exclude:
                continue
            load = in_flight.get(replica.id, 0)
            if best is None or load < best_load:
                best, best_load = replica, load
                if load == 0:
                    break
        return best

    def acquire(self, replica_id: str) -> None:
        self._in_flight[replica_id] = self._in_flight.get(replica_id, 0) + 1

    def release(self, replica_id: str) -> None:
        left = self._in_flight.get(replica_id, 0) - 1
        if left > 0:
            self._in_flight[replica_id] = left
            return
        self._in_flight.pop(replica_id, None)
        if self.on_idle is not None:
            self.on_idle(replica_id)

    def in_flight(self, replica_id: str) -> int:
        return self._in_flight.get(replica_id, 0)

    def total_in_flight(self) -> int:
        return sum(self._in_flight.values())
