"""What a run's, a pipeline's and a job's workflow shows in the Web UI, and how it ends
(docs/runs.md#the-web-ui).

Its current details (no command, no event: the UI asks the workflow) follow its status. One that ends
FAILED fails, non-retryable, with its status line as the message and its result as the details, so that
the Web UI shows it Failed and why; any other completes with its result (a stopped run too: the user's
stop is no failure). It fails only after all its bookkeeping (store, watchers, schedule, capacity), as
its very last command. Histories recorded before this rule completed there instead: `workflow.patched`
keeps them replaying as they did, and marks the histories where it holds.
"""

from __future__ import annotations

from typing import Any, TypeVar

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from core.jobs.state_machine import JobState
    from core.runs.run_state import RunState
    from core.runs.workflow_messages import RunInput
    from core.status import JobStatus, RunStatus
    from core.web_ui import JOB_FAILED, RUN_FAILED, job_line, run_current_details, run_summary
    from core.wire.job_messages import JobEnding
    from core.wire.run_messages import RunResult

_Result = TypeVar("_Result", RunResult, JobEnding)

FAILS_VISIBLY = "fails-visibly"  # the patch that made a FAILED run's or job's workflow fail


def show_run(inp: RunInput, state: RunState) -> None:
    workflow.set_current_details(run_current_details(state, run_summary(inp.run_name, inp.configuration)))


def show_job(state: JobState) -> None:
    workflow.set_current_details(f"**status** {job_line(state)}")


def end_run(result: RunResult, message: str) -> RunResult:
    """`result`, or for a FAILED run a RunFailed failure (its message `message`, its details `result`)."""
    ending = run_ending(result, message)
    if isinstance(ending, ApplicationError):
        raise ending
    return ending


def run_ending(result: RunResult, message: str) -> RunResult | ApplicationError:
    """What `end_run` ends with, decided now (the patch asked in this workflow task), ended with later."""
    if result.status != RunStatus.FAILED or not workflow.patched(FAILS_VISIBLY):
        return result
    return ApplicationError(message, result, type=RUN_FAILED, non_retryable=True)


def end_job(outcome: JobEnding, message: str) -> JobEnding:
    """`outcome`, or for a job that ends FAILED a JobFailed failure (details: `outcome`)."""
    if outcome.termination_reason.to_status() != JobStatus.FAILED or not workflow.patched(FAILS_VISIBLY):
        return outcome
    raise ApplicationError(message, outcome, type=JOB_FAILED, non_retryable=True)


def failed_run_result(cause: BaseException | None) -> RunResult | None:
    """The result of a run whose workflow failed as `end_run` fails it, from the failure's cause (a
    ChildWorkflowError's in a workflow, a WorkflowFailureError's for a client); None for any other."""
    return _failure_details(cause, RUN_FAILED, RunResult)


def failed_job_ending(cause: BaseException | None) -> JobEnding | None:
    """The result of a job whose workflow failed as `end_job` fails it, from a ChildWorkflowError's cause;
    None for any other."""
    return _failure_details(cause, JOB_FAILED, JobEnding)


def _failure_details(cause: BaseException | None, failure_type: str, result: type[_Result]) -> _Result | None:
    """The result a workflow failed with as `end_run`/`end_job` fail it: the failure's details."""
    if not isinstance(cause, ApplicationError) or cause.type != failure_type or not cause.details:
        return None
    details: Any = cause.details[0]
    return details if isinstance(details, result) else result.model_validate(details)
