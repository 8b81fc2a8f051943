"""The ids a fleet scheduler's queue holds, indexed for a step's many enqueues (core.fleets.scheduling)."""

from __future__ import annotations

from core.wire.job_messages import PlacementRequest


class QueueIndex:
    """The request and job ids of a scheduler's queue, kept up across a step's enqueues: each would
    otherwise search the whole queue, and a burst's step hears thousands (docs/fleets.md#scheduling).
    Valid for the one queue it was built or last updated for (queues are never changed in place); any
    other queue is indexed anew."""

    def __init__(self) -> None:
        self._queue: list[PlacementRequest] | None = None
        self.requests: set[str] = set()
        self.jobs: set[str] = set()

    def of(self, queue: list[PlacementRequest]) -> QueueIndex:
        if queue is not self._queue:
            self.requests = {request.request_id for request in queue}
            self.jobs = {node.job_id for request in queue for node in request.nodes}
            self._queue = queue
        return self

    def added(self, request: PlacementRequest, queue: list[PlacementRequest]) -> None:
        self.requests.add(request.request_id)
        self.jobs.update(node.job_id for node in request.nodes)
        self._queue = queue
