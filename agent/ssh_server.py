"""The agent's SSH server: a user into any running job of this host (docs/attach.md).

It listens on loopback only, beside the agent's API, and is reached the same way: through an SSH connection
to the host. The SSH user names the job: it is the task's id. Only public keys authenticate, and only the
keys the task was submitted with (`TaskSubmitRequest.authorized_keys`); a task that is not running refuses
the login once the key is proven, saying why, with nothing opened. A session is the job's (agent/
ssh_sessions.py): shells and commands, SFTP and SCP; and ports are forwarded as the job sees the network
(agent/ssh_forwarding.py).

The open connections are counted per task, in the task's TaskInfo with the time one last opened or closed,
which is what a dev environment's inactivity is measured by. When the task's job ends, or the task is
removed, its connections are closed and what its sessions started is killed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import cast

import asyncssh

from agent import ssh_forwarding
from agent.ssh_keys import is_authorized, load_or_create_host_key, public_line
from agent.ssh_sessions import JobSessions, SessionRefused
from agent.tasks import TaskNotFound, TaskRegistry
from core.wire.agent_api import TaskStatus

logger = logging.getLogger(__name__)

# A connection whose client has vanished (a laptop closed) must not count as activity forever: after this
# many unanswered keepalives, this many seconds apart, it is closed.
KEEPALIVE_INTERVAL = 15
KEEPALIVE_COUNT_MAX = 4
LOGIN_TIMEOUT = 30  # seconds from connecting to authenticated


class AgentSSHServer:
    """The server, and the connections it holds, by task."""

    def __init__(self, registry: TaskRegistry, host: str, port: int, data_dir: Path) -> None:
        self.registry = registry
        # "localhost" would be two sockets, 127.0.0.1 and ::1, each with its own free port when port is 0.
        self.host = "127.0.0.1" if host == "localhost" else host
        self.requested_port = port
        self.host_key = load_or_create_host_key(data_dir)
        self.host_key_line = public_line(self.host_key)
        self.sessions = JobSessions(registry)
        self.port: int | None = None
        self._acceptor: asyncssh.SSHAcceptor | None = None
        self._connections: dict[str, set[asyncssh.SSHServerConnection]] = {}  # authenticated, by task
        self._all: set[asyncssh.SSHServerConnection] = set()  # and those still logging in
        registry.end_listeners.append(self.close_task)

    async def start(self) -> None:
        self._acceptor = await asyncssh.create_server(
            lambda: JobSSHServer(self),
            self.host,
            self.requested_port,
            server_host_keys=[self.host_key],
            process_factory=self.sessions.run,
            sftp_factory=self.sessions.sftp_server,
            allow_scp=True,
            encoding=None,
            password_auth=False,
            kbdint_auth=False,
            gss_host=None,
            agent_forwarding=False,
            x11_forwarding=False,
            keepalive_interval=KEEPALIVE_INTERVAL,
            keepalive_count_max=KEEPALIVE_COUNT_MAX,
            login_timeout=LOGIN_TIMEOUT,
        )
        self.port = self._acceptor.get_port()
        logger.info("SSH server into the jobs listening on %s:%d", self.host, self.port)

    async def stop(self) -> None:
        if self._acceptor is None:
            return
        self._acceptor.close()
        for conn in list(self._all):
            conn.disconnect(asyncssh.DISC_BY_APPLICATION, "the agent is stopping")
        await self._acceptor.wait_closed()
        self._acceptor = None

    # --- connections, by task ----------------------------------------------------------------------

    def refusal(self, task_id: str) -> str | None:
        """Why a login into `task_id` is refused (its key proven), or None when it may go ahead."""
        try:
            status = self.registry.get(task_id).status
        except TaskNotFound:
            return f"task {task_id!r} is gone"
        if status == TaskStatus.TERMINATED:
            return f"task {task_id!r} has ended: there is no job to attach to"
        if status != TaskStatus.RUNNING:
            return f"task {task_id!r} is {status}: its job is not running yet"
        return None

    def connected(self, conn: asyncssh.SSHServerConnection) -> None:
        self._all.add(conn)

    def disconnected(self, conn: asyncssh.SSHServerConnection) -> None:
        self._all.discard(conn)

    def opened(self, task_id: str, conn: asyncssh.SSHServerConnection) -> None:
        self._connections.setdefault(task_id, set()).add(conn)
        self._note(task_id, +1)

    def closed(self, task_id: str, conn: asyncssh.SSHServerConnection) -> None:
        connections = self._connections.get(task_id)
        if connections is None or conn not in connections:
            return
        connections.discard(conn)
        if not connections:
            del self._connections[task_id]
        self._note(task_id, -1)

    def _note(self, task_id: str, change: int) -> None:
        try:
            record = self.registry.get(task_id)
        except TaskNotFound:
            return  # removed: nothing left to count on
        record.note_ssh_connection(change, time.time())
        try:
            self.registry.save(record)  # the last activity outlives an agent restart; the count does not
        except OSError as exc:
            logger.warning("task %s: cannot save its SSH activity: %s", task_id, exc)

    def close_task(self, task_id: str) -> None:
        """The task's job has ended, or the task is removed: close its connections, kill what they ran."""
        reason = f"task {task_id!r} has ended"
        self.sessions.kill(task_id, reason)
        self._disconnect(task_id, reason)

    def _disconnect(self, task_id: str, reason: str) -> None:
        for conn in list(self._connections.get(task_id, ())):
            conn.disconnect(asyncssh.DISC_BY_APPLICATION, reason)


