"""The API's application (docs/teams.md#the-api): FastAPI over the store; every answer that is not a
success is `{"detail": "<one line>"}`."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from api.attach_routes import router as attach_router
from api.backend_routes import router as backend_router
from api.fleet_routes import router as fleet_router
from api.pipeline_routes import router as pipeline_router
from api.run_changes import router as run_changes_router
from api.run_live import router as run_live_router
from api.run_reads import router as run_reads_router
from api.run_tools_routes import router as run_tools_router
from api.secret_routes import router as secret_router
from api.teams_routes import router as teams_router
from api.volume_routes import router as volume_router
from cli.fleet_api import LocalFleetStarts
from core.version import ferry_version
from store.repository import Store

# How often the API makes sure again that a project's local fleet runs, rather than at every submission: it
# cannot be deleted and its scheduler runs for ever, so this only restarts one that an operator terminated.
LOCAL_FLEET_RECHECK_S = 60.0


def make_app(store: Store, *, embedded: bool = False) -> FastAPI:
    """`embedded`: served by the embedded stack, one user's machine (docs/deployment.md#webhooks)."""
    app = FastAPI(title="Ferry", version=ferry_version())
    app.state.store = store
    app.state.embedded = embedded
    app.state.local_starts = LocalFleetStarts(recheck_s=LOCAL_FLEET_RECHECK_S)
    app.include_router(teams_router)
    app.include_router(run_reads_router)
    app.include_router(run_changes_router)
    app.include_router(attach_router)
    app.include_router(pipeline_router)
    app.include_router(run_live_router)
    app.include_router(run_tools_router)
    app.include_router(secret_router)
    app.include_router(volume_router)
    app.include_router(fleet_router)
    app.include_router(backend_router)
    app.add_exception_handler(RequestValidationError, _invalid)  # type: ignore[arg-type]
    return app


async def _invalid(request: Request, error: RequestValidationError) -> JSONResponse:
    """One line for a body or path that does not parse: the first problem, with where it is."""
    first = error.errors()[0] if error.errors() else {"loc": (), "msg": "invalid request"}
    where = ".".join(str(part) for part in first.get("loc", ()) if part != "body")
    message = str(first.get("msg")).removeprefix("Value error, ")  # pydantic's prefix for a validator's own
    return JSONResponse({"detail": f"{where}: {message}" if where else message}, 422)
