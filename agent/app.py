"""The agent's HTTP API: FastAPI routes over the task registry, behind a bearer token."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import re
from collections.abc import AsyncIterator
from importlib.metadata import PackageNotFoundError, version

from fastapi import APIRouter, Depends, FastAPI, Header, HTTPException, Path, Query, Request, WebSocket
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from starlette.websockets import WebSocketDisconnect

from agent import batches, jobs
from agent.changes import MAX_CHANGES_WAIT
from agent.code import CodeArchiveError
from agent.code_cache import CodeCache
from agent.instance import agent_uid, cpu_arch, disk_usage, shm_bytes
from agent.logs import OffsetOutOfRange, read_log
from agent.metrics import MetricsSampler
from agent.ssh_server import AgentSSHServer
from agent.task_watch import watch_forever
from agent.tasks import ERROR_STATUSES, BadTaskRequest, TaskNotFound, TaskRegistry
from core.wire.agent_api import (
    CODE_HASH_PARAM,
    DEFAULT_PULL_LIMIT,
    MAX_PULL_LIMIT,
    ChangesResponse,
    ErrorResponse,
    HealthcheckResponse,
    InstanceInfo,
    JobSpec,
    PullResponse,
    TaskInfo,
    TaskList,
    TaskMetrics,
    TaskStatus,
    TaskSubmitRequest,
    TerminateRequest,
)
from core.wire.agent_batches import BatchAnswers, CodeKept, RemoveBatch, StartBatch

WS_CHUNK = 1024 * 1024
WS_POLL_INTERVAL = 0.05  # seconds between looks at a live log that has nothing new
WS_CLOSE_UNAUTHORIZED = 4401  # WebSocket close codes that mirror the HTTP statuses
WS_CLOSE_NOT_FOUND = 4404
WS_CLOSE_BAD_REQUEST = 4400

# Request bodies: JSON ones are small; a code archive is streamed to disk, so it may be far larger.
MAX_JSON_BODY = 8 * 2**20
MAX_CODE_BODY = 2 * 2**30
_CODE_PATH = re.compile(r"^/api/(tasks/[^/]+/code|code/[^/]+)$")
OPEN_PATHS = frozenset({"/api/healthcheck"})
MAX_OFFSET = 2**62  # a log offset: seek() and file sizes are 63-bit
UNAUTHORIZED = "missing or wrong bearer token"


def agent_version() -> str:
    try:
        return version("ferry")
    except PackageNotFoundError:
        return "unknown"


def _token_matches(presented: str | None, token: str) -> bool:
    return presented is not None and hmac.compare_digest(presented.encode(), token.encode())


def _bearer(authorization: str | None) -> str | None:
    if authorization is None:
        return None
    scheme, _, credentials = authorization.partition(" ")
    return credentials.strip() if scheme.lower() == "bearer" else None


def create_app(registry: TaskRegistry, token: str, ssh_server: AgentSSHServer | None = None) -> FastAPI:
    if not token:
        raise ValueError("the agent needs a non-empty token")

    # GuardMiddleware refuses first, before any body is read; this dependency stays so that the
    # routes stay guarded even if mounted without it, and so that the schema says they need a token.
    async def require_token(authorization: str | None = Header(default=None)) -> None:
        if not _token_matches(_bearer(authorization), token):
            raise HTTPException(401, UNAUTHORIZED, headers={"WWW-Authenticate": "Bearer"})

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        watcher = asyncio.create_task(watch_forever(registry))
        if ssh_server is not None:
            await ssh_server.start()  # its port taken fails the start, as the API's does
        yield
        if ssh_server is not None:
            await ssh_server.stop()
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        # Here, not after uvicorn returns: uvicorn raises a caught SIGTERM again once it has shut down.
        registry.executors.container.close()

    errors: dict[int | str, dict[str, object]] = {
        code: {"model": ErrorResponse} for code in (400, 401, 404, 409)
    }
    # The schema is served behind the token (the guard covers every path but the healthcheck); the
    # docs pages are off: a browser loading them could not send the token to fetch the schema.
    app = FastAPI(
        title="ferry-agent",
        version=agent_version(),
        lifespan=lifespan,
        responses=errors,
        docs_url=None,
        redoc_url=None,
    )
    app.add_middleware(GuardMiddleware, token=token)
    api = APIRouter(prefix="/api", dependencies=[Depends(require_token)])

    for exc_type, status_code in ERROR_STATUSES:

        def handler(_: Request, exc: Exception, status_code: int = status_code) -> JSONResponse:
            return JSONResponse({"detail": str(exc)}, status_code=status_code)

        app.add_exception_handler(exc_type, handler)

    async def invalid_request(_: Request, exc: Exception) -> JSONResponse:
        # FastAPI's own handler echoes each bad input back, and an input such as 1e309 (inf) cannot
        # be written as JSON: it answered 500. Where and why is what the caller needs.
        assert isinstance(exc, RequestValidationError)
        errors = [
            {"loc": list(error["loc"]), "msg": str(error["msg"]), "type": str(error["type"])}
            for error in exc.errors()
        ]
        return JSONResponse({"detail": errors}, status_code=422)

    app.add_exception_handler(RequestValidationError, invalid_request)

    @app.get("/api/healthcheck")
    async def healthcheck() -> HealthcheckResponse:
        return HealthcheckResponse(version=agent_version())

    @api.get("/instance/info")
    async def instance_info() -> InstanceInfo:
        total_disk, free_disk = disk_usage(registry.data_dir)
        return InstanceInfo(
            cpus=registry.capacity.cpus,
            memory_bytes=registry.capacity.memory_bytes,
            disk_total_bytes=total_disk,
            disk_free_bytes=free_disk,
            gpus=registry.gpus,
            total=registry.ledger.total(),
            free=registry.ledger.free(),
            free_gpu_indices=registry.ledger.free_gpu_indices(),
            ssh_port=ssh_server.port if ssh_server is not None else None,
            ssh_host_key=ssh_server.host_key_line if ssh_server is not None else None,
            container_engine=registry.executors.container.engine_name,
            cpu_arch=cpu_arch(),
            shm_bytes=shm_bytes(),
            agent_uid=agent_uid(),
        )

    @api.post("/tasks")
    async def submit_task(request: TaskSubmitRequest) -> TaskInfo:
        return registry.submit(request)

    @api.get("/tasks")
    async def list_tasks() -> TaskList:
        return TaskList(tasks=registry.list_tasks())

    @api.get("/tasks/{task_id}")
    async def get_task(task_id: str) -> TaskInfo:
        return registry.get(task_id).to_info()

    @api.post("/tasks/{task_id}/terminate")
    async def terminate_task(task_id: str, request: TerminateRequest) -> TaskInfo:
        return registry.terminate(task_id, request)

    @api.post("/tasks/{task_id}/remove")
    async def remove_task(task_id: str) -> TaskInfo:
        return registry.remove(task_id)

    @api.post("/tasks/{task_id}/job")
    async def submit_job(task_id: str, spec: JobSpec) -> TaskInfo:
        return jobs.submit_job(registry, task_id, spec)

    @api.post("/tasks/{task_id}/code")
    async def upload_code(
        task_id: str,
        request: Request,
        sha256: str = Query(alias=CODE_HASH_PARAM, pattern="^[0-9a-fA-F]{64}$"),
    ) -> TaskInfo:
        return await jobs.upload_code(registry, task_id, request.stream(), sha256)

    code = CodeCache(registry.data_dir)

    @api.get("/code/{sha256}")
    async def kept_code(sha256: str = Path(pattern="^[0-9a-f]{64}$")) -> CodeKept:
        """Whether this agent keeps the archive (docs/jobs.md#batches): 404 if not."""
        if not code.has(sha256):
            raise HTTPException(404, f"code {sha256} is not kept on this agent")
        return CodeKept(sha256=sha256)

    @api.put("/code/{sha256}")
    async def keep_code(request: Request, sha256: str = Path(pattern="^[0-9a-f]{64}$")) -> CodeKept:
        """A code archive kept for the tasks of a start batch, checked against its hash."""
        if not code.has(sha256):
            try:
                await code.receive(request.stream(), sha256)
            except CodeArchiveError as exc:
                raise BadTaskRequest(str(exc)) from exc
        return CodeKept(sha256=sha256)

    @api.post("/batches/start")
    async def start_batch(batch: StartBatch) -> BatchAnswers:
        return await batches.start_tasks(registry, code, batch)

    @api.post("/batches/remove")
    async def remove_batch(batch: RemoveBatch) -> BatchAnswers:
        return batches.remove_tasks(registry, batch)

    @api.post("/tasks/{task_id}/run")
    async def run_job(task_id: str) -> TaskInfo:
        return await jobs.run(registry, task_id)

    metrics = MetricsSampler(registry)

    @api.get("/tasks/{task_id}/metrics")
    async def task_metrics(task_id: str) -> TaskMetrics:
        """The running job's CPU, memory and GPU use now (docs/jobs.md#metrics); 409 unless it runs."""
        return await metrics.sample(task_id)

    @api.get("/tasks/{task_id}/pull", response_model=PullResponse)
    async def pull(
        task_id: str,
        offset: int = Query(default=0, ge=0, le=MAX_OFFSET),
        limit: int = Query(default=DEFAULT_PULL_LIMIT, ge=1, le=MAX_PULL_LIMIT),
        states_offset: int = Query(default=0, ge=0, le=MAX_OFFSET),
        wait: float = Query(default=0.0, ge=0, le=jobs.MAX_PULL_WAIT, allow_inf_nan=False),
    ) -> Response:
        if wait > 0:
            body = await jobs.pull_waiting(registry, task_id, offset, limit, states_offset, wait)
        else:
            body = jobs.pull(registry, task_id, offset, limit, states_offset)
        return Response(content=body, media_type="application/json")

    @api.get("/changes", response_model=ChangesResponse)
    async def changes(
        cursor: int = Query(default=0, ge=0, le=MAX_OFFSET),
        epoch: str = Query(default="", max_length=64),
        wait: float = Query(default=0.0, ge=0, le=MAX_CHANGES_WAIT, allow_inf_nan=False),
    ) -> ChangesResponse:
        """What changed on the tasks since `cursor` (docs/jobs.md#the-instance-watch), held up to `wait`
        seconds while nothing has."""
        return await registry.changes.wait(cursor, epoch, wait)

    app.include_router(api)

    @app.websocket("/api/tasks/{task_id}/logs/ws")
    async def stream_logs(
        websocket: WebSocket,
        task_id: str,
        offset: int = 0,
        query_token: str | None = Query(default=None, alias="token"),
    ) -> None:
        # Browsers cannot set headers on a WebSocket, hence the token may come as a query parameter.
        presented = (
            query_token if query_token is not None else _bearer(websocket.headers.get("authorization"))
        )
        if not _token_matches(presented, token):
            await _refuse(websocket, WS_CLOSE_UNAUTHORIZED, UNAUTHORIZED)
            return
        try:
            registry.get(task_id)
        except TaskNotFound as exc:
            await _refuse(websocket, WS_CLOSE_NOT_FOUND, str(exc))
            return
        if not 0 <= offset <= MAX_OFFSET:
            await _refuse(websocket, WS_CLOSE_BAD_REQUEST, f"offset must be in [0, {MAX_OFFSET}]")
            return
        await websocket.accept()
        await _stream(websocket, registry, task_id, offset)

    return app


class BodyTooLarge(HTTPException):
    """Raised from `receive` once a body passes its limit. An HTTPException, so that FastAPI's body
    parsing passes it on as it is rather than answering 400."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body larger than {limit} bytes")


class GuardMiddleware:
    """Pure ASGI, ahead of routing and body parsing: a request without the token is answered 401 before
    a byte of its body is read, and a body past its limit is refused 413, at once when Content-Length
    says so, else (chunked) as soon as the bytes received pass it."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # the log WebSocket checks its token itself (header or query)
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        headers = Headers(scope=scope)
        if path not in OPEN_PATHS and not _token_matches(_bearer(headers.get("authorization")), self.token):
            await _answer(send, 401, UNAUTHORIZED, {"www-authenticate": "Bearer"})
            return
        limit = MAX_CODE_BODY if _CODE_PATH.match(path) else MAX_JSON_BODY
        declared = headers.get("content-length")
        if declared is not None and not declared.isdigit():
            await _answer(send, 400, "bad Content-Length header")
            return
        if declared is not None and int(declared) > limit:
            await _answer(send, 413, BodyTooLarge(limit).detail)
            return
        received = 0
        started = False

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(limit)
            return message

        async def watching_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counting_receive, watching_send)
        except BodyTooLarge as exc:  # read by a route that streams the body itself, outside FastAPI's parsing
            if started:
                raise
            await _answer(send, 413, exc.detail)


