"""How long the agent keeps a task that has ended and that nobody removed (docs/jobs.md#ended-tasks).

A task's worker removes it once its job is over. A task whose worker never comes back (a deployment given
up, a host that lost power under another home's jobs) would stay for good: its record, its log, its
directory. The agent removes such a task TASK_RETENTION after it ended: at its start, and at most every
RETENTION_CHECK_EVERY seconds after. Its end was told to whoever watched it; a job only takes its own
task's end (core/jobs/phases.py), so a stale task never ends another deployment's job meanwhile.
"""

from __future__ import annotations

import logging
import time

from agent.tasks import TaskRegistry
from core.wire.agent_api import TaskStatus

logger = logging.getLogger(__name__)

TASK_RETENTION = 7 * 24 * 3600.0
RETENTION_CHECK_EVERY = 3600.0


def remove_stale(registry: TaskRegistry, now: float | None = None) -> list[str]:
    """Removes every task that ended more than TASK_RETENTION ago; their ids."""
    now = time.time() if now is None else now
    stale = [
        record.id
        for record in registry.records()
        if record.status == TaskStatus.TERMINATED and (record.finished_at or 0.0) < now - TASK_RETENTION
    ]
    for task_id in stale:
        registry.remove(task_id)
    if stale:
        logger.info("removed %d task(s) that ended over %d days ago", len(stale), TASK_RETENTION // 86400)
    return stale
