"""Run and job statuses, termination reasons, and what each reason leads to (docs/runs.md)."""

from __future__ import annotations

from core.compat import StrEnum


class RunStatus(StrEnum):
    PENDING = "pending"
    SUBMITTED = "submitted"
    PROVISIONING = "provisioning"
    RUNNING = "running"
    TERMINATING = "terminating"
    TERMINATED = "terminated"
    FAILED = "failed"
    DONE = "done"

    @classmethod
    def finished_statuses(cls) -> frozenset[RunStatus]:
        return frozenset({cls.TERMINATED, cls.FAILED, cls.DONE})

    def is_finished(self) -> bool:
        return self in self.finished_statuses()

    def is_active(self) -> bool:
        return not self.is_finished()


# A submitted job's status message while its fleet holds it in its queue (docs/fleets.md).
WAITING_FOR_CAPACITY = "waiting for capacity"


class JobStatus(StrEnum):
    SUBMITTED = "submitted"
    PROVISIONING = "provisioning"
    PULLING = "pulling"
    RUNNING = "running"
    TERMINATING = "terminating"
    TERMINATED = "terminated"
    ABORTED = "aborted"
    FAILED = "failed"
    DONE = "done"

    @classmethod
    def finished_statuses(cls) -> frozenset[JobStatus]:
        return frozenset({cls.TERMINATED, cls.ABORTED, cls.FAILED, cls.DONE})

    def is_finished(self) -> bool:
        return self in self.finished_statuses()

    def is_active(self) -> bool:
        return not self.is_finished()


class RetryEvent(StrEnum):
    """The events a configuration's `retry.on_events` may name."""

    NO_CAPACITY = "no-capacity"
    INTERRUPTION = "interruption"
    ERROR = "error"


class JobTerminationReason(StrEnum):
    # Placement
    FAILED_TO_START_DUE_TO_NO_CAPACITY = "failed_to_start_due_to_no_capacity"
    INTERRUPTED_BY_NO_CAPACITY = "interrupted_by_no_capacity"
    # The host or its agent
    INSTANCE_UNREACHABLE = "instance_unreachable"
    WAITING_INSTANCE_LIMIT_EXCEEDED = "waiting_instance_limit_exceeded"
    WAITING_RUNNER_LIMIT_EXCEEDED = "waiting_runner_limit_exceeded"
    # The user or the server
    TERMINATED_BY_USER = "terminated_by_user"
    ABORTED_BY_USER = "aborted_by_user"
    TERMINATED_BY_SERVER = "terminated_by_server"
    SCALED_DOWN = "scaled_down"
    # Limits
    MAX_DURATION_EXCEEDED = "max_duration_exceeded"
    INACTIVITY_DURATION_EXCEEDED = "inactivity_duration_exceeded"
    TERMINATED_DUE_TO_UTILIZATION_POLICY = "terminated_due_to_utilization_policy"
    # The job itself
    DONE_BY_RUNNER = "done_by_runner"
    CONTAINER_EXITED_WITH_ERROR = "container_exited_with_error"
    # Starting the job
    VOLUME_ERROR = "volume_error"
    GATEWAY_ERROR = "gateway_error"
    PORTS_BINDING_FAILED = "ports_binding_failed"
    CREATING_CONTAINER_ERROR = "creating_container_error"
    EXECUTOR_ERROR = "executor_error"

    def to_status(self) -> JobStatus:
        """The finished status a job terminated for this reason ends in."""
        return _JOB_REASON_STATUS.get(self, JobStatus.FAILED)

    def to_retry_event(self) -> RetryEvent | None:
        """The retry event this reason counts as; None for reasons that are never retried."""
        if self == JobTerminationReason.FAILED_TO_START_DUE_TO_NO_CAPACITY:
            return RetryEvent.NO_CAPACITY
        if self in _INTERRUPTIONS:
            return RetryEvent.INTERRUPTION
        if self.to_status() == JobStatus.FAILED:
            return RetryEvent.ERROR
        return None

    def message(self) -> str:
        """A short human-readable message, as `ferry ps` shows it."""
        return _JOB_REASON_MESSAGE.get(self, self.value.replace("_", " "))


