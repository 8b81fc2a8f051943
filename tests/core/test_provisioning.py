"""An elastic fleet's pure decisions (core/fleets/provisioning.py, core/fleets/growth.py) and the Slurm
backend's (core/backends/slurm.py), without Temporal or Slurm: docs/backends.md."""

from __future__ import annotations

from core.backends.slurm import (
    AllocationRequest,
    Ending,
    JobState,
    fleet_backend_column,
    job_state,
    parse_squeue,
    parse_test_only,
    pending_words,
    pick_partition,
    sbatch_arguments,
    slurm_backend_name,
)
from core.configuration.backend import SlurmPartition
from core.fleets.book import FleetBook, apply, deployed, schedule
from core.fleets.growth import GroupNews, apply_news, plan_step
from core.fleets.messages import NoticeKind, ReleaseJob
from core.fleets.placement import InstanceSlot
from core.fleets.provisioning import Create, ElasticSpec, GroupPhase, Provisioning, Release
from core.status import JobTerminationReason
from core.wire.agent_api import Resources
from core.wire.job_messages import Enqueue, NodeRequest, PlacementRequest

SHAPE = Resources(cpu=2, memory=4, gpu=0)


def book(min_: int = 0, max_: int = 3, idle: float = 60) -> FleetBook:
    spec = ElasticSpec(min=min_, max=max_, shape=SHAPE, idle_duration=idle)
    made = FleetBook(name="hpc", local=False, provisioning=Provisioning(spec=spec))
    return deployed(made, [], {})[0]


def enqueue(current: FleetBook, request_id: str, nodes: int = 1, cpu: float = 1) -> FleetBook:
    request = PlacementRequest(
        request_id=request_id,
        nodes=[NodeRequest(job_id=f"{request_id}/{k}", resources=Resources(cpu=cpu)) for k in range(nodes)],
    )
    notify = {n.job_id: f"wf/{n.job_id}" for n in request.nodes}
    current, notices = apply(current, Enqueue(request=request, notify=notify))
    assert notices == []
    return current


def ready(current: FleetBook, group: str, now: float) -> FleetBook:
    provisioning = current.provisioning
    assert provisioning is not None
    names = provisioning.groups[group].instances
    slots = [
        InstanceSlot(name=n, address=f"10.0.0.{k}", total=SHAPE, fleet="hpc") for k, n in enumerate(names)
    ]
    current, _ = apply_news(current, GroupNews(group=group, state="running", backend_id="7"), now)
    current, _ = apply_news(current, GroupNews(group=group, state="ready", backend_id="7", slots=slots), now)
    return current


def test_a_waiting_replica_gets_one_group_of_its_nodes_and_max_holds() -> None:
    current = enqueue(enqueue(book(max_=3), "a", nodes=2), "b", nodes=2)
    current, effects = plan_step(current, 0.0)
    assert [(type(e), e.group.nodes, e.group.for_request) for e in effects] == [(Create, 2, "a")]
    current, again = plan_step(current, 1.0)
    assert again == []  # `a` has its group; `b` would pass MAX (2 + 2 > 3) and waits its turn


def test_a_replica_larger_than_the_instances_it_could_create_is_refused_at_once() -> None:
    current = book()
    request = PlacementRequest(
        request_id="big", nodes=[NodeRequest(job_id="big/0", resources=Resources(cpu=8))]
    )
    why = current.never_fits(request)
    assert why is not None and "the instances fleet hpc creates have cpu=2 mem=4GB gpu=0" in why
    assert (
        current.never_fits(request.model_copy(update={"nodes": [NodeRequest(job_id="x", resources=SHAPE)]}))
        is None
    )


def test_min_is_kept_and_an_idle_group_is_released_after_idle_duration() -> None:
    current, effects = plan_step(book(min_=1, idle=60), 0.0)
    assert [type(e) for e in effects] == [Create]
    current = ready(current, "g1", 1.0)
    assert plan_step(current, 1000.0)[1] == []  # MIN: the one instance stays however long it idles
    current, _ = schedule(enqueue(enqueue(current, "a", cpu=2), "b", cpu=2))  # `a` takes g1, `b` waits
    current, effects = plan_step(current, 1001.0)
    assert [(type(e), e.group.for_request) for e in effects] == [(Create, "b")]
    current, _ = schedule(ready(current, "g2", 1002.0))
    current, _ = apply(current, ReleaseJob(job_id="b/0"))  # `b` ended: g2 idle from now
    current, effects = plan_step(current, 1003.0)
    assert effects == []
    current, effects = plan_step(current, 1062.0)
    assert effects == []  # idle since 1003.0: not yet
    current, effects = plan_step(current, 1064.0)
    assert [(type(e), e.group.name) for e in effects] == [(Release, "g2")]
    assert "hpc-g2-0" not in current.scheduler.instances  # it takes no more jobs


