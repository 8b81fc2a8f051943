"""`ferry schedule` and `ferry metrics` through Ferry's API as different users
(docs/teams.md#schedules-and-metrics), on the embedded stack: alice, a user of `a`, pauses, resumes and
triggers her scheduled run and samples her running task with only the API's URL, her token and her
project; bob, no member of `a`, is refused in one line with exit code 5 and changes nothing. An operator's
CLI (Temporal's address, no login) reaches the same schedule itself."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from cli import exit_codes
from tests.e2e.conftest import Ferry, last_line, task
from tests.e2e.test_runs_by_role import as_user, users

__all__ = ["users"]  # the fixture of tests/e2e/test_runs_by_role.py, used here too

TEMPORAL = str(Path(sys.executable).parent / "temporal")


def _stack_port(ferry: Ferry) -> int:
    port: int = json.loads((ferry.home / "stack" / "stack.json").read_text())["port"]
    return port


def _schedule(ferry: Ferry, run_id: str) -> dict[str, Any]:
    """The run's Temporal Schedule as the Temporal CLI describes it (no payload decoded)."""

    def temporal(*args: str) -> Any:
        address = f"127.0.0.1:{_stack_port(ferry)}"
        done = subprocess.run(
            [TEMPORAL, "schedule", *args, "--address", address, "-o", "json"],
            capture_output=True, text=True, timeout=30, check=True,
        )  # fmt: skip
        return json.loads(done.stdout or "[]")

    [found] = [s["scheduleId"] for s in temporal("list") if s["scheduleId"].endswith(f"/schedule/{run_id}")]
    described: dict[str, Any] = temporal("describe", "--schedule-id", found)
    return described


def _until(what: str, check: Any, limit: float = 60) -> None:
    deadline = time.monotonic() + limit
    while not check():
        assert time.monotonic() < deadline, f"no {what} within {limit}s"
        time.sleep(0.5)


def _run(ferry: Ferry, env: dict[str, str], name: str) -> dict[str, Any]:
    [run] = [r for r in json.loads(ferry("ps", "-a", "--json", env=env).stdout) if r["name"] == name]
    return dict(run)


def test_a_member_changes_her_schedule_and_samples_her_run_and_no_one_else_does(
    ferry: Ferry, users: dict[str, str], tmp_path: Path
) -> None:
    alice, bob = as_user(ferry, users, "alice", "a"), as_user(ferry, users, "bob", "a")
    assert not any(name.startswith(("FERRY_TEMPORAL", "TEMPORAL_")) for name in {**ferry.env, **alice})
    config = task(tmp_path, "yearly", "echo cycle ran", extra="schedule: {cron: '0 0 1 1 *'}\n")
    applied = ferry("apply", "-f", config, "-y", "-d", env=alice, timeout=120)
    assert applied.returncode == 0, applied.stderr
    _until("wait for the schedule", lambda: _run(ferry, alice, "yearly")["message"].startswith("next at "))
    run_id = _run(ferry, alice, "yearly")["id"]

    for action in ("pause", "resume", "trigger"):
        refused = ferry("schedule", action, "yearly", env=bob, timeout=60)
        assert refused.returncode == exit_codes.DENIED, (action, refused.stderr)
        assert last_line(refused.stderr) == f"ferry schedule {action}: bob is not a member of project a"
    untouched = _schedule(ferry, run_id)
    assert not untouched["schedule"]["state"].get("paused")
    assert not untouched["info"].get("actionCount")  # bob's trigger ran no cycle

    paused = ferry("schedule", "pause", "yearly", env=alice, timeout=60)
    assert (paused.returncode, paused.stderr) == (0, "run yearly: schedule paused\n")
    state = _schedule(ferry, run_id)["schedule"]["state"]
    assert (state.get("paused"), state.get("notes")) == (True, "ferry schedule pause by alice")
    resumed = ferry("schedule", "resume", "yearly", env=alice, timeout=60)
    assert resumed.returncode == 0, resumed.stderr
    assert not _schedule(ferry, run_id)["schedule"]["state"].get("paused")
    triggered = ferry("schedule", "trigger", "yearly", env=alice, timeout=60)
    assert triggered.returncode == 0, triggered.stderr
    _until("cycle's log", lambda: "cycle ran" in ferry("logs", "yearly", env=alice).stdout)

    # The same refusals as before, through the API: a run with no schedule, a run that is not there.
    hot = task(tmp_path, "hot", "sleep 300")
    assert ferry("apply", "-f", hot, "-y", "-d", env=alice, timeout=120).returncode == 0
    unscheduled = ferry("schedule", "pause", "hot", env=alice)
    assert unscheduled.returncode == exit_codes.FAILED, unscheduled.stderr
    assert last_line(unscheduled.stderr) == "ferry schedule pause: run hot has no schedule"
    missing = ferry("schedule", "trigger", "nope", env=alice)
    assert missing.returncode == exit_codes.NOT_FOUND, missing.stderr
    assert last_line(missing.stderr) == "ferry schedule trigger: no run named 'nope' in project 'a'"

    # An operator's CLI (Temporal's address, the stack's home, no login) reaches the schedule itself.
    operator = {"FERRY_TEMPORAL_ADDRESS": f"127.0.0.1:{_stack_port(ferry)}", "FERRY_PROJECT": "a"}
    assert ferry("schedule", "pause", "yearly", env=operator, timeout=60).returncode == 0
    assert _schedule(ferry, run_id)["schedule"]["state"].get("notes") == "ferry schedule pause by tester"

    running = ferry("wait", "hot", "--status", "running", "--timeout", "60s", env=alice, timeout=90)
    assert running.returncode == 0, running.stderr
    shown = ferry("metrics", "hot", env=alice, timeout=90)
    assert shown.returncode == 0, shown.stderr
    header, row = shown.stdout.splitlines()
    assert header.split() == ["REPLICA", "JOB", "INSTANCE", "STATUS", "CPU", "MEMORY", "GPU"]
    assert row.split()[:4] == ["0", "0", "local", "running"]
    refused = ferry("metrics", "hot", env=bob)
    assert refused.returncode == exit_codes.DENIED, refused.stderr
    assert last_line(refused.stderr) == "ferry metrics: bob is not a member of project a"

    for name in ("hot", "yearly"):
        assert ferry("stop", "-y", "-x", name, env=alice, timeout=120).returncode == 0
