"""dstack's `utilization_policy` (docs/jobs.md#utilization-policy): the configuration's field, and the pure
decision core.runs.utilization takes from a job's GPU samples."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from core.configuration import TaskConfiguration
from core.configuration.loading import ConfigurationError, load_configuration_text
from core.configuration.specs import UtilizationPolicy
from core.runs.utilization import (
    GpuSample,
    assess,
    idle_since,
    kept,
    sample_interval,
    utilization_news,
)
from core.status import JobStatus, JobTerminationReason
from core.wire.messages import UtilizationNewsKind

POLICY = UtilizationPolicy(min_gpu_utilization=10, time_window=600)  # 10%, 10m


def loaded(policy: str) -> object:
    text = f"type: task\ncommands: [train]\nresources: {{gpu: 1}}\nutilization_policy: {policy}\n"
    return load_configuration_text(text, "job.yml")


# --- the configuration ------------------------------------------------------------------------------


def test_the_policy_is_read_with_a_duration_and_not_warned_about() -> None:
    result = load_configuration_text(
        "type: task\ncommands: [train]\nutilization_policy: {min_gpu_utilization: 10, time_window: 30m}\n",
        "job.yml",
    )
    assert isinstance(result.configuration, TaskConfiguration)
    assert result.configuration.utilization_policy == UtilizationPolicy(
        min_gpu_utilization=10, time_window=1800
    )
    assert result.warning() is None


@pytest.mark.parametrize(
    ("policy", "error"),
    [
        (
            "{min_gpu_utilization: 101, time_window: 10m}",
            "job.yml:4: utilization_policy.min_gpu_utilization: should be less than or equal to 100, got 101",
        ),
        (
            "{min_gpu_utilization: -1, time_window: 10m}",
            "job.yml:4: utilization_policy.min_gpu_utilization: should be greater than or equal to 0, got -1",
        ),
        (
            "{min_gpu_utilization: 10, time_window: soon}",
            "job.yml:4: utilization_policy.time_window: expected a duration such as 90s, 5m, 1h, 2d or 1w, "
            "got 'soon'",
        ),
        ("{min_gpu_utilization: 10}", "job.yml:4: utilization_policy.time_window: required field is missing"),
    ],
)
def test_a_wrong_policy_is_refused_with_its_field(policy: str, error: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        loaded(policy)
    assert str(raised.value) == error


def test_the_reason_ends_the_job_terminated_and_is_not_retried() -> None:
    # As in dstack: a stop, not a failure, so no `retry` event counts it.
    reason = JobTerminationReason.TERMINATED_DUE_TO_UTILIZATION_POLICY
    assert reason.value == "terminated_due_to_utilization_policy"
    assert reason.to_status() == JobStatus.TERMINATED
    assert reason.to_retry_event() is None


# --- the decision -----------------------------------------------------------------------------------


def samples(*readings: tuple[float, Mapping[int, float | None]]) -> list[GpuSample]:
    return [GpuSample(at=at, utilization=dict(utilization)) for at, utilization in readings]


def test_the_interval_is_a_tenth_of_the_window_within_5s_and_60s() -> None:
    assert sample_interval(POLICY) == 60
    assert sample_interval(UtilizationPolicy(min_gpu_utilization=10, time_window=200)) == 20
    assert sample_interval(UtilizationPolicy(min_gpu_utilization=10, time_window=20)) == 5
    assert sample_interval(UtilizationPolicy(min_gpu_utilization=10, time_window=86400)) == 60


def test_no_samples_or_busy_gpus_say_nothing() -> None:
    assert assess([], POLICY, now=1000).note is None
    busy = samples((0, {0: 50.0}), (60, {0: 95.0}))
    verdict = assess(busy, POLICY, now=120)
    assert (verdict.gpu, verdict.low_since, verdict.breached, verdict.note) == (None, None, False, None)


def test_on_the_way_the_note_says_how_long_of_the_window() -> None:
    idle = samples((0, {0: 80.0}), (60, {0: 3.0}), (120, {0: 0.0}), (300, {0: 9.0}))
    verdict = assess(idle, POLICY, now=300)
    assert (verdict.gpu, verdict.low_since, verdict.breached) == (0, 60, False)
    assert verdict.note == "GPU 0 utilization below 10% for 4m of 10m"


def test_met_once_the_low_run_covers_the_whole_window() -> None:
    idle = samples(*((at, {0: 2.0}) for at in range(0, 601, 60)))
    assert assess(idle, POLICY, now=599).breached is False  # the first low sample is not yet 10m old
    verdict = assess(idle, POLICY, now=600)
    assert verdict.breached is True
    assert verdict.note == "GPU 0 utilization below 10% for 10m of 10m"


def test_one_sample_at_or_above_the_threshold_starts_the_window_again() -> None:
    readings = [(at, {0: 2.0}) for at in range(0, 601, 60)]
    readings[5] = (300, {0: 10.0})  # the threshold itself is not below it
    verdict = assess(samples(*readings), POLICY, now=600)
    assert (verdict.low_since, verdict.breached) == (360, False)


def test_any_gpu_idle_for_the_window_is_enough_as_in_dstack() -> None:
    # dstack: "if any GPU has utilization below the value during the whole time window".
    readings = samples(*((at, {0: 99.0, 1: 1.0}) for at in range(0, 601, 60)))
    verdict = assess(readings, POLICY, now=600)
    assert (verdict.gpu, verdict.breached) == (1, True)
    assert verdict.note == "GPU 1 utilization below 10% for 10m of 10m"


def test_the_gpu_idle_the_longest_is_named() -> None:
    readings = samples((0, {0: 50.0, 1: 1.0}), (60, {0: 1.0, 1: 1.0}), (120, {0: 1.0, 1: 1.0}))
    assert idle_since(readings, POLICY, now=120) == {0: 60, 1: 0}
    assert assess(readings, POLICY, now=120).gpu == 1


def test_an_unknown_reading_or_a_missing_gpu_proves_nothing() -> None:
    na = samples((0, {0: 1.0}), (60, {0: None}), (120, {0: 1.0}))
    assert assess(na, POLICY, now=120).low_since == 120
    missing = samples((0, {0: 1.0, 1: 1.0}), (60, {0: 1.0}), (120, {0: 1.0, 1: 1.0}))
    assert idle_since(missing, POLICY, now=120) == {0: 0, 1: 120}


def test_samples_after_now_are_not_looked_at() -> None:
    readings = samples((0, {0: 1.0}), (700, {0: 1.0}))
    assert assess(readings, POLICY, now=300).note == "GPU 0 utilization below 10% for 5m of 10m"


def test_the_kept_samples_are_the_window_and_the_one_before() -> None:
    readings = samples(*((at, {0: 1.0}) for at in range(0, 1201, 60)))
    window = kept(readings, POLICY, now=1200)
    assert [s.at for s in window] == list(range(540, 1201, 60))
    # What is dropped never changes the decision, nor what is said.
    short, full = assess(window, POLICY, now=1200), assess(readings, POLICY, now=1200)
    assert (
        (short.breached, short.note)
        == (full.breached, full.note)
        == (True, "GPU 0 utilization below 10% for 10m of 10m")
    )
    assert kept([], POLICY, now=0) == []


def test_a_zero_percent_threshold_never_terminates() -> None:
    never = UtilizationPolicy(min_gpu_utilization=0, time_window=60)
    assert assess(samples((0, {0: 0.0}), (60, {0: 0.0})), never, now=60).breached is False


def test_news_is_a_change_from_what_the_workflow_knows() -> None:
    low = samples((0, {0: 3.0}))
    below = utilization_news(False, low, POLICY, 0)
    assert below is not None and below.kind == UtilizationNewsKind.BELOW
    assert utilization_news(True, low, POLICY, 0) is None  # still below, the window not met: nothing new
    met = samples((0, {0: 3.0}), (300, {0: 2.0}), (600, {0: 1.0}))
    breached = utilization_news(True, met, POLICY, 600)
    assert breached is not None and breached.kind == UtilizationNewsKind.BREACHED
    assert breached.note == "GPU 0 utilization below 10% for 10m of 10m" and breached.samples == met
    busy = samples((0, {0: 3.0}), (60, {0: 80.0}))
    recovered = utilization_news(True, busy, POLICY, 60)
    assert recovered is not None and recovered.kind == UtilizationNewsKind.RECOVERED
    assert utilization_news(False, busy, POLICY, 60) is None
