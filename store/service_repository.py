"""The store's services: replicas the proxies route to, the proxies, drains and request counts.

A mixin of `Store` (store.repository), like FleetRecords: idempotent writes, as activities and proxies may
repeat them. See docs/services.md.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection, Engine, Table, delete, func, update
from sqlmodel import Session, col, select

from store.models import (
    GatewayRecord,
    ReplicaDrainRecord,
    RunRecord,
    ServiceReplicaRecord,
    ServiceRequestsRecord,
)
from store.sql import dialect_insert, insert_ignore, row_of, upsert

_REPLICAS: Table = ServiceReplicaRecord.__table__  # type: ignore[attr-defined]
_GATEWAYS: Table = GatewayRecord.__table__  # type: ignore[attr-defined]
_DRAINS: Table = ReplicaDrainRecord.__table__  # type: ignore[attr-defined]
_REQUESTS: Table = ServiceRequestsRecord.__table__  # type: ignore[attr-defined]

# RunStatus.finished_statuses(), spelled out: core.status is light, but the store keeps its imports few.
_FINISHED = ("terminated", "aborted", "failed", "done")
_DRAINING = "draining"  # core.services.replicas.ReplicaState.DRAINING


class ServiceRecords(ABC):
    """Service records; `Store` provides the engine, sessions and upserts."""

    engine: Engine
    _writer: Engine

    @abstractmethod
    def _session(self) -> AbstractContextManager[Session]: ...

    # Replicas

    def register_replica(self, record: ServiceReplicaRecord) -> None:
        """Inserts the replica, or updates it (keeping when it was first registered)."""
        with self._writer.begin() as connection:
            upsert(connection, _REPLICAS, row_of(_REPLICAS, record), keep=("registered_at",))

    def set_replica_state(self, replica_id: str, state: str, probes: str | None = None) -> bool:
        """Its new state (and probe statuses, JSON); False if it is not registered (any more), or if it is
        draining and the new state is not: a probe still in flight never puts a draining replica back."""
        values: dict[str, Any] = {"state": state, "updated_at": time.time()}
        if probes is not None:
            values["probes"] = probes
        where = [_REPLICAS.c.id == replica_id]
        if state != _DRAINING:
            where.append(_REPLICAS.c.state != _DRAINING)
        with self._writer.begin() as connection:
            statement = update(_REPLICAS).where(*where).values(**values)
            result = connection.execute(statement)
        return bool(result.rowcount)

    def remove_replica(self, replica_id: str) -> None:
        with self._writer.begin() as connection:
            connection.execute(delete(_REPLICAS).where(_REPLICAS.c.id == replica_id))
            connection.execute(delete(_DRAINS).where(_DRAINS.c.replica_id == replica_id))

    def get_replica(self, replica_id: str) -> ServiceReplicaRecord | None:
        with self._session() as session:
            return session.get(ServiceReplicaRecord, replica_id)

    def list_service_replicas(self, run_ids: list[str] | None = None) -> list[ServiceReplicaRecord]:
        """The registered replicas (of these runs), by run, replica and submission."""
        statement = select(ServiceReplicaRecord)
        if run_ids is not None:
            statement = statement.where(col(ServiceReplicaRecord.run_id).in_(run_ids))
        statement = statement.order_by(
            col(ServiceReplicaRecord.run_id),
            col(ServiceReplicaRecord.replica_num),
            col(ServiceReplicaRecord.submission_num),
        )
        with self._session() as session:
            return list(session.exec(statement).all())

    def active_services(self) -> list[RunRecord]:
        """Every service run that has not finished, oldest first."""
        statement = (
            select(RunRecord)
            .where(col(RunRecord.type) == "service", col(RunRecord.status).not_in(_FINISHED))
            .order_by(col(RunRecord.submitted_at))
        )
        with self._session() as session:
            return list(session.exec(statement).all())

    # Proxies

    def gateway_seen(self, record: GatewayRecord) -> None:
        """A proxy's heartbeat: inserted, or its URL and seen_at updated."""
        with self._writer.begin() as connection:
            upsert(connection, _GATEWAYS, row_of(_GATEWAYS, record), keep=("started_at",))

    def remove_gateway(self, gateway_id: str) -> None:
        with self._writer.begin() as connection:
            connection.execute(delete(_GATEWAYS).where(_GATEWAYS.c.id == gateway_id))
            connection.execute(delete(_DRAINS).where(_DRAINS.c.gateway_id == gateway_id))

    def live_gateways(self, seen_since: float) -> list[GatewayRecord]:
        """The proxies heard from since then, the most recently started first."""
        statement = (
            select(GatewayRecord)
            .where(col(GatewayRecord.seen_at) >= seen_since)
            .order_by(col(GatewayRecord.started_at).desc())
        )
        with self._session() as session:
            return list(session.exec(statement).all())

    def mark_drained(self, replica_id: str, gateway_id: str) -> None:
        with self._writer.begin() as connection:
            row = {"replica_id": replica_id, "gateway_id": gateway_id, "drained_at": time.time()}
            insert_ignore(connection, _DRAINS, [row], key=("replica_id", "gateway_id"))

    def drained_by(self, replica_id: str) -> set[str]:
        """The proxies that have drained this replica."""
        statement = select(ReplicaDrainRecord.gateway_id).where(
            col(ReplicaDrainRecord.replica_id) == replica_id
        )
        with self._session() as session:
            return set(session.exec(statement).all())

    # Request counts

    def add_requests(self, gateway_id: str, counts: Mapping[tuple[str, int], int]) -> None:
        """Adds one proxy's counts, by (run id, unix second), to those stored."""
        if not counts:
            return
        rows = [
            {"run_id": run_id, "gateway_id": gateway_id, "second": second, "count": count}
            for (run_id, second), count in sorted(counts.items())
        ]
        with self._writer.begin() as connection:
            for row in rows:
                _add_count(connection, row)

    def request_count(self, run_id: str, since_second: int) -> int:
        """The requests every proxy received for this run from `since_second` on."""
        statement = sa.select(func.coalesce(func.sum(_REQUESTS.c.count), 0)).where(
            _REQUESTS.c.run_id == run_id, _REQUESTS.c.second >= since_second
        )
        with self.engine.connect() as connection:
            return int(connection.execute(statement).scalar_one())

    def prune_requests(self, before_second: int) -> None:
        with self._writer.begin() as connection:
            connection.execute(delete(_REQUESTS).where(_REQUESTS.c.second < before_second))


def _add_count(connection: Connection, row: dict[str, Any]) -> None:
    statement = dialect_insert(connection, _REQUESTS)
    if statement is not None:
        statement = statement.values(**row)
        connection.execute(
            statement.on_conflict_do_update(
                index_elements=["run_id", "gateway_id", "second"],
                set_={"count": _REQUESTS.c.count + statement.excluded.count},
            )
        )
        return
    # Other databases: correct for one writer at a time, as portable SQL allows.
    where = [_REQUESTS.c[name] == row[name] for name in ("run_id", "gateway_id", "second")]
    added = update(_REQUESTS).where(*where).values(count=_REQUESTS.c.count + row["count"])
    changed = connection.execute(added)
    if changed.rowcount == 0:
        connection.execute(sa.insert(_REQUESTS).values(**row))
