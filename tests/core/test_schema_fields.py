"""Every field of every configuration model, nested ones included, is acted on, refused with a reason, or
named in the warning line of `validate` and `apply` (issue 43); and every field of dstack's schema
(dstack_schema.json, written by scripts/dstack_schema.py at the commit it names) is one Ferry knows.

A field path is dotted through nested models and lists (`replicas.resources.gpu.count`). It is:
- refused: REFUSED sets it and the configuration is refused with the reason given;
- warned: its type's NOT_ACTED_ON (or a parent's entry) names it, and setting it makes the warning say so;
- acted on: ACTED_ON names the module that does it, which reads the attribute.
A field may be acted on and warned (a container's `user`: acted on with `image`, warned without), never
refused and warned.
"""

from __future__ import annotations

import json
import re
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from core.configuration import (
    DevEnvironmentConfiguration,
    FleetConfiguration,
    ServiceConfiguration,
    TaskConfiguration,
    VolumeConfiguration,
)
from core.configuration.loading import ConfigurationError, load_configuration_text
from core.configuration.model import ConfigModel
from core.configuration.ranges import Range
from core.configuration.specs import ReplicaRange

REPO = Path(__file__).resolve().parents[2]
DSTACK = json.loads(Path(__file__).with_name("dstack_schema.json").read_text())
MODELS: dict[str, type[ConfigModel]] = {
    "task": TaskConfiguration,
    "service": ServiceConfiguration,
    "dev-environment": DevEnvironmentConfiguration,
    "fleet": FleetConfiguration,
    "volume": VolumeConfiguration,
}
BASES = {
    "task": "type: task\ncommands: [x]\n",
    "service": "type: service\nport: 8000\ncommands: [serve]\nauth: false\n",
    "dev-environment": "type: dev-environment\nide: vscode\n",
    "fleet": "type: fleet\nssh_config: {user: u, hosts: [a]}\n",
    "volume": "type: volume\nname: data\n",
}
# The base for a field of a list of groups (the other form of `replicas`, and a task's `groups`).
_GROUPS = "type: service\nport: 8000\nauth: false\nreplicas: [{count: 1, commands: [x]}]\n"
GROUP_BASES = {
    ("task", "groups"): "type: task\ngroups: [{commands: [x]}]\n",
    ("service", "replicas"): _GROUPS,
    ("fleet", "nodes"): "type: fleet\nnodes: {min: 1, max: 4}\n",
}
VALUE_MODELS = (Range, ReplicaRange)  # spellings of one value (min..max), not fields

