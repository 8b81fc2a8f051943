"""The routing table: an immutable snapshot of the active services and their replicas.

The directory builds a new one in a thread whenever the store's rows change and swaps it in whole, so a
request reads one consistent table with plain dict lookups and never waits on the store. Each run's
configuration (the JSON of its normalised ServiceConfiguration) is parsed once per configuration string,
tolerantly: only `auth`, `strip_prefix`, `model`, `rate_limits` and the router group (`replicas[i].router`)
matter here, and a value of the wrong shape falls back to the safe default (auth on; a malformed limit is
skipped: gateway.rate_limits). A service with a router group gets its requests on that group's replicas
only; the router sends them on to the others (docs/services.md#a-router-group).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from core.services.replicas import ReplicaState, service_path
from core.services.routers import routed_replicas
from gateway.rate_limits import RateLimitRule, parse_rules
from store.models import RunRecord, ServiceReplicaRecord

DEFAULT_MODEL_PREFIX = "/v1"

ServiceKey = tuple[str, str]  # (project, run name)


@dataclass(frozen=True, slots=True)
class Replica:
    id: str  # its job submission id
    run_id: str
    url: str  # http://host:port, no trailing slash
    state: str  # a ReplicaState value
    group: str | None = None  # its replica group


@dataclass(frozen=True, slots=True)
class ModelRoute:
    name: str
    prefix: str  # the replica's OpenAI-compatible base path, e.g. /v1 (no trailing slash)


@dataclass(frozen=True, slots=True)
class ServiceSettings:
    """What the proxy needs of a service's configuration."""

    auth: bool = True
    strip_prefix: bool = True
    model: ModelRoute | None = None
    rate_limits: tuple[RateLimitRule, ...] = ()  # docs/services.md#rate-limits
    router_group: str | None = None  # the group that gets every request (docs/services.md#a-router-group)


@dataclass(frozen=True, slots=True)
class Service:
    run_id: str
    project: str
    run_name: str
    settings: ServiceSettings
    created: int  # when the run was submitted, unix seconds (the model's `created`)
    replicas: tuple[Replica, ...]
    ready: tuple[Replica, ...]  # those that get new requests (of a router group's, the router's only)

    @property
    def key(self) -> ServiceKey:
        return (self.project, self.run_name)

    @property
    def path(self) -> str:
        return service_path(self.project, self.run_name)


def _frozen(mapping: dict[Any, Any]) -> Mapping[Any, Any]:
    return MappingProxyType(mapping)


@dataclass(frozen=True, slots=True)
class RoutingTable:
    services: Mapping[ServiceKey, Service] = field(default_factory=lambda: _frozen({}))
    models: Mapping[tuple[str, str], Service] = field(default_factory=lambda: _frozen({}))  # (project, name)
    draining: frozenset[str] = frozenset()  # ids of draining replicas, of any run

    def project_models(self, project: str) -> list[Service]:
        return [service for (owner, _), service in self.models.items() if owner == project]


def parse_settings(configuration: str) -> ServiceSettings:
    """The proxy's view of a run's configuration JSON; defaults for whatever is missing or malformed."""
    try:
        data = json.loads(configuration)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        return ServiceSettings()
    return ServiceSettings(
        auth=data.get("auth") is not False,  # only an explicit `auth: false` makes a service public
        strip_prefix=data.get("strip_prefix") is not False,
        model=_model_route(data.get("model")),
        rate_limits=parse_rules(data.get("rate_limits")),
        router_group=_router_group(data.get("replicas")),
    )


def _router_group(value: Any) -> str | None:
    """The name of the replica group with a `router`, if `replicas` lists groups and one has it."""
    if not isinstance(value, list):
        return None
    for group in value:
        if isinstance(group, dict) and isinstance(group.get("router"), dict):
            name = group.get("name")
            return name if isinstance(name, str) else None
    return None


def _model_route(value: Any) -> ModelRoute | None:
    if isinstance(value, str) and value:
        return ModelRoute(name=value, prefix=DEFAULT_MODEL_PREFIX)
    if isinstance(value, dict) and isinstance(value.get("name"), str) and value["name"]:
        prefix = value.get("prefix")
        if not isinstance(prefix, str):
            prefix = DEFAULT_MODEL_PREFIX
        prefix = "/" + prefix.strip("/") if prefix.strip("/") else ""
        return ModelRoute(name=value["name"], prefix=prefix)
    return None


class SettingsCache:
    """Parsed settings by run id, kept while the run's configuration string stays the same."""

    def __init__(self) -> None:
        self._by_run: dict[str, tuple[str, ServiceSettings]] = {}

    def settings(self, run: RunRecord) -> ServiceSettings:
        cached = self._by_run.get(run.id)
        if cached is not None and cached[0] == run.configuration:
            return cached[1]
        parsed = parse_settings(run.configuration)
        self._by_run[run.id] = (run.configuration, parsed)
        return parsed

    def keep_only(self, run_ids: Iterable[str]) -> None:
        wanted = set(run_ids)
        for run_id in [run_id for run_id in self._by_run if run_id not in wanted]:
            del self._by_run[run_id]


def build_table(
    runs: list[RunRecord], replicas: list[ServiceReplicaRecord], cache: SettingsCache
) -> RoutingTable:
    """The table of these active service runs (oldest first) and registered replicas (of any run).

    Should two active runs share a (project, name) or a project share a model name, the newest run wins.
    """
    by_run: dict[str, list[Replica]] = {}
    draining = set()
    for record in replicas:
        replica = Replica(
            id=record.id,
            run_id=record.run_id,
            url=record.url.rstrip("/"),
            state=record.state,
            group=record.group_name,
        )
        by_run.setdefault(record.run_id, []).append(replica)
        if record.state == ReplicaState.DRAINING:
            draining.add(record.id)
    services: dict[ServiceKey, Service] = {}
    models: dict[tuple[str, str], Service] = {}
    for run in runs:
        run_replicas = tuple(by_run.get(run.id, ()))
        settings = cache.settings(run)
        service = Service(
            run_id=run.id,
            project=run.project,
            run_name=run.run_name,
            settings=settings,
            created=int(run.submitted_at),
            replicas=run_replicas,
            ready=tuple(
                r
                for r in run_replicas
                if r.state == ReplicaState.READY and routed_replicas(settings.router_group, r.group)
            ),
        )
        services[service.key] = service
        if service.settings.model is not None:
            models[(run.project, service.settings.model.name)] = service
    cache.keep_only(run.id for run in runs)
    return RoutingTable(services=_frozen(services), models=_frozen(models), draining=frozenset(draining))


def rows_signature(runs: list[RunRecord], replicas: list[ServiceReplicaRecord]) -> tuple[Any, ...]:
    """What the table depends on: an unchanged signature means the table need not be rebuilt."""
    return (
        tuple((r.id, r.project, r.run_name, r.submitted_at, r.configuration) for r in runs),
        tuple((r.id, r.run_id, r.url, r.state, r.group_name) for r in replicas),
    )
