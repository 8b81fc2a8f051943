"""An async client for the agent's API (agent/app.py), as the worker's activities use it.

Every call raises `AgentUnreachable` when the agent cannot be reached in time (the lifecycle maps it to
INSTANCE_UNREACHABLE) and `AgentError` with the status code and the agent's message when it answers
with an error.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import urlencode, urlsplit

import websockets
from pydantic import BaseModel
from websockets.exceptions import ConnectionClosedError, InvalidStatus

from core.status import JobTerminationReason
from core.wire.agent_api import (
    CODE_HASH_PARAM,
    DEFAULT_PULL_LIMIT,
    HealthcheckResponse,
    InstanceInfo,
    JobSpec,
    PullResponse,
    TaskInfo,
    TaskList,
    TaskSubmitRequest,
    TerminateRequest,
)

ModelT = TypeVar("ModelT", bound=BaseModel)

# The agent closes a log stream with these codes to say what an HTTP call would have said.
_WS_CLOSE_TO_STATUS = {4400: 400, 4401: 401, 4404: 404}


class AgentError(Exception):
    """The agent answered, with an error."""

    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(f"agent error {status_code}: {message}")
        self.status_code = status_code
        self.message = message


class AgentUnreachable(Exception):
    """The agent could not be reached, or did not answer in time."""


class AgentClient:
    def __init__(self, base_url: str, token: str, timeout: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._token = token
        self._timeout = timeout
        self._http = Http1Client(self.base_url, {"Authorization": f"Bearer {token}"}, timeout)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AgentClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def _request(self, method: str, path: str, model: type[ModelT], **kwargs: Any) -> ModelT:
        try:
            response = await self._http.request(method, path, **kwargs)
        except TransportError as exc:
            raise AgentUnreachable(f"agent at {self.base_url} unreachable: {exc}") from exc
        if response.status_code >= 400:
            raise AgentError(response.status_code, _error_message(response))
        return model.model_validate_json(response.content)

    # --- shim role -------------------------------------------------------------------------------------

    async def healthcheck(self) -> HealthcheckResponse:
        return await self._request("GET", "/api/healthcheck", HealthcheckResponse)

    async def instance_info(self) -> InstanceInfo:
        return await self._request("GET", "/api/instance/info", InstanceInfo)

    async def submit_task(self, request: TaskSubmitRequest) -> TaskInfo:
        return await self._request("POST", "/api/tasks", TaskInfo, **_json_body(request))

    async def list_tasks(self) -> list[TaskInfo]:
        return (await self._request("GET", "/api/tasks", TaskList)).tasks

    async def get_task(self, task_id: str) -> TaskInfo:
        return await self._request("GET", f"/api/tasks/{task_id}", TaskInfo)

    async def terminate(
        self,
        task_id: str,
        reason: JobTerminationReason = JobTerminationReason.TERMINATED_BY_USER,
        message: str | None = None,
        timeout: float = 10.0,
    ) -> TaskInfo:
        body = TerminateRequest(reason=reason, message=message, timeout=timeout)
        return await self._request("POST", f"/api/tasks/{task_id}/terminate", TaskInfo, **_json_body(body))

    async def remove(self, task_id: str) -> TaskInfo:
        return await self._request("POST", f"/api/tasks/{task_id}/remove", TaskInfo)

    # --- runner role -----------------------------------------------------------------------------------

    async def submit_job(self, task_id: str, spec: JobSpec) -> TaskInfo:
        return await self._request("POST", f"/api/tasks/{task_id}/job", TaskInfo, **_json_body(spec))

    async def upload_code(self, task_id: str, archive: bytes, sha256: str | None = None) -> TaskInfo:
        """Upload a tar.gz, checked against `sha256` (the archive's own hash when not given)."""
        digest = sha256 if sha256 is not None else hashlib.sha256(archive).hexdigest()
        return await self._request(
            "POST",
            f"/api/tasks/{task_id}/code",
            TaskInfo,
            params={CODE_HASH_PARAM: digest},
            content=archive,
            headers={"Content-Type": "application/gzip"},
        )

    async def run(self, task_id: str) -> TaskInfo:
        return await self._request("POST", f"/api/tasks/{task_id}/run", TaskInfo)

    async def pull(
        self,
        task_id: str,
        offset: int = 0,
        limit: int = DEFAULT_PULL_LIMIT,
        states_offset: int = 0,
        wait: float = 0.0,
    ) -> PullResponse:
        """The job's states from `states_offset` and its log from `offset`. With `wait` > 0 (at most 30 s)
        the agent holds the request until there is something new or `wait` has passed: a watch then
        costs one request per change (or per `wait`) instead of one per polling interval."""
        params: dict[str, float] = {"offset": offset, "limit": limit, "states_offset": states_offset}
        kwargs: dict[str, Any] = {"params": params}
        if wait > 0:
            params["wait"] = wait
            kwargs["timeout"] = self._timeout + wait
        return await self._request("GET", f"/api/tasks/{task_id}/pull", PullResponse, **kwargs)

    async def stream_logs(self, task_id: str, offset: int = 0) -> AsyncIterator[bytes]:
        """The job's log from `offset`, live, until the job has ended and every byte was sent."""
        url = self.base_url.replace("http", "ws", 1) + f"/api/tasks/{task_id}/logs/ws?offset={offset}"
        headers = {"Authorization": f"Bearer {self._token}"}
        try:
            # Logs are sent as they are: deflating them costs more CPU than a tunnel saves.
            async with websockets.connect(
                url, additional_headers=headers, max_size=None, compression=None
            ) as ws:
                async for frame in ws:
                    yield frame if isinstance(frame, bytes) else frame.encode()
        except ConnectionClosedError as exc:
            received = exc.rcvd
            if received is not None and received.code in _WS_CLOSE_TO_STATUS:
                raise AgentError(_WS_CLOSE_TO_STATUS[received.code], received.reason) from exc
            raise AgentUnreachable(f"log stream from {self.base_url} broke: {exc}") from exc
        except InvalidStatus as exc:
            raise AgentError(exc.response.status_code, f"log stream refused: {exc}") from exc
        except (OSError, TimeoutError) as exc:
            raise AgentUnreachable(f"agent at {self.base_url} unreachable: {exc!r}") from exc


def _json_body(model: BaseModel) -> dict[str, Any]:
    return {"content": model.model_dump_json().encode(), "headers": {"Content-Type": "application/json"}}


def _error_message(response: Response) -> str:
    try:
        body = json.loads(response.content)
    except ValueError:
        return response.text or response.reason_phrase
    detail = body.get("detail") if isinstance(body, dict) else body
    return detail if isinstance(detail, str) else str(detail)


# --- HTTP/1.1 ---------------------------------------------------------------------------------------------
#
# The worker talks to each agent over plain HTTP, on loopback or through an SSH tunnel, and it does so a
# great deal: every step of every job, and every watch. httpx spent about 1 ms of CPU per request there,
# 15 times what this does (`python -m bench.run --profile` shows it), and made concurrent requests queue
# for one of 100 connections, so that one watch per running job could time out waiting for a connection.
# This speaks just the HTTP/1.1 the agent's server (uvicorn) speaks: requests with a Content-Length body;
# responses with a Content-Length or chunked body; keep-alive unless told otherwise. Timeouts are per
# step, as httpx's were: connecting, sending, and each wait for response bytes may take `timeout` seconds.

_READ_CHUNK = 1 << 20
# uvicorn closes a connection after 5 s idle: one idle longer than this is not reused (it may be closing).
_IDLE_REUSE = 4.0
_MAX_IDLE = 4096


class TransportError(Exception):
    """The server could not be reached, broke the connection, or was too slow."""


@dataclass
class Response:
    status_code: int
    reason_phrase: str
    headers: dict[str, str]
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode(errors="replace")


@dataclass
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    idle_since: float = 0.0

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


# What a broken, refused, slow or garbled exchange raises (OSError covers resets and refusals).
_BROKEN = (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError)


class _Stale(Exception):
    """A reused connection ended before any byte of the response: the server had closed it."""


class Http1Client:
    def __init__(self, base_url: str, headers: Mapping[str, str], timeout: float) -> None:
        parts = urlsplit(base_url)
        if parts.scheme != "http" or parts.hostname is None:
            raise ValueError(f"not a plain http URL: {base_url!r}")
        self.host = parts.hostname
        self.port = parts.port or 80
        self.prefix = parts.path.rstrip("/")
        self.timeout = timeout
        host = f"{self.host}:{self.port}" if ":" not in self.host else f"[{self.host}]:{self.port}"
        fixed = {"Host": host, **headers}
        self._head = "".join(f"{name}: {value}\r\n" for name, value in fixed.items())
        self._idle: list[_Connection] = []
        self._closed = False

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, object] | None = None,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> Response:
        if self._closed:
            raise RuntimeError("the client has been closed")
        target = self.prefix + path + (f"?{urlencode(params)}" if params else "")
        head = f"{method} {target} HTTP/1.1\r\n{self._head}"
        for name, value in (headers or {}).items():
            head += f"{name}: {value}\r\n"
        if content is not None or method not in ("GET", "HEAD", "DELETE"):
            head += f"Content-Length: {len(content or b'')}\r\n"
        message = (head + "\r\n").encode("latin-1") + (content or b"")
        limit = self.timeout if timeout is None else timeout
        while True:
            connection, reused = self._take()
            if connection is None:
                connection = await self._open(limit)
            try:
                response, keep = await self._exchange(connection, message, limit, reused)
            except _Stale:
                connection.close()
                continue  # the request never reached the server: send it on a new connection
            except BaseException:
                connection.close()
                raise
            if keep and not self._closed and len(self._idle) < _MAX_IDLE:
                connection.idle_since = time.monotonic()
                self._idle.append(connection)
            else:
                connection.close()
            return response

    def _take(self) -> tuple[_Connection | None, bool]:
        now = time.monotonic()
        while self._idle:
            connection = self._idle.pop()
            if now - connection.idle_since < _IDLE_REUSE and not connection.reader.at_eof():
                return connection, True
            connection.close()
        return None, False

    async def _open(self, timeout: float) -> _Connection:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port, limit=1 << 17), timeout
            )
        except (OSError, TimeoutError) as err:
            raise TransportError(f"cannot connect to {self.host}:{self.port}: {err!r}") from err
        return _Connection(reader, writer)

    async def _exchange(
        self, connection: _Connection, message: bytes, timeout: float, reused: bool
    ) -> tuple[Response, bool]:
        reader, writer = connection.reader, connection.writer
        try:
            try:
                writer.write(message)
                async with asyncio.timeout(timeout):
                    await writer.drain()
                async with asyncio.timeout(timeout):
                    status_line = await reader.readuntil(b"\r\n")
            except (asyncio.IncompleteReadError, ConnectionResetError, BrokenPipeError) as err:
                if reused and not getattr(err, "partial", b""):
                    raise _Stale() from err
                raise
            async with asyncio.timeout(timeout):
                header_block = await reader.readuntil(b"\r\n\r\n")
            version, _, rest = status_line.decode("latin-1").rstrip("\r\n").partition(" ")
            code, _, reason = rest.partition(" ")
            headers: dict[str, str] = {}
            for line in header_block.decode("latin-1").split("\r\n"):
                name, sep, value = line.partition(":")
                if sep:
                    headers[name.strip().lower()] = value.strip()
            if headers.get("transfer-encoding", "").lower() == "chunked":
                body = await self._read_chunked(reader, timeout)
            elif "content-length" in headers:
                body = await self._read_exactly(reader, int(headers["content-length"]), timeout)
            else:  # the body runs to the end of the connection
                body = await self._read_to_end(reader, timeout)
                headers["connection"] = "close"
        except (
            OSError,
            TimeoutError,
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            ValueError,
        ) as err:
            raise TransportError(f"{self.host}:{self.port}: {err!r}") from err
        connection_header = headers.get("connection", "").lower()
        keep = connection_header != "close" and (version == "HTTP/1.1" or connection_header == "keep-alive")
        return Response(int(code), reason, headers, body), keep

    async def _read_exactly(self, reader: asyncio.StreamReader, size: int, timeout: float) -> bytes:
        parts: list[bytes] = []
        while size > 0:
            async with asyncio.timeout(timeout):
                part = await reader.read(min(size, _READ_CHUNK))
            if not part:
                raise asyncio.IncompleteReadError(b"".join(parts), size)
            parts.append(part)
            size -= len(part)
        return b"".join(parts)

    async def _read_chunked(self, reader: asyncio.StreamReader, timeout: float) -> bytes:
        parts: list[bytes] = []
        while True:
            async with asyncio.timeout(timeout):
                size_line = await reader.readuntil(b"\r\n")
            size = int(size_line.split(b";", 1)[0].strip(), 16)
            if size == 0:
                async with asyncio.timeout(timeout):  # trailers, if any, then the empty line
                    while await reader.readuntil(b"\r\n") != b"\r\n":
                        pass
                return b"".join(parts)
            parts.append(await self._read_exactly(reader, size, timeout))
            async with asyncio.timeout(timeout):
                await reader.readexactly(2)

    async def _read_to_end(self, reader: asyncio.StreamReader, timeout: float) -> bytes:
        parts: list[bytes] = []
        while True:
            async with asyncio.timeout(timeout):
                part = await reader.read(_READ_CHUNK)
            if not part:
                return b"".join(parts)
            parts.append(part)
