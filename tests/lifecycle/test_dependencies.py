"""Runs that wait for others against the real dev server and agent (docs/dependencies.md): a run that
waits for another to be done starts once it is, and one that waits for a run that failed fails at once,
with its reason; a cycle of dependencies is refused before anything is submitted."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from cli.api import FerryAPI, FerryError
from core.configuration import RunConfiguration, parse_configuration
from core.status import RunStatus, RunTerminationReason
from tests.lifecycle.checks import eventually

SMALL = {"cpu": "0..", "memory": "0GB..", "disk": "0GB.."}


def task(name: str, command: str, **fields: Any) -> RunConfiguration:
    data = {"type": "task", "name": name, "commands": [command], "resources": SMALL, **fields}
    configuration = parse_configuration(data)
    assert not isinstance(configuration, type(None))
    return configuration  # type: ignore[return-value]


async def _message(ferry: FerryAPI, name: str) -> str:
    return (await ferry.get_run(name)).status_message or ""


async def test_done_dependency_starts_the_run_and_a_failed_one_fails_it(
    ferry: FerryAPI, tmp_path: Path
) -> None:
    marker = tmp_path / "prep-went"
    prep = await ferry.submit(task("dep-prep", f"sleep 2; touch {marker}"), repo_dir=tmp_path)
    train = await ferry.submit(
        task("dep-train", f"test -e {marker} && echo trained", depends_on=["dep-prep:done"]),
        repo_dir=tmp_path,
    )
    await eventually("train waiting", lambda: _waits(ferry, "dep-train"))
    assert await _message(ferry, "dep-train") == "waiting for dep-prep to be done"
    assert ferry.store.list_job_submissions(train.id) == []
    assert (await ferry.wait("dep-prep")).status == RunStatus.DONE
    final = await ferry.wait("dep-train")
    assert final.status == RunStatus.DONE  # it ran after prep: prep's file was there
    assert ferry.logs(final)[0] == b"trained\n"
    names = [e.name for e in ferry.run_events(final)]
    assert names[:6] == ["submit", "dependency-add", "status", "dependency-remove", "depend", "status"]
    assert prep.id != train.id

    await ferry.submit(task("dep-broken", "exit 3"), repo_dir=tmp_path)
    assert (await ferry.wait("dep-broken")).status == RunStatus.FAILED
    started = time.monotonic()
    await ferry.submit(task("dep-after", "echo never", depends_on=["dep-broken"]), repo_dir=tmp_path)
    after = await ferry.wait("dep-after")
    assert (after.status, after.termination_reason) == (
        RunStatus.FAILED,
        RunTerminationReason.DEPENDENCY_FAILED.value,
    )
    assert (
        after.status_message == "run dep-broken ended failed (job failed); this run waited for it to be done"
    )
    assert ferry.store.list_job_submissions(after.id) == []
    print(f"failed {time.monotonic() - started:.2f}s after submission")


async def _waits(ferry: FerryAPI, name: str) -> bool:
    run = await ferry.get_run(name)
    return run.status == RunStatus.PENDING and (run.status_message or "").startswith("waiting for")


async def test_a_cycle_of_dependencies_is_refused(ferry: FerryAPI, tmp_path: Path) -> None:
    await ferry.submit(task("cyc-long", "sleep 600"), repo_dir=tmp_path)
    await ferry.submit(task("cyc-wait", "true", depends_on=["cyc-long"]), repo_dir=tmp_path)
    await eventually("cyc-wait waiting", lambda: _waits(ferry, "cyc-wait"))
    # cyc-long re-applied to wait for cyc-wait, which waits for cyc-long: refused, nothing stopped.
    again = task("cyc-long", "true", depends_on=["cyc-wait"])
    with pytest.raises(FerryError, match=r"a cycle of dependencies \(cyc-long -> cyc-wait -> cyc-long\)"):
        ferry.resolve_dependencies("cyc-long", again)
    with pytest.raises(FerryError, match="a run cannot depend on itself"):
        await ferry.submit(
            task("cyc-x", "true", depends_on=["cyc-self"]), repo_dir=tmp_path, run_name="cyc-self"
        )
    with pytest.raises(FerryError):
        await ferry.get_run("cyc-self")  # nothing was submitted
    assert (await ferry.get_run("cyc-long")).status != RunStatus.TERMINATED
    await ferry.stop("cyc-long", abort=True)
    final = await ferry.wait("cyc-wait")
    assert final.termination_reason == RunTerminationReason.DEPENDENCY_FAILED.value


async def _finished(ferry: FerryAPI, name: str) -> bool:
    return RunStatus((await ferry.get_run(name)).status).is_finished()