# Where each field acted on is acted on: the module reads the attribute (`.name` or "name"), or the token
# after `::`. Keyed by the model that declares the field.
_MATCHING = "core/fleets/matching.py"
ACTED_ON = {
    **{
        f"BaseRunConfiguration.{field}": "core/run_types/base.py"
        for field in ("env", "image", "python", "max_duration", "stop_duration", "shell", "working_dir")
    },
    "BaseRunConfiguration.user": "core/run_types/base.py",  # with `image` or `python`: docs/containers.md
    "BaseRunConfiguration.entrypoint": "core/run_types/base.py",
    # On the host, a placement requirement (NodeRequest.privileged); a container's --privileged in
    # core/run_types/base.py (docs/containers.md#privileged).
    "BaseRunConfiguration.privileged": "core/runs/submissions.py",
    # Where a run's jobs may go: its placement request's picks (docs/fleets.md#pinned-instances).
    "BaseRunConfiguration.instances": "core/runs/submissions.py",
    **{f"InstanceSpec.{field}": "core/configuration/specs.py" for field in ("name", "hostname", "instance")},
    "InstanceSpec.fleet": "core/configuration/specs.py",
    "BaseRunConfiguration.registry_auth": "core/run_types/base.py",
    "RegistryAuth.username": "core/run_types/base.py",
    "RegistryAuth.password": "core/run_types/base.py",
    "BaseRunConfiguration.depends_on": "cli/apply.py",
    "DependencySpec.run": "core/runs/dependencies.py",
    "DependencySpec.condition": "core/runs/dependencies.py",
    "BaseRunConfiguration.files": "activities/code.py",
    "FileMapping.local_path": "activities/code.py",
    "FileMapping.path": "activities/code.py",
    "BaseRunConfiguration.repos": "activities/code.py",  # docs/runs.md#repos
    "RepoSpec.local_path": "activities/code.py",
    "RepoSpec.url": "activities/code.py",
    "RepoSpec.path": "activities/code.py",
    "RepoSpec.branch": "core/wire/repo_clone.py",
    "RepoSpec.hash": "core/wire/repo_clone.py",
    "RepoSpec.if_exists": "core/wire/repo_clone.py",
    "BaseRunConfiguration.single_branch": "core/wire/repo_clone.py",
    "BaseRunConfiguration.fleets": "cli/fleet_api.py",
    "BaseRunConfiguration.dstack": "activities/job_tokens.py",  # docs/teams.md#a-jobs-token
    "BaseRunConfiguration.ferry": "activities/job_tokens.py",
    "BaseRunConfiguration.name": "cli/apply.py",
    "BaseRunConfiguration.notifications": "workflows/notify.py",
    "NotificationSpec.url": "activities/notifications.py",
    "NotificationSpec.events": "core/notifications.py::wants",
    "NotificationSpec.secret": "core/notifications.py::secret_name",
    "BaseRunConfiguration.priority": "core/runs/submissions.py",
    "BaseRunConfiguration.resources": "core/runs/submissions.py",
    "BaseRunConfiguration.retry": "core/runs/retry.py",
    "RetryPolicy.duration": "core/runs/retry.py",
    "RetryPolicy.on_events": "core/runs/retry.py",
    "BaseRunConfiguration.schedule": "core/runs/lifecycle.py",
    "Schedule.cron": "core/runs/lifecycle.py",
    "BaseRunConfiguration.setup": "core/configuration/dev_environment.py",  # a dev environment's, before init
    "BaseRunConfiguration.startup_order": "core/runs/submissions.py",
    "BaseRunConfiguration.stop_criteria": "core/runs/status_decision.py",
    "BaseRunConfiguration.utilization_policy": "core/runs/submissions.py",
    "UtilizationPolicy.min_gpu_utilization": "core/runs/utilization.py",
    "UtilizationPolicy.time_window": "core/runs/utilization.py",
    "BaseRunConfiguration.volumes": "core/run_types/volumes.py",
    "NetworkVolume.name": "core/run_types/volumes.py",
    "InstanceVolume.instance_path": "core/run_types/volumes.py",
    "InstanceVolume.path": "core/run_types/volumes.py",
    "InstanceVolume.optional": "core/run_types/volumes.py",
    **{f"ResourcesSpec.{field}": _MATCHING for field in ("cpu", "cpu_arch", "memory", "disk", "gpu")},
    "ResourcesSpec.shm_size": _MATCHING,  # on the host; a container's --shm-size in core/run_types/base.py
    **{f"GPUSpec.{field}": _MATCHING for field in ("vendor", "name", "memory", "total_memory", "count")},
    "TaskConfiguration.type": "core/configuration/loading.py::type",
    "ServiceConfiguration.type": "core/configuration/loading.py::type",
    "DevEnvironmentConfiguration.type": "core/configuration/loading.py::type",
    "FleetConfiguration.type": "core/configuration/loading.py::type",
    "VolumeConfiguration.type": "core/configuration/loading.py::type",
    "TaskConfiguration.commands": "core/run_types/task.py",
    "TaskConfiguration.nodes": "core/run_types/task.py",
    "TaskConfiguration.array": "core/runs/lifecycle.py",  # docs/runs.md#arrays
    "ArraySpec.count": "core/run_types/task.py",
    "ArraySpec.max_parallel": "core/configuration/task.py",  # the run's plan takes parallel()
    "TaskConfiguration.ports": "core/run_types/task.py",
    "TaskConfiguration.groups": "core/run_types/task.py",
    **{f"NodeGroup.{field}": "core/run_types/task.py" for field in ("nodes", "resources", "commands")},
    "NodeGroup.name": "core/configuration/task.py",  # the summary's, and `${{ groups[i] }}` by position
    "NodeGroup.ports": "core/run_types/task.py",
    "PortMapping.container_port": "cli/attach.py",
    "PortMapping.local_port": "cli/attach.py",
    "DevEnvironmentConfiguration.ide": "cli/dev_environments.py",
    "DevEnvironmentConfiguration.init": "core/run_types/dev_environment.py",
    "DevEnvironmentConfiguration.ports": "core/run_types/base.py::ports",
    "DevEnvironmentConfiguration.inactivity_duration": "core/run_types/dev_environment.py",
    "ServiceConfiguration.port": "core/run_types/service.py",
    "ServiceConfiguration.commands": "core/run_types/service.py",
    "ServiceConfiguration.replicas": "core/run_types/service.py",
    "ServiceConfiguration.scaling": "core/services/autoscaler.py",
    "ServiceConfiguration.probes": "core/run_types/service.py",
    "ServiceConfiguration.strip_prefix": "gateway/services_api.py",
    "ServiceConfiguration.auth": "gateway/access.py",
    "ServiceConfiguration.https": "core/services/domains.py",
    "ServiceConfiguration.model": "gateway/routing_table.py",
    "ServiceConfiguration.rate_limits": "gateway/routing_table.py",
    **{f"ReplicaGroupSpec.{field}": "core/configuration/service.py" for field in ("name", "commands")},
    "ReplicaGroupSpec.resources": "core/configuration/service.py",
    "ReplicaGroupSpec.count": "core/configuration/service.py",
    "ReplicaGroupSpec.scaling": "core/configuration/service.py",
    # A group's own container, over the service's (core/run_types/service.py for_group).
    **{f"ReplicaGroupSpec.{field}": "core/configuration/service.py" for field in ("image", "python")},
    "ReplicaGroupSpec.privileged": "core/configuration/service.py",
    "ReplicaGroupSpec.router": "core/run_types/service.py::router_group",  # docs/services.md#a-router-group
    "RouterSpec.type": "core/run_types/service.py::router_type",  # docs/services.md#a-dynamo-router
    **{f"ScalingSpec.{field}": "core/services/autoscaler.py" for field in ("target", "scale_up_delay")},
    "ScalingSpec.scale_down_delay": "core/services/autoscaler.py",
    "ScalingSpec.window": "activities/services.py",
    "ScalingSpec.metric": "core/services/autoscaler.py::rps",  # requests per second, the one metric
    **{
        f"ProbeSpec.{field}": "activities/services.py"
        for field in ("url", "method", "headers", "body", "timeout", "interval")
    },
    "ProbeSpec.type": "activities/services.py::http",  # http, the one type
    "ProbeSpec.ready_after": "core/services/probes.py",
    "HTTPHeader.name": "activities/services.py",
    "HTTPHeader.value": "activities/services.py",
    "ModelSpec.type": "gateway/models_api.py::chat",  # chat, the one type
    "ModelSpec.name": "gateway/routing_table.py",
    "ModelSpec.format": "core/configuration/runnable.py",  # openai is served; tgi is refused
    "ModelSpec.prefix": "gateway/models_api.py",
    **{f"RateLimit.{field}": "gateway/rate_limits.py" for field in ("prefix", "key", "rps", "burst")},
    "HeaderKey.header": "gateway/rate_limits.py",
    "HeaderKey.type": "gateway/rate_limits.py::header",  # else the client's address
    "FleetConfiguration.name": "cli/fleet_api.py",
    "FleetConfiguration.ssh_config": "cli/fleet_api.py",
    "FleetConfiguration.nodes": "core/fleets/provisioning.py",
    "FleetConfiguration.resources": "core/fleets/provisioning.py",
    "FleetConfiguration.blocks": "core/fleets/book.py",
    "FleetConfiguration.env": "core/fleets/book.py",
    **{f"FleetNodes.{field}": "core/fleets/provisioning.py" for field in ("min", "max")},
    "FleetNodes.target": "workflows/fleet.py",  # the first plan asks for TARGET (Provisioning.initial)
    **{f"SSHConfig.{field}": "activities/ssh_config.py" for field in ("user", "port", "identity_file")},
    "SSHConfig.proxy_jump": "activities/ssh_config.py",
    # `placement: cluster`: each host's cluster check (activities/ssh_host.py, core/fleets/cluster.py)
    "FleetConfiguration.placement": "activities/ssh_config.py",
    "SSHConfig.network": "activities/ssh_config.py",
    "SSHConfig.hosts": "cli/fleet_api.py",
    **{f"SSHHost.{field}": "activities/ssh_config.py" for field in ("hostname", "port", "user")},
    "SSHHost.identity_file": "activities/ssh_config.py",
    "SSHHost.proxy_jump": "activities/ssh_config.py",
    "SSHHost.internal_ip": "activities/ssh_config.py",
    "SSHHost.blocks": "core/fleets/book.py",
    **{f"ProxyJump.{field}": "activities/ssh_config.py" for field in ("hostname", "port", "user")},
    "ProxyJump.identity_file": "activities/ssh_config.py",
    "VolumeConfiguration.name": "cli/volume_api.py",
    "VolumeConfiguration.fleet": "cli/volume_api.py",
    "VolumeConfiguration.instance": "cli/volume_api.py",
}  # fmt: skip

