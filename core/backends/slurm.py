"""The Slurm backend's decisions (docs/backends.md#a-slurm-backend): what an allocation asks `sbatch` for,
what `squeue` says of it, and which of its ends is an interruption.

An instance is one node of a Slurm allocation (a job of `sbatch --nodes=N`) whose one task per node runs
Ferry's agent. Every allocation has a job name Ferry chooses and records before it submits (`job_name`),
so that an `sbatch` whose answer was lost (the worker killed meanwhile) is found again by its name, not
submitted twice; `ferry-<hash>` keeps Ferry's jobs apart from everyone else's in `squeue`.
"""

from __future__ import annotations

import hashlib
import math
import shlex
from enum import StrEnum
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict

from core.configuration.backend import SlurmBackendConfiguration, SlurmPartition
from core.configuration.fields import SpotPolicy
from core.configuration.resources import ResourcesSpec

JOB_NAME_PREFIX = "ferry-"
# squeue's fields, `|`-separated: id, name, state, reason, nodes, partition.
SQUEUE_FORMAT = "%i|%j|%T|%r|%N|%P"


FLEET_BACKEND_PREFIX = "slurm:"  # a fleet record's `backend` column for a fleet on the backend that follows


def fleet_backend_column(backend: str) -> str:
    """What a fleet on the Slurm backend `backend` records as its backend (store FleetRecord.backend)."""
    return f"{FLEET_BACKEND_PREFIX}{backend}"


def slurm_backend_name(column: str) -> str | None:
    """The Slurm backend a fleet record's `backend` column names; None for an SSH or the local fleet."""
    return column.removeprefix(FLEET_BACKEND_PREFIX) if column.startswith(FLEET_BACKEND_PREFIX) else None


def job_name(project: str, fleet: str, allocation: str) -> str:
    """The Slurm job name of one of a fleet's allocations: stable, and short enough for every `squeue`."""
    digest = hashlib.sha256(f"{project}/{fleet}".encode()).hexdigest()[:10]
    return f"{JOB_NAME_PREFIX}{digest}-{allocation}"


def fleet_prefix(project: str, fleet: str) -> str:
    """What every one of the fleet's job names starts with (a sweep of what a crash left behind)."""
    return job_name(project, fleet, "")


class AllocationRequest(BaseModel):
    """What one `sbatch` asks for: N nodes of the fleet's shape, in one partition."""

    model_config = ConfigDict(frozen=True)

    job_name: str
    nodes: int
    partition: str
    account: str | None = None
    qos: str | None = None
    time_limit_minutes: int | None = None
    cpus: int  # per node (one task per node)
    memory_mb: int | None  # per node; None: the partition's default
    gpus: int = 0  # per node
    gpu_name: str | None = None
    preemptible: bool = False


def partitions_for(backend: SlurmBackendConfiguration, policy: SpotPolicy | None) -> list[SlurmPartition]:
    """The partitions a fleet may ask, in the order to try them: `spot` only preemptible ones, `on-demand`
    (the default, as dstack's) only the others, `auto` preemptible ones first and then the others."""
    preemptible = [p for p in backend.partitions if p.preemptible]
    others = [p for p in backend.partitions if not p.preemptible]
    if policy == SpotPolicy.SPOT:
        return preemptible
    if policy == SpotPolicy.AUTO:
        return preemptible + others
    return others


def allocation_request(
    backend: SlurmBackendConfiguration,
    partition: SlurmPartition,
    resources: ResourcesSpec,
    *,
    name: str,
    nodes: int,
) -> AllocationRequest:
    """The allocation of `nodes` nodes, each the least of the fleet's `resources` (a range's lower bound;
    disk is not asked: nodes seldom declare it to Slurm)."""
    gpu = resources.gpu
    gpus = 0 if gpu is None else gpu.count.min or 0
    memory = resources.memory.min
    return AllocationRequest(
        job_name=name,
        nodes=nodes,
        partition=partition.name,
        account=backend.account,
        qos=partition.qos or backend.qos,
        time_limit_minutes=None if backend.time_limit is None else max(1, math.ceil(backend.time_limit / 60)),
        cpus=max(1, resources.cpu.min or 1),
        memory_mb=None if not memory else math.ceil(memory * 1024),
        gpus=gpus,
        gpu_name=(gpu.name[0].lower() if gpu is not None and gpu.name and len(gpu.name) == 1 else None),
        preemptible=partition.preemptible,
    )


