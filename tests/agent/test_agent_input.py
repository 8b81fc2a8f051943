"""The agent refuses bad input as the client's error, never as its own: token before body, bodies
bounded, numbers finite, paths confined, a task id bound to its request. Most cases drive the real app
through httpx's ASGI transport, which lets a test see whether the body was read at all; the ones about
the wire (Content-Length) talk to a real agent process."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import tarfile
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from agent_harness import AgentProcess, new_id
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.app import MAX_JSON_BODY, create_app
from agent.instance import HostCapacity
from agent.tasks import TaskRegistry
from core.wire.agent_api import CODE_HASH_PARAM

TOKEN = "input-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
JSON = {"Content-Type": "application/json"}


def make_registry(data_dir: Path) -> TaskRegistry:
    registry = TaskRegistry(data_dir, HostCapacity(cpus=4, memory_bytes=8 * 2**30), [])
    registry.load()
    return registry


def asgi_client(registry: TaskRegistry) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=create_app(registry, TOKEN))
    return httpx.AsyncClient(transport=transport, base_url="http://agent")


@pytest.fixture
def registry(tmp_path: Path) -> TaskRegistry:
    return make_registry(tmp_path / "data")


@pytest.fixture
async def http(registry: TaskRegistry) -> AsyncIterator[httpx.AsyncClient]:
    async with asgi_client(registry) as client:
        yield client


class CountingBody:
    """A streamed request body that records how many of its chunks the server pulled."""

    def __init__(self, chunks: int, chunk: bytes = b"x" * 2**20) -> None:
        self.chunks, self.chunk, self.pulled = chunks, chunk, 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for _ in range(self.chunks):
            self.pulled += 1
            yield self.chunk


RAW = "__raw__"


def raw_json(shape: dict[str, Any], literal: str) -> str:
    """JSON with `literal` written as it is where RAW stands: 1e309 or NaN, which json.dumps won't write."""
    return json.dumps(shape).replace(json.dumps(RAW), literal)


def error_locs(response: httpx.Response) -> list[list[Any]]:
    detail = response.json()["detail"]
    assert isinstance(detail, list), detail
    return [error["loc"] for error in detail]


# --- the token comes before the body -----------------------------------------------------------------


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}])
@pytest.mark.parametrize("path", ["/api/tasks", "/api/tasks/x/job", "/api/tasks/x/terminate"])
async def test_no_token_is_401_before_an_unparsable_body_is_read(
    http: httpx.AsyncClient, registry: TaskRegistry, headers: dict[str, str], path: str
) -> None:
    body = CountingBody(64, b"{not json")  # 64 chunks of garbage, streamed (chunked)
    response = await http.post(path, content=body, headers={**headers, **JSON})
    assert response.status_code == 401, response.text
    assert response.json()["detail"] == "missing or wrong bearer token"
    assert response.headers["www-authenticate"] == "Bearer"
    assert body.pulled == 0
    assert registry.list_tasks() == []


async def test_no_token_is_401_before_a_code_upload_is_read(http: httpx.AsyncClient) -> None:
    body = CountingBody(64)
    response = await http.post(f"/api/tasks/x/code?{CODE_HASH_PARAM}={'0' * 64}", content=body)
    assert response.status_code == 401
    assert body.pulled == 0


async def test_healthcheck_stays_open(http: httpx.AsyncClient) -> None:
    assert (await http.get("/api/healthcheck")).status_code == 200


async def wire_exchange(agent: AgentProcess, head: str) -> bytes:
    """Send a request's head alone and read the answer: a server that waited for the body would hang."""
    reader, writer = await asyncio.open_connection("127.0.0.1", agent.port)
    try:
        writer.write(head.encode())
        await writer.drain()
        return await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
    finally:
        writer.close()


async def test_real_agent_answers_a_64mb_post_without_token_before_its_body(
    shared_agent: AgentProcess,
) -> None:
    head = (
        "POST /api/tasks HTTP/1.1\r\nHost: agent\r\nContent-Type: application/json\r\n"
        f"Content-Length: {64 * 2**20}\r\n\r\n"
    )
    assert (await wire_exchange(shared_agent, head)).startswith(b"HTTP/1.1 401 ")


