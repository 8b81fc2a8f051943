"""What `ferry ps` shows of a dev environment (cli/dev_environments.py, docs/attach.md), without a server:
the IDE link only for the job `ferry attach` reached from here, and the SSH state its agent told."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from cli import render
from cli.dev_environments import DevView, dev_views, time_left, to_ask
from cli.ssh_hosts import note_attached
from core.wire.messages import SSHEndpoint
from store import JobSubmissionRecord, RunRecord


def dev_run(status: str = "running", **fields: object) -> RunRecord:
    conf = {"type": "dev-environment", "name": "dev", "ide": "windsurf", **fields}
    return RunRecord(
        id="dev-1", project="main", run_name="dev", user="u", type="dev-environment", status=status,
        workflow_id="ferry/main/dev", configuration=json.dumps(conf),
    )  # fmt: skip


def dev_job(status: str = "running", submission: int = 0) -> JobSubmissionRecord:
    return JobSubmissionRecord(
        id=f"dev-1-r0-j0-s{submission}", run_id="dev-1", submission_num=submission, status=status
    )


@pytest.mark.parametrize(
    ("seconds", "said"),
    [(0, "0s"), (12.9, "12s"), (250, "4m 10s"), (3600, "1h 0m"), (3 * 86400 + 7200 + 5, "3d 2h")],
)
def test_time_left(seconds: float, said: str) -> None:
    assert time_left(seconds) == said


def test_the_link_is_for_the_job_attach_reached_from_here(tmp_path: Path) -> None:
    run, job = dev_run(), dev_job()
    assert dev_views([(run, [job])], tmp_path, {})[run.id].link is None  # never attached from here
    note_attached(tmp_path, "dev", job.id, "/work/dir")
    assert (
        dev_views([(run, [job])], tmp_path, {})[run.id].link
        == "windsurf://vscode-remote/ssh-remote+dev/work/dir"
    )
    # A later submission (a retry) is another task: the entry attach wrote logs in to the old one.
    retried = dev_job(submission=1)
    assert dev_views([(run, [retried])], tmp_path, {})[run.id].link is None
    # Without `ide` there is no link; a run that is not a dev environment, or not running, has no view.
    plain = dev_run(ide=None)
    assert dev_views([(plain, [job])], tmp_path, {})[plain.id].link is None
    task = run.model_copy(
        update={"type": "task", "configuration": json.dumps({"type": "task", "commands": ["true"]})}
    )
    assert dev_views([(task, [job]), (dev_run("terminated"), [dev_job("terminated")])], tmp_path, {}) == {}


def test_the_agents_word_on_inactivity(tmp_path: Path) -> None:
    run, job = dev_run(inactivity_duration="30m"), dev_job()
    assert to_ask([(run, [job]), (dev_run(), [job])]) == [(run, job)]  # only with inactivity_duration
    idle = dev_views([(run, [job])], tmp_path, {job.id: SSHEndpoint(idle_since=1000.0)})[run.id]
    assert (idle.asked, idle.attached, idle.stops_at) == (True, False, 1000.0 + 1800)
    assert idle.ssh_message(now=1000.0 + 1800 - 250) == "idle: stops in 4m 10s"
    assert idle.ssh_message(now=1000.0 + 1800) == "idle: stopping"
    busy = dev_views([(run, [job])], tmp_path, {job.id: SSHEndpoint(ssh_connections=2)})[run.id]
    assert (busy.attached, busy.stops_at, busy.ssh_message(now=0.0)) == (True, None, "attached")
    silent = dev_views([(run, [job])], tmp_path, {job.id: None})[run.id]  # its agent did not answer
    assert (silent.asked, silent.ssh_message(now=0.0)) == (False, None)


def test_ps_shows_the_link_under_the_run_and_the_ssh_state_on_the_job() -> None:
    run, job = dev_run(), dev_job()
    view = DevView(job_id=job.id, link="windsurf://vscode-remote/ssh-remote+dev/w", asked=True, attached=True)
    console = Console(width=300, record=True)
    console.print(render.runs_table([(run, [job])], devs={run.id: view}))
    run_row, link, job_row = console.export_text().splitlines()[1:4]
    assert run_row.split()[0] == "dev" and link == "  ide: windsurf://vscode-remote/ssh-remote+dev/w"
    assert " attached " in job_row
    [shown] = render.runs_json([(run, [job])], devs={run.id: view})
    assert shown["ide_link"] == view.link
    assert shown["jobs"][0]["inactivity"] == {"attached": True, "stops_at": None}
    [unasked] = render.runs_json([(run, [job])], devs={run.id: DevView(job_id=job.id)})
    assert "ide_link" not in unasked and "inactivity" not in unasked["jobs"][0]
