"""Where Ferry keeps its state and how it reaches Temporal, from FERRY_* environment variables."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel

TASK_QUEUE = "ferry"
DEFAULT_PROJECT = "main"
DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"


class Settings(BaseModel):
    home: Path
    database_url: str
    temporal_address: str | None  # None: the embedded stack decides
    temporal_namespace: str
    # SSH fleets: the host keys the worker accepts (None: any, see `from_env`), and the hosts' interpreter.
    ssh_known_hosts: str | None = DEFAULT_KNOWN_HOSTS
    ssh_python: str = "python3"
    # FERRY_WORKFLOW_SANDBOX=1 runs the workflows in the SDK's sandbox (a check while developing them).
    workflow_sandbox: bool = False

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Settings:
        """FERRY_SSH_KNOWN_HOSTS=none accepts any host key: only on a network you trust, since a man in the
        middle could then take the agents' tokens and run commands as the fleets' users."""
        env = dict(os.environ) if env is None else env
        home = Path(env.get("FERRY_HOME") or Path.home() / ".ferry").expanduser()
        known_hosts = env.get("FERRY_SSH_KNOWN_HOSTS") or DEFAULT_KNOWN_HOSTS
        return cls(
            home=home,
            database_url=env.get("FERRY_DATABASE_URL") or f"sqlite:///{home / 'ferry.db'}",
            temporal_address=env.get("FERRY_TEMPORAL_ADDRESS") or None,
            temporal_namespace=env.get("FERRY_TEMPORAL_NAMESPACE") or "default",
            ssh_known_hosts=None if known_hosts.lower() == "none" else known_hosts,
            ssh_python=env.get("FERRY_SSH_PYTHON") or "python3",
            workflow_sandbox=env.get("FERRY_WORKFLOW_SANDBOX", "").lower() in ("1", "true", "yes"),
        )
