"""What the CLI shows of an array task (docs/runs.md#arrays): its size from its configuration, its elements
as `element N`, and one line of how many are in each status."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from core.status import JobStatus

if TYPE_CHECKING:
    from store import JobSubmissionRecord, RunRecord

# The order the summary names the statuses in: what is under way first, then how they ended.
_ORDER = (
    JobStatus.RUNNING,
    JobStatus.PULLING,
    JobStatus.PROVISIONING,
    JobStatus.SUBMITTED,
    JobStatus.TERMINATING,
    JobStatus.DONE,
    JobStatus.FAILED,
    JobStatus.TERMINATED,
    JobStatus.ABORTED,
)


def array_size(run: RunRecord) -> int:
    """An array task's elements; 0 for any other run (or one whose configuration no longer validates)."""
    from core.configuration import TaskConfiguration

    try:
        configuration = run.run_configuration()
    except ValueError:
        return 0
    if isinstance(configuration, TaskConfiguration) and configuration.array is not None:
        return configuration.array.count
    return 0


def element_label(job: JobSubmissionRecord) -> str:
    return f"element {job.replica_num}"


def element_counts(latest: Sequence[JobSubmissionRecord], size: int, *, finished: bool = False) -> str:
    """`2 running, 5 done, 1 failed, 92 waiting`: the latest submission of each element by status, and
    those not started yet (`not started`, once the run has finished). An element submitted and not yet
    placed waits too, and one stopped before it was placed never started (docs/runs.md#arrays)."""
    pending = [job for job in latest if _never_placed(job)]
    counts = Counter(JobStatus(job.status) for job in latest if not _never_placed(job))
    parts = [f"{counts[status]} {status.value}" for status in _ORDER if counts[status]]
    waiting = size - len({job.replica_num for job in latest}) + len(pending)
    if waiting > 0:
        parts.append(f"{waiting} {'not started' if finished else 'waiting'}")
    return ", ".join(parts)


def _never_placed(job: JobSubmissionRecord) -> bool:
    """Submitted and waiting, or stopped before it was placed."""
    status = JobStatus(job.status)
    stopped = status in (JobStatus.TERMINATED, JobStatus.ABORTED) and job.provisioned_at is None
    return status == JobStatus.SUBMITTED or stopped
