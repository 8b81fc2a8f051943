"""Where Ferry keeps its state and how it reaches Temporal, from FERRY_* environment variables (and
Temporal's own TEMPORAL_* connection variables, core/temporal_connection.py)."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel

from core.temporal_connection import (
    ConnectionSettingsError,
    TemporalConnection,
    security_variables,
    temporal_address,
    temporal_connection,
    temporal_namespace,
)

TASK_QUEUE = "ferry"
# The fleets' schedulers have a task queue of their own beside each worker's: every placement and release
# goes through one of them, so their workflow tasks must not wait behind thousands of runs' and jobs'
# (docs/scaling.md#the-fleets-own-queue).
FLEET_QUEUE_SUFFIX = "-fleets"
DEFAULT_PROJECT = "main"
DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"


def fleet_task_queue(task_queue: str) -> str:
    """The task queue of the fleets served beside `task_queue` (the same for a fleets' queue itself)."""
    return task_queue if task_queue.endswith(FLEET_QUEUE_SUFFIX) else task_queue + FLEET_QUEUE_SUFFIX


class Settings(BaseModel):
    home: Path
    database_url: str
    temporal_address: str | None  # None: the embedded stack decides
    temporal_namespace: str
    # TLS, mTLS and an API key, as the TEMPORAL_* variables say; checked when a connection is made, so that
    # commands that need no server never fail on them (docs/deployment.md).
    temporal_security: dict[str, str] = {}
    # SSH fleets: the host keys the worker accepts (None: any, see `from_env`), and the hosts' interpreter.
    ssh_known_hosts: str | None = DEFAULT_KNOWN_HOSTS
    ssh_python: str = "python3"
    # FERRY_AGENT_WHEELS: a wheelhouse the agent's packages for other Pythons come from, for a worker
    # without a package index (docs/fleets.md#what-a-host-needs).
    agent_wheels: Path | None = None
    # FERRY_WORKFLOW_SANDBOX=1 runs the workflows in the SDK's sandbox (a check while developing them).
    workflow_sandbox: bool = False
    # FERRY_GATEWAY_DOMAIN: the services proxy's domain (docs/deployment.md#https-on-a-domain): the proxy
    # routes `<run>.<domain>` by Host, and the CLI shows a service's URL on it (core.services.domains).
    gateway_domain: str | None = None
    # FERRY_WEBHOOKS_ALLOW_PRIVATE: 1 posts notifications to loopback and private addresses, 0 refuses them;
    # None (unset): the embedded stack does, a deployment's worker does not (docs/deployment.md#webhooks).
    webhooks_allow_private: bool | None = None
    # FERRY_JOB_API_URL: Ferry's API as a job with `dstack: true` reaches it (docs/teams.md#a-jobs-token); the
    # embedded stack sets its own; None: such a run is refused.
    job_api_url: str | None = None

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
            temporal_address=temporal_address(env),
            temporal_namespace=temporal_namespace(env),
            temporal_security=security_variables(env),
            ssh_known_hosts=None if known_hosts.lower() == "none" else known_hosts,
            ssh_python=env.get("FERRY_SSH_PYTHON") or "python3",
            agent_wheels=Path(env["FERRY_AGENT_WHEELS"]).expanduser()
            if env.get("FERRY_AGENT_WHEELS")
            else None,
            workflow_sandbox=env.get("FERRY_WORKFLOW_SANDBOX", "").lower() in ("1", "true", "yes"),
            gateway_domain=(env.get("FERRY_GATEWAY_DOMAIN") or "").strip().lower().strip(".") or None,
            webhooks_allow_private=_yes_no(env.get("FERRY_WEBHOOKS_ALLOW_PRIVATE")),
            job_api_url=(env.get("FERRY_JOB_API_URL") or "").strip().rstrip("/") or None,
        )

    def temporal_connection(self, embedded_address: str | None = None) -> TemporalConnection:
        """How to reach Temporal: the configured address with its TLS and key, else `embedded_address`
        (the embedded stack's, plain). ConnectionSettingsError for settings that cannot work."""
        address = self.temporal_address or embedded_address
        if address is None:
            raise ConnectionSettingsError(
                "no Temporal address: set FERRY_TEMPORAL_ADDRESS (or TEMPORAL_ADDRESS) to its host:port"
            )
        return temporal_connection(
            self.temporal_security,
            address,
            self.temporal_namespace,
            embedded=self.temporal_address is None,
        )


def _yes_no(value: str | None) -> bool | None:
    """None when unset or empty; True for 1, true or yes; False for anything else (the safe side)."""
    if not (value or "").strip():
        return None
    return (value or "").strip().lower() in ("1", "true", "yes")
