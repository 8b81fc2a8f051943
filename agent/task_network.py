"""A task's network on its instance, for the registry (agent/tasks.py): the network a submission is granted,
its own network namespace made (agent/network.py), made again after a reboot, and removed.

Each step logs, rather than raises, what it could not do: a task that cannot be isolated runs on the host's
network, and one whose namespace is gone says so when its job does not start.
"""

from __future__ import annotations

import logging
from pathlib import Path

from agent import network
from agent.records import TaskRecord
from core.wire.agent_api import TaskNetwork, TaskSubmitRequest

logger = logging.getLogger(__name__)


def granted_network(request: TaskSubmitRequest, isolation: network.Isolation | None) -> TaskNetwork:
    if request.container is not None:
        return "host" if request.network == "host" else "bridge"
    return "isolated" if isolation is not None else "host"


def isolate(data_dir: Path, task_id: str, owner: Path) -> network.Isolation | None:
    """The task's own network namespace, or None (and why, in the log) when it gets the host's."""
    # The data dir is in the name's key: two agents on one machine may both have a task of this id.
    netns = network.namespace_name(f"{data_dir}\0{task_id}")
    if network.leaves_trace(netns):
        # An earlier task of this id whose removal failed, or a submission that died before its record
        # was written: whatever it left (processes included) is no part of this new task.
        teardown(task_id, netns)
    try:
        isolation = network.setup(netns, owner)
    except network.NetworkError as exc:
        logger.warning("task %s runs on the host's network: it cannot be isolated: %s", task_id, exc)
        return None
    if isolation.outbound_error is not None:
        logger.warning(
            "task %s: its network namespace %s has no outbound access, only the host reaches it: %s",
            task_id,
            netns,
            isolation.outbound_error,
        )
    return isolation


def restore(record: TaskRecord, owner: Path) -> bool:
    """After an agent restart: make a pending task's namespace again if it is gone (a reboot). True when
    the record's address changed (the caller saves it)."""
    assert record.netns is not None
    if network.is_intact(record.netns):
        return False
    try:
        isolation = network.setup(record.netns, owner)
    except network.NetworkError as exc:
        logger.warning("task %s: its network namespace is gone and cannot be made again: %s", record.id, exc)
        return False  # its job will not start, and says why
    if isolation.address == record.address:
        return False
    record.address = isolation.address
    return True


def teardown(task_id: str, netns: str) -> None:
    try:
        network.teardown(netns)
    except network.NetworkError as exc:
        logger.warning("task %s: its network namespace %s was not fully removed: %s", task_id, netns, exc)
