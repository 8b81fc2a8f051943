"""`ferry apply`, `ps`, `logs`, `events`, `wait` and `stop`, end to end on the embedded stack."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from tests.e2e.conftest import Ferry, last_line, task


@pytest.fixture(scope="module")
def configs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("configs")


def test_apply_runs_the_readme_example_and_exits_0(ferry: Ferry) -> None:
    # A fresh FERRY_HOME: this first command starts the embedded stack in the background.
    result = ferry("apply", "-y", "-f", "examples/hello.yml")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Hello from Ferry\nRunning on ")
    assert last_line(result.stderr) == "run hello: done (all jobs done)"
    assert (ferry.home / "stack" / "stack.json").exists()


def test_failing_task_exits_non_zero_with_the_reason(ferry: Ferry, configs: Path) -> None:
    result = ferry("apply", "-y", "-f", task(configs, "failing", "echo before", "exit 3", "echo never"))
    assert result.returncode == 1
    assert result.stdout == "before\n"
    assert last_line(result.stderr) == "run failing: failed (job failed): exited (3)"


def test_overrides_and_a_multi_node_task(ferry: Ferry, configs: Path) -> None:
    conf = task(configs, "ranks", 'echo "rank $FERRY_NODE_RANK says $WORD"', extra="nodes: 2\n")
    result = ferry("apply", "-y", "-f", conf, "-n", "renamed", "-e", "WORD=hi")
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == ["[job 0] rank 0 says hi", "[job 1] rank 1 says hi"]
    assert last_line(result.stderr) == "run renamed: done (all jobs done)"
    only_one = ferry("logs", "renamed", "--job", "1")
    assert only_one.stdout == "rank 1 says hi\n"


def test_run_args_after_the_double_dash(ferry: Ferry, configs: Path) -> None:
    # dstack's `${{ run.args }}`: the arguments after --, shell-quoted as one string; none without them.
    conf = task(configs, "args", "printf '%s|' ${{ run.args }}; echo")
    result = ferry("apply", "-y", "-f", conf, "--", "--lr", "0.1", "two words")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "--lr|0.1|two words|\n"
    assert ferry("apply", "-y", "-f", conf).stdout == "|\n"
    dev = configs / "dev.yml"
    dev.write_text("type: dev-environment\nide: vscode\n")
    refused = ferry("apply", "-y", "-f", str(dev), "--", "x")
    assert (refused.returncode, last_line(refused.stderr)) == (
        2,
        f"ferry apply: {dev}: only a task or a service takes arguments after --",
    )


def test_ps_lists_runs_with_their_jobs(ferry: Ferry) -> None:
    table = ferry("ps", "-a")
    assert table.returncode == 0
    header = table.stdout.splitlines()[0].split()  # piped: no width limit, every default column
    assert header == ["NAME", "JOB", "STATUS", "MESSAGE", "RESOURCES", "INSTANCE", "SUBMITTED"]
    assert "exited (0)" in table.stdout and "exited (3)" in table.stdout
    runs = {run["name"]: run for run in json.loads(ferry("ps", "-a", "--json").stdout)}
    assert {"hello", "failing", "renamed"} <= set(runs)
    assert (runs["failing"]["status"], runs["failing"]["message"]) == ("failed", "job failed")
    [job] = runs["failing"]["jobs"]
    assert (job["status"], job["message"], job["exit_status"], job["instance"]) == (
        "failed",
        "exited (3)",
        3,
        "local",
    )
    # Without -a, only active runs: none are left.
    assert json.loads(ferry("ps", "--json").stdout) == []


def test_logs_of_a_finished_run(ferry: Ferry) -> None:
    result = ferry("logs", "failing")
    assert (result.returncode, result.stdout, result.stderr) == (0, "before\n", "")
    assert ferry("logs", "failing", "--since", "1h").stdout == "before\n"
    assert ferry("logs", "failing", "--since", "0s").stdout == ""  # nothing was logged from now on
    assert ferry("logs", "failing", "-f").stdout == "before\n"  # finished: -f returns at once


def test_events_as_json_lines_end_with_clean(ferry: Ferry) -> None:
    run_log = [json.loads(line) for line in ferry("events", "hello", "--json").stdout.splitlines()]
    assert [e["name"] for e in run_log][0] == "submit"
    assert run_log[-1]["name"] == "clean"
    assert run_log[-1]["context"] == {"status": "done", "reason": "all_jobs_done"}
    assert all(set(e) == {"timestamp", "name", "context"} for e in run_log)
    job_log = [
        json.loads(line) for line in ferry("events", "hello", "--job", "0", "--json").stdout.splitlines()
    ]
    assert [e["name"] for e in job_log][:2] == ["submit", "alloc"]
    assert "finish" in [e["name"] for e in job_log] and job_log[-1]["name"] == "clean"
    readable = ferry("events", "hello").stdout.splitlines()
    assert readable[0].split()[2:4] == ["submit", "run_name=hello"]


def test_wait_stop_and_follow_a_sleeping_task(ferry: Ferry, configs: Path) -> None:
    conf = task(configs, "sleeper", "echo sleeping", "sleep 120")
    assert ferry("apply", "-y", "-d", "-f", conf).returncode == 0
    reached = ferry("wait", "sleeper", "--status", "running", "--timeout", "30s")
    assert (reached.returncode, reached.stdout) == (0, "run sleeper: running\n")
    assert ferry("wait", "sleeper", "--event", "start", "--timeout", "30s").returncode == 0
    timed_out = ferry("wait", "sleeper", "--timeout", "1s")
    assert timed_out.returncode == 1
    assert timed_out.stderr == "ferry wait: timed out after 1s: run sleeper is running\n"
    logs = ferry.popen("logs", "-f", "sleeper")
    events = ferry.popen("events", "-f", "--json", "sleeper")
    active = json.loads(ferry("ps", "--json").stdout)
    assert [(r["name"], r["jobs"][0]["message"]) for r in active] == [("sleeper", "running")]

    stopped = ferry("stop", "-y", "sleeper")
    assert stopped.returncode == 0, stopped.stderr
    assert last_line(stopped.stderr) == "run sleeper: terminated (stopped by user)"
    out, _ = logs.communicate(timeout=30)
    assert (logs.returncode, out.splitlines()[0]) == (0, "sleeping")
    out, _ = events.communicate(timeout=30)
    assert events.returncode == 0 and json.loads(out.splitlines()[-1])["name"] == "clean"
    [run] = [r for r in json.loads(ferry("ps", "-a", "--json").stdout) if r["name"] == "sleeper"]
    assert (run["status"], run["jobs"][0]["message"]) == ("terminated", "stopped")

    assert ferry("wait", "sleeper").returncode == 0  # finished
    assert ferry("wait", "sleeper", "--status", "terminated").returncode == 0
    assert ferry("wait", "sleeper", "--event", "clean").returncode == 0
    impossible = ferry("wait", "sleeper", "--status", "running")
    assert impossible.returncode == 2
    assert impossible.stderr == "ferry wait: run sleeper finished terminated, it can no longer be running\n"
    assert ferry("wait", "sleeper", "--event", "no-such-event").returncode == 2
    again = ferry("stop", "-y", "sleeper")
    assert (again.returncode, again.stderr) == (0, "run sleeper has already finished: terminated\n")


def test_ctrl_c_detaches_and_applying_an_active_name_stops_it_first(ferry: Ferry, configs: Path) -> None:
    conf = task(configs, "twice", "echo started", "sleep 120")
    following = ferry.popen("apply", "-y", "-f", conf)
    assert following.stdout is not None
    assert following.stdout.readline() == "started\n"
    following.send_signal(signal.SIGINT)  # no terminal to ask on: detach, and leave the run running
    _, err = following.communicate(timeout=30)
    assert following.returncode == 130
    assert last_line(err) == "detached: run twice goes on (ferry logs -f twice, ferry stop twice)"
    again = ferry("apply", "-y", "-d", "-f", conf)
    assert again.returncode == 0, again.stderr
    assert "run twice: stopping" in again.stderr
    runs = [r for r in json.loads(ferry("ps", "-a", "--json").stdout) if r["name"] == "twice"]
    assert [r["status"] for r in runs][1:] == ["terminated"]
    aborted = ferry("stop", "-y", "-x", "twice")
    assert aborted.returncode == 0
    assert last_line(aborted.stderr) == "run twice: terminated (aborted by user)"


def test_re_applying_a_scheduled_run_updates_it_in_place(ferry: Ferry, configs: Path) -> None:
    """docs/schedules.md#changing-a-scheduled-run: no restart offered; the next trigger follows the new
    cron."""
    yearly = task(configs, "nightly", "echo v1", extra='schedule: {cron: "0 0 1 1 *"}\n')
    applied = ferry("apply", "-y", "-f", yearly)
    assert applied.returncode == 0 and "scheduled: next at " in applied.stderr, applied.stderr
    same = ferry("apply", "-y", "-f", yearly)
    assert "run nightly: no changes" in same.stderr, same.stderr
    july = task(configs, "nightly", "echo v2", extra='schedule: {cron: "0 0 1 7 *"}\n')
    changed = ferry("apply", "-y", "-f", july)
    assert changed.returncode == 0, changed.stderr
    assert "run nightly: changed schedule, commands: its schedule and its next cycles take" in changed.stderr
    assert "Stop it and submit anew" not in changed.stderr
    [next_line] = [line for line in changed.stderr.splitlines() if line.startswith("scheduled: next at ")]
    july_first = next_line.split("next at ")[1].split(",")[0]
    assert "-07-01 00:00 UTC" in july_first
    listed = ferry("ps").stdout
    assert f"next at {july_first}" in listed, listed
    events = ferry("events", "nightly").stdout
    assert "deploy" in events and "schedule-wait" in events, events
    assert ferry("stop", "-y", "nightly").returncode == 0
