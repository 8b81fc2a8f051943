"""Which run a stuck workflow belongs to, and how `ferry ps` and `ferry server status` say it (cli/stuck.py,
docs/upgrades.md#stuck-runs); the real flag on a real run: tests/lifecycle/test_stuck_runs.py."""

from __future__ import annotations

import time
from types import SimpleNamespace

from rich.console import Console

from cli.server import status_table
from cli.stuck import StuckWorkflow, stuck_runs
from core.wire.workflow_ids import fleet_workflow_id, job_workflow_id, run_of_workflow, run_workflow_id
from embedded.stack import StackStatus

RUN = run_workflow_id("main", "train")


def test_a_runs_and_its_jobs_workflows_belong_to_it_a_fleets_to_no_run() -> None:
    assert run_of_workflow(RUN) == RUN
    assert run_of_workflow(job_workflow_id(RUN, 1, 0, 2)) == RUN
    assert run_of_workflow(fleet_workflow_id("main", "lab")) is None
    assert run_of_workflow("someone-elses-workflow") is None
    # A run may be called "fleet": its jobs' ids are longer than a fleet's.
    named_fleet = run_workflow_id("main", "fleet")
    assert run_of_workflow(job_workflow_id(named_fleet, 0, 0, 0)) == named_fleet


def test_a_run_is_shown_by_its_own_stuck_workflow_before_its_jobs() -> None:
    job = StuckWorkflow(job_workflow_id(RUN, 0, 0, 0), 10.0, "job's error")
    run = StuckWorkflow(RUN, 20.0, "run's error")
    fleet = StuckWorkflow(fleet_workflow_id("main", "lab"), 30.0, "fleet's error")
    assert stuck_runs([job, fleet, run]) == {RUN: run}
    assert stuck_runs([job]) == {RUN: job}


def test_the_message_says_which_workflow_since_when_and_why() -> None:
    since = time.mktime((2026, 11, 26, 9, 14, 3, 0, 0, -1))
    stuck = StuckWorkflow(RUN, since, "[TMPRL1100] Nondeterminism error: x")
    assert stuck.message() == (
        "workflow ferry/main/train stuck since 2026-11-26 09:14:03: [TMPRL1100] Nondeterminism error: x"
    )
    assert StuckWorkflow(RUN, None, "its workflow tasks keep failing").message() == (
        "workflow ferry/main/train stuck: its workflow tasks keep failing"
    )


def test_server_status_counts_the_stuck_runs_only_when_asked() -> None:
    ctx = SimpleNamespace(settings=SimpleNamespace(database_url="sqlite:////h/ferry.db"))

    def shown(status: StackStatus) -> str:
        console = Console(width=200, record=True)
        console.print(status_table(ctx, status))  # type: ignore[arg-type]
        return console.export_text()

    base = StackStatus(home="/h", running=True, address=None, ui_url=None, processes=[])
    assert "stuck runs" not in shown(base)
    assert "stuck runs" in shown(base.model_copy(update={"stuck_runs": 0}))
    assert "2 (`ferry ps` says why)" in shown(base.model_copy(update={"stuck_runs": 2}))
    assert base.version  # the version of the code asking (docs/upgrades.md#releases)
