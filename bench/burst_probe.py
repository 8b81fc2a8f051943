"""Where a burst's time goes: `python -m bench.burst_probe [--runs N] [--workers W] [--slots S]`.

N trivial runs at once on a fresh embedded stack (as bench.run's throughput section; with `--slots S`,
each job asks 1/S of the instance's memory, as its slots section: at most S run at once, the rest queue),
then, from the histories of up to 60 of them, when each step happened after its run's start (p50 and max:
the job's workflow started, `placed` heard, its one activity scheduled and done, `task_ended` heard, the
job and the run completed), their events per run by kind (the run's and its job's workflow), and the
fleet's history by event type with its workflow tasks' waits (scheduled -> started) and work (started ->
completed). docs/scaling.md#the-hot-path reads it.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import io
import statistics
import tempfile
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from bench.common import Report
from bench.ferry_side import FerrySide
from core.wire.workflow_ids import fleet_workflow_id, job_workflow_id
from store import RunRecord

PROJECT = "burst-probe"


def _at(event: Any) -> float:
    return float(event.event_time.ToDatetime().timestamp())


def _kind(event: Any) -> str:
    kind = str(event.WhichOneof("attributes")).removesuffix("_event_attributes")
    if kind == "workflow_execution_signaled":
        kind += ":" + event.workflow_execution_signaled_event_attributes.signal_name
    elif kind == "signal_external_workflow_execution_initiated":
        kind += ":" + event.signal_external_workflow_execution_initiated_event_attributes.signal_name
    elif kind == "activity_task_scheduled":
        kind += ":" + event.activity_task_scheduled_event_attributes.activity_type.name
    return kind


def _steps(run: list[Any], job: list[Any]) -> dict[str, float]:
    """Each step's time after the run's start (the first occurrence of each)."""
    t0 = _at(run[0])
    steps = {"job started": _at(job[0])}
    for event in job:
        kind = _kind(event)
        if kind.startswith(("workflow_execution_signaled", "activity_task_")):
            steps.setdefault(kind, _at(event))
        elif kind == "external_workflow_execution_signaled":
            steps.setdefault("its own signal delivered (its last word)", _at(event))
        elif kind == "workflow_execution_completed":
            steps["job completed"] = _at(event)
    steps["run completed"] = _at(run[-1])
    return {name: at - t0 for name, at in steps.items()}


async def probe(runs: int, workers: int, slots: int | None, home: Path) -> None:
    side = FerrySide(home, Report(out=io.StringIO()), workers)
    await asyncio.to_thread(side.start)
    try:
        await side.connect()
        for i in range(2):
            await side.latency_sample(-1 - i)
        resources = {} if slots is None else {"memory": await side.slot_memory(slots)}
        result = await side.burst(runs, "probe", **resources)
        cpu = ", ".join(f"{name} {seconds:.1f}" for name, seconds in result.cpu_s.items())
        print(f"burst_runs: {runs}")
        print(f"burst_completion_rate_runs_per_s: {runs / result.all_done_s:.1f}")
        print(f"# CPU seconds: {cpu}, in {result.all_done_s:.1f} s")
        client: Any = side._client  # noqa: SLF001 - the bench's own client
        steps: dict[str, list[float]] = collections.defaultdict(list)
        kinds = {"run": collections.Counter[str](), "job": collections.Counter[str]()}
        sample = _sample(side)
        for workflow_id in sample:
            run = await _history(client, workflow_id)
            job = await _history(client, job_workflow_id(workflow_id, 0, 0, 0))
            for name, at in _steps(run, job).items():
                steps[name].append(at)
            kinds["run"].update(_kind(event) for event in run)
            kinds["job"].update(_kind(event) for event in job)
        print("# step after the run's start: p50, max (s)")
        for name, ats in sorted(steps.items(), key=lambda item: statistics.median(item[1])):
            print(f"#   {name:55s} {statistics.median(ats):6.2f} {max(ats):6.2f}")
        for workflow, counted in kinds.items():
            print(f"burst_events_per_{workflow}_workflow: {sum(counted.values()) / len(sample):.1f}")
            for kind, count in counted.most_common():
                print(f"#   {count / len(sample):6.2f} {kind}")
        _print_fleet(await _history(client, fleet_workflow_id(PROJECT, "local")))
    finally:
        await asyncio.to_thread(side.stop)


def _sample(side: FerrySide, most: int = 60) -> list[str]:
    """The workflow ids of up to `most` of the burst's runs, spread over it."""
    table = RunRecord.__table__.c  # type: ignore[attr-defined]
    statement = sa.select(table.workflow_id).where(table.project == PROJECT)
    with side.store.engine.connect() as connection:
        ids = [row[0] for row in connection.execute(statement)]
    return ids[:: max(1, len(ids) // most)]


async def _history(client: Any, workflow_id: str) -> list[Any]:
    return list((await client.get_workflow_handle(workflow_id).fetch_history()).events)


def _print_fleet(fleet: list[Any]) -> None:
    kinds = collections.Counter(_kind(event) for event in fleet)
    print(f"# the fleet's history: {len(fleet)} events")
    for kind, count in kinds.most_common():
        print(f"#   {count:6d} {kind}")
    waits, work = [], []
    scheduled = started = 0.0
    for event in fleet:
        kind = _kind(event)
        if kind == "workflow_task_scheduled":
            scheduled = _at(event)
        elif kind == "workflow_task_started":
            started = _at(event)
            waits.append(started - scheduled)
        elif kind == "workflow_task_completed":
            work.append(_at(event) - started)
    if work:
        print(f"# the fleet's workflow tasks: {len(work)}")
        for name, times in (
            ("waited (scheduled -> started)", waits),
            ("worked (started -> completed)", work),
        ):
            print(f"#   {name}: p50 {statistics.median(times) * 1000:.0f} ms, {sum(times):.1f} s in all")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--slots", type=int, default=None, help="at most this many jobs at once")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ferry-probe-") as work:
        asyncio.run(probe(args.runs, args.workers, args.slots, Path(work) / "ferry-home"))


if __name__ == "__main__":
    main()