# What Ferry refuses: (type, path): (the path the sample sets, the sample, words of the reason). "run" is
# every run type.
RUN_TYPES = ("task", "service", "dev-environment")
REFUSED: dict[tuple[str, str], tuple[str, Any, str]] = {
    ("run", "docker"): ("docker", True, "Ferry does not give a job a container engine"),
    ("service", "replicas.docker"): ("replicas.docker", True, "Ferry does not give a job a container engine"),
    ("service", "model.chat_template"): ("model", {"name": "m", "chat_template": "t"}, "format: tgi"),
    ("service", "model.eos_token"): ("model", {"name": "m", "eos_token": "e"}, "format: tgi"),
    ("volume", "volume_id"): ("volume_id", "vol-1", "Ferry cannot register a cloud disk"),
    ("volume", "claim_name"): ("claim_name", "c", "Ferry cannot register a Kubernetes volume claim"),
}
REFUSED_CASES = [
    (kind, path) for group, path in REFUSED for kind in (RUN_TYPES if group == "run" else (group,))
]
# A value for a warned field where the first that loads would not do.
SAMPLES: dict[str, list[Any]] = {
    "creation_policy": ["reuse"],
    "spot_policy": ["auto"],
    "termination_policy": ["destroy-after-idle"],
    "registry_auth": [{"username": "u", "password": "p"}],
    "ssh_config.network": ["10.0.0.0/24"],
    "resources.gpu.compute_capability": [{"count": 1, "compute_capability": "7.5"}],
}
_CANDIDATES: list[Any] = [True, "x", ["x"], {"x": "y"}, 1, "1h", "1GB", [{"name": "x"}], "7.5"]


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in typing.get_args(annotation) for model in _models_in(arg)]