def sbatch_arguments(request: AllocationRequest, output: str) -> list[str]:
    """`sbatch`'s options for the allocation. `--no-requeue`: a preempted allocation ends (Ferry recovers
    its runs on a new one, docs/backends.md#elastic-fleets) rather than coming back later with no agent."""
    args = [
        "--parsable",
        f"--job-name={request.job_name}",
        f"--nodes={request.nodes}",
        "--ntasks-per-node=1",
        f"--cpus-per-task={request.cpus}",
        f"--partition={request.partition}",
        f"--output={output}",
        "--no-requeue",
    ]
    if request.memory_mb is not None:
        args.append(f"--mem={request.memory_mb}M")
    if request.gpus:
        kind = f"{request.gpu_name}:" if request.gpu_name else ""
        args.append(f"--gres=gpu:{kind}{request.gpus}")
    if request.account:
        args.append(f"--account={request.account}")
    if request.qos:
        args.append(f"--qos={request.qos}")
    if request.time_limit_minutes is not None:
        args.append(f"--time={request.time_limit_minutes}")
    return args


def batch_script(node_command: list[str]) -> str:
    """The batch script: one task per node, each running the node's agent until the allocation ends."""
    return "#!/bin/sh\nexec srun --kill-on-bad-exit=0 --ntasks-per-node=1 " + shlex.join(node_command) + "\n"


class JobState(StrEnum):
    """What Ferry makes of a Slurm job's state (squeue's %T, scontrol's JobState)."""

    WAITING = "waiting"  # PENDING, CONFIGURING (nodes booting), REQUEUED, RESV_DEL_HOLD
    RUNNING = "running"
    ENDING = "ending"  # COMPLETING: its processes are being stopped
    ENDED = "ended"  # any final state, with its Ending


class Ending(StrEnum):
    """Why an allocation ended, as Ferry tells its jobs (docs/backends.md#elastic-fleets)."""

    PREEMPTED = "preempted"  # PREEMPTED, SUSPENDED: an interruption
    TIME_LIMIT = "time-limit"  # TIMEOUT, DEADLINE: an interruption
    NODE_FAILURE = "node-failure"  # NODE_FAIL, BOOT_FAIL: an interruption
    CANCELLED = "cancelled"  # CANCELLED: by Ferry when it released it, else by someone: a loss
    EXITED = "exited"  # COMPLETED, FAILED, OUT_OF_MEMORY...: the agents' step ended: a loss