_JOB_REASON_STATUS: dict[JobTerminationReason, JobStatus] = {
    JobTerminationReason.DONE_BY_RUNNER: JobStatus.DONE,
    JobTerminationReason.TERMINATED_BY_USER: JobStatus.TERMINATED,
    JobTerminationReason.TERMINATED_BY_SERVER: JobStatus.TERMINATED,
    JobTerminationReason.SCALED_DOWN: JobStatus.TERMINATED,
    JobTerminationReason.MAX_DURATION_EXCEEDED: JobStatus.TERMINATED,
    JobTerminationReason.INACTIVITY_DURATION_EXCEEDED: JobStatus.TERMINATED,
    JobTerminationReason.TERMINATED_DUE_TO_UTILIZATION_POLICY: JobStatus.TERMINATED,
    JobTerminationReason.ABORTED_BY_USER: JobStatus.ABORTED,
}

_INTERRUPTIONS = frozenset(
    {JobTerminationReason.INTERRUPTED_BY_NO_CAPACITY, JobTerminationReason.INSTANCE_UNREACHABLE}
)

_JOB_REASON_MESSAGE: dict[JobTerminationReason, str] = {
    JobTerminationReason.FAILED_TO_START_DUE_TO_NO_CAPACITY: "no capacity",
    JobTerminationReason.INTERRUPTED_BY_NO_CAPACITY: "interrupted",
    JobTerminationReason.INSTANCE_UNREACHABLE: "instance unreachable",
    JobTerminationReason.TERMINATED_BY_USER: "stopped",
    JobTerminationReason.ABORTED_BY_USER: "aborted",
    JobTerminationReason.DONE_BY_RUNNER: "exited (0)",
    JobTerminationReason.MAX_DURATION_EXCEEDED: "max duration exceeded",
    JobTerminationReason.INACTIVITY_DURATION_EXCEEDED: "inactive",
}


class RunTerminationReason(StrEnum):
    ALL_JOBS_DONE = "all_jobs_done"
    JOB_FAILED = "job_failed"
    RETRY_LIMIT_EXCEEDED = "retry_limit_exceeded"
    STOPPED_BY_USER = "stopped_by_user"
    ABORTED_BY_USER = "aborted_by_user"
    SERVER_ERROR = "server_error"
    DEPENDENCY_FAILED = "dependency_failed"  # a run it waited for can no longer meet the condition
    INACTIVITY_DURATION_EXCEEDED = "inactivity_duration_exceeded"  # a dev environment nobody attached to

    def to_status(self) -> RunStatus:
        """The finished status a run terminated for this reason ends in."""
        return _RUN_REASON_STATUS[self]

    def to_job_termination_reason(self) -> JobTerminationReason:
        """The reason given to the run's still-active jobs when the run terminates for this reason."""
        return _RUN_TO_JOB_REASON[self]

    @property
    def is_by_user(self) -> bool:
        """The user stopped or aborted the run (a scheduled run then does not return to PENDING)."""
        return self in (RunTerminationReason.STOPPED_BY_USER, RunTerminationReason.ABORTED_BY_USER)


_RUN_REASON_STATUS: dict[RunTerminationReason, RunStatus] = {
    RunTerminationReason.ALL_JOBS_DONE: RunStatus.DONE,
    RunTerminationReason.JOB_FAILED: RunStatus.FAILED,
    RunTerminationReason.RETRY_LIMIT_EXCEEDED: RunStatus.FAILED,
    RunTerminationReason.STOPPED_BY_USER: RunStatus.TERMINATED,
    RunTerminationReason.ABORTED_BY_USER: RunStatus.TERMINATED,
    RunTerminationReason.SERVER_ERROR: RunStatus.FAILED,
    RunTerminationReason.DEPENDENCY_FAILED: RunStatus.FAILED,
    RunTerminationReason.INACTIVITY_DURATION_EXCEEDED: RunStatus.TERMINATED,
}

_RUN_TO_JOB_REASON: dict[RunTerminationReason, JobTerminationReason] = {
    RunTerminationReason.ALL_JOBS_DONE: JobTerminationReason.DONE_BY_RUNNER,
    RunTerminationReason.JOB_FAILED: JobTerminationReason.TERMINATED_BY_SERVER,
    RunTerminationReason.RETRY_LIMIT_EXCEEDED: JobTerminationReason.TERMINATED_BY_SERVER,
    RunTerminationReason.STOPPED_BY_USER: JobTerminationReason.TERMINATED_BY_USER,
    RunTerminationReason.ABORTED_BY_USER: JobTerminationReason.ABORTED_BY_USER,
    RunTerminationReason.SERVER_ERROR: JobTerminationReason.TERMINATED_BY_SERVER,
    RunTerminationReason.DEPENDENCY_FAILED: JobTerminationReason.TERMINATED_BY_SERVER,
    RunTerminationReason.INACTIVITY_DURATION_EXCEEDED: JobTerminationReason.INACTIVITY_DURATION_EXCEEDED,
}
