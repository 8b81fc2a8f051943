"""Run types as configurators: what each type decides for its jobs."""

from __future__ import annotations

from typing import Any

import pytest

from core.configuration import (
    NotARun,
    RunConfiguration,
    parse_configuration,
)
from core.run_types import (
    UNLIMITED_GRACE,
    DevEnvironmentConfigurator,
    ServiceConfigurator,
    TaskConfigurator,
    configurator_for,
)
from core.wire.agent_api import JobSpec, Resources


def conf(**fields: Any) -> RunConfiguration:
    configuration = parse_configuration(fields)
    assert not isinstance(configuration, NotARun)
    return configuration


def test_each_type_gets_its_configurator() -> None:
    assert type(configurator_for(conf(type="task", commands=["x"]))) is TaskConfigurator
    assert type(configurator_for(conf(type="service", port=80, commands=["x"]))) is ServiceConfigurator
    assert type(configurator_for(conf(type="dev-environment", ide="vscode"))) is DevEnvironmentConfigurator


def test_a_fleet_configuration_has_no_configurator() -> None:
    fleet = parse_configuration({"type": "fleet", "nodes": 1})
    with pytest.raises(TypeError, match="not a run configuration: type 'fleet'"):
        configurator_for(fleet)  # type: ignore[arg-type]


def test_a_task_has_one_replica_of_one_job_per_node() -> None:
    task = configurator_for(conf(type="task", commands=["echo a", "echo b"], nodes=3))
    assert (task.replica_count(), task.nodes_per_replica()) == (1, 3)
    assert task.commands() == ["echo a", "echo b"]
    assert configurator_for(conf(type="task", commands=["x"])).nodes_per_replica() == 1


@pytest.mark.parametrize(("replicas", "expected"), [(1, 1), (4, 4), ("2..5", 2), ("0..3", 1)])
def test_a_service_starts_its_lower_bound_of_replicas_but_at_least_one(replicas: Any, expected: int) -> None:
    scaling = {"scaling": {"target": 10}} if isinstance(replicas, str) else {}
    service = configurator_for(
        conf(type="service", port=8000, commands=["serve"], replicas=replicas, **scaling)
    )
    assert service.replica_count() == expected
    assert service.nodes_per_replica() == 1
    assert service.commands() == ["serve"]


def test_a_dev_environment_runs_init_then_stays_up() -> None:
    dev = configurator_for(conf(type="dev-environment", ide="vscode", init=["pip install x", "make"]))
    assert (dev.replica_count(), dev.nodes_per_replica()) == (1, 1)
    assert dev.commands() == ["pip install x", "make", "sleep infinity"]
    bare = configurator_for(conf(type="dev-environment", ide="cursor"))
    assert bare.commands() == ["sleep infinity"]


def test_commands_are_a_copy_the_caller_may_change() -> None:
    configuration = conf(type="task", commands=["x"])
    configurator_for(configuration).commands().append("y")
    assert configurator_for(configuration).commands() == ["x"]


def test_job_spec_carries_the_configuration_fields() -> None:
    configuration = conf(
        type="task",
        commands=["train"],
        env=["A=1", "FROM_SHELL"],
        working_dir="src",
        shell="sh",
        max_duration="2h",
        stop_duration="30s",
    )
    job = configurator_for(configuration).job_spec(run_name="r", replica_num=2, job_num=1)
    assert job == JobSpec(
        run_name="r",
        replica_num=2,
        job_num=1,
        commands=["train"],
        env={"A": "1"},  # an unresolved bare name is left out
        working_dir="src",
        shell="sh",
        max_duration=7200,
        stop_duration=30,
    )


def test_job_spec_defaults_bash_and_unlimited_grace_for_stop_duration_off() -> None:
    job = configurator_for(conf(type="service", port=80, commands=["s"], stop_duration="off")).job_spec(
        run_name="svc", replica_num=0, job_num=0
    )
    assert (job.shell, job.stop_duration, job.max_duration, job.working_dir) == (
        "bash",
        UNLIMITED_GRACE,
        None,
        None,
    )
    default = configurator_for(conf(type="task", commands=["x"])).job_spec(
        run_name="t", replica_num=0, job_num=0
    )
    assert default.stop_duration == 300


def test_python_runs_in_the_official_image_of_that_version_with_sh() -> None:
    # docs/containers.md#python: `python` without `image` is a container of that Python's image.
    snake = configurator_for(conf(type="task", python="3.12", commands=["python3 x.py"], privileged=True))
    container = snake.container_spec()
    assert container is not None
    assert (container.image, container.python, container.privileged) == (
        "docker.io/library/python:3.12-slim",
        "3.12",
        True,
    )
    assert snake.job_spec(run_name="s", replica_num=0, job_num=0).shell == "sh"
    boxed = configurator_for(conf(type="task", image="alpine:3", commands=["x"])).container_spec()
    assert boxed is not None and (boxed.image, boxed.python) == ("alpine:3", None)
    assert configurator_for(conf(type="task", commands=["x"])).container_spec() is None


def test_resources_are_the_lower_bounds() -> None:
    configuration = conf(
        type="dev-environment", ide="vscode", resources={"cpu": "2..8", "memory": "8GB..", "gpu": "A100:2"}
    )
    assert configurator_for(configuration).resources() == Resources(cpu=2, memory=8, gpu=2)


DEFAULT = Resources(cpu=2, memory=8)  # the default `resources`: cpu 2.., memory 8GB..
GPU_1 = Resources(cpu=2, memory=8, gpu=1)


@pytest.mark.parametrize(
    ("configuration", "replicas", "nodes", "commands", "resources"),
    [
        (conf(type="task", commands=["a", "b"], nodes=2), 1, 2, ["a", "b"], DEFAULT),
        (conf(type="service", port=80, commands=["s"], replicas=3, resources={"gpu": 1}), 3, 1, ["s"], GPU_1),
        (conf(type="dev-environment", ide="vscode", init=["i"]), 1, 1, ["i", "sleep infinity"], DEFAULT),
    ],
    ids=["task", "service", "dev-environment"],
)
def test_each_run_type_answers_for_its_jobs(
    configuration: RunConfiguration,
    replicas: int,
    nodes: int,
    commands: list[str],
    resources: Resources,
) -> None:
    run_type = configurator_for(configuration)
    assert run_type.replica_count() == replicas
    assert run_type.nodes_per_replica() == nodes
    assert run_type.commands() == commands
    assert run_type.resources() == resources
    job = run_type.job_spec(run_name="r", replica_num=1, job_num=0)
    assert (job.run_name, job.replica_num, job.job_num, job.commands) == ("r", 1, 0, commands)
