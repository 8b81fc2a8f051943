"""What the Slurm backend's watch makes of `squeue` (docs/backends.md#elastic-fleets), pure: each group's
state as the watch compares it with what the fleet knows (`state_key`, `known_key`), and the news to
report when they differ (`watch_news`), or when the login node does not answer (`unreachable_news`).
"""

from __future__ import annotations

from core.backends.slurm import INTERRUPTIONS, NEVER_REASONS, Ending, JobState, SlurmJob, pending_words
from core.fleets.growth import GroupNews, WatchGroups
from core.fleets.provisioning import GroupPhase, InstanceGroup


def known_key(group: InstanceGroup) -> str:
    """What the fleet knows of a group, in `state_key`'s terms."""
    if group.unreachable:
        return "unreachable"
    if group.phase == GroupPhase.WAITING:
        return f"waiting:{(group.reason or '').split(':')[0]}"
    return "running"


def state_key(job: SlurmJob | None) -> str:
    """What the fleet knows of a group, as the watch compares it: `waiting:Resources`, `running`..."""
    if job is None:
        return "gone"
    meaning, ending = job.meaning
    if meaning == JobState.WAITING:
        return f"waiting:{job.reason}"
    if meaning == JobState.ENDED:
        return f"ended:{ending}"
    return "running"


def watch_news(call: WatchGroups, jobs: list[SlurmJob]) -> list[GroupNews]:
    """The news of each group whose Slurm job says otherwise than the fleet knows."""
    by_name = {name: group for group, (name, _) in call.groups.items()}
    found = {job.name: job for job in jobs}
    news = []
    for name, group in sorted(by_name.items()):
        known = call.groups[group][1]
        job = found.get(name)
        key = state_key(job)
        if known == "unreachable":  # the login node answers again: back, then whatever else Slurm says
            news.append(GroupNews(group=group, state="reachable"))
            known = "running"
        if key == known or (job is None and known.startswith("ended")):
            continue
        if job is None:
            news.append(GroupNews(group=group, state="ended", reason="Slurm no longer has its allocation"))
            continue
        meaning, ending = job.meaning
        if meaning == JobState.WAITING:
            state = "refused" if job.reason in NEVER_REASONS else "waiting"
            news.append(
                GroupNews(group=group, state=state, backend_id=job.job_id, reason=pending_words(job.reason))
            )
        elif meaning == JobState.ENDED:
            news.append(ended_news(call, group, job, ending))
        elif known != "running":
            news.append(GroupNews(group=group, state="running", backend_id=job.job_id))
    return news


def ended_news(call: WatchGroups, group: str, job: SlurmJob, ending: Ending | None) -> GroupNews:
    words = {
        Ending.PREEMPTED: "was preempted",
        Ending.TIME_LIMIT: "reached its time limit",
        Ending.NODE_FAILURE: "lost a node",
        Ending.CANCELLED: "was cancelled",
        Ending.EXITED: f"ended ({job.state})",
    }
    said = words.get(ending or Ending.EXITED, job.state)
    return GroupNews(
        group=group,
        state="ended",
        backend_id=job.job_id,
        reason=f"its Slurm allocation {job.job_id} on backend {call.backend} {said}",
        interrupted=ending in INTERRUPTIONS,
    )


def unreachable_news(call: WatchGroups, why: str) -> list[GroupNews]:
    """The groups the fleet holds as running, reported unreachable (once: the fleet then knows)."""
    words = f"the login node of backend {call.backend} does not answer: {why}"
    return [
        GroupNews(group=group, state="unreachable", reason=words)
        for group, (_, known) in sorted(call.groups.items())
        if known == "running"
    ]
