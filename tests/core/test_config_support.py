"""What Ferry does with a valid configuration: the fields it does not act on yet (the warning line), and
the configurations it cannot run (refused before submission)."""

from __future__ import annotations

import textwrap

import pytest

from core.configuration import (
    DevEnvironmentConfiguration,
    FleetConfiguration,
    ServiceConfiguration,
    TaskConfiguration,
)
from core.configuration.base import CLOUD_FIELDS_NOT_ACTED_ON
from core.configuration.loading import (
    ConfigurationError,
    LoadedConfiguration,
    ensure_runnable,
    load_configuration_text,
)
from core.configuration.model import ConfigModel
from core.configuration.runnable import refusals

RUN_TYPES = {
    "task": "type: task\ncommands: [x]\n",
    "service": "type: service\nport: 8000\ncommands: [serve]\nauth: false\n",
    "dev-environment": "type: dev-environment\nide: vscode\n",
}


def loaded(text: str, file: str = "x.yml") -> LoadedConfiguration:
    return load_configuration_text(textwrap.dedent(text).lstrip("\n"), file)


def warned(text: str) -> list[str]:
    return loaded(text).configuration.unsupported_fields()


# --- the audit: every field, nested ones included, is acted on, refused or named: test_schema_fields.py ---


@pytest.mark.parametrize(
    "model",
    [TaskConfiguration, ServiceConfiguration, DevEnvironmentConfiguration, FleetConfiguration],
    ids=lambda model: model.__name__,
)
def test_cloud_fields_are_one_list_shared_by_runs_and_fleets(model: type[ConfigModel]) -> None:
    assert CLOUD_FIELDS_NOT_ACTED_ON <= model.NOT_ACTED_ON
    assert {"spot_policy", "max_price", "backends", "regions"} <= CLOUD_FIELDS_NOT_ACTED_ON


# --- the warning line ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(RUN_TYPES))
def test_every_run_type_names_cloud_fields_but_not_volumes_or_schedule(kind: str) -> None:
    base = RUN_TYPES[kind]
    assert warned(base) == {"task": [], "service": [], "dev-environment": []}[kind]
    fields = warned(base + "volumes: [data:/data]\nschedule: {cron: '0 2 * * *'}\nspot_policy: auto\n")
    assert fields == ["spot_policy"]  # volumes: docs/volumes.md; schedule: docs/schedules.md


def test_the_proxy_acts_on_port_auth_probes_and_scaling() -> None:
    # The proxy (gateway/) serves the port, checks the token, follows the probes; the run autoscales.
    assert loaded("type: service\nport: 8000\ncommands: [serve]\n").warning() is None
    assert warned("type: service\nport: 8000\ncommands: [serve]\nauth: true\nmodel: m\n") == []
    service = RUN_TYPES["service"]
    assert warned(service + "replicas: 1..4\nscaling: {target: 5}\nprobes: [{url: /health}]\n") == []


def test_a_separate_gateway_is_not_acted_on_and_rate_limits_are() -> None:
    fields = warned(RUN_TYPES["service"] + "strip_prefix: true\nhttps: true\ngateway: gw\n")
    assert fields == ["gateway"]
    # https picks the scheme of the URL on the proxy's domain (docs/services.md#https).
    for https in ("true", "false", "auto"):
        assert warned(RUN_TYPES["service"] + f"https: {https}\n") == []
    assert warned(RUN_TYPES["service"] + "rate_limits: [{rps: 5}]\n") == []  # docs/services.md#rate-limits


def test_startup_order_is_acted_on() -> None:
    # core.runs.startup holds the waiting nodes (docs/runs.md#startup-order).
    task = RUN_TYPES["task"] + "nodes: 2\n"
    for order in ("any", "master-first", "workers-first"):
        assert warned(task + f"startup_order: {order}\n") == []


def test_ports_of_tasks_and_dev_environments() -> None:
    # `ferry attach` forwards them (docs/attach.md); the IDE installs its own server (`version`).
    assert warned(RUN_TYPES["task"] + "ports: [8080]\n") == []
    dev = RUN_TYPES["dev-environment"] + "ports: ['8000:8080']\ninactivity_duration: 1h\nversion: '1.9'\n"
    assert warned(dev) == ["version"]
    assert warned(RUN_TYPES["dev-environment"] + "inactivity_duration: off\n") == []


def test_nested_fields_are_named_with_their_path() -> None:
    gpu = "resources: {gpu: {count: 1, compute_capability: 7.5}}\n"
    assert warned(RUN_TYPES["task"] + gpu) == ["resources.gpu.compute_capability"]
    assert warned(RUN_TYPES["task"] + "resources: {cpu: 2.., shm_size: 1GB}\n") == []  # placement
    ssh = "type: fleet\nssh_config:\n  user: u\n  hosts: [a, b]\n"
    assert warned(ssh) == []
    # `placement: cluster` is acted on, and with it `network` (docs/fleets.md#cluster-placement)
    assert warned(ssh + "  network: 10.0.0.0/24\nplacement: cluster\n") == []
    assert warned(ssh + "  network: 10.0.0.0/24\n") == ["ssh_config.network"]
    assert warned(ssh + "placement: any\n") == []


