"""A pipeline as pure decisions and as a file (docs/pipelines.md): its status follows the running task's,
a task done starts the next, the first task not done ends it with its reason, a stop ends it with the
user's; a file of several documents is a pipeline of tasks, and what cannot be one is refused by line."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.configuration.loading import ConfigurationError, LoadedConfiguration
from core.configuration.pipeline import LoadedPipeline, load_run_file
from core.eventlog import Event
from core.runs import pipelines
from core.runs.pipelines import PipelineLog
from core.runs.state_machine import apply_run_event, replay_run
from core.runs.status_words import status_message
from core.status import RunStatus, RunTerminationReason
from core.wire.run_messages import RunNews

RS = RunStatus
RR = RunTerminationReason


def submitted() -> PipelineLog:
    submit = Event(
        timestamp=0, name="submit", context={"run_name": "p", "project": "x", "user": "u", "type": "pipeline"}
    )
    log = PipelineLog(apply_run_event(None, submit), 1)
    log.events.append(submit)
    return log


def test_the_pipeline_follows_its_tasks_and_ends_with_the_last() -> None:
    log = submitted()
    pipelines.start_task(log, 1, 2, "p-t1")
    pipelines.mirror(log, RunNews(run_id="p-t1", status=RS.RUNNING, started=True))
    pipelines.mirror(log, RunNews(run_id="p-t1", status=RS.TERMINATING))  # a task's, not the pipeline's
    assert log.state.status == RS.RUNNING and status_message(log.state) == "task 1 of 2"
    assert pipelines.task_ended(log, RS.DONE, RR.ALL_JOBS_DONE, stopping=False) == 2
    pipelines.start_task(log, 2, 2, "p-t2")
    pipelines.mirror(log, RunNews(run_id="p-t1", status=RS.RUNNING))  # late news of task 1
    assert log.state.status == RS.SUBMITTED
    assert pipelines.task_ended(log, RS.DONE, RR.ALL_JOBS_DONE, stopping=False) is None
    assert (log.state.status, log.state.termination_reason) == (RS.DONE, RR.ALL_JOBS_DONE)
    assert replay_run(log.events) == log.state
    assert status_message(log.state) == "task 2 of 2: all jobs done"


def test_a_task_not_done_ends_the_pipeline_with_its_reason() -> None:
    log = submitted()
    pipelines.start_task(log, 1, 3, "p-t1")
    assert pipelines.task_ended(log, RS.FAILED, RR.RETRY_LIMIT_EXCEEDED, stopping=False) is None
    assert (log.state.status, log.state.termination_reason) == (RS.FAILED, RR.RETRY_LIMIT_EXCEEDED)


def test_a_stop_ends_the_pipeline_even_after_a_task_done() -> None:
    log = submitted()
    pipelines.start_task(log, 1, 3, "p-t1")
    pipelines.stop(log, abort=False)
    assert log.state.status == RS.TERMINATING
    assert pipelines.task_ended(log, RS.DONE, RR.ALL_JOBS_DONE, stopping=True) is None
    assert (log.state.status, log.state.termination_reason) == (RS.TERMINATED, RR.STOPPED_BY_USER)


PIPELINE = """\
name: nightly
---
type: task
commands: [echo one]
---
type: task
nvcc: true
commands: [echo two]
"""


def test_a_file_of_several_documents_is_a_pipeline(tmp_path: Path) -> None:
    path = tmp_path / "p.yml"
    path.write_text(PIPELINE)
    loaded = load_run_file(path)
    assert isinstance(loaded, LoadedPipeline)
    assert loaded.pipeline.name == "nightly" and len(loaded.pipeline.tasks) == 2
    assert loaded.warning() == f"{path}: warning: Ferry does not act on yet: task 2: nvcc"
    path.write_text("type: task\ncommands: [x]\n")
    assert isinstance(load_run_file(path), LoadedConfiguration)


@pytest.mark.parametrize(
    ("text", "issue"),
    [
        (
            "type: task\ncommands: [a]\n---\ntype: service\nport: 80\ncommands: [b]\n",
            "4: type: a pipeline runs tasks only, not a service",
        ),
        (
            "name: p\nretry: true\n---\ntype: task\ncommands: [a]\n",
            "2: retry: the pipeline's first document takes only `name`",
        ),
        (
            "type: task\ncommands: [a]\n---\ntype: task\ncommands: [b]\ndepends_on: [x1]\n",
            "6: depends_on: a pipeline's task waits",
        ),
        ("name: P!\n---\ntype: task\ncommands: [a]\n", "1: name: invalid name"),
        ("type: task\ncommands: [a]\n---\ntype: task\nnodes: zero\ncommands: [b]\n", "5: nodes:"),
    ],
)
def test_what_a_pipeline_cannot_be_is_refused_by_line(tmp_path: Path, text: str, issue: str) -> None:
    path = tmp_path / "p.yml"
    path.write_text(text)
    with pytest.raises(ConfigurationError) as refused:
        load_run_file(path)
    assert str(refused.value).startswith(f"{path}:{issue}")


def test_the_example_pipeline_loads() -> None:
    loaded = load_run_file(Path(__file__).parents[2] / "examples" / "pipeline.yml")
    assert isinstance(loaded, LoadedPipeline) and loaded.warning() is None
    assert [task.name for task in loaded.pipeline.tasks] == ["fetch", "train", "report"]
    loaded.ensure_runnable()
