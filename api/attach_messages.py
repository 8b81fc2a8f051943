"""What `ferry attach` sends and gets through the API (docs/teams.md#attach); the CLI reads the same
models."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SSHRouteAsk(_Message):
    """`POST /api/projects/{p}/runs/{name}/ssh-route`'s body: which job of the run."""

    replica: int = 0
    job: int = 0


class SSHHost(_Message):
    """One `Host` entry of Ferry's SSH config (cli.ssh_hosts.HostEntry's fields). `identity_file`: the job's
    entry has none (the CLI puts the user's own key there); a fleet host's or login node's is the path its
    fleet or backend names, on the machine where that was applied."""

    alias: str
    hostname: str
    port: int
    user: str
    identity_file: str | None = None
    host_key_alias: str | None = None
    proxy_jump: str | None = None


class SSHRoute(_Message):
    """The way into a running job (docs/attach.md): its entry first, then the host it jumps through, if any;
    the agents' host keys to pin, by `HostKeyAlias`; `user`, the SSH user that names the job."""

    user: str
    hosts: list[SSHHost]
    host_keys: dict[str, str]