async def _answer(send: Send, status: int, detail: str, headers: dict[str, str] | None = None) -> None:
    response = JSONResponse({"detail": detail}, status_code=status, headers=headers)
    await send({"type": "http.response.start", "status": status, "headers": response.raw_headers})
    await send({"type": "http.response.body", "body": response.body})


async def _refuse(websocket: WebSocket, code: int, reason: str) -> None:
    # Accepting first lets the client read why; a refused handshake would only say 403.
    await websocket.accept()
    await websocket.close(code=code, reason=reason)


async def _stream(websocket: WebSocket, registry: TaskRegistry, task_id: str, offset: int) -> None:
    """Send the log from `offset` as binary frames, follow it while the job runs, close when all is sent."""
    # The client never speaks; waiting on its side tells us at once when it leaves.
    leaving = asyncio.ensure_future(websocket.receive())
    log_path = registry.paths(task_id).log
    try:
        while not leaving.done():
            try:
                record = registry.get(task_id)
                finished = record.status == TaskStatus.TERMINATED  # read before the log, as in pull
                data, _ = read_log(log_path, offset, WS_CHUNK)
            except TaskNotFound as exc:  # removed while streamed
                await websocket.close(code=WS_CLOSE_NOT_FOUND, reason=str(exc)[:120])
                return
            except OffsetOutOfRange as exc:
                await websocket.close(code=WS_CLOSE_BAD_REQUEST, reason=str(exc)[:120])
                return
            if data:
                await websocket.send_bytes(data)
                offset += len(data)
            elif finished:
                await websocket.close(code=1000)
                return
            else:
                await asyncio.wait({leaving}, timeout=WS_POLL_INTERVAL)
    except WebSocketDisconnect:
        pass
    finally:
        leaving.cancel()
