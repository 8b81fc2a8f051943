"""The proxy's SSH connections to backends' login nodes, for its tunnels to replicas behind them
(gateway.tunnels, docs/services.md#replicas-behind-a-login-node). Imported only once a replica is behind a
login node: a proxy that routes none starts without asyncssh."""

from __future__ import annotations

import asyncio

import asyncssh

from activities.ssh_config import DeployOptions
from activities.ssh_tunnel import open_ssh
from core.configuration.backend import SlurmBackendConfiguration
from core.settings import Settings
from store.backend_repository import open_backend_key
from store.keys import process_keys
from store.repository import Store

Connections = tuple[asyncssh.SSHClientConnection, ...]  # the login node's first, then its jump host's


def _login_of(store: Store, via: str) -> tuple[SlurmBackendConfiguration, str]:
    """The backend's configuration and login key, opened (in a thread: the store, the key file)."""
    project, _, name = via.partition("/")
    record = store.get_backend(project, name)
    if record is None:
        raise LookupError(f"project {project} has no backend {name}")
    configuration = SlurmBackendConfiguration.model_validate(record.configuration_data())
    return configuration, open_backend_key(process_keys(), record)


async def open_login(store: Store, via: str, options: DeployOptions | None = None) -> Connections:
    """An SSH connection to backend `via`'s login node (through its jump host's, when it has one), as the
    workers open theirs (activities.slurm_backend); host keys checked against FERRY_SSH_KNOWN_HOSTS."""
    if options is None:
        options = DeployOptions(known_hosts=Settings.from_env().ssh_known_hosts)
    configuration, key_text = await asyncio.to_thread(_login_of, store, via)
    key = asyncssh.import_private_key(key_text)
    login = configuration.login
    jump = None
    if login.proxy_jump is not None:
        hop = login.proxy_jump
        jump = await open_ssh(hop.hostname, hop.port or 22, hop.user or login.user, [key], options)
    try:
        conn = await open_ssh(login.hostname, login.port, login.user, [key], options, jump or ())
    except BaseException:
        if jump is not None:
            jump.abort()
        raise
    return (conn,) if jump is None else (conn, jump)
