"""The local agent SIGKILLed while it prepares a job (its task PREPARING: the run's code being extracted,
the job's process not spawned yet): the agent the worker starts again makes the task pending again, the
worker's retried start runs the job once, and the run is done with its whole log
(docs/jobs.md#a-restarted-agent, docs/chaos.md#what-it-found). Before, that run failed: "agent restarted
while preparing the job, before it started"."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from tests.chaos.stream import LIMIT, stack_process, until
from tests.e2e.conftest import SMALL, Ferry, ferry_env, stack_of

# Random, so that gzip cannot shrink it: extracting it keeps the task PREPARING long enough to be seen.
CODE_BYTES = 48 * 1024 * 1024


def preparing(home: Path) -> bool:
    for record in (home / "agent" / "data" / "tasks").glob("*/task.json"):
        try:
            if json.loads(record.read_text())["status"] == "preparing":
                return True
        except (OSError, ValueError):  # being written
            continue
    return False


def test_an_agent_killed_while_it_prepares_a_job_runs_it_once_when_started_again(tmp_path: Path) -> None:
    home, code, marker = tmp_path / "home", tmp_path / "code", tmp_path / "ran"
    home.mkdir()
    code.mkdir()
    (code / "big.bin").write_bytes(os.urandom(CODE_BYTES))
    commands = ["echo start", f"echo ran >> {marker}", "echo end"]
    conf = code / "prepared.yml"
    listed = "".join(f"  - {json.dumps(command)}\n" for command in commands)
    conf.write_text(f"type: task\nname: prepared\ncommands:\n{listed}{SMALL}")
    with stack_of(Ferry(home, ferry_env(home))) as ferry:
        assert ferry("server", "start", timeout=LIMIT).returncode == 0
        agent = stack_process(home, "agent")
        assert agent.pid is not None
        submitted = ferry.popen("apply", "-y", "-d", "-f", str(conf))
        try:
            until("the job to be prepared", lambda: preparing(home))
            os.kill(agent.pid, signal.SIGKILL)
            assert submitted.wait(LIMIT) == 0
        finally:
            if submitted.poll() is None:
                submitted.kill()
            submitted.communicate()
        waited = ferry("wait", "prepared", "--timeout", f"{LIMIT:.0f}s", timeout=LIMIT + 30)
        assert waited.returncode == 0, waited.stderr
        [run] = [r for r in json.loads(ferry("ps", "-a", "--json").stdout) if r["name"] == "prepared"]
        logs = ferry("logs", "prepared").stdout
        again = stack_process(home, "agent")
    assert (run["status"], [job["submission"] for job in run["jobs"]]) == ("done", [0])
    assert logs == "start\nend\n"
    assert marker.read_text() == "ran\n"  # its commands ran once
    assert again.pid != agent.pid
    # The path this test is for: the task made pending again by the agent started after the kill.
    agent_log = (home / "agent" / "agent.log").read_text()
    assert "its agent died before its job started: pending again" in agent_log
