"""Statuses that are true in the Web UI (issue 20, docs/runs.md#the-web-ui), on the embedded stack: one run
done and one failed, then what the Temporal Web UI's own HTTP API answers about them (the list: Failed and
Completed; the failed one's failure, summary, details and current details, read through Ferry's codec
endpoint as the UI does once it is given it), and the UI's workflows list as a real headless Chromium
renders it (skipped, saying why, where Debian's `chromium` is not installed; scripts/test.sh installs it).
"""

from __future__ import annotations

import base64
import html
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from core.settings import DEFAULT_PROJECT
from tests.e2e.conftest import Ferry, task

API = "/api/v1/namespaces/default"
SCREENSHOT = "web-ui-workflows.png"
CHROMIUM_LIMIT = 120  # seconds


def workflow_id(run: str) -> str:
    return f"ferry/{DEFAULT_PROJECT}/{run}"


class WebUI:
    """The Web UI server's HTTP API (what the UI's pages ask), and Ferry's codec endpoint."""

    def __init__(self, url: str, codec: str) -> None:
        self.url, self.codec = url, codec
        self.http = httpx.Client(trust_env=False, timeout=30)

    def get(self, path: str, **params: str) -> Any:
        answer = self.http.get(f"{self.url}{API}{path}", params=params)
        assert answer.status_code == 200, answer.text
        return answer.json()

    def status(self, run: str) -> str:
        listed = self.get("/workflows", query=f'WorkflowId="{workflow_id(run)}"')
        [execution] = listed["executions"]
        return str(execution["status"])

    def describe(self, run: str) -> Any:
        return self.get(f"/workflows/{quote(workflow_id(run), safe='')}")

    def last_event(self, run: str) -> Any:
        history = self.get(f"/workflows/{quote(workflow_id(run), safe='')}/history", reverseOrder="true")
        events = history["history"]["events"]
        return max(events, key=lambda event: int(event["eventId"]))

    def query_metadata(self, run: str) -> Any:
        """The `__temporal_workflow_metadata` query, as the UI sends it for a workflow's current details:
        a POST, with the CSRF token of the UI's cookie."""
        self.http.get(self.url)  # sets the _csrf cookie
        token = self.http.cookies.get("_csrf") or ""
        query = "__temporal_workflow_metadata"
        answer = self.http.post(
            f"{self.url}{API}/workflows/{quote(workflow_id(run), safe='')}/query/{query}",
            json={"query": {"queryType": query}},
            headers={"X-CSRF-TOKEN": token},
        )
        assert answer.status_code == 200, answer.text
        [payload] = answer.json()["queryResult"]["payloads"]
        return self.decode(payload)

    def decode(self, payload: dict[str, Any]) -> Any:
        """A sealed payload opened by Ferry's codec endpoint (the UI's Data Encoder setting)."""
        assert base64.b64decode(payload["metadata"]["encoding"]) == b"binary/encrypted"  # sealed in the UI
        answer = self.http.post(f"{self.codec}/decode", json={"payloads": [payload]})
        assert answer.status_code == 200, answer.text
        [opened] = answer.json()["payloads"]
        return json.loads(base64.b64decode(opened["data"]))


def row_of(dom: str, workflow: str) -> list[str]:
    """The texts of the rendered list's row of `workflow` (the page escapes its slashes, twice)."""
    rows = []
    for row in dom.split("<tr")[1:]:
        texts = [text.strip() for text in re.split(r"<[^>]*>", html.unescape(html.unescape(row)))]
        if workflow in texts:
            rows.append([text for text in texts if text])
    assert len(rows) == 1, f"{workflow} is in {len(rows)} rows of the rendered list"
    return rows[0]


@pytest.fixture(scope="module")
def runs(ferry: Ferry, tmp_path_factory: pytest.TempPathFactory) -> WebUI:
    """`web-done` (exits 0) and `web-failed` (exits 3), both ended."""
    configs = tmp_path_factory.mktemp("web-ui")
    done = ferry("apply", "-y", "-f", task(configs, "web-done", "echo done"))
    assert done.returncode == 0, done.stderr
    failed = ferry("apply", "-y", "-f", task(configs, "web-failed", "exit 3"))
    assert failed.returncode != 0
    assert "run web-failed: failed (job failed): exited (3)" in failed.stderr
    status = json.loads(ferry("server", "status", "--json").stdout)
    codec = ferry("secret", "codec")
    assert codec.returncode == 0, codec.stderr
    return WebUI(status["ui_url"], codec.stdout.strip())


def test_the_list_shows_the_failed_run_failed(runs: WebUI) -> None:
    assert runs.status("web-failed") == "WORKFLOW_EXECUTION_STATUS_FAILED"
    assert runs.status("web-done") == "WORKFLOW_EXECUTION_STATUS_COMPLETED"


def test_the_failed_run_says_why(runs: WebUI) -> None:
    event = runs.last_event("web-failed")
    failure = event["workflowExecutionFailedEventAttributes"]["failure"]
    assert failure["applicationFailureInfo"]["type"] == "RunFailed"
    assert failure["applicationFailureInfo"]["nonRetryable"] is True
    # Its message is sealed like every failure's (docs/secrets.md); the codec endpoint opens it.
    assert failure["message"] == "Encoded failure"
    opened = runs.decode(failure["encodedAttributes"])
    assert opened["message"] == "failed (job failed): job 0 exited (3)"


def test_summary_details_and_current_details(runs: WebUI) -> None:
    metadata = runs.describe("web-failed")["executionConfig"]["userMetadata"]
    summary = runs.decode(metadata["summary"])
    assert summary.startswith("task web-failed: nodes 1; cpu=0..")
    details = runs.decode(metadata["details"])
    assert f"**run** `web-failed` (task) of project `{DEFAULT_PROJECT}`, by `tester`" in details
    current = runs.query_metadata("web-failed")
    assert "- **status** failed (job failed): job 0 exited (3)" in current["currentDetails"].splitlines()
    assert "- **status** done (all jobs done)" in runs.query_metadata("web-done")["currentDetails"]


def test_chromium_renders_the_list_with_the_statuses(runs: WebUI, tmp_path: Path) -> None:
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.fail("Debian's chromium is not installed: apt-get install chromium (scripts/test.sh does)")
    page = f"{runs.url}/namespaces/default/workflows"
    common = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
    common += [
        "--window-size=1600,1000",
        "--virtual-time-budget=20000",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]
    dom = subprocess.run(
        [*common, "--dump-dom", page], capture_output=True, text=True, timeout=CHROMIUM_LIMIT
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    (tmp_path / "workflows.html").write_text(dom.stdout)
    assert "Failed" in row_of(dom.stdout, workflow_id("web-failed"))
    assert "Completed" in row_of(dom.stdout, workflow_id("web-done"))
    shot = tmp_path / SCREENSHOT
    taken = subprocess.run(
        [*common, f"--screenshot={shot}", page], capture_output=True, text=True, timeout=CHROMIUM_LIMIT
    )
    assert taken.returncode == 0, taken.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    print(f"the Web UI's workflows list: {shot}")