# --- refused: what Ferry cannot run -------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["type: task\nimage: python:3.11\n", "type: task\nname: t1\nimage: python:3.11\ncommands: []\n"],
)
def test_an_image_without_commands_runs_its_entrypoint(text: str) -> None:
    # As in dstack: the container executor runs the image's own entrypoint (docs/containers.md).
    config = loaded(text, "ok.yml")
    assert refusals(config.configuration) == []
    assert config.warning() is None


def test_container_settings_are_acted_on_only_with_an_image() -> None:
    settings = "user: app\nentrypoint: /start\nresources: {shm_size: 1GB}\n"
    assert warned(RUN_TYPES["task"] + settings) == ["user", "entrypoint"]
    assert warned(RUN_TYPES["task"] + "image: busybox\n" + settings + "privileged: true\n") == []


def test_privileged_on_the_host_is_accepted_without_a_warning() -> None:
    # docs/containers.md#privileged: on the host, a placement requirement (an agent that runs as root).
    for settings in ("privileged: true\n", "privileged: false\n", "python: '3.12'\nprivileged: true\n"):
        config = loaded(RUN_TYPES["task"] + settings)
        assert config.refusals() == [] and config.warning() is None


def test_blank_commands_are_refused() -> None:
    config = loaded("type: service\nport: 80\ncommands:\n  - ''\n  - '  '\n", "bad.yml")
    assert [str(issue) for issue in config.refusals()] == [
        "bad.yml:3: commands: nothing to run: every command is blank"
    ]


def test_a_configuration_without_a_file_is_refused_by_name() -> None:
    # FerryAPI.submit takes configurations that never were a file, e.g. a copy without its commands.
    task = loaded(RUN_TYPES["task"]).configuration
    assert isinstance(task, TaskConfiguration)
    ensure_runnable(task, "run ok")
    empty = task.model_copy(update={"commands": []})
    with pytest.raises(ConfigurationError) as caught:
        ensure_runnable(empty, "run t1")
    assert str(caught.value) == "run t1: commands: nothing to run: a task needs `commands`"


def test_a_fleet_of_nodes_is_runnable_its_backend_is_checked_at_apply() -> None:
    config = loaded("type: fleet\nname: cloud\nnodes: 0..2\n", "ok.yml")
    assert config.refusals() == []  # docs/backends.md: apply refuses it when no backend can create it
    assert loaded("type: fleet\nssh_config: {user: u, hosts: [a]}\n").refusals() == []


@pytest.mark.parametrize(
    "text",
    [
        *RUN_TYPES.values(),
        "type: task\nimage: ubuntu\ncommands: [echo hi]\n",  # warned about, and run on the host
        "type: dev-environment\nide: cursor\nimage: ubuntu\n",  # runs `init`, then stays up
    ],
)
def test_what_ferry_can_run_is_not_refused(text: str) -> None:
    assert loaded(text).refusals() == []


@pytest.mark.parametrize("kind", ["task", "dev-environment"])
def test_a_working_dir_that_goes_up_is_refused(kind: str) -> None:
    """The agent confines a relative working_dir to the job's directory: `..` would end the run at its
    first step, so it is refused before submission (an absolute path is the user's to choose)."""
    commands = "commands: [pwd]\n" if kind == "task" else "ide: vscode\n"
    config = loaded(f"type: {kind}\n{commands}working_dir: src/../../etc\n", "bad.yml")
    assert [str(issue) for issue in config.refusals()] == [
        "bad.yml:3: working_dir: a relative working_dir cannot go up (`..`) out of the job's directory"
    ]
    for fine in ("src/app", "/opt/app", "./src"):
        assert loaded(f"type: {kind}\n{commands}working_dir: {fine}\n").refusals() == []


# --- volumes (docs/volumes.md) ------------------------------------------------------------------------


def test_a_volumes_cloud_disk_fields_are_named_and_registering_one_is_refused() -> None:
    volume = loaded("type: volume\nname: data\nfleet: lab\nbackend: aws\nregion: eu\nsize: 100GB\n")
    assert volume.warning() == "x.yml: warning: Ferry does not act on yet: backend, region, size"
    assert volume.refusals() == []
    assert warned("type: volume\nname: data\ninstance: lab-1\n") == []
    registered = loaded("type: volume\nname: data\nvolume_id: vol-123\n")
    [refusal] = registered.refusals()
    assert (refusal.line, refusal.field_path) == (3, "volume_id")
    assert refusal.message.startswith("Ferry cannot register a cloud disk")


def test_the_nodes_of_a_multi_node_task_cannot_share_a_volume() -> None:
    shared = loaded("type: task\nnodes: 2\ncommands: [x]\nvolumes:\n  - /cache:/cache\n  - data:/data\n")
    [refusal] = shared.refusals()
    assert (refusal.line, refusal.field_path) == (6, "volumes.1.name")
    assert refusal.message == (
        "the 2 nodes cannot share volume data: a volume is attached to one job at a time; "
        "name one per node, e.g. data-${{ dstack.node_rank }}"
    )
    per_node = "type: task\nnodes: 2\ncommands: [x]\nvolumes: ['data-${{ dstack.node_rank }}:/data']\n"
    assert loaded(per_node).refusals() == []
    assert loaded("type: task\ncommands: [x]\nvolumes: [data:/data]\n").refusals() == []
