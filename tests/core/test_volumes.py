"""Volumes' pure rules (docs/volumes.md): names per node, what each job mounts and where it is placed, the
host paths the worker gives the agent, and the configuration's forms."""

from __future__ import annotations

from typing import Any

import pytest

from core.configuration import (
    NotARun,
    TaskConfiguration,
    parse_configuration,
)
from core.configuration.interpolation import check_template, interpolate, is_per_node
from core.configuration.loading import ConfigurationError, load_configuration_text
from core.fleets.placement import InstanceSlot, node_cost
from core.fleets.scheduling import SchedulerState
from core.jobs.volumes import attach_request, detach_request
from core.run_types.volumes import candidate_names, job_volumes, volumes_instance
from core.runs.deploying import not_in_place
from core.runs.lifecycle import submit_run
from core.runs.submissions import job_input
from core.runs.workflow_messages import RunInput
from core.wire.agent_api import Resources
from core.wire.job_messages import NodeRequest, PlacementRequest
from core.wire.volumes import AttachVolumes, DetachVolumes, HostDirs, JobVolume, host_path, named_volumes

SMALL = {"cpu": "0..", "memory": "0GB..", "disk": "0GB.."}
PER_NODE = "data-${{ dstack.node_rank }}"


def task(**fields: Any) -> TaskConfiguration:
    conf = parse_configuration({"type": "task", "commands": ["train"], "resources": SMALL, **fields})
    assert isinstance(conf, TaskConfiguration)
    return conf


def run_input(configuration: TaskConfiguration, volume_instances: dict[str, str]) -> RunInput:
    return RunInput(
        run_id="run-1",
        project="main",
        run_name="train",
        user="ana",
        configuration=configuration,
        submitted_at=1000.0,
        volume_instances=volume_instances,
    )


# --- names per node --------------------------------------------------------------------------------------


def test_node_rank_variables_are_dstacks_and_nothing_else() -> None:
    assert interpolate(PER_NODE, 3) == "data-3"
    assert interpolate("d${{dstack.job_num}}-${{  dstack.node_rank }}", 1) == "d1-1"
    assert interpolate("plain", 7) == "plain"
    assert is_per_node(PER_NODE) and not is_per_node("plain")
    with pytest.raises(
        ValueError, match=r"unknown variable \$\{\{ run.node_rank \}\} in 'd-\$\{\{ run.node_rank"
    ):
        check_template("d-${{ run.node_rank }}")


