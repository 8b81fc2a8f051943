"""What the embedded stack (embedded/stack.py) keeps in stack.json and says of itself: light models, no
Temporal SDK."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from core.settings import TASK_QUEUE
from core.version import ferry_version


class StackState(BaseModel):
    """stack.json: the ports the stack uses (kept across restarts) and the pids of its processes."""

    port: int
    ui_port: int
    proxy_port: int | None = None  # None: a stack.json of a Ferry before the proxy; one is chosen
    temporal_pid: int | None = None
    worker_pid: int | None = None
    proxy_pid: int | None = None
    api_port: int | None = None  # None: a stack.json of a Ferry before the API (docs/teams.md); one is chosen
    api_pid: int | None = None
    # Temporal's Prometheus `/metrics` (docs/deployment.md#the-embedded-stack); None: a stack.json of a
    # Ferry before it: one is chosen at Temporal's next start.
    metrics_port: int | None = None


class AgentFile(BaseModel):
    """What this module reads of embedded.local_agent's agent.json (that module imports httpx: slow)."""

    model_config = ConfigDict(extra="ignore")

    url: str
    pid: int


class ProcessStatus(BaseModel):
    name: str
    pid: int | None
    alive: bool
    address: str | None = None
    log: str


class StackStatus(BaseModel):
    home: str
    version: str = Field(default_factory=ferry_version)  # of the code asking: the CLI's (docs/upgrades.md)
    running: bool  # every process alive
    address: str | None  # the Temporal gRPC address, host:port
    ui_url: str | None
    metrics_url: str | None = None  # Temporal's Prometheus metrics
    task_queue: str = TASK_QUEUE
    processes: list[ProcessStatus]
    stuck_runs: int | None = None  # runs whose workflow cannot go on (cli/stuck.py); None: not asked