async def test_real_agent_refuses_a_declared_oversized_body_before_reading_it(
    shared_agent: AgentProcess,
) -> None:
    head = (
        f"POST /api/tasks HTTP/1.1\r\nHost: agent\r\nAuthorization: Bearer {shared_agent.token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {MAX_JSON_BODY + 1}\r\n\r\n"
    )
    assert (await wire_exchange(shared_agent, head)).startswith(b"HTTP/1.1 413 ")


# --- bodies are bounded ----------------------------------------------------------------------------------


async def test_oversized_json_body_is_413(http: httpx.AsyncClient) -> None:
    response = await http.post("/api/tasks", content=b" " * (MAX_JSON_BODY + 1), headers={**AUTH, **JSON})
    assert response.status_code == 413


async def test_oversized_chunked_json_body_is_413_once_past_the_limit(http: httpx.AsyncClient) -> None:
    body = CountingBody(64)
    response = await http.post("/api/tasks", content=body, headers={**AUTH, **JSON})
    assert response.status_code == 413
    assert body.pulled <= MAX_JSON_BODY // len(body.chunk) + 1  # not the whole 64 MiB


async def test_code_upload_keeps_its_larger_limit(http: httpx.AsyncClient, registry: TaskRegistry) -> None:
    task_id = new_id()
    assert (await http.post("/api/tasks", json={"id": task_id}, headers=AUTH)).status_code == 200
    buffer = io.BytesIO()
    payload = os.urandom(MAX_JSON_BODY + 2**20)  # incompressible: the archive is past the JSON limit
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("blob")
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
    archive = buffer.getvalue()
    assert len(archive) > MAX_JSON_BODY

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(archive), 2**20):
            yield archive[start : start + 2**20]

    response = await http.post(
        f"/api/tasks/{task_id}/code",
        params={CODE_HASH_PARAM: hashlib.sha256(archive).hexdigest()},
        content=chunks(),
        headers=AUTH,
    )
    assert response.status_code == 200, response.text
    assert registry.get(task_id).code_hash == hashlib.sha256(archive).hexdigest()


# --- numbers are finite and in range ------------------------------------------------------------------


@pytest.mark.parametrize("value", ["1e309", "-1e309", "NaN", "Infinity", "-Infinity", "1e30", "-1"])
@pytest.mark.parametrize("field", ["cpu", "memory"])
async def test_resource_amounts_must_be_finite_and_in_range(
    http: httpx.AsyncClient, registry: TaskRegistry, field: str, value: str
) -> None:
    body = raw_json({"id": new_id(), "resources": {field: RAW}}, value)
    response = await http.post("/api/tasks", content=body, headers={**AUTH, **JSON})
    assert response.status_code == 422, response.text
    assert error_locs(response) == [["body", "resources", field]]
    assert registry.list_tasks() == []


@pytest.mark.parametrize("value", ["1e309", "1.5", str(10**40), "-1"])
async def test_gpu_count_must_be_a_bounded_integer(http: httpx.AsyncClient, value: str) -> None:
    body = raw_json({"id": new_id(), "resources": {"gpu": RAW}}, value)
    response = await http.post("/api/tasks", content=body, headers={**AUTH, **JSON})
    assert response.status_code == 422, response.text
    assert error_locs(response) == [["body", "resources", "gpu"]]


async def pending_task(http: httpx.AsyncClient) -> str:
    task_id = new_id()
    assert (await http.post("/api/tasks", json={"id": task_id}, headers=AUTH)).status_code == 200
    return task_id