def _declared_by(model: type[BaseModel], name: str) -> str:
    return next(c for c in model.__mro__ if name in c.__dict__.get("__annotations__", {})).__name__


def field_paths(model: type[BaseModel], prefix: str = "") -> dict[str, str]:
    """Every field path of `model`, nested ones included: {path: Model.field of its declaration}."""
    found: dict[str, str] = {}
    for name, info in model.model_fields.items():
        found[prefix + name] = f"{_declared_by(model, name)}.{name}"
        for nested in _models_in(info.annotation):
            if not issubclass(nested, VALUE_MODELS):
                found.update(field_paths(nested, f"{prefix}{name}."))
    return found


PATHS = {kind: field_paths(model) for kind, model in MODELS.items()}
CASES = [(kind, path) for kind, paths in PATHS.items() for path in sorted(paths)]


def _ancestors(path: str) -> list[str]:
    parts = path.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _warned_entry(kind: str, path: str) -> str | None:
    return next((p for p in _ancestors(path) if p in MODELS[kind].NOT_ACTED_ON), None)


def _document(kind: str, path: str, value: Any) -> str:
    """The base configuration of `kind` with `path` set to `value` (the first item of a list on the way)."""
    first = path.split(".")[0]
    data = yaml.safe_load(GROUP_BASES.get((kind, first), BASES[kind]))
    node, parts = data, path.split(".")
    for at, part in enumerate(parts[:-1]):
        here = ".".join(parts[: at + 1])
        if part not in node:
            is_list = typing.get_origin(_annotation(kind, here)) is list
            node[part] = [{}] if is_list else {}
        node = node[part][0] if isinstance(node[part], list) else node[part]
    node[parts[-1]] = value
    return yaml.safe_dump(data)