_WAITING = {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"}
_RUNNING = {"RUNNING", "RESIZING", "SIGNALING", "STAGE_OUT"}
_ENDINGS = {
    "PREEMPTED": Ending.PREEMPTED,
    "SUSPENDED": Ending.PREEMPTED,
    "TIMEOUT": Ending.TIME_LIMIT,
    "DEADLINE": Ending.TIME_LIMIT,
    "NODE_FAIL": Ending.NODE_FAILURE,
    "BOOT_FAIL": Ending.NODE_FAILURE,
    "CANCELLED": Ending.CANCELLED,
}
INTERRUPTIONS = frozenset({Ending.PREEMPTED, Ending.TIME_LIMIT, Ending.NODE_FAILURE})


def job_state(state: str) -> tuple[JobState, Ending | None]:
    """(what it means, why it ended) for one of Slurm's job states (`CANCELLED by 0` counts as CANCELLED)."""
    word = state.split()[0].upper() if state.strip() else ""
    if word in _WAITING:
        return JobState.WAITING, None
    if word in _RUNNING:
        return JobState.RUNNING, None
    if word == "COMPLETING":
        return JobState.ENDING, None
    return JobState.ENDED, _ENDINGS.get(word, Ending.EXITED)


class SlurmJob(NamedTuple):
    """One line of `squeue -o SQUEUE_FORMAT`."""

    job_id: str
    name: str
    state: str
    reason: str
    nodes: str
    partition: str

    @property
    def meaning(self) -> tuple[JobState, Ending | None]:
        return job_state(self.state)


def parse_squeue(output: str) -> list[SlurmJob]:
    jobs = []
    for line in output.splitlines():
        fields = line.strip().split("|")
        if len(fields) != 6 or not fields[0]:
            continue
        jobs.append(SlurmJob(*(field.strip() for field in fields)))
    return jobs


def parse_scontrol(output: str) -> dict[str, str]:
    """`scontrol show job -o ID` (or `show node -o`): its `Key=Value` fields; values have no spaces but
    for the last ones (Reason, Comment), which keep the rest of their words."""
    fields: dict[str, str] = {}
    last: str | None = None
    for word in output.split():
        key, sep, value = word.partition("=")
        if sep and key and key[0].isalpha() and (key[0].isupper() or key in ("mcs",)):
            fields[key] = value
            last = key
        elif last is not None:
            fields[last] += " " + word
    return fields


# Slurm's pending reasons (squeue %r) said in words; the reason's own name is kept beside them.
_REASONS = {
    "Resources": "the nodes it needs are busy",
    "Priority": "jobs of higher priority are ahead of it",
    "Dependency": "it waits for another job",
    "ReqNodeNotAvail": "the nodes it needs are not available",
    "PartitionNodeLimit": "it asks more nodes than its partition has",
    "PartitionTimeLimit": "it asks more time than its partition allows",
    "QOSMaxJobsPerUserLimit": "the QOS's limit of jobs per user is reached",
    "AssocMaxJobsLimit": "the account's limit of jobs is reached",
    "BeginTime": "it may not start yet",
    "None": "Slurm has not looked at it yet",
}
# Reasons a pending allocation will never leave: it is cancelled and the request refused.
NEVER_REASONS = frozenset(
    {"PartitionNodeLimit", "PartitionTimeLimit", "PartitionConfig", "BadConstraints", "InvalidAccount",
     "InvalidQOS", "QOSUsageThreshold"}
)  # fmt: skip


def pending_words(reason: str) -> str:
    """`Resources: the nodes it needs are busy`, or Slurm's reason as it is."""
    words = _REASONS.get(reason)
    return f"{reason}: {words}" if words else reason


# An allocation Slurm would start within this many seconds starts "now" (`sbatch --test-only`).
STARTS_NOW = 60.0
# `sh -c TEST_ONLY sbatch-options...`: the login node's clock, when Slurm would start it, and what it said.
TEST_ONLY = (
    'now=$(date +%s); out=$(sbatch --test-only "$@" --wrap true 2>&1); '
    "at=$(printf '%s' \"$out\" | sed -n 's/.* to start at \\([^ ]*\\) .*/\\1/p' | head -n 1); "
    'echo "$now"; if [ -n "$at" ]; then date -d "$at" +%s; else echo -; fi; printf "%s\\n" "$out"'
)


def parse_test_only(output: str) -> tuple[float | None, str]:
    """(seconds until Slurm would start it, or None when it refuses it; Slurm's words)."""
    lines = output.splitlines()
    words = " ".join(" ".join(lines[2:]).split())
    if len(lines) < 2 or not lines[0].strip().isdigit() or not lines[1].strip().isdigit():
        return None, words
    return max(0.0, float(lines[1]) - float(lines[0])), words


def pick_partition(
    estimates: list[tuple[SlurmPartition, float | None, str]],
) -> tuple[SlurmPartition | None, str]:
    """The first partition, in the policy's order, where Slurm would start the allocation now; else the
    first that would ever start it (it waits there); None and Slurm's words when every one refuses it."""
    possible = [(partition, wait) for partition, wait, _ in estimates if wait is not None]
    for partition, wait in possible:
        if wait is not None and wait <= STARTS_NOW:
            return partition, ""
    if possible:
        return possible[0][0], ""
    return None, "; ".join(f"{p.name}: {words}" for p, _, words in estimates)
