"""An async client for the agent's API (agent/app.py), as the worker's activities use it.

Every call raises `AgentUnreachable` when the agent cannot be reached in time (the lifecycle maps it to
INSTANCE_UNREACHABLE) and `AgentError` with the status code and the agent's message when it answers
with an error.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any, TypeVar

import httpx
import websockets
from pydantic import BaseModel
from websockets.exceptions import ConnectionClosedError, InvalidStatus

from core.agent_api import (
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
from core.status import JobTerminationReason

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
        self._http = httpx.AsyncClient(
            base_url=self.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=timeout
        )

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
        except (httpx.TransportError, httpx.TimeoutException) as exc:
            raise AgentUnreachable(f"agent at {self.base_url} unreachable: {exc!r}") from exc
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
        self, task_id: str, offset: int = 0, limit: int = DEFAULT_PULL_LIMIT, states_offset: int = 0
    ) -> PullResponse:
        params = {"offset": offset, "limit": limit, "states_offset": states_offset}
        return await self._request("GET", f"/api/tasks/{task_id}/pull", PullResponse, params=params)

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
    return {"content": model.model_dump_json(), "headers": {"Content-Type": "application/json"}}


def _error_message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text or response.reason_phrase
    detail = body.get("detail") if isinstance(body, dict) else body
    return detail if isinstance(detail, str) else str(detail)