def test_target_instances_at_the_start_then_min_is_kept() -> None:
    """dstack's `nodes: {min: 1, target: 3, max: 5}`: three instances at creation; the two above MIN go
    once idle for `idle_duration`, and none is made again (docs/backends.md#elastic-fleets)."""
    current = book(min_=1, max_=5, idle=60)
    assert current.provisioning is not None
    started = current.provisioning.model_copy(update={"initial": 3})
    current, effects = plan_step(current.copy_with(provisioning=started), 0.0)
    assert [(type(e), e.group.name, e.group.for_request) for e in effects] == [
        (Create, "g1", None),
        (Create, "g2", None),
        (Create, "g3", None),
    ]
    assert current.provisioning is not None and current.provisioning.initial == 0
    for group in ("g1", "g2", "g3"):
        current = ready(current, group, 1.0)
    current, effects = plan_step(current, 30.0)  # idle from now
    assert effects == []
    assert plan_step(current, 89.0)[1] == []  # not idle long enough yet
    current, effects = plan_step(current, 91.0)
    assert sorted((type(e).__name__, e.group.name) for e in effects) == [("Release", "g1"), ("Release", "g2")]
    assert plan_step(current, 2000.0)[1] == []  # MIN: g3 stays, and nothing is made again


def test_a_preempted_allocation_ends_its_jobs_as_an_interruption_and_is_cleaned_up() -> None:
    current = enqueue(book(), "a")
    current, _ = plan_step(current, 0.0)
    current = ready(current, "g1", 1.0)
    current, notices = schedule(current)
    assert [n.kind for n in notices] == [NoticeKind.PLACED]
    why = "its Slurm allocation 7 on backend hpc was preempted"
    current, notices = apply_news(
        current, GroupNews(group="g1", state="ended", reason=why, interrupted=True), 5.0
    )
    assert [(n.kind, n.reason, n.message) for n in notices] == [
        (NoticeKind.TERMINATE, JobTerminationReason.INTERRUPTED_BY_NO_CAPACITY, f"instance hpc-g1-0: {why}")
    ]
    assert current.provisioning is not None
    assert current.provisioning.groups["g1"].phase == GroupPhase.RELEASING  # its directory is removed
    current, _ = apply_news(current, GroupNews(group="g1", state="released"), 6.0)
    assert current.provisioning is not None and current.provisioning.groups == {}


def test_a_refused_allocation_fails_its_replica_with_slurms_reason() -> None:
    current = enqueue(book(), "a")
    current, _ = plan_step(current, 0.0)
    why = "backend hpc cannot create 1 instance(s): sbatch: error: invalid partition specified: gpu"
    current, notices = apply_news(current, GroupNews(group="g1", state="refused", reason=why), 1.0)
    assert [(n.kind, n.job_id, n.message) for n in notices] == [(NoticeKind.REFUSED, "a/0", why)]
    assert current.scheduler.queue == [] and current.provisioning is not None
    assert current.provisioning.groups == {}  # Slurm never had it: nothing to cancel


def test_a_fleet_record_names_its_slurm_backend_and_ssh_and_local_fleets_none() -> None:
    assert slurm_backend_name(fleet_backend_column("hpc")) == "hpc"
    assert slurm_backend_name("ssh") is None
    assert slurm_backend_name("local") is None


def test_slurm_states_and_reasons() -> None:
    assert job_state("PENDING") == (JobState.WAITING, None)
    assert job_state("RUNNING") == (JobState.RUNNING, None)
    assert job_state("PREEMPTED") == (JobState.ENDED, Ending.PREEMPTED)
    assert job_state("TIMEOUT") == (JobState.ENDED, Ending.TIME_LIMIT)
    assert job_state("NODE_FAIL") == (JobState.ENDED, Ending.NODE_FAILURE)
    assert job_state("CANCELLED by 0") == (JobState.ENDED, Ending.CANCELLED)
    assert job_state("COMPLETED") == (JobState.ENDED, Ending.EXITED)
    [job] = parse_squeue("42|ferry-abc-g1|PENDING|Resources|(null)|low\nnoise\n")
    assert (job.job_id, job.name, job.reason, job.partition) == ("42", "ferry-abc-g1", "Resources", "low")
    assert pending_words("Resources") == "Resources: the nodes it needs are busy"
    assert pending_words("SomethingNew") == "SomethingNew"


def test_sbatch_asks_the_fleets_shape_without_requeue() -> None:
    request = AllocationRequest(
        job_name="ferry-x-g1", nodes=2, partition="low", cpus=2, memory_mb=4096, gpus=1, gpu_name="a100",
        time_limit_minutes=60, account="lab",
    )  # fmt: skip
    assert sbatch_arguments(request, "/d/slurm-%j.out") == [
        "--parsable", "--job-name=ferry-x-g1", "--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=2",
        "--partition=low", "--output=/d/slurm-%j.out", "--no-requeue", "--mem=4096M", "--gres=gpu:a100:1",
        "--account=lab", "--time=60",
    ]  # fmt: skip


def test_auto_takes_the_first_partition_slurm_would_start_now_else_waits_in_the_first() -> None:
    low, high = SlurmPartition(name="low", preemptible=True), SlurmPartition(name="high")
    said = "sbatch: Job 3 to start at 2026-11-29T13:01:59 using 1 processors on nodes n1 in partition low"
    assert parse_test_only(f"1000\n1002\n{said}\n") == (2.0, said)
    assert parse_test_only(
        "1000\n-\nallocation failure: Requested node configuration is not available\n"
    ) == (
        None,
        "allocation failure: Requested node configuration is not available",
    )
    assert pick_partition([(low, 2.0, ""), (high, 0.0, "")]) == (low, "")
    assert pick_partition([(low, 3600.0 * 24 * 365, ""), (high, 1.0, "")]) == (high, "")
    assert pick_partition([(low, 9000.0, ""), (high, 8000.0, "")]) == (low, "")  # none now: the first
    assert pick_partition([(low, None, "too big"), (high, None, "too big")]) == (
        None,
        "low: too big; high: too big",
    )
