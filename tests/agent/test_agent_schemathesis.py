"""The agent's API fuzzed from its own OpenAPI schema by schemathesis, against a real agent process.

With the token, no generated request, valid or not, gets a server error, and each answer is one the
schema documents (its status, content type and body): every operation once with what schemathesis
generates (a task id is then mostly unknown: 404), and every operation on a task once more on a task
that exists, in the state the operation acts on. Without the token, or with a wrong one, every operation
but the healthcheck answers 401 and nothing is done: no task, the data directory as it was.

schemathesis's pytest loader (`schemathesis.pytest.from_fixture`) fails on pytest 9.2 (it sets
`Item._nodeid`, which pytest no longer has), so the cases come from its Hypothesis strategies.
"""

from __future__ import annotations

import secrets
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from agent_harness import AgentProcess, start_agent, stop_agent
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from core.wire.agent_api import JobSpec, TaskSubmitRequest
from tests.fuzzing import fuzz_operation

TOKEN = secrets.token_hex(16)
# Cases per operation, generation mode and pass; Hypothesis derandomized: every run sends the same ones.
MAX_EXAMPLES = 25
OPEN_PATHS = {"/api/healthcheck"}
# Not `negative_data_rejection`: a few inputs schemathesis counts invalid are accepted on purpose or by
# pydantic's lax mode (an unknown query parameter is ignored, `"timeout": true` reads as 1 s).
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
MODES = [GenerationMode.POSITIVE, GenerationMode.NEGATIVE]
REQUEST_TIMEOUT = 60  # seconds: `run` answers within 20 (agent/jobs.py), everything else at once

Exercise = Callable[[schemathesis.Case], None]


class Agent:
    """The agent under test, driven with its token, and where a fuzzed job may write on the host."""

    def __init__(self, process: AgentProcess, sandbox: Path) -> None:
        self.process = process
        self.sandbox = sandbox
        self.http = httpx.Client(
            base_url=process.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=REQUEST_TIMEOUT
        )

    def schema(self) -> schemathesis.BaseSchema:
        # /openapi.json is behind the token too (agent/app.py).
        return schemathesis.openapi.from_url(
            f"{self.process.url}/openapi.json", headers={"Authorization": f"Bearer {TOKEN}"}
        )

    def task_ids(self) -> list[str]:
        listed = self.http.get("/api/tasks")
        listed.raise_for_status()
        return [task["id"] for task in listed.json()["tasks"]]

    def status(self, task_id: str) -> str | None:
        got = self.http.get(f"/api/tasks/{task_id}")
        return str(got.json()["status"]) if got.status_code == 200 else None

    def new_task(self, commands: list[str] | None = None, run: bool = False) -> str:
        """A task of no resources: pending, or with a job (running it when `run`)."""
        task_id = f"fuzz-{secrets.token_hex(6)}"
        self.http.post("/api/tasks", json=TaskSubmitRequest(id=task_id).model_dump(mode="json"))
        if commands is not None:
            spec = JobSpec(run_name="fuzz", commands=commands)
            self.http.post(f"/api/tasks/{task_id}/job", json=spec.model_dump(mode="json"))
        if run:
            self.http.post(f"/api/tasks/{task_id}/run")
        assert self.status(task_id) is not None, f"{task_id} was not made"
        return task_id

    def wait_terminated(self, task_id: str) -> None:
        deadline = time.monotonic() + 30
        while self.status(task_id) not in ("terminated", None):
            assert time.monotonic() < deadline, f"{task_id} still {self.status(task_id)} after 30 s"
            time.sleep(0.02)

    def discard(self, task_id: str) -> None:
        """Stop and remove a task, so that it holds no resources and its job's volume links go."""
        self.http.post(f"/api/tasks/{task_id}/terminate", json={"timeout": 0})
        self.wait_terminated(task_id)
        self.http.post(f"/api/tasks/{task_id}/remove")

    def discard_all(self) -> None:
        for task_id in self.task_ids():
            self.discard(task_id)


