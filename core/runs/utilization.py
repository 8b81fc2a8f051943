"""dstack's `utilization_policy` (docs/jobs.md#utilization-policy): a running job with a GPU that stays
below `min_gpu_utilization` percent over the whole `time_window` is terminated with
TERMINATED_DUE_TO_UTILIZATION_POLICY ("if any GPU has utilization below the value during the whole time
window, the run is terminated", dstack's reference).

Pure: the `watch_utilization` activity samples the agent's GPU metrics (docs/jobs.md#metrics) every
`sample_interval`, asks `assess` what they say, and returns to the job's workflow only with news
(`utilization_news`): one activity per change, not per sample, so a job's history stays short however long
it runs. As in dstack, the window must be covered by samples: a GPU is idle since the first
sample of its latest unbroken run of readings below the threshold. A reading of N/A (a MIG instance) or a
GPU missing from a sample proves nothing, so it breaks the run.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.configuration.specs import UtilizationPolicy
from core.durations import format_duration
from core.wire.messages import GpuSample, UtilizationNews, UtilizationNewsKind

MIN_INTERVAL = 5.0
MAX_INTERVAL = 60.0


@dataclass(frozen=True)
class Assessment:
    """What the samples say now: the GPU idle the longest and since when (None: none is idle), and
    whether it has been for the whole window."""

    gpu: int | None
    low_since: float | None
    breached: bool
    note: str | None  # e.g. `GPU 0 utilization below 10% for 4m of 10m`; None when no GPU is idle


def sample_interval(policy: UtilizationPolicy) -> float:
    """A tenth of the window, from 5 s to 60 s: enough samples to cover it, few activities."""
    return min(max(policy.time_window / 10, MIN_INTERVAL), MAX_INTERVAL)


def kept(samples: list[GpuSample], policy: UtilizationPolicy, now: float) -> list[GpuSample]:
    """The samples a later assessment may still need: those of the window, and the one just before it
    (which tells whether the window began low)."""
    start = now - policy.time_window
    inside = [s for s in samples if s.at >= start]
    before = [s for s in samples if s.at < start]
    return before[-1:] + inside


def idle_since(samples: list[GpuSample], policy: UtilizationPolicy, now: float) -> dict[int, float]:
    """Each idle GPU and the first sample of its latest unbroken run of low readings (samples in time
    order; those after `now` are not looked at)."""
    since: dict[int, float] = {}
    gpus = {gpu for sample in samples for gpu in sample.utilization}
    for sample in samples:
        if sample.at > now:
            break
        for gpu in gpus:
            reading = sample.utilization.get(gpu)
            if reading is not None and reading < policy.min_gpu_utilization:
                since.setdefault(gpu, sample.at)
            else:
                since.pop(gpu, None)
    return since


def assess(samples: list[GpuSample], policy: UtilizationPolicy, now: float) -> Assessment:
    """Whether a GPU has read below the threshold in every sample over the last `time_window` (up to
    `now`): met once its run of low readings began at least `time_window` before now."""
    since = idle_since(samples, policy, now)
    if not since:
        return Assessment(gpu=None, low_since=None, breached=False, note=None)
    gpu = min(since, key=lambda index: (since[index], index))
    below = max(now - since[gpu], 0.0)
    return Assessment(
        gpu=gpu,
        low_since=since[gpu],
        breached=below >= policy.time_window,
        note=below_note(policy, gpu, below),
    )


def below_note(policy: UtilizationPolicy, gpu: int, seconds: float) -> str:
    held = format_duration(min(int(seconds), policy.time_window))
    window = format_duration(policy.time_window)
    return f"GPU {gpu} utilization below {policy.min_gpu_utilization}% for {held} of {window}"


def no_gpu_note(policy: UtilizationPolicy) -> str:
    """Said once in the job's events: dstack looks only at a job's GPUs, so a job without is left alone."""
    return f"utilization_policy (min_gpu_utilization {policy.min_gpu_utilization}%) not applied: no GPU"


def recovered_note(policy: UtilizationPolicy) -> str:
    return f"GPU utilization at or above {policy.min_gpu_utilization}% again"


def utilization_news(
    low: bool, samples: list[GpuSample], policy: UtilizationPolicy, now: float
) -> UtilizationNews | None:
    """What the job's workflow must hear, knowing `low` (a GPU was below when it last heard): the window
    met, a GPU fallen below, or all recovered; None while nothing changed."""
    verdict = assess(samples, policy, now)
    if verdict.breached and verdict.note is not None:
        return UtilizationNews(kind=UtilizationNewsKind.BREACHED, note=verdict.note, samples=samples)
    if verdict.note is not None and not low:
        return UtilizationNews(kind=UtilizationNewsKind.BELOW, note=verdict.note, samples=samples)
    if verdict.note is None and low:
        return UtilizationNews(
            kind=UtilizationNewsKind.RECOVERED, note=recovered_note(policy), samples=samples
        )
    return None
