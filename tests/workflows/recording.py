"""A release's workflow histories: recorded from the workflow tests, replayed by every later release
(docs/upgrades.md).

`scripts/record_release.py` runs tests/workflows with `FERRY_RECORD_HISTORIES` set; the harness then
writes, after each test, every execution the test server saw — finished, continued as new, or still in
flight when the test ended (the case an upgrade meets) — into one file per test:
`tests/histories/<version>/<module>.<test>.json.gz`, a list of `{workflow_id, run_id, workflow_type,
history}` (gzipped: a release's histories are about 5 MB of JSON, 0.5 MB compressed).
`tests/workflows/test_release_histories.py` replays them all on today's workflows.
"""

from __future__ import annotations

import gzip
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.api.workflowservice.v1 import (
    ListClosedWorkflowExecutionsRequest,
    ListOpenWorkflowExecutionsRequest,
)
from temporalio.client import Client, WorkflowHistory

RECORD_ENV = "FERRY_RECORD_HISTORIES"
HISTORIES = Path(__file__).resolve().parent.parent / "histories"


@dataclass(frozen=True)
class RecordedExecution:
    test: str
    workflow_id: str
    run_id: str
    workflow_type: str
    history: WorkflowHistory


def recording_dir() -> Path | None:
    """Where this test session records histories; None (the default): it records nothing."""
    value = os.environ.get(RECORD_ENV)
    return Path(value) if value else None


async def record_test_histories(client: Client, directory: Path, test: str) -> int:
    """Every execution on the (per-test) server, into `directory/<test>.json.gz`; how many there were."""
    executions: list[dict[str, Any]] = []
    for info in await _executions(client):
        handle = client.get_workflow_handle(info.execution.workflow_id, run_id=info.execution.run_id)
        history = await handle.fetch_history()
        executions.append(
            {
                "workflow_id": info.execution.workflow_id,
                "run_id": info.execution.run_id,
                "workflow_type": info.type.name,
                "history": json.loads(history.to_json()),
            }
        )
    executions.sort(key=lambda e: (e["workflow_id"], e["history"]["events"][0]["eventTime"]))
    directory.mkdir(parents=True, exist_ok=True)
    data = json.dumps(executions, separators=(",", ":")).encode()
    (directory / f"{test}.json.gz").write_bytes(gzip.compress(data, mtime=0))
    return len(executions)


async def _executions(client: Client) -> list[Any]:
    # The test server has no visibility queries (ListWorkflowExecutions); it answers the older lists.
    service, namespace = client.workflow_service, client.namespace
    found: list[Any] = []
    page = b""
    while True:
        open_ = await service.list_open_workflow_executions(
            ListOpenWorkflowExecutionsRequest(namespace=namespace, next_page_token=page)
        )
        found += open_.executions
        if not (page := open_.next_page_token):
            break
    while True:
        closed = await service.list_closed_workflow_executions(
            ListClosedWorkflowExecutionsRequest(namespace=namespace, next_page_token=page)
        )
        found += closed.executions
        if not (page := closed.next_page_token):
            break
    return found


def recorded_releases() -> list[str]:
    """The versions whose histories are kept, oldest first."""
    found = [p.name for p in HISTORIES.iterdir() if p.is_dir()] if HISTORIES.is_dir() else []
    return sorted(found, key=_version_key)


def recorded_executions(version: str) -> list[RecordedExecution]:
    found = []
    for path in sorted((HISTORIES / version).glob("*.json.gz")):
        test = path.name.removesuffix(".json.gz")
        for e in json.loads(gzip.decompress(path.read_bytes())):
            history = WorkflowHistory.from_json(e["workflow_id"], e["history"])
            found.append(RecordedExecution(test, e["workflow_id"], e["run_id"], e["workflow_type"], history))
    return found


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))
