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
from bench.histories import event_kind, event_time, history, run_and_job, steps
from core.wire.workflow_ids import fleet_workflow_id
from store import RunRecord

PROJECT = "burst-probe"


async def probe(runs: int, workers: int, slots: int | None, home: Path) -> None:
    side = FerrySide(home, Report(out=io.StringIO()), workers)
    await asyncio.to_thread(side.start)
    try:
        await side.connect()
        for i in range(2):
            await side.latency_sample(-1 - i)
        if slots is None:
            result = await side.burst(runs, "probe")
        else:
            result = await side.burst(runs, "probe", memory=await side.slot_memory(slots))
        cpu = ", ".join(f"{name} {seconds:.1f}" for name, seconds in result.cpu_s.items())
        print(f"burst_runs: {runs}")
        print(f"burst_completion_rate_runs_per_s: {runs / result.all_done_s:.1f}")
        print(f"# CPU seconds: {cpu}, in {result.all_done_s:.1f} s")
        client = side.client
        timings: dict[str, list[float]] = collections.defaultdict(list)
        kinds = {"run": collections.Counter[str](), "job": collections.Counter[str]()}
        sample = _sample(side)
        for workflow_id in sample:
            run, job = await run_and_job(client, workflow_id)
            for name, at in steps(run, job).items():
                timings[name].append(at)
            kinds["run"].update(event_kind(event) for event in run)
            kinds["job"].update(event_kind(event) for event in job)
        print("# step after the run's start: p50, max (s)")
        for name, ats in sorted(timings.items(), key=lambda item: statistics.median(item[1])):
            print(f"#   {name:55s} {statistics.median(ats):6.2f} {max(ats):6.2f}")
        for workflow, counted in kinds.items():
            print(f"burst_events_per_{workflow}_workflow: {sum(counted.values()) / len(sample):.1f}")
            for kind, count in counted.most_common():
                print(f"#   {count / len(sample):6.2f} {kind}")
        _print_fleet(await history(client, fleet_workflow_id(PROJECT, "local")))
    finally:
        await asyncio.to_thread(side.stop)


def _sample(side: FerrySide, most: int = 60) -> list[str]:
    """The workflow ids of up to `most` of the burst's runs, spread over it."""
    table = RunRecord.__table__.c  # type: ignore[attr-defined]
    statement = sa.select(table.workflow_id).where(table.project == PROJECT)
    with side.store.engine.connect() as connection:
        ids = [row[0] for row in connection.execute(statement)]
    return ids[:: max(1, len(ids) // most)]


def _print_fleet(fleet: list[Any]) -> None:
    kinds = collections.Counter(event_kind(event) for event in fleet)
    print(f"# the fleet's history: {len(fleet)} events")
    for kind, count in kinds.most_common():
        print(f"#   {count:6d} {kind}")
    waits, work = [], []
    scheduled = started = 0.0
    for event in fleet:
        kind = event_kind(event)
        if kind == "workflow_task_scheduled":
            scheduled = event_time(event)
        elif kind == "workflow_task_started":
            started = event_time(event)
            waits.append(started - scheduled)
        elif kind == "workflow_task_completed":
            work.append(event_time(event) - started)
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
