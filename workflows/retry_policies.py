"""The retry policies of Ferry's activities, in one place (docs/checklists.md: adding an activity).

Temporal retries an activity by its policy; these say how hard each kind of effect is worth retrying.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.common import RetryPolicy

# Effects that talk to an agent or the store retry quickly and without end: a worker restart or a busy
# agent must not cost seconds, and the activity's timeout (or the job's stop) bounds them. An agent's
# error on a job's start ends them after a few attempts (activities/jobs.py, docs/jobs.md#agent-errors).
QUICK = RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_interval=timedelta(seconds=2))

# One-off requests whose failure the caller handles (stop a task, clean or stop an instance): three tries.
FEW_TRIES = RetryPolicy(maximum_attempts=3)

# Removing a finished task from its agent: tries for about half a minute (an agent restarted or upgraded
# meanwhile is back within seconds), then the job logs that it could not.
REMOVE = RetryPolicy(maximum_attempts=8, maximum_interval=timedelta(seconds=5))

# Freeing a job's volumes (docs/volumes.md): until it succeeds, however long, backing off to a try every
# 10 s; the job stays TERMINATING meanwhile and its capacity is released only after
# (docs/jobs.md#step-5-clean-up).
DETACH = RetryPolicy(initial_interval=timedelta(milliseconds=500), maximum_interval=timedelta(seconds=10))

# Deploying the agent to an SSH host: a second try for a flaky connection, then the host is failed.
DEPLOY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=2)

# A webhook (docs/runs.md#notifications): from 1 s, doubling, to a try every 5 min; the notifier gives up
# at its schedule-to-close timeout (workflows/notify.py).
NOTIFY = RetryPolicy(
    initial_interval=timedelta(seconds=1), backoff_coefficient=2, maximum_interval=timedelta(minutes=5)
)
