"""sqlmodel tables, engine and migrations."""

from store.engine import for_writes, make_engine, migrate
from store.models import (
    RUN_EVENTLOG,
    BackendRecord,
    CodeArchiveRecord,
    EventRecord,
    FleetRecord,
    GatewayRecord,
    InstanceRecord,
    JobSubmissionRecord,
    LogChunkRecord,
    QueuedJobRecord,
    ReplicaDrainRecord,
    RunRecord,
    SecretRecord,
    ServiceReplicaRecord,
    ServiceRequestsRecord,
    UserRecord,
    VolumeRecord,
)
from store.opening import open_store
from store.repository import LogGapError, RecordNotFoundError, Store

__all__ = [
    "RUN_EVENTLOG",
    "BackendRecord",
    "CodeArchiveRecord",
    "EventRecord",
    "FleetRecord",
    "GatewayRecord",
    "InstanceRecord",
    "JobSubmissionRecord",
    "LogChunkRecord",
    "LogGapError",
    "QueuedJobRecord",
    "RecordNotFoundError",
    "ReplicaDrainRecord",
    "RunRecord",
    "SecretRecord",
    "ServiceReplicaRecord",
    "ServiceRequestsRecord",
    "UserRecord",
    "VolumeRecord",
    "Store",
    "for_writes",
    "make_engine",
    "migrate",
    "open_store",
]