def _annotation(kind: str, path: str) -> Any:
    model: type[BaseModel] = MODELS[kind]
    *parents, last = path.split(".")
    for part in parents:
        model = next(
            m for m in _models_in(model.model_fields[part].annotation) if not issubclass(m, VALUE_MODELS)
        )
    annotation = model.model_fields[last].annotation
    while typing.get_origin(annotation) in (typing.Union, type(int | None)):  # Optional[X]: X
        annotation = next(arg for arg in typing.get_args(annotation) if arg is not type(None))
    return annotation


def _refusal(text: str) -> str | None:
    """Why Ferry refuses `text` (validation or runnable), None when it does not."""
    try:
        loaded = load_configuration_text(text, "x.yml")
    except ConfigurationError as error:
        return str(error)
    refusals = loaded.refusals()
    return "\n".join(str(refusal) for refusal in refusals) or None


@pytest.mark.parametrize(("kind", "path"), CASES, ids=[f"{kind}:{path}" for kind, path in CASES])
def test_every_field_is_acted_on_refused_or_warned(kind: str, path: str) -> None:
    declared = PATHS[kind][path]
    warned = _warned_entry(kind, path)
    refused = (kind, path) in REFUSED_CASES
    acted = ACTED_ON.get(declared)
    assert warned or refused or acted, f"{kind} {path} ({declared}): neither acted on, refused nor warned"
    assert not (warned and refused), f"{kind} {path}: refused and named in the warning line"
    if acted is not None and not warned:
        module, _, token = acted.partition("::")
        text = (REPO / module).read_text()
        word = token or declared.split(".")[1]
        assert re.search(rf"\b{re.escape(word)}\b", text), f"{module} never names {word}"


def _refused_sample(kind: str, path: str) -> tuple[str, str]:
    """A file of `kind` setting the refused `path`, and the words its refusal must have."""
    set_path, value, reason = REFUSED.get((kind, path)) or REFUSED["run", path]
    return _document(kind, set_path, value), reason


@pytest.mark.parametrize(("kind", "path"), REFUSED_CASES)
def test_a_refused_field_says_why(kind: str, path: str) -> None:
    text, reason = _refused_sample(kind, path)
    said = _refusal(text)
    assert said is not None and reason in said, said
    assert "unknown field" not in said


def _warned_cases() -> list[tuple[str, str]]:
    return [
        (kind, entry)
        for kind, model in MODELS.items()
        for entry in sorted(model.NOT_ACTED_ON)
        if entry in PATHS[kind]
    ]


@pytest.mark.parametrize(("kind", "entry"), _warned_cases(), ids=lambda value: str(value))
def test_a_warned_field_is_named_in_the_warning_line(kind: str, entry: str) -> None:
    leaf = entry.split(".")[-1]
    candidates = SAMPLES.get(entry) or SAMPLES.get(entry.split(".", 1)[-1]) or _CANDIDATES
    if leaf == "compute_capability":  # set on the GPU spec, which needs a count beside it
        entry, candidates = entry.rsplit(".", 1)[0], SAMPLES["resources.gpu.compute_capability"]
    tried = []
    for value in candidates:
        text = _document(kind, entry, value)
        if _refusal(text) is None:
            loaded = load_configuration_text(text, "x.yml")
            named = loaded.configuration.unsupported_fields()
            full = entry if leaf != "compute_capability" else f"{entry}.compute_capability"
            assert full in named, f"{kind}: {full} set to {value!r} is not named: {named}"
            assert full in (loaded.warning() or "")
            return
        tried.append(value)
    pytest.fail(f"{kind} {entry}: no sample value loads ({tried}); add one to SAMPLES")