def confine(case: schemathesis.Case, sandbox: Path) -> None:
    """Keep what a fuzzed task or job does on the host inside `sandbox`: the agent runs as the test's user
    (root in CI), makes a volume's host path and mount path and a job's working directory wherever they
    are asked for, and runs the job's commands with its `shell`. Absolute paths move under the sandbox
    (still absolute, so as valid or invalid as they were) and a job's shell becomes `true`, which reads
    no script: every field is still sent as generated but the program."""
    body = case.body
    if not isinstance(body, dict):
        return

    def moved(value: Any) -> Any:
        return f"{sandbox}{value}" if isinstance(value, str) and value.startswith("/") else value

    volumes = body.get("volumes")
    if case.operation.path == "/api/tasks" and isinstance(volumes, list):
        for volume in volumes:
            if isinstance(volume, dict):
                volume.update({key: moved(value) for key, value in volume.items()})
    if case.operation.path.endswith("/job"):
        body["working_dir"] = moved(body.get("working_dir"))
        if isinstance(body.get("shell"), str) and body["shell"]:
            body["shell"] = "true"


def operations(schema: schemathesis.BaseSchema) -> list[schemathesis.APIOperation]:
    found = []
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result  # the agent's schema is FastAPI's: none is invalid
        found.append(result.ok())
    return found


def labels(schema: schemathesis.BaseSchema, only: Callable[[str], bool] = lambda path: True) -> set[str]:
    return {operation.label for operation in operations(schema) if only(operation.path)}


def fuzz_every_operation(
    agent: Agent,
    schema: schemathesis.BaseSchema,
    mode: GenerationMode,
    exercise: Exercise,
    only: Callable[[str], bool] = lambda path: True,
) -> Counter[str]:
    """Run `exercise` on MAX_EXAMPLES generated cases of each operation; the cases sent, by operation."""
    sent: Counter[str] = Counter()
    for operation in operations(schema):
        if not only(operation.path):
            continue

        def fuzz(case: schemathesis.Case) -> None:
            confine(case, agent.sandbox)
            exercise(case)
            sent[case.operation.label] += 1

        fuzz_operation(operation, mode, MAX_EXAMPLES, fuzz)
    return sent


def start(tmp_path_factory: pytest.TempPathFactory, name: str) -> Agent:
    workspace = tmp_path_factory.mktemp(name)
    # No container engine: a fuzzed `container` task fails at once rather than pull an image.
    engine = ("--container-engine", f"unix://{workspace}/no-engine.sock")
    sandbox = workspace / "sandbox"
    sandbox.mkdir()
    return Agent(start_agent(workspace, token=TOKEN, extra_args=engine), sandbox)


@pytest.fixture(scope="module")
def fuzzed_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agent]:
    agent = start(tmp_path_factory, "fuzzed-agent")
    yield agent
    agent.discard_all()
    stop_agent(agent.process)


@pytest.fixture(scope="module")
def locked_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agent]:
    agent = start(tmp_path_factory, "locked-agent")
    yield agent
    stop_agent(agent.process)


def call_with_token(case: schemathesis.Case, statuses: Counter[str]) -> int:
    """Sends the case with the token, checks the answer, and counts it by operation and status."""
    # The schema has `authorization` as a header parameter: whatever was generated for it is replaced.
    headers = {"Authorization": f"Bearer {TOKEN}"}
    response = case.call(headers=headers, timeout=REQUEST_TIMEOUT)
    statuses[f"{case.operation.label} {response.status_code}"] += 1
    case.validate_response(response, checks=CHECKS, headers=headers)
    return response.status_code


def assert_no_server_error(response: httpx.Response) -> None:
    assert response.status_code < 500, (response.request.url, response.status_code, response.text)


@pytest.mark.parametrize("mode", MODES, ids=lambda mode: mode.value)
def test_generated_requests_get_no_server_error(fuzzed_agent: Agent, mode: GenerationMode) -> None:
    agent = fuzzed_agent
    statuses: Counter[str] = Counter()

    def exercise(case: schemathesis.Case) -> None:
        if call_with_token(case, statuses) == 200 and case.operation.label == "POST /api/tasks":
            # A task made from a generated request runs a job, which uses its volumes, network and ports.
            assert isinstance(case.body, dict)
            task_id = str(case.body["id"])
            spec = JobSpec(run_name="fuzz", commands=["true"]).model_dump(mode="json")
            assert_no_server_error(agent.http.post(f"/api/tasks/{task_id}/job", json=spec))
            assert_no_server_error(agent.http.post(f"/api/tasks/{task_id}/run"))
            agent.discard(task_id)

    sent = fuzz_every_operation(agent, agent.schema(), mode, exercise)
    answers = dict(sorted(statuses.items()))
    print(f"{mode.value}, generated: {sum(sent.values())} cases; answers: {answers}")
    assert set(sent) == labels(agent.schema()) if mode == GenerationMode.POSITIVE else len(sent) > 0
    agent.discard_all()
    assert not [path for path in agent.sandbox.rglob("*") if path.is_symlink()], "volume links left"


