"""bench.run's bursts: the throughput and slots sections, arrays, and the workers section.

Each burst runs on a stack of its own (Bench.burst_alone) and prints its figures with a prefix
(`burst_figures`); the ratios that the issues set goals for follow, as `ratio_*` lines.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from bench import temporal_counters
from bench.common import Report
from bench.ferry_side import BurstResult

if TYPE_CHECKING:
    from bench.run import Bench

ARRAY_SLOTS = 64  # the array section's elements at once: Slurm's `tuned_os32` job slots
WORKER_COUNTS = (1, 2, 4)  # the workers section's stacks


def burst_figures(report: Report, prefix: str, count: int, result: BurstResult) -> None:
    report.put(f"{prefix}_runs", count)
    report.put(f"{prefix}_submit_s", result.submit_s)
    report.put(f"{prefix}_submit_rate_runs_per_s", count / result.submit_s, 1)
    report.put(f"{prefix}_all_done_s", result.all_done_s)
    report.put(f"{prefix}_completion_rate_runs_per_s", result.completed / result.all_done_s, 1)
    report.put(f"{prefix}_completed_ok", result.completed)
    report.put(f"{prefix}_failed", result.failed)
    if result.per_run_s:
        report.put(f"{prefix}_slowest_submit_to_done_s", max(result.per_run_s))
        report.distribution(f"{prefix}_submit_to_done", "s", result.per_run_s)
    for name, used in result.cpu_s.items():
        report.put(f"{prefix}_cpu_{name}_s", used, 1)
    if result.cpu_s:  # Slurm's side measures none
        report.put(f"{prefix}_cpu_per_run_ms", sum(result.cpu_s.values()) / count * 1000, 1)
    if result.temporal_written_mb is not None:
        report.put(f"{prefix}_temporal_written_mb", result.temporal_written_mb, 1)
    temporal_counters.put_per_run(report, prefix, result.temporal_counts, count)


def _ratio(report: Report, name: str, numerator: str, denominator: str) -> None:
    top, bottom = report.figures.get(numerator), report.figures.get(denominator)
    if isinstance(top, float | int) and isinstance(bottom, float | int) and bottom:
        report.put(name, top / bottom, 2)
    else:
        report.put(name, "n/a")


async def throughput(bench: Bench) -> None:
    """The burst: Ferry's (no slot limit) and Slurm's (16 job slots, `tuned`); then, with `slots`,
    smaller bursts at Slurm's concurrency: Ferry's jobs each ask 1/16 (1/64) of the instance's memory
    so that at most 16 (64) run at once, and Slurm's with 16 (`tuned`) and 64 (`tuned_os32`) slots."""
    r, n = bench.report, bench.plan.burst
    burst_figures(r, "throughput", n, await bench.burst_alone("throughput", n))
    # The same burst submitted through Ferry's API (issue 42: >= 0.95x the direct path's rate).
    burst_figures(r, "api_throughput", n, await bench.burst_alone("api_throughput", n, through_api=True))
    _ratio(
        r,
        "ratio_api_over_direct_completion_rate",
        "api_throughput_completion_rate_runs_per_s",
        "throughput_completion_rate_runs_per_s",
    )
    r.put("throughput_ferry_concurrency", "unlimited (0-resource jobs share the local instance)")
    slurm = bench.slurm
    if slurm is not None:
        burst = await asyncio.to_thread(slurm.burst, n)
        burst_figures(r, f"slurm_throughput_{slurm.job_slots()}slots", n, burst)
    if bench.wants("slots"):
        m = bench.plan.slots_burst
        if slurm is not None:
            burst_figures(r, "slurm_slots_16slots", m, await asyncio.to_thread(slurm.burst, m))
        await slotted_burst(bench, 16)
        if slurm is not None and bench.start_slurm("tuned_os32"):
            burst_figures(r, "slurm_slots_64slots", m, await asyncio.to_thread(slurm.burst, m))
        await slotted_burst(bench, 64)
        queued_over_unqueued(r)
    bench.stop_slurm()


async def slotted_burst(bench: Bench, slots: int) -> None:
    """The burst with each job asking 1/slots of the instance's memory: at most `slots` at once."""
    memory = await bench.ferry.slot_memory(slots)
    n = bench.plan.slots_burst
    result = await bench.burst_alone(f"slots{slots}", n, memory=memory)
    burst_figures(bench.report, f"slots_{slots}slots", n, result)


def queued_over_unqueued(r: Report) -> None:
    """Each slotted burst's completion rate over the unqueued burst's: a queue must cost no speed."""
    r.note("goal: a queued burst completes at >= 0.9x the unqueued burst's rate (same size, issue 19)")
    for slots in (16, 64):
        name = f"ratio_slots_{slots}slots_over_throughput_completion_rate"
        queued = f"slots_{slots}slots_completion_rate_runs_per_s"
        _ratio(r, name, queued, "throughput_completion_rate_runs_per_s")


async def arrays(bench: Bench) -> None:
    """An array of `true` (1,000 elements, 64 at once) on a stack of its own, beside Slurm's `sbatch
    --array` of as many at 64 job slots (`tuned_os32`), as bench.sh's arrayN (issue 44)."""
    r, n = bench.report, bench.plan.array
    async with bench.fresh_side("array") as side:
        with bench.profile("array", side):
            burst_figures(r, "array_64slots", n, await side.array(n, ARRAY_SLOTS))
    if bench.start_slurm("tuned_os32"):
        assert bench.slurm is not None
        burst_figures(r, "slurm_array_64slots", n, await asyncio.to_thread(bench.slurm.array, n))
        bench.stop_slurm()
    if "slurm_array_64slots_completion_rate_runs_per_s" in r.figures:
        _ratio(
            r,
            "ratio_array_64slots_ferry_over_slurm",
            "array_64slots_completion_rate_runs_per_s",
            "slurm_array_64slots_completion_rate_runs_per_s",
        )
    r.note("goal: an array of 1,000 `true` at >= 1.0x Slurm's `sbatch --array` rate, 64 slots (issue 44)")


async def workers(bench: Bench) -> None:
    """The burst with 1, 2 and 4 workers, each on a stack of its own (whatever `--workers` says), one
    after another in this invocation: how its rate grows with workers on this machine (docs/scaling.md)."""
    r, n = bench.report, bench.plan.burst
    for count in WORKER_COUNTS:
        burst_figures(r, f"workers_{count}", n, await bench.burst_alone(f"workers{count}", n, workers=count))
    for count in WORKER_COUNTS[1:]:
        _ratio(
            r,
            f"ratio_workers_{count}_over_1_completion_rate",
            f"workers_{count}_completion_rate_runs_per_s",
            "workers_1_completion_rate_runs_per_s",
        )
    store = bench.plan.store
    r.note(f"goal: the burst with 2 and 4 workers at >= 1.0x one worker's rate, store {store} (issue 44)")
