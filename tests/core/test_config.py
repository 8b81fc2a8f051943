"""Accepted configurations: every documented spelling of a field, its normalised form, and the defaults."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from core.configuration import (
    AnyConfiguration,
    DevEnvironmentConfiguration,
    FleetConfiguration,
    InstanceVolume,
    NetworkVolume,
    PortMapping,
    ReplicaRange,
    ServiceConfiguration,
    StartupOrder,
    StopCriteria,
    TaskConfiguration,
    known_field_names,
    parse_configuration,
)
from core.configuration.loading import load_configuration, load_configuration_text
from core.configuration.retry import RetryPolicy
from core.status import RetryEvent

# One configuration each; the pipelines' files (several documents) are tests/core/test_pipelines.py's.
PIPELINE_EXAMPLES = {"pipeline.yml"}
EXAMPLES = sorted(
    p for p in (Path(__file__).parents[2] / "examples").glob("*.yml") if p.name not in PIPELINE_EXAMPLES
)


def load(text: str) -> AnyConfiguration:
    return load_configuration_text(textwrap.dedent(text).lstrip("\n"), "ok.yml").configuration


def task(extra: str = "") -> TaskConfiguration:
    config = load("type: task\ncommands: [echo hi]\n" + textwrap.dedent(extra))
    assert isinstance(config, TaskConfiguration)
    return config


def service(extra: str = "") -> ServiceConfiguration:
    config = load("type: service\nport: 8000\ncommands: [serve]\n" + textwrap.dedent(extra))
    assert isinstance(config, ServiceConfiguration)
    return config


def fleet(text: str) -> FleetConfiguration:
    config = load("type: fleet\n" + textwrap.dedent(text))
    assert isinstance(config, FleetConfiguration)
    return config


# --- defaults ----------------------------------------------------------------------------------------


def test_task_defaults() -> None:
    config = task()
    assert config.name is None
    assert config.nodes == 1
    assert config.retry is None
    assert config.max_duration is None
    assert config.stop_duration == 300
    assert config.idle_duration is None
    assert config.priority == 0
    assert config.env == {}
    assert config.ports == []
    assert config.volumes == []
    assert config.schedule is None
    assert config.stop_criteria == StopCriteria.ALL_DONE
    assert config.startup_order == StartupOrder.ANY
    assert config.resources.pretty() == config.resources.model_validate({}).pretty()


def test_service_defaults() -> None:
    config = service()
    assert config.replicas == ReplicaRange(min=1, max=1)
    assert config.scaling is None
    assert config.port == PortMapping(container_port=8000)
    assert config.auth is True
    assert config.strip_prefix is True
    assert config.stop_duration == 300


def test_scaling_defaults() -> None:
    scaling = service("replicas: 0..4\nscaling:\n  target: 2.5\n").scaling
    assert scaling is not None
    assert (scaling.metric, scaling.target) == ("rps", 2.5)
    assert (scaling.window, scaling.scale_up_delay, scaling.scale_down_delay) == (60, 300, 600)


def test_dev_environment_defaults() -> None:
    config = load("type: dev-environment\nide: cursor\n")
    assert isinstance(config, DevEnvironmentConfiguration)
    assert config.ide == "cursor"
    assert config.inactivity_duration is None
    assert config.max_duration is None
    assert config.init == []


# --- retry -------------------------------------------------------------------------------------------


def test_retry_true_means_every_event_for_an_hour() -> None:
    retry = task("retry: true\n").retry
    assert retry == RetryPolicy(
        on_events=[RetryEvent.NO_CAPACITY, RetryEvent.INTERRUPTION, RetryEvent.ERROR], duration=3600
    )


@pytest.mark.parametrize("value", ["false", "null"])
def test_retry_off(value: str) -> None:
    assert task(f"retry: {value}\n").retry is None


def test_retry_mapping() -> None:
    retry = task("retry:\n  on_events: [no-capacity, error, error]\n  duration: 2h\n").retry
    assert retry == RetryPolicy(on_events=[RetryEvent.NO_CAPACITY, RetryEvent.ERROR], duration=7200)


def test_retry_mapping_defaults() -> None:
    assert task("retry:\n  duration: 30m\n").retry == RetryPolicy(duration=1800)
    assert task("retry: {}\n").retry == RetryPolicy()


# --- env ---------------------------------------------------------------------------------------------


def test_env_list() -> None:
    config = task("env:\n  - A=1\n  - B=x=y\n  - EMPTY=\n  - FROM_SHELL\n")
    assert config.env == {"A": "1", "B": "x=y", "EMPTY": "", "FROM_SHELL": None}
    assert config.unresolved_env() == ["FROM_SHELL"]


def test_env_map() -> None:
    config = task("env:\n  A: one\n  PORT: 8000\n  RATIO: 0.5\n  DEBUG: true\n  FROM_SHELL:\n")
    assert config.env == {"A": "one", "PORT": "8000", "RATIO": "0.5", "DEBUG": "true", "FROM_SHELL": None}


def test_resolved_env() -> None:
    config = task("env:\n  - A=1\n  - TOKEN\n")
    assert config.resolved_env({"TOKEN": "s3cret", "OTHER": "x"}) == {"A": "1", "TOKEN": "s3cret"}
    with pytest.raises(ValueError, match="TOKEN"):
        config.resolved_env({})


# --- replicas, nodes, ports --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "low", "high"),
    [("3", 3, 3), ("'2'", 2, 2), ("1..3", 1, 3), ("0..2", 0, 2), ("{min: 1, max: 5}", 1, 5)],
)
def test_replicas_forms(value: str, low: int, high: int) -> None:
    scaling = "" if low == high else "scaling:\n  target: 10\n"
    config = service(f"replicas: {value}\n{scaling}")
    assert config.replicas == ReplicaRange(min=low, max=high)
    assert str(config.replicas) == (str(low) if low == high else f"{low}..{high}")
    assert config.summary().scale == f"replicas {config.replicas}"


def test_nodes() -> None:
    config = task("nodes: 4\nstop_criteria: master-done\nstartup_order: workers-first\n")
    assert config.nodes == 4
    assert config.stop_criteria == StopCriteria.MASTER_DONE
    assert config.startup_order == StartupOrder.WORKERS_FIRST


def test_ports_forms() -> None:
    config = task(
        "ports:\n  - 8080\n  - '8081'\n  - 8000:8082\n  - {container_port: 9000, local_port: 9001}\n"
    )
    assert config.ports == [
        PortMapping(container_port=8080),
        PortMapping(container_port=8081),
        PortMapping(container_port=8082, local_port=8000),
        PortMapping(container_port=9000, local_port=9001),
    ]
    assert [str(port) for port in config.ports] == ["8080", "8081", "8000:8082", "9001:9000"]


def test_port_mapping_is_not_a_base_60_number() -> None:
    # YAML 1.1 reads an unquoted 80:30 as 4830; the loader keeps it the mapping it means.
    assert task("ports: [80:30]\n").ports == [PortMapping(container_port=30, local_port=80)]


def test_service_port_mapping() -> None:
    config = load("type: service\nport: '80:8000'\nimage: nginx\n")
    assert isinstance(config, ServiceConfiguration)
    assert config.port == PortMapping(container_port=8000, local_port=80)


# --- volumes -----------------------------------------------------------------------------------------


def test_volume_forms() -> None:
    config = task(
        """
        volumes:
          - my-data:/data
          - /mnt/cache:/cache
          - ~/models:/models
          - name: other
            path: /other
          - name: [vol-a, vol-b]
            path: /per-node
          - instance_path: /scratch
            path: /scratch
            optional: true
        """
    )
    assert config.volumes == [
        NetworkVolume(name="my-data", path="/data"),
        InstanceVolume(instance_path="/mnt/cache", path="/cache"),
        InstanceVolume(instance_path="~/models", path="/models"),
        NetworkVolume(name="other", path="/other"),
        NetworkVolume(name=["vol-a", "vol-b"], path="/per-node"),
        InstanceVolume(instance_path="/scratch", path="/scratch", optional=True),
    ]


# --- schedule, durations -----------------------------------------------------------------------------


def test_schedule_forms() -> None:
    one = task("schedule:\n  cron: '*/15 * * * *'\n").schedule
    many = task("schedule:\n  cron: ['0 8 * * mon-fri', '@daily']\n").schedule
    assert one is not None and one.cron == ["*/15 * * * *"]
    assert many is not None and many.cron == ["0 8 * * mon-fri", "@daily"]


def test_duration_forms() -> None:
    config = task("max_duration: 2h\nstop_duration: off\nidle_duration: 90\n")
    assert (config.max_duration, config.stop_duration, config.idle_duration) == (7200, None, 90)
    assert task("max_duration: off\n").max_duration is None


# --- fleets ------------------------------------------------------------------------------------------


def test_ssh_hosts_string_and_mapping() -> None:
    config = fleet(
        """
        ssh_config:
          user: ubuntu
          port: 2200
          identity_file: ~/.ssh/id_ed25519
          proxy_jump:
            hostname: bastion.example
            user: jump
          hosts:
            - 10.0.0.1
            - hostname: gpu-2.example
              port: 22
              user: root
              identity_file: ~/.ssh/other
              internal_ip: 10.0.0.2
              blocks: auto
            - hostname: 10.0.0.3
              blocks: 4
        placement: cluster
        blocks: 2
        """
    )
    assert config.ssh_config is not None
    hosts = config.ssh_config.hosts
    assert [host.hostname for host in hosts] == ["10.0.0.1", "gpu-2.example", "10.0.0.3"]
    assert hosts[0].user is None and hosts[0].blocks is None
    assert (hosts[1].user, hosts[1].port, hosts[1].blocks) == ("root", 22, "auto")
    assert hosts[2].blocks == 4
    assert config.ssh_config.proxy_jump is not None
    assert config.ssh_config.proxy_jump.hostname == "bastion.example"
    assert (config.placement, config.blocks) == ("cluster", 2)
    assert config.summary().scale == "hosts 3"
    assert config.summary().resources == "-"


@pytest.mark.parametrize(
    ("value", "expected", "shown"),
    [
        ("2", (2, 2, 2), "2"),
        ("0..3", (0, 0, 3), "0..3"),
        ("1..", (1, 1, None), "1.."),
        ("{min: 1, max: 4}", (1, 1, 4), "1..4"),
    ],
)
def test_fleet_nodes_forms(value: str, expected: tuple[int, int, int | None], shown: str) -> None:
    config = fleet(f"nodes: {value}\n")
    assert config.nodes is not None
    assert (config.nodes.min, config.nodes.target, config.nodes.max) == expected
    assert config.summary().scale == f"nodes {shown}"


# --- everything dstack documents is accepted ---------------------------------------------------------


def test_every_documented_run_field_is_accepted() -> None:
    config = service(
        """
        name: full-service
        python: "3.12"
        nvcc: true
        user: ubuntu
        privileged: true
        entrypoint: /bin/sh -c
        working_dir: /workflow
        shell: bash
        registry_auth: {username: me, password: secret}
        docker: false
        repos: [., {url: "https://github.com/org/repo", path: /repo}]
        files: [./data:/data, {local_path: ./x, path: /x}]
        single_branch: true
        volumes: [cache:/cache]
        fleets: [my-fleet]
        backends: [aws]
        regions: [us-east-1]
        availability_zones: [us-east-1a]
        instance_types: [p5.48xlarge]
        reservation: cr-123
        spot_policy: auto
        max_price: 1.5
        creation_policy: reuse
        idle_duration: 10m
        utilization_policy: {min_gpu_utilization: 10, time_window: 30m}
        tags: {team: ml}
        priority: 50
        max_duration: 1d
        stop_duration: 1m
        schedule: {cron: "0 * * * *"}
        replicas: 1..2
        scaling: {metric: rps, target: 4, window: 2m, scale_up_delay: 30s, scale_down_delay: 1m}
        probes:
          - {type: http, url: /health, method: post, headers: [{name: X-A, value: b}], body: "{}",
             timeout: 5s, interval: 5s, ready_after: 2}
        auth: false
        gateway: my-gateway
        strip_prefix: false
        https: false
        model: {type: chat, name: llama, format: openai, prefix: /v1}
        rate_limits:
          - {prefix: /api, key: {type: header, header: X-User}, rps: 5, burst: 10}
          - {rps: 1}
        """
    )
    assert config.scaling is not None and config.scaling.window == 120
    assert config.utilization_policy is not None and config.utilization_policy.time_window == 1800
    assert config.probes[0].ready_after == 2


def test_model_and_gateway_short_forms() -> None:
    config = service("model: llama-3\ngateway: true\n")
    assert (config.model, config.gateway) == ("llama-3", True)


def test_every_documented_fleet_field_is_accepted() -> None:
    config = fleet(
        """
        name: cloud
        nodes: 0..2
        placement: cluster
        resources: {gpu: 1}
        blocks: auto
        env: [A=1]
        backends: [gcp]
        regions: [europe-west4]
        availability_zones: [europe-west4-a]
        instance_types: [a2-highgpu-1g]
        reservation: r-1
        spot_policy: spot
        retry: true
        max_price: 2
        idle_duration: 3d
        tags: {team: ml}
        termination_policy: destroy-after-idle
        termination_idle_time: 1h
        """
    )
    assert config.blocks == "auto"
    assert config.idle_duration == 3 * 86400


def test_known_field_names_include_nested_models() -> None:
    names = known_field_names()
    assert {"commands", "scale_up_delay", "hostname", "on_events", "instance_path", "ready_after"} <= names


# --- fields Ferry does not act on yet ----------------------------------------------------------------


def test_unsupported_fields_in_declaration_order() -> None:
    config = task("spot_policy: auto\nrepos: [https://x.io/r]\nuser: app\nnvcc: true\ntags: {}\n")
    assert config.unsupported_fields() == ["nvcc", "user", "spot_policy"]  # repos: docs/runs.md#repos
    # `python` runs the job in a container, where `user` is acted on (docs/containers.md#python).
    assert task("user: app\npython: '3.11'\n").unsupported_fields() == []
    loaded = load_configuration_text(
        "type: task\ncommands: [x]\nspot_policy: auto\nrepos: [..:/r]\n", "x.yml"
    )
    assert loaded.warning() == "x.yml: warning: Ferry does not act on yet: spot_policy"


def test_no_warning_for_supported_fields() -> None:
    loaded = load_configuration_text("type: task\ncommands: [x]\nnodes: 2\nretry: true\n", "x.yml")
    assert loaded.configuration.unsupported_fields() == []
    assert loaded.warning() is None


def test_service_and_dev_environment_unsupported_fields() -> None:
    assert service("auth: true\nhttps: false\nmodel: m\n").unsupported_fields() == []
    assert service("gateway: gw\n").unsupported_fields() == ["gateway"]  # https: acted on
    dev = load("type: dev-environment\nide: vscode\nversion: '1.90'\npython: '3.11'\n")
    assert dev.unsupported_fields() == ["version"]  # `ide`: ferry attach prints its link; `python`: an image


def test_ssh_fleet_resources_are_reported() -> None:
    config = fleet("ssh_config:\n  user: u\n  hosts: [a]\nresources: {gpu: 1}\nretry: true\n")
    assert config.unsupported_fields() == ["retry", "resources"]
    assert fleet("nodes: 1\nresources: {gpu: 1}\n").unsupported_fields() == []


# --- the examples ------------------------------------------------------------------------------------


def test_the_examples_are_all_there() -> None:
    assert {path.name for path in EXAMPLES} >= {
        "hello.yml",
        "two-node.yml",
        "service.yml",
        "dev-environment.yml",
        "fleet-ssh.yml",
        "scheduled.yml",
    }


# What each example asks for that Ferry does not do yet (their comments say so); the others ask for none.
EXAMPLE_WARNINGS: dict[str, list[str]] = {}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda path: path.name)
def test_example_validates_and_round_trips(path: Path) -> None:
    loaded = load_configuration(path)
    assert loaded.configuration.unsupported_fields() == EXAMPLE_WARNINGS.get(path.name, [])
    assert loaded.refusals() == []
    # Configurations travel through Temporal as JSON: the dump must validate back to the same model.
    dumped: Any = loaded.configuration.model_dump(mode="json")
    assert parse_configuration(dumped) == loaded.configuration


def test_example_shapes() -> None:
    by_name = {path.name: load_configuration(path).configuration for path in EXAMPLES}
    hello, two, web = by_name["hello.yml"], by_name["two-node.yml"], by_name["service.yml"]
    assert isinstance(hello, TaskConfiguration) and hello.nodes == 1
    assert isinstance(two, TaskConfiguration) and two.nodes == 2
    assert isinstance(web, ServiceConfiguration) and web.replicas == ReplicaRange(min=1, max=3)
    assert web.scaling is not None
    assert isinstance(by_name["dev-environment.yml"], DevEnvironmentConfiguration)
    ssh = by_name["fleet-ssh.yml"]
    assert isinstance(ssh, FleetConfiguration) and ssh.is_ssh
    scheduled = by_name["scheduled.yml"]
    assert isinstance(scheduled, TaskConfiguration) and scheduled.schedule is not None


def test_summary_columns() -> None:
    summary = task(
        "name: sum-up\nnodes: 2\nretry: true\nschedule:\n  cron: ['0 1 * * *', '0 13 * * *']\n"
    ).summary()
    assert summary.type == "task"
    assert summary.name == "sum-up"
    assert summary.scale == "nodes 2"
    assert summary.retry == "no-capacity, interruption, error for 1h"
    assert summary.schedule == "0 1 * * *, 0 13 * * *"
    assert summary.resources