@pytest.mark.parametrize("value", ["1e309", "NaN", "-Infinity", "1e300", "-1"])
async def test_terminate_timeout_must_be_finite_and_in_range(http: httpx.AsyncClient, value: str) -> None:
    task_id = await pending_task(http)
    body = raw_json({"timeout": RAW}, value)
    response = await http.post(f"/api/tasks/{task_id}/terminate", content=body, headers={**AUTH, **JSON})
    assert response.status_code == 422, response.text
    assert error_locs(response) == [["body", "timeout"]]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_duration", 10**30),
        ("max_duration", 0),
        ("stop_duration", 10**30),
        ("stop_duration", 1e309),
        ("replica_num", 10**30),
        ("job_num", -1),
    ],
)
async def test_job_spec_durations_and_counts_are_bounded(
    http: httpx.AsyncClient, field: str, value: float
) -> None:
    task_id = await pending_task(http)
    body = json.dumps({"run_name": "r", "commands": ["true"], field: value})
    response = await http.post(f"/api/tasks/{task_id}/job", content=body, headers={**AUTH, **JSON})
    assert response.status_code == 422, response.text
    assert error_locs(response) == [["body", field]]


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("offset=99999999999999999999999999", "offset"),
        ("states_offset=99999999999999999999999999", "states_offset"),
        ("limit=0", "limit"),
        ("wait=nan", "wait"),
        ("wait=inf", "wait"),
        ("offset=-1", "offset"),
    ],
)
async def test_pull_offsets_and_limits_are_bounded(http: httpx.AsyncClient, query: str, field: str) -> None:
    task_id = await pending_task(http)
    response = await http.get(f"/api/tasks/{task_id}/pull?{query}", headers=AUTH)
    assert response.status_code == 422, response.text
    assert error_locs(response) == [["query", field]]


# --- the API's schema and docs ----------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/docs", "/redoc", "/openapi.json"])
async def test_docs_and_schema_need_the_token(http: httpx.AsyncClient, path: str) -> None:
    assert (await http.get(path)).status_code == 401


async def test_schema_is_served_with_the_token_and_the_docs_pages_are_off(http: httpx.AsyncClient) -> None:
    schema = await http.get("/openapi.json", headers=AUTH)
    assert schema.status_code == 200
    assert "/api/tasks" in schema.json()["paths"]
    assert (await http.get("/docs", headers=AUTH)).status_code == 404
    assert (await http.get("/redoc", headers=AUTH)).status_code == 404


# --- paths stay in the task's directory -----------------------------------------------------------


@pytest.mark.parametrize("path", ["..", "../outside", "data/../../outside", "./..", "a/b/../../../c"])
async def test_relative_volume_path_that_leaves_the_workdir_is_422(
    http: httpx.AsyncClient, registry: TaskRegistry, tmp_path: Path, path: str
) -> None:
    volume = {"host_path": str(tmp_path / "volume"), "path": path}
    response = await http.post("/api/tasks", json={"id": new_id(), "volumes": [volume]}, headers=AUTH)
    assert response.status_code == 422, response.text
    assert error_locs(response) == [["body", "volumes", 0, "path"]]
    assert "'..'" in response.text
    assert registry.list_tasks() == []


@pytest.mark.parametrize(("field", "value"), [("host_path", "/tmp/a\x00b"), ("path", "da\x00ta")])
async def test_volume_path_with_nul_is_422(http: httpx.AsyncClient, field: str, value: str) -> None:
    volume = {"host_path": "/tmp/volume", "path": "data", field: value}
    response = await http.post("/api/tasks", json={"id": new_id(), "volumes": [volume]}, headers=AUTH)
    assert response.status_code == 422, response.text
    assert error_locs(response) == [["body", "volumes", 0, field]]


@pytest.mark.parametrize("working_dir", ["..", "../..", "src/../../etc", "a\x00b"])
async def test_working_dir_that_leaves_the_workdir_is_422(http: httpx.AsyncClient, working_dir: str) -> None:
    task_id = await pending_task(http)
    body = {"run_name": "r", "commands": ["pwd"], "working_dir": working_dir}
    response = await http.post(f"/api/tasks/{task_id}/job", json=body, headers=AUTH)
    assert response.status_code == 422, response.text
    assert error_locs(response) == [["body", "working_dir"]]


