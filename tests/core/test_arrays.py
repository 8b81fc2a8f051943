"""Array tasks (docs/runs.md#arrays, core.runs.arrays): what the configuration takes and refuses, each
element's environment, and the run's lifecycle over its elements: at most `max_parallel` at once, started in
order as others end, each retried on its own, and a failure that ends only its element."""

from __future__ import annotations

import pytest

from core.configuration import TaskConfiguration
from core.configuration.loading import ConfigurationError, load_configuration_text
from core.runs.effects import StartJob
from core.runs.lifecycle import submit_run
from core.runs.machine import RunMachine
from core.runs.submissions import job_input
from core.status import JobStatus as S
from core.status import JobTerminationReason as R
from core.status import RunStatus as RS
from core.status import RunTerminationReason as RR
from tests.core.test_run_lifecycle import ON_ERROR, T0, finished, keys_of, news, run_input, running, step


def started(effects: list) -> list[int]:
    """The elements (replicas) an effect list starts."""
    return [key[0] for key in keys_of(effects, StartJob)]


def test_array_is_a_count_or_a_mapping_and_is_one_node_each() -> None:
    def load(text: str) -> TaskConfiguration:
        conf = load_configuration_text(f"type: task\ncommands: [x]\n{text}", "a.yml").configuration
        assert isinstance(conf, TaskConfiguration)
        return conf

    assert load("array: 5\n").array.count == 5  # type: ignore[union-attr]
    mapped = load("array: {count: 100, max_parallel: 8}\n")
    assert mapped.array is not None and mapped.array.parallel() == 8
    assert mapped.summary().scale == "array 100, 8 at once"
    for text, words in [
        ("array: 5\nnodes: 2\n", "a.yml:3: array: cannot be used with `nodes`"),
        ("array: 0\n", "array.count"),
        ("array: 1001\n", "array.count"),
        ("array: {count: 4, max_parallel: 0}\n", "array.max_parallel"),
        ("array: 3\nstop_criteria: master-done\n", "stop_criteria: an array has no master"),
        ("array: 3\nschedule: {cron: '0 * * * *'}\n", "array: cannot be used with `schedule` yet"),
    ]:
        with pytest.raises(ConfigurationError) as error:
            load(text)
        assert words in str(error.value), str(error.value)


def test_each_element_knows_its_index_under_ferrys_slurms_and_skypilots_names() -> None:
    inp = run_input("task", array=4)
    state = submit_run(inp, T0).machine.state
    env = job_input(inp, state, "wf", 2, 0).spec.env
    assert {k: env[k] for k in ("FERRY_ARRAY_INDEX", "SLURM_ARRAY_TASK_ID", "SKYPILOT_JOB_RANK")} == {
        "FERRY_ARRAY_INDEX": "2",
        "SLURM_ARRAY_TASK_ID": "2",
        "SKYPILOT_JOB_RANK": "2",
    }
    assert (env["FERRY_ARRAY_SIZE"], env["SLURM_ARRAY_TASK_MAX"], env["SKYPILOT_NUM_JOBS"]) == ("4", "3", "4")
    assert "FERRY_ARRAY_INDEX" not in job_input(run_input("task"), state, "wf", 0, 0).spec.env


def test_at_most_max_parallel_run_and_the_next_starts_as_one_ends() -> None:
    first = submit_run(run_input("task", array={"count": 5, "max_parallel": 2}), T0)
    assert sorted(started(first.effects)) == [0, 1]
    m = running(first.machine, (0, 0, 0), (1, 0, 0))
    s = step(m, finished((1, 0, 0), R.DONE_BY_RUNNER, exit_status=0, at=T0 + 5), at=T0 + 5)
    assert started(s.effects) == [2]
    assert s.machine.state.status == RS.RUNNING
    m = s.machine
    # Two end in one step: the next two start; the last element once one more ends.
    both = [finished(k, R.DONE_BY_RUNNER, exit_status=0, at=T0 + 6) for k in ((0, 0, 0), (2, 0, 0))]
    s = step(m, *both, at=T0 + 6)
    assert sorted(started(s.effects)) == [3, 4]
    s = step(
        s.machine,
        *(finished(k, R.DONE_BY_RUNNER, exit_status=0, at=T0 + 7) for k in ((3, 0, 0), (4, 0, 0))),
        at=T0 + 7,
    )
    assert started(s.effects) == [] and s.machine.state.status in (RS.TERMINATING, RS.DONE)
    assert s.machine.state.termination_reason == RR.ALL_JOBS_DONE


def _done(m: RunMachine, key: tuple[int, int, int], at: float) -> RunMachine:
    return step(m, finished(key, R.DONE_BY_RUNNER, exit_status=0, at=at), at=at).machine