@pytest.mark.parametrize("mode", MODES, ids=lambda mode: mode.value)
def test_requests_on_an_existing_task_get_no_server_error(fuzzed_agent: Agent, mode: GenerationMode) -> None:
    agent = fuzzed_agent
    statuses: Counter[str] = Counter()
    # A job that has ended, with a log: reads of it (get, pull) change nothing, so one serves every case.
    ended = agent.new_task(["echo one", "echo two >&2", "exit 3"], run=True)
    agent.wait_terminated(ended)
    # Each case of an operation that changes its task gets a task of its own in the state it acts on.
    fresh: dict[str, Callable[[], str]] = {
        "POST /api/tasks/{task_id}/terminate": lambda: agent.new_task(["sleep 600"], run=True),
        "POST /api/tasks/{task_id}/remove": lambda: agent.new_task(["true"], run=True),
        "POST /api/tasks/{task_id}/job": lambda: agent.new_task(),
        "POST /api/tasks/{task_id}/code": lambda: agent.new_task(),
        "POST /api/tasks/{task_id}/run": lambda: agent.new_task(["true"]),
    }

    def exercise(case: schemathesis.Case) -> None:
        make = fresh.get(case.operation.label)
        task_id = make() if make is not None else ended
        if case.operation.label == "POST /api/tasks/{task_id}/remove":
            agent.wait_terminated(task_id)
        case.path_parameters = {**(case.path_parameters or {}), "task_id": task_id}
        status = call_with_token(case, statuses)
        if status == 200 and case.operation.label == "POST /api/tasks/{task_id}/job":
            assert_no_server_error(agent.http.post(f"/api/tasks/{task_id}/run"))  # the generated job runs
        if make is not None:
            agent.discard(task_id)

    sent = fuzz_every_operation(agent, agent.schema(), mode, exercise, only=lambda path: "{task_id}" in path)
    answers = dict(sorted(statuses.items()))
    print(f"{mode.value}, on existing tasks: {sum(sent.values())} cases; answers: {answers}")
    on_tasks = labels(agent.schema(), lambda path: "{task_id}" in path)
    assert set(sent) == on_tasks if mode == GenerationMode.POSITIVE else set(sent) <= on_tasks
    agent.discard_all()
    assert not [path for path in agent.sandbox.rglob("*") if path.is_symlink()], "volume links left"


@pytest.mark.parametrize("mode", MODES, ids=lambda mode: mode.value)
def test_without_the_token_nothing_is_honoured(locked_agent: Agent, mode: GenerationMode) -> None:
    agent = locked_agent
    before = {str(path) for path in agent.process.data_dir.rglob("*")}
    wrong: list[dict[str, str]] = [
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": f"Basic {TOKEN}"},  # the token, but not as a bearer's
        {"Authorization": f"Bearer {TOKEN[:-1]}"},
    ]

    def exercise(case: schemathesis.Case) -> None:
        expected = 200 if case.operation.path in OPEN_PATHS else 401
        # The generated `authorization` header as it is (random, so wrong), then none, then wrong ones.
        statuses = [case.call(timeout=REQUEST_TIMEOUT).status_code]
        if case.headers is not None:
            case.headers.pop("authorization", None)  # any case: a CaseInsensitiveDict
        statuses += [case.call(headers=headers, timeout=REQUEST_TIMEOUT).status_code for headers in wrong]
        assert statuses == [expected] * len(statuses), (case.operation.label, statuses)

    sent = fuzz_every_operation(agent, agent.schema(), mode, exercise)
    print(f"{mode.value}, without the token: {sum(sent.values())} cases x5: {dict(sent)}")
    assert agent.task_ids() == []
    assert {str(path) for path in agent.process.data_dir.rglob("*")} == before
    assert list(agent.sandbox.iterdir()) == []