class JobSSHServer(asyncssh.SSHServer):
    """One connection: its authentication, and the forwarding it asks for."""

    def __init__(self, agent: AgentSSHServer) -> None:
        self._agent = agent
        self._conn: asyncssh.SSHServerConnection | None = None
        self._task_id = ""
        self._counted = False
        self._refusal_logged = False

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self._conn = conn
        self._agent.connected(conn)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._conn is None:
            return
        self._agent.disconnected(self._conn)
        if self._counted:
            self._agent.closed(self._task_id, self._conn)

    def begin_auth(self, username: str) -> bool:
        self._task_id = username
        return True  # always: nobody gets in without a key

    def public_key_auth_supported(self) -> bool:
        return True

    def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        try:
            record = self._agent.registry.get(username)
        except TaskNotFound:
            self._refuse(f"SSH login as {username!r} refused: there is no such task")
            return False
        if not is_authorized(key, record.authorized_keys):
            # Clients offer key after key: each refused one is a line, with the key that was offered.
            logger.warning(
                "SSH login into task %s refused: key %s is not one of its authorized keys",
                username,
                key.get_fingerprint(),
            )
            return False
        return True

    def auth_completed(self) -> None:
        assert self._conn is not None
        refusal = self._agent.refusal(self._task_id)
        if refusal is not None:
            logger.warning("SSH login into task %s refused: %s", self._task_id, refusal)
            self._conn.disconnect(asyncssh.DISC_BY_APPLICATION, refusal)
            return
        self._counted = True
        self._agent.opened(self._task_id, self._conn)

    def _refuse(self, message: str) -> None:
        if not self._refusal_logged:
            self._refusal_logged = True
            logger.warning("%s", message)

    # --- forwarding ------------------------------------------------------------------------------------

    def connection_requested(
        self, dest_host: str, dest_port: int, orig_host: str, orig_port: int
    ) -> bool | Awaitable[asyncssh.SSHTCPSession[bytes]]:
        """`ssh -L`: a connection to dest_host:dest_port as the job would make it."""
        try:
            netns = self._agent.sessions.context(self._task_id).netns
        except SessionRefused as exc:
            raise asyncssh.ChannelOpenError(asyncssh.OPEN_CONNECT_FAILED, str(exc)) from None
        if netns is None:
            return True  # the job has the host's network, as the agent: asyncssh connects
        # An SSHForwarder is the session asyncssh's own forwarding gives a channel, typed or not as one.
        connecting = ssh_forwarding.connect_in_namespace(netns, dest_host, dest_port)
        return cast(Awaitable[asyncssh.SSHTCPSession[bytes]], connecting)

    async def server_requested(self, listen_host: str, listen_port: int) -> asyncssh.SSHListener | bool:
        """`ssh -R`: a port on the job's loopback whose connections go back to the client."""
        assert self._conn is not None
        try:
            netns = self._agent.sessions.context(self._task_id).netns
            return await ssh_forwarding.listen(self._conn, netns, listen_host, listen_port)
        except (SessionRefused, ssh_forwarding.NotLoopback) as exc:
            logger.warning("task %s: remote forward refused: %s", self._task_id, exc)
            return False
        except OSError as exc:
            logger.warning("task %s: remote forward on port %d failed: %s", self._task_id, listen_port, exc)
            return False