async def test_paths_that_stay_inside_are_accepted(http: httpx.AsyncClient, tmp_path: Path) -> None:
    volumes = [
        {"host_path": str(tmp_path / "v1"), "path": "data/in/here"},
        {"host_path": str(tmp_path / "v2"), "path": "./cache..d"},  # a name with dots is no `..`
    ]
    response = await http.post("/api/tasks", json={"id": new_id(), "volumes": volumes}, headers=AUTH)
    assert response.status_code == 200, response.text
    task_id = response.json()["id"]
    body = {"run_name": "r", "commands": ["pwd"], "working_dir": "src/sub"}
    assert (await http.post(f"/api/tasks/{task_id}/job", json=body, headers=AUTH)).status_code == 200


# --- one task id, one request -----------------------------------------------------------------------


async def test_same_submission_again_is_the_same_answer(http: httpx.AsyncClient) -> None:
    body = {"id": new_id(), "name": "n", "resources": {"cpu": 1, "memory": 0.5}, "env": {"A": "1"}}
    first = await http.post("/api/tasks", json=body, headers=AUTH)
    second = await http.post("/api/tasks", json=body, headers=AUTH)
    assert first.status_code == second.status_code == 200
    assert first.json() == second.json()


@pytest.mark.parametrize(
    "change",
    [{"name": "other"}, {"resources": {"cpu": 2}}, {"ports": [18999]}, {"env": {"A": "2"}}, {"env": {}}],
)
async def test_same_id_with_a_different_body_is_409(
    http: httpx.AsyncClient, registry: TaskRegistry, change: dict[str, Any]
) -> None:
    body = {"id": new_id(), "name": "n", "resources": {"cpu": 1}, "env": {"A": "1"}}
    assert (await http.post("/api/tasks", json=body, headers=AUTH)).status_code == 200
    response = await http.post("/api/tasks", json={**body, **change}, headers=AUTH)
    assert response.status_code == 409, response.text
    assert body["id"] in response.json()["detail"]
    assert registry.get(body["id"]).name == "n"  # the first request stands
    assert registry.ledger.free().cpu == 3


# --- property: random bodies -------------------------------------------------------------------------

_json_leaf = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**40), max_value=10**40)
    | st.floats()  # NaN and infinities too: json.dumps writes them as NaN / Infinity
    | st.text(max_size=20)
)
_json = st.recursive(
    _json_leaf,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
_ids = st.sampled_from(["a", "b", "../x", "", "ok-id"]) | st.text(max_size=10)
_resources = st.fixed_dictionaries(
    {}, optional={"cpu": _json_leaf, "memory": _json_leaf, "gpu": _json_leaf, "extra": _json_leaf}
)
_volumes = st.lists(
    st.fixed_dictionaries({}, optional={"host_path": _json_leaf | st.just("/tmp/v"), "path": _json_leaf}),
    max_size=2,
)
_submit_like = st.fixed_dictionaries(
    {"id": _ids},
    optional={
        "name": _json_leaf,
        "resources": _resources | _json,
        "ports": st.lists(_json_leaf, max_size=3) | _json,
        "volumes": _volumes | _json,
        "env": st.dictionaries(st.text(max_size=5), _json_leaf, max_size=2) | _json,
    },
)
_bodies = _submit_like.map(json.dumps) | _json.map(json.dumps) | st.binary(max_size=64)


@pytest.fixture(scope="module")
def property_data_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as directory:
        yield Path(directory)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=_bodies, with_token=st.booleans())
def test_random_submit_bodies_never_500_and_never_pass_without_the_token(
    property_data_dir: Path, body: str | bytes, with_token: bool
) -> None:
    registry = make_registry(property_data_dir / new_id("data"))

    async def submit() -> httpx.Response:
        async with asgi_client(registry) as client:
            headers = {**JSON, **(AUTH if with_token else {})}
            return await client.post("/api/tasks", content=body, headers=headers)

    response = asyncio.run(submit())
    assert response.status_code < 500, response.text
    if not with_token:
        assert response.status_code == 401
        assert registry.list_tasks() == []
    else:
        assert response.status_code in (200, 400, 409, 422), response.text  # 400: not UTF-8
        assert len(registry.list_tasks()) == (1 if response.status_code == 200 else 0)