@pytest.mark.parametrize(
    ("volume", "reason"),
    [
        ("'d-${{ run.name }}:/d'", "volumes.0.name: unknown variable ${{ run.name }}"),
        ("'D-${{ dstack.node_rank }}:/d'", "volumes.0.name: invalid name 'D-${{ dstack.node_rank }}'"),
        ("'~bob/x:/d'", "volumes.0.instance_path: only `~` or `~/...` (the agent's user's home)"),
    ],
)
def test_bad_volume_names_and_paths_are_said_at_validation(volume: str, reason: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        load_configuration_text(f"type: task\ncommands: [x]\nvolumes:\n  - {volume}\n", "bad.yml")
    [issue] = caught.value.issues
    assert f"{issue.field_path}: {issue.message}".startswith(reason)


# --- what each job mounts --------------------------------------------------------------------------------


def test_each_node_mounts_its_own_named_volume_and_the_same_instance_volumes() -> None:
    conf = task(
        nodes=2,
        volumes=[f"{PER_NODE}:/data", {"instance_path": "~/cache", "path": "/cache", "optional": True}],
    )
    assert candidate_names(conf, 2) == ["data-0", "data-1"]
    assert job_volumes(conf, "main", 1, {}) == [
        JobVolume(path="/data", name="data-1", project="main"),
        JobVolume(path="/cache", instance_path="~/cache", optional=True),
    ]


def test_of_a_list_of_names_the_job_takes_the_first_that_exists() -> None:
    conf = task(volumes=[{"name": ["eu", "us"], "path": "/data"}])
    assert candidate_names(conf, 1) == ["eu", "us"]
    assert job_volumes(conf, "main", 0, {"us": "lab-1"})[0].name == "us"
    assert job_volumes(conf, "main", 0, {})[0].name == "eu"  # none exists: the first, which fails by name


def test_a_job_goes_to_the_instance_of_its_named_volumes() -> None:
    volumes = [JobVolume(path="/c", instance_path="/c"), JobVolume(path="/d", name="d", project="main")]
    assert volumes_instance(volumes, {"d": "lab-2"}) == "lab-2"
    assert volumes_instance(volumes, {}) is None  # a volume that does not exist places nothing
    assert volumes_instance(volumes[:1], {"d": "lab-2"}) is None


def test_job_input_carries_each_nodes_volumes_and_node_0_the_replicas_instances() -> None:
    inp = run_input(task(nodes=2, volumes=[f"{PER_NODE}:/data"]), {"data-0": "lab-0", "data-1": "lab-1"})
    state = submit_run(inp, 1000.0).machine.state
    first, second = (job_input(inp, state, "wf", 0, job) for job in (0, 1))
    assert first.volumes == [JobVolume(path="/data", name="data-0", project="main")]
    assert second.volumes == [JobVolume(path="/data", name="data-1", project="main")]
    assert first.enqueue is not None and second.enqueue is None
    assert [node.instance for node in first.enqueue.request.nodes] == ["lab-0", "lab-1"]
    assert attach_request(second, "run-1-r0-j1-s0", "lab-1") == AttachVolumes(
        job_submission_id="run-1-r0-j1-s0", project="main", instance_name="lab-1", names=["data-1"]
    )
    assert detach_request(second, "run-1-r0-j1-s0") == DetachVolumes(job_submission_id="run-1-r0-j1-s0")


def test_a_job_without_named_volumes_attaches_and_detaches_nothing() -> None:
    inp = run_input(task(volumes=["/scratch:/scratch"]), {})
    job = job_input(inp, submit_run(inp, 1000.0).machine.state, "wf", 0, 0)
    assert job.volumes == [JobVolume(path="/scratch", instance_path="/scratch")]
    assert job.enqueue is not None and job.enqueue.request.nodes[0].instance is None
    assert attach_request(job, "j", "local") is None and detach_request(job, "j") is None


# --- host paths ------------------------------------------------------------------------------------------


def test_host_paths_on_an_instance() -> None:
    dirs = HostDirs(home="/home/ana", data_dir="/home/ana/.ferry/agent/data")
    named = JobVolume(path="/data", name="ckpt", project="main")
    assert host_path(named, dirs) == "/home/ana/.ferry/agent/data/volumes/main/ckpt"
    assert host_path(JobVolume(path="/c", instance_path="~"), dirs) == "/home/ana"
    assert host_path(JobVolume(path="/c", instance_path="~/cache/"), dirs) == "/home/ana/cache"
    assert host_path(JobVolume(path="/c", instance_path="/mnt/x"), dirs) == "/mnt/x"
    assert named_volumes([named, JobVolume(path="/e", name="ckpt", project="main")]) == ["ckpt"]


# --- placement -------------------------------------------------------------------------------------------


def slot(name: str) -> InstanceSlot:
    return InstanceSlot(name=name, address="10.0.0.1", total=Resources(cpu=8, memory=32), fleet="lab")


def test_a_node_with_volumes_fits_only_their_instance() -> None:
    node = NodeRequest(job_id="j", resources=Resources(cpu=1), instance="lab-1")
    assert node_cost(slot("lab-0"), node) == ["its volumes are on instance lab-1"]
    assert node_cost(slot("lab-1"), node) == (1, Resources(cpu=8, memory=32))


def test_the_scheduler_places_a_node_on_its_volumes_instance_or_refuses_it() -> None:
    state = SchedulerState()
    for name in ("lab-0", "lab-1", "lab-2"):
        state = state.add_instance(slot(name))
    wanted = PlacementRequest(request_id="r", nodes=[NodeRequest(job_id="j", instance="lab-2")])
    state, [grant] = state.enqueue(wanted).schedule()
    assert [p.instance for p in grant.placements] == ["lab-2"]
    nowhere = PlacementRequest(request_id="r2", nodes=[NodeRequest(job_id="k", instance="lab-9")])
    why = state.never_fits(nowhere)
    assert why is not None and "its volumes are on instance lab-9" in why


def test_volumes_cannot_change_in_place() -> None:
    """They decided the run's fleet and instances at submission: a service or a scheduled run re-applied
    with other volumes is restarted."""
    service = {"type": "service", "port": 80, "commands": ["serve"], "resources": SMALL}
    old, new = (parse_configuration({**service, "volumes": [v]}) for v in ("aa:/a", "bb:/a"))
    assert not isinstance(old, NotARun)
    assert not isinstance(new, NotARun)
    assert not_in_place(old, new) == ["volumes"]
    scheduled = {"schedule": {"cron": "0 1 * * *"}}
    assert not_in_place(task(**scheduled, volumes=["aa:/a"]), task(**scheduled, volumes=["bb:/a"])) == [
        "volumes"
    ]