def test_every_registry_entry_is_a_field() -> None:
    declared = {name for paths in PATHS.values() for name in paths.values()}
    assert set(ACTED_ON) <= declared, sorted(set(ACTED_ON) - declared)
    assert all(path in PATHS[kind] for kind, path in REFUSED_CASES)
    for kind, model in MODELS.items():
        assert all(entry in PATHS[kind] for entry in model.NOT_ACTED_ON), kind


# --- dstack's schema --------------------------------------------------------------------------------

# Fields of dstack's models that no user writes: dstack's server fills `ssh_key` from `identity_file` (its
# schema gives it no description); Ferry reads `identity_file` itself, and takes no key in a file.
DSTACK_INTERNAL = re.compile(r"(^|\.)ssh_key(\.|$)")
# dstack's names for what Ferry keeps under another: a service's `groups` are its `replicas` list, where a
# group's count is `count` (Ferry takes `replicas` too: core.configuration.replica_groups).
RENAMED = {"service": [(r"^groups(?=\.|$)", "replicas"), (r"^replicas\.replicas$", "replicas.count")]}
# dstack's mapping spellings of a value Ferry keeps as one field (a range, a reference): each loads.
SPELLINGS = {
    "resources.cpu.arch": "resources: {cpu: {arch: arm, count: 2..}}\n",
    "resources.cpu.count": "resources: {cpu: {count: 4}}\n",
    "resources.disk.size": "resources: {disk: {size: 200GB..}}\n",
    "fleets.name": "fleets: [{name: lab, project: main}]\n",
    "fleets.project": "fleets: [{name: lab, project: main}]\n",
    "instances.fleet.name": "instances: [{fleet: {name: lab, project: main}, instance: 0}]\n",
    "instances.fleet.project": "instances: [{fleet: {name: lab, project: main}, instance: 0}]\n",
    "gateway.name": "gateway: {name: gw, project: main}\n",
    "gateway.project": "gateway: {name: gw, project: main}\n",
}


def _ferry_path(kind: str, path: str) -> str:
    for pattern, replacement in RENAMED.get(kind, []):
        path = re.sub(pattern, replacement, path)
    return path


def _spelling(path: str) -> str:
    """The spelling key of a nested path: without the list of groups it is under."""
    return re.sub(r"^(groups|replicas)\.(?=resources\.)", "", path)


def test_the_schema_file_names_its_commit_and_its_types() -> None:
    assert len(DSTACK["commit"]) == 40 and "scripts/dstack_schema.py" in DSTACK["command"]
    assert set(DSTACK["types"]) == set(MODELS)


@pytest.mark.parametrize("kind", list(MODELS))
def test_every_dstack_field_is_one_ferry_knows(kind: str) -> None:
    unknown = []
    for dstack_path in DSTACK["types"][kind]:
        path = _ferry_path(kind, dstack_path)
        if DSTACK_INTERNAL.search(path) or path in PATHS[kind]:
            continue
        if _spelling(path) not in SPELLINGS:
            unknown.append(dstack_path)
    assert unknown == [], f"dstack's {kind} fields Ferry's models do not have: {unknown}"


@pytest.mark.parametrize(("spelling", "text"), [(s, t) for s, t in SPELLINGS.items() if t is not None])
def test_dstack_spellings_of_one_value_load(spelling: str, text: str) -> None:
    kind = "service" if spelling.startswith("gateway") else "task"
    said = _refusal(BASES[kind] + text)
    assert said is None, said


def test_a_nested_field_of_node_groups_is_named_with_its_path() -> None:
    text = _document("task", "groups.resources.gpu", {"count": 1, "compute_capability": "8.0"})
    named = load_configuration_text(text, "x.yml").configuration.unsupported_fields()
    assert named == ["groups.resources.gpu.compute_capability"]