def test_a_failed_element_ends_only_itself_and_the_run_fails_once_all_have_ended() -> None:
    m = running(submit_run(run_input("task", array=3), T0).machine, (0, 0, 0), (1, 0, 0), (2, 0, 0))
    s = step(m, finished((1, 0, 0), R.CONTAINER_EXITED_WITH_ERROR, exit_status=3, at=T0 + 2), at=T0 + 2)
    assert s.effects == [] and s.machine.state.status == RS.RUNNING  # the others go on, none is stopped
    m = _done(s.machine, (0, 0, 0), T0 + 3)
    assert m.state.status == RS.RUNNING
    m = _done(m, (2, 0, 0), T0 + 4)
    assert m.state.status in (RS.TERMINATING, RS.FAILED)
    assert m.state.termination_reason == RR.JOB_FAILED


def test_an_element_is_retried_on_its_own_and_one_failed_for_good_is_not() -> None:
    inp = run_input("task", array={"count": 3, "max_parallel": 2}, retry=ON_ERROR)
    m = running(submit_run(inp, T0).machine, (0, 0, 0), (1, 0, 0))
    # Element 1 fails retryably while 0 runs: it is resubmitted in place, and no new element starts.
    s = step(m, finished((1, 0, 0), R.CONTAINER_EXITED_WITH_ERROR, exit_status=1, at=T0 + 2), at=T0 + 2)
    assert keys_of(s.effects, StartJob) == [(1, 0, 1)]
    # Element 0 is lost for good (an interruption is not a retry event here): 2 starts in its place.
    s = step(s.machine, finished((0, 0, 0), R.INSTANCE_UNREACHABLE, at=T0 + 3), at=T0 + 3)
    assert keys_of(s.effects, StartJob) == [(2, 0, 0)]
    m = running(s.machine, (1, 0, 1), (2, 0, 0), at=T0 + 4)
    m = _done(m, (1, 0, 1), T0 + 5)
    m = _done(m, (2, 0, 0), T0 + 6)
    assert m.state.status in (RS.TERMINATING, RS.FAILED)  # element 0's failure is the run's
    assert m.state.termination_reason == RR.JOB_FAILED


def test_after_a_backoff_only_the_retryable_elements_are_resubmitted() -> None:
    inp = run_input("task", array=2, retry={"on_events": ["no-capacity"]})
    m = submit_run(inp, T0).machine
    m = step(
        m, finished((0, 0, 0), R.CONTAINER_EXITED_WITH_ERROR, exit_status=1, at=T0 + 1), at=T0 + 1
    ).machine
    s = step(m, finished((1, 0, 0), R.FAILED_TO_START_DUE_TO_NO_CAPACITY, at=T0 + 2), at=T0 + 2)
    assert s.machine.state.status == RS.PENDING
    due = step(s.machine, at=s.machine.retry_at or 0)
    assert keys_of(due.effects, StartJob) == [(1, 0, 1)]  # element 0 failed for good: not again


def test_a_stop_starts_no_more_elements() -> None:
    from core.runs.machine import StopKind

    m = running(submit_run(run_input("task", array={"count": 4, "max_parallel": 1}), T0).machine, (0, 0, 0))
    s = step(m, at=T0 + 2, stop=StopKind.STOP)
    s = step(s.machine, finished((0, 0, 0), R.TERMINATED_BY_USER, at=T0 + 3), at=T0 + 3)
    assert started(s.effects) == []
    assert s.machine.state.status in (RS.TERMINATING, RS.TERMINATED)


def test_news_of_an_element_is_heard_as_any_jobs() -> None:
    m = submit_run(run_input("task", array=2), T0).machine
    s = step(m, news((1, 0, 0), S.PROVISIONING, at=T0 + 1), at=T0 + 1)
    assert s.machine.state.job(1, 0) is not None and s.machine.state.job(1, 0).status == S.PROVISIONING  # type: ignore[union-attr]


def test_the_cli_sums_an_array_up_by_status_and_names_what_has_not_started() -> None:
    from types import SimpleNamespace

    from cli.arrays import element_counts

    latest = [
        SimpleNamespace(replica_num=i, status=s) for i, s in enumerate(["running", "done", "done", "failed"])
    ]
    assert element_counts(latest, 10) == "1 running, 2 done, 1 failed, 6 waiting"  # type: ignore[arg-type]
    assert element_counts(latest, 10, finished=True).endswith("6 not started")  # type: ignore[arg-type]
    assert element_counts(latest, 4) == "1 running, 2 done, 1 failed"  # type: ignore[arg-type]


def test_an_array_whose_retries_ran_out_during_the_backoff_ends_then() -> None:
    inp = run_input("task", array=2, retry={"on_events": ["no-capacity"], "duration": "10s"})
    m = submit_run(inp, T0).machine
    m = step(m, finished((0, 0, 0), R.DONE_BY_RUNNER, exit_status=0, at=T0 + 1), at=T0 + 1).machine
    s = step(m, finished((1, 0, 0), R.FAILED_TO_START_DUE_TO_NO_CAPACITY, at=T0 + 2), at=T0 + 2)
    assert s.machine.state.status == RS.PENDING
    due = step(s.machine, at=s.machine.retry_at or 0)  # 15 s later: past the 10 s window
    assert keys_of(due.effects, StartJob) == []
    assert due.machine.state.status in (RS.TERMINATING, RS.FAILED)
    assert due.machine.state.termination_reason == RR.RETRY_LIMIT_EXCEEDED
    assert due.machine.retry_at is None
