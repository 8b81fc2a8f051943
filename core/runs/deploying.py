"""A rolling deployment (docs/services.md#rolling-deployment): a service re-applied in place.

`ferry apply` of a changed configuration for an active service shows what changed (`changed_fields`);
fields that cannot change in place (`not_in_place`) make it offer a restart instead. The run logs
`deploy {deployment, changed}` and takes the new plan; new submissions run the new configuration (the
workflow's input). Then, step by step, `roll` replaces the replicas of older deployments one at a time:
one new replica is started (a surge above the count), and once it is ready in the proxies one old replica
is stopped (drained first, ending SCALED_DOWN, which does not count towards the run's status). So the
service never has fewer ready replicas than before, and once the roll is over every request is answered
by the new deployment.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from core.configuration import RunConfiguration, ServiceConfiguration
from core.runs.machine import RunPlan, StepBuilder, actor
from core.runs.scaling import (
    SCALED_DOWN,
    SCALES_IN,
    current_replicas,
    free_replica_numbers,
    serving_replicas,
)
from core.runs.state_machine import RunState
from core.wire.services import ReplicaState

# A run's identity and placement: changing them is another run (stop it, then submit the new one). Its
# volumes decide its fleet and instances at submission (docs/volumes.md).
NOT_IN_PLACE = ("type", "name", "fleets", "nodes", "volumes")


class Deploy(BaseModel):
    """A re-applied configuration the run takes in place: its plan, and the fields that changed."""

    model_config = ConfigDict(frozen=True)

    plan: RunPlan
    changed: list[str]
    by: str | None = None  # who re-applied it (docs/teams.md#who-did-it)


def changed_fields(old: RunConfiguration, new: RunConfiguration) -> list[str]:
    """The top-level fields whose values differ, in the new configuration's order."""
    if type(old) is not type(new):
        return ["type"]
    before, after = old.model_dump(mode="json"), new.model_dump(mode="json")
    return [name for name in type(new).model_fields if before.get(name) != after.get(name)]


def not_in_place(old: RunConfiguration, new: RunConfiguration) -> list[str]:
    """The changed fields that the run cannot take in place (it must be restarted): a service rolls to
    its new configuration; a scheduled run's next cycles run it
    (docs/schedules.md#changing-a-scheduled-run)."""
    changed = changed_fields(old, new)
    if is_rescheduling(old, new):
        fixed = [name for name in changed if name in NOT_IN_PLACE and name not in ("fleets", "nodes")]
        if new.schedule is None:
            fixed.append("schedule (removed: the run would no longer wait for it)")
        return fixed
    if not isinstance(old, ServiceConfiguration) or not isinstance(new, ServiceConfiguration):
        return changed  # only a service rolls; any other run is restarted
    fixed = [name for name in changed if name in NOT_IN_PLACE]
    if [g.name for g in old.groups] != [g.name for g in new.groups]:
        # Each replica belongs to a group: groups added, removed or renamed are another set of replicas.
        fixed.append("replicas (its groups)")
    return fixed


def is_rescheduling(old: RunConfiguration, new: RunConfiguration) -> bool:
    """A scheduled run re-applied: between its cycles nothing runs, so any field but its identity may
    change for the next cycles (placement included)."""
    return old.schedule is not None and type(old) is type(new) and not isinstance(old, ServiceConfiguration)


def begin(b: StepBuilder, deploy: Deploy) -> None:
    """The new deployment: logged, and its plan taken (its replica count, scaling and retry)."""
    b.log("deploy", deployment=b.state.deployment + 1, changed=deploy.changed, **actor(deploy.by))
    b.plan = deploy.plan.model_copy(update={"run_id": b.plan.run_id, "submitted_at": b.plan.submitted_at})
    for group in b.plan.replica_groups():
        name = None if group is None else group.name
        scaled, fixed = b.state.scaled_count(name), b.plan.starting_count(name)
        if b.plan.scaling_rule(name) is None and scaled is not None and scaled != fixed:
            # A fixed count replaces the autoscaler's: said as a scale, so that the count is in the log.
            b.log("scale", replicas=fixed, rps=0.0, group=name)


def applies(b: StepBuilder) -> bool:
    """A rolling deployment in progress (a scheduled run's next cycle simply starts anew instead)."""
    return b.state.deployment > 0 and b.state.status in SCALES_IN and not b.plan.schedule


def roll(b: StepBuilder) -> None:
    """For each replica group, one move of its roll, if one is due."""
    for group in b.plan.replica_groups():
        _roll_group(b, None if group is None else group.name)


def _roll_group(b: StepBuilder, group: str | None) -> None:
    """Start a new replica, or stop an old one a new one replaced."""
    state, told = b.state, b.told_keys()
    live = serving_replicas(state, told, group)
    old = [r for r in live if _deployment(state, r) < state.deployment]
    if not old:
        return
    fresh = [r for r in live if _deployment(state, r) == state.deployment]
    ready = [r for r in fresh if _ready(state, r)]
    wanted = current_replicas(b, group)
    if len(ready) + len(old) > wanted:
        # A new replica is ready in the proxies: the newest old one goes (drained by its job first).
        replaced = max(old)
        for job in state.jobs:
            if job.replica_num == replaced and (job.replica_num, job.job_num, job.submission_num) not in told:
                key = (job.replica_num, job.job_num, job.submission_num)
                b.tell_once(key, SCALED_DOWN, abort=False)
        return
    if len(fresh) == len(ready):  # no new replica on its way: start one (the surge)
        [replica] = free_replica_numbers(state, serving_replicas(state, told, every_group=True), 1)
        b.submit_replica(replica, group)


def _deployment(state: RunState, replica: int) -> int:
    return min(j.deployment for j in state.jobs if j.replica_num == replica)


def _ready(state: RunState, replica: int) -> bool:
    return all(j.serving == ReplicaState.READY for j in state.jobs if j.replica_num == replica)
