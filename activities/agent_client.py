"""An async client for the agent's API (agent/app.py), as the worker's activities use it.

Every call raises `AgentUnreachable` when the agent cannot be reached in time (the lifecycle maps it to
INSTANCE_UNREACHABLE) and `AgentError` with the status code and the agent's message when it answers
with an error.

A client given `relocate` (the local agent's, embedded.local_agent) asks where the agent is after a
connection failure: a restarted agent may listen elsewhere (docs/jobs.md#a-restarted-agent). When that
finds a restarted (or moved) agent, a request is sent to it once more if it is safe to: it never
reached the old one (no connection), or it only reads (GET). Others are left to the caller's retry.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

import websockets
from pydantic import BaseModel
from websockets.exceptions import ConnectionClosedError, InvalidStatus

from activities.http1 import ConnectFailed, Http1Client, Response, TransportError
from core.status import JobTerminationReason
from core.wire.agent_api import (
    CODE_HASH_PARAM,
    DEFAULT_PULL_LIMIT,
    ChangesResponse,
    HealthcheckResponse,
    InstanceInfo,
    JobSpec,
    PullResponse,
    TaskInfo,
    TaskList,
    TaskMetrics,
    TaskSubmitRequest,
    TerminateRequest,
)
from core.wire.agent_batches import BatchAnswers, CodeKept, RemoveBatch, StartBatch, TaskAnswer

ModelT = TypeVar("ModelT", bound=BaseModel)
HTTP_NOT_FOUND = 404
_NO_ROUTE = (HTTP_NOT_FOUND, 405)  # a PUT to a path the agent knows only with GET: 405


@dataclass(frozen=True)
class AgentAddress:
    """Where an agent is: its base URL and token, and what tells it from an earlier agent there (the local
    agent's pid)."""

    url: str
    token: str
    incarnation: int = 0


Relocate = Callable[[], Awaitable[AgentAddress]]

_log = logging.getLogger(__name__)
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
    def __init__(
        self, base_url: str, token: str, timeout: float = 30.0, relocate: Relocate | None = None
    ) -> None:
        self._timeout = timeout
        self._relocate = relocate
        self._relocating = asyncio.Lock()
        self._address: AgentAddress | None = None  # as `relocate` last found it
        self._found = 0  # how many agents (or addresses) it has found: a request's own is the one then
        self._looked_at = float("-inf")  # when its last look began
        self._closed = False
        self.kept_code: set[str] = set()  # archives the agent said it keeps (a moved agent: asked again)
        self.takes_batches = True  # False once the agent answered a batch request as a route it lacks
        self._connect(base_url, token)

    def _connect(self, base_url: str, token: str) -> None:
        self.base_url = base_url.rstrip("/")
        self._token = token
        self._http = Http1Client(self.base_url, {"Authorization": f"Bearer {token}"}, self._timeout)

    async def aclose(self) -> None:
        self._closed = True
        await self._http.aclose()

    async def __aenter__(self) -> AgentClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def _request(self, method: str, path: str, model: type[ModelT], **kwargs: Any) -> ModelT:
        found = self._found
        try:
            response = await self._http.request(method, path, **kwargs)
        except TransportError as exc:
            unreachable = AgentUnreachable(f"agent at {self.base_url} unreachable: {exc}")
            await self._follow(time.monotonic())
            if not (self._found != found and (isinstance(exc, ConnectFailed) or method == "GET")):
                raise unreachable from exc
            try:  # safe to send again (see the module's doc), to the agent found
                response = await self._http.request(method, path, **kwargs)
            except TransportError as again:
                raise AgentUnreachable(f"agent at {self.base_url} unreachable: {again}") from again
        if response.status_code >= 400:
            raise AgentError(response.status_code, _error_message(response))
        return model.model_validate_json(response.content)

    async def _follow(self, failed_at: float) -> None:
        """After a connection failure at `failed_at`: where the agent is now, if this client can ask
        (`relocate`). One look at a time, and none where a look begun since answers already (a thousand
        watches failing at once, one look)."""
        if self._relocate is None or self._closed:
            return
        async with self._relocating:
            if self._looked_at >= failed_at:
                return
            self._looked_at = time.monotonic()
            try:
                found = await self._relocate()
            except Exception as err:  # neither found nor started: the caller hears it is unreachable
                _log.warning("the agent of %s is not found again: %s", self.base_url, err)
                self._looked_at = time.monotonic()  # the failures meanwhile are answered: not now
                return
            if found != self._address:
                self._address, self._found = found, self._found + 1
                await self._move_to(found)

    async def _move_to(self, found: AgentAddress) -> None:
        """Later requests go to `found` (requests in flight end on the connections they have)."""
        if (found.url.rstrip("/"), found.token) == (self.base_url, self._token) or self._closed:
            return
        previous = self._http
        self.kept_code, self.takes_batches = set(), True
        self._connect(found.url, found.token)
        await previous.aclose()

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

    async def task_metrics(self, task_id: str) -> TaskMetrics:
        """The running job's CPU, memory and GPU use now (docs/jobs.md#metrics); AgentError 409 unless it
        runs. The agent may take half a second to measure the CPU."""
        return await self._request("GET", f"/api/tasks/{task_id}/metrics", TaskMetrics)

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

    # --- batches (docs/jobs.md#batches) ----------------------------------------------------------------

    async def keep_code(self, archive: bytes, sha256: str) -> None:
        """The archive kept by the agent for start batches, sent only if it does not keep it yet (an agent
        of an earlier release answers 404 to both: AgentError)."""
        if sha256 in self.kept_code:
            return
        try:
            await self._request("GET", f"/api/code/{sha256}", CodeKept)
        except AgentError as err:
            if err.status_code != HTTP_NOT_FOUND:
                raise
            gzip = {"Content-Type": "application/gzip"}
            await self._batch_request("PUT", f"/api/code/{sha256}", CodeKept, content=archive, headers=gzip)
        self.kept_code.add(sha256)

    async def start_batch(self, batch: StartBatch) -> list[TaskAnswer]:
        body = _json_body(batch)
        return (await self._batch_request("POST", "/api/batches/start", BatchAnswers, **body)).answers

    async def remove_batch(self, task_ids: list[str]) -> list[TaskAnswer]:
        body = _json_body(RemoveBatch(ids=task_ids))
        return (await self._batch_request("POST", "/api/batches/remove", BatchAnswers, **body)).answers

    async def _batch_request(self, method: str, path: str, model: type[ModelT], **kwargs: Any) -> ModelT:
        """A batch request; an agent without the route (an earlier release's) is not asked again."""
        try:
            return await self._request(method, path, model, **kwargs)
        except AgentError as err:
            if err.status_code in _NO_ROUTE:
                self.takes_batches = False
            raise

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

    async def changes(self, cursor: int, epoch: str, wait: float = 0.0) -> ChangesResponse:
        """The tasks that changed since `cursor` of `epoch` (every task after a restart of the agent),
        held up to `wait` seconds while none has (docs/jobs.md#the-instance-watch)."""
        params: dict[str, float | str] = {"cursor": cursor, "epoch": epoch, "wait": wait}
        kwargs: dict[str, Any] = {"params": params, "timeout": self._timeout + wait}
        return await self._request("GET", "/api/changes", ChangesResponse, **kwargs)

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
            unreachable = AgentUnreachable(f"agent at {self.base_url} unreachable: {exc!r}")
            await self._follow(time.monotonic())  # the caller's next stream goes where the agent is now
            raise unreachable from exc


def _json_body(model: BaseModel) -> dict[str, Any]:
    """The body without what the agent fills in itself (its defaults): an agent of an earlier release,
    which forbids a field it does not know, takes a request that uses nothing new (docs/upgrades.md)."""
    content = model.model_dump_json(exclude_defaults=True).encode()
    return {"content": content, "headers": {"Content-Type": "application/json"}}


def _error_message(response: Response) -> str:
    try:
        body = json.loads(response.content)
    except ValueError:
        return response.text or response.reason_phrase
    detail = body.get("detail") if isinstance(body, dict) else body
    return detail if isinstance(detail, str) else str(detail)
