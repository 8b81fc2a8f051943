"""PipelineWorkflow: a pipeline's tasks one after another (docs/pipelines.md), each a RunWorkflow child
with its own resources, retry and recovery; the decisions are core.runs.pipelines'.

For each task: its run's record is stored under the pipeline's, the child started, asked to tell the
pipeline its news (its status becomes the pipeline's), and its result awaited. A stop goes to the running
task and no later task starts. The pipeline's own events go to the store under its run id (RECORD_RUN).
A worker that dies mid-pipeline loses nothing: the child runs on, and the pipeline resumes from its
history where it was.
"""

from __future__ import annotations

import contextlib
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ChildWorkflowError, FailureError

with workflow.unsafe.imports_passed_through():
    from core.configuration.pipeline import PIPELINE_TYPE
    from core.eventlog import Event
    from core.runs import pipelines
    from core.runs.pipelines import PipelineLog, task_run_id, task_workflow_id
    from core.runs.state_machine import RunState, apply_run_event
    from core.runs.status_words import status_message
    from core.runs.watching import run_news
    from core.runs.workflow_messages import RunInput
    from core.status import RunStatus
    from core.web_ui import pipeline_summary, run_current_details, run_line, run_metadata
    from core.wire import revisions
    from core.wire.messages import RecordPipelineTask, RecordRun
    from core.wire.run_messages import PipelineInput, RunNews, RunResult, StopReply, StopRequest, WatchRequest
    from workflows import activity_stubs, retry_policies
    from workflows.run import RunWorkflow
    from workflows.run_watchers import DEPENDENCY_NEWS, Watchers
    from workflows.search_attributes import run_search_attributes
    from workflows.web_ui import end_run, failed_run_result


@workflow.defn
class PipelineWorkflow:
    @workflow.init
    def __init__(self, inp: PipelineInput) -> None:
        self._input = inp
        submit = Event(
            timestamp=workflow.now().timestamp(),
            name="submit",
            context={
                "run_name": inp.run_name,
                "project": inp.project,
                "user": inp.user,
                "type": PIPELINE_TYPE,
            },
        )
        self._state: RunState = apply_run_event(None, submit)
        self._events: list[Event] = [submit]
        self._flushed = 0
        self._news: list[RunNews] = []
        self._stop: StopRequest | None = None
        self._told_stop: StopRequest | None = None
        self._watchers = Watchers(inp.run_id, [])  # runs waiting for this one (docs/dependencies.md)
        self._show()

    @workflow.signal(name=DEPENDENCY_NEWS)
    def task_news(self, news: RunNews) -> None:
        self._news.append(news)

    @workflow.signal
    def watch(self, request: WatchRequest) -> None:
        """A run that waits for this pipeline asks to be told its status, as of a run."""
        self._watchers.add(request)

    @workflow.update
    def stop(self, request: StopRequest) -> StopReply:
        if self._stop is None or request.abort:
            self._stop = request
        return StopReply(status=self._state.status, termination_reason=self._state.termination_reason)

    @workflow.run
    async def run(self, inp: PipelineInput) -> RunResult:
        await self._flush()
        task: int | None = 1
        while task is not None:
            result = await self._run_task(task)
            log = self._log()
            stopping = self._stop is not None
            task = pipelines.task_ended(log, result.status, result.termination_reason, stopping)
            self._keep(log)
            await self._flush()
        result = RunResult(status=self._state.status, termination_reason=self._state.termination_reason)
        return end_run(result, run_line(self._state))  # a FAILED pipeline's workflow fails

    async def _run_task(self, task: int) -> RunResult:
        inp = self._input
        run_id = task_run_id(inp.run_id, task)
        workflow_id = task_workflow_id(workflow.info().workflow_id, task)
        configuration = inp.tasks[task - 1]
        record = RecordPipelineTask(
            pipeline_id=inp.run_id,
            task_num=task,
            run_id=run_id,
            workflow_id=workflow_id,
            project=inp.project,
            run_name=inp.run_name,
            user=inp.user,
            configuration=configuration,
            code_hash=inp.code_hash,
            submitted_at=workflow.now().timestamp(),
        )
        await workflow.execute_activity(
            activity_stubs.record_pipeline_task,
            record,
            start_to_close_timeout=timedelta(seconds=10),
            retry_policy=retry_policies.QUICK,
        )
        log = self._log()
        pipelines.start_task(log, task, len(inp.tasks), run_id)
        self._keep(log)
        await self._flush()
        run_input = RunInput(
            run_id=run_id,
            project=inp.project,
            run_name=inp.run_name,
            user=inp.user,
            configuration=configuration,
            code_hash=inp.code_hash,
            repo_id=inp.repo_id,
            submitted_at=record.submitted_at,
            fleet=inp.fleets[task - 1],
            volume_instances=inp.volume_instances,
            authorized_keys=inp.authorized_keys,
            revision=revisions.CURRENT,
        )
        summary, details = run_metadata(run_input)
        child = await workflow.start_child_workflow(
            RunWorkflow.run,
            run_input,
            id=workflow_id,
            search_attributes=run_search_attributes(run_input, RunStatus.SUBMITTED),
            static_summary=f"{summary} (task {task} of {len(inp.tasks)})",
            static_details=details,
        )
        await child.signal(
            RunWorkflow.watch, WatchRequest(run_id=run_id, watcher_workflow_id=workflow.info().workflow_id)
        )
        while not child.done():
            await workflow.wait_condition(
                lambda: (
                    child.done()
                    or bool(self._news)
                    or self._stop != self._told_stop
                    or self._watchers.untold(self._run_news())
                )
            )
            news, self._news = self._news, []
            log = self._log()
            for item in news:
                pipelines.mirror(log, item)
            stop = self._stop if self._stop != self._told_stop else None
            if stop is not None:
                self._told_stop = stop
                pipelines.stop(log, stop.abort)
            self._keep(log)
            if stop is not None:
                with contextlib.suppress(FailureError):  # the task may have ended meanwhile
                    await child.signal(RunWorkflow.stop_run, stop)
            await self._flush()
        try:
            return await child
        except ChildWorkflowError as err:
            result = failed_run_result(err.cause)  # the task's run failed (workflows/web_ui.py)
            if result is None:
                raise
            return result

    def _log(self) -> PipelineLog:
        return PipelineLog(self._state, workflow.now().timestamp())

    def _keep(self, log: PipelineLog) -> None:
        self._state = log.state
        self._events += log.events
        self._show()

    def _show(self) -> None:
        """The Web UI's current details (docs/runs.md#the-web-ui)."""
        summary = pipeline_summary(self._input.run_name, len(self._input.tasks))
        workflow.set_current_details(run_current_details(self._state, summary))

    def _run_news(self) -> RunNews:
        return run_news(self._input.run_id, self._state)

    async def _flush(self) -> None:
        """The new events to the store, then the news to the runs waiting for this one."""
        await self._record()
        await self._watchers.tell(self._run_news())

    async def _record(self) -> None:
        new = self._events[self._flushed :]
        if not new:
            return
        state = self._state
        await workflow.execute_activity(
            activity_stubs.record_run,
            RecordRun(
                run_id=self._input.run_id,
                status=state.status,
                termination_reason=state.termination_reason,
                status_message=status_message(state),
                start_seq=self._flushed,
                events=new,
                finished_at=state.status_since if state.status.is_finished() else None,
                jobs=[],
            ),
            start_to_close_timeout=timedelta(seconds=10),
            retry_policy=retry_policies.QUICK,
        )
        self._flushed += len(new)
