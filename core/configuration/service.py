"""`type: service`: commands that serve a port, as replicas behind Ferry's proxy (docs/services.md).

The proxy (gateway/) serves each service at /proxy/services/<project>/<run>/, checks `auth`, routes by
`model`, holds each client to `rate_limits`, and sends requests only to replicas whose `probes` pass;
`replicas` as a range with `scaling` autoscales. `https` picks the scheme of the service's URL on the
proxy's domain (docs/services.md#https, core.services.domains). A separate gateway (`gateway`) is not
acted on: `ferry validate` names it in its warning line. A model's `format: tgi` is refused
(core.configuration.runnable): the proxy serves models OpenAI-style only.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, Discriminator, Field, Tag, model_validator

from core.configuration.base import (
    CONTAINER_FIELDS,
    RUN_FIELDS_NOT_ACTED_ON,
    BaseRunConfiguration,
    ConfigSummary,
)
from core.configuration.durations import Duration
from core.configuration.fields import Commands, Port, Reference
from core.configuration.interpolation import PROBE, Context, commands_context, substitute
from core.configuration.model import ConfigFieldError, ConfigModel, shape_of
from core.configuration.replica_groups import (
    GROUP_FIELDS_NOT_ACTED_ON,
    ReplicaGroupSpec,
    ScalingSpec,
    ServiceGroup,
    check_groups,
    check_scaling,
)
from core.configuration.specs import ReplicaRange, Replicas

# Ferry's proxy is in its server: no separate gateway. `https` is acted on by the proxy's domain
# (docs/services.md#https).
SERVICE_FIELDS_NOT_ACTED_ON = (
    RUN_FIELDS_NOT_ACTED_ON
    | {"gateway", "probes.until_ready", "replicas.resources.gpu.compute_capability"}
    | {f"replicas.{field}" for field in GROUP_FIELDS_NOT_ACTED_ON}
)


_COMMANDS = commands_context("replicas")


class HTTPHeader(ConfigModel):
    name: str
    value: str


def _check_url_path(value: str) -> str:
    if not value.startswith("/"):
        raise ValueError(f"expected a path starting with /, got {value!r}")
    return value


class ProbeSpec(ConfigModel):
    """A readiness check: a replica gets traffic after `ready_after` successful requests in a row."""

    type: Literal["http"] = "http"
    url: Annotated[str, AfterValidator(_check_url_path)] = "/"
    method: Literal["get", "post", "put", "delete", "patch", "head"] = "get"
    headers: list[HTTPHeader] = Field(default_factory=list)
    body: str | None = None
    timeout: Duration = 10
    interval: Duration = 15
    ready_after: int = Field(default=1, ge=1)
    until_ready: bool | None = None  # stop probing once ready (not acted on: probes go on)


class ModelSpec(ConfigModel):
    type: Literal["chat"] = "chat"
    name: str
    format: Literal["openai", "tgi"] = "openai"  # tgi is refused: core.configuration.runnable
    prefix: str = "/v1"
    # dstack's fields of a TGI model, taken so that its `format: tgi` is refused for its real reason.
    chat_template: str | None = None
    eos_token: str | None = None

    @model_validator(mode="after")
    def _tgi_fields_with_tgi(self) -> ModelSpec:
        for field in ("chat_template", "eos_token"):
            if getattr(self, field) is not None and self.format != "tgi":
                raise ConfigFieldError([field], "a field of `format: tgi` models only")
        return self


# dstack's bounds (it writes both into nginx's configuration): a header name of letters, digits, dashes
# and underscores; a path prefix with no spaces, backslashes or braces, of nginx's length at most.
MIN_RPS = 1 / 60
MAX_RPS = float(2**63 // 60)  # dstack's bound (nginx counts requests a minute in a 64-bit integer)
_HEADER_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,500}$")
_LIMIT_PREFIX = re.compile(r"^/[^\s\\{}]{0,4093}$")


def _check_header_name(value: str) -> str:
    if not _HEADER_NAME.match(value):
        raise ValueError(f"invalid header name {value!r}: use letters, digits, dashes and underscores")
    return value


def _check_limit_prefix(value: str) -> str:
    if not _LIMIT_PREFIX.match(value):
        raise ValueError(
            f"invalid prefix {value!r}: a path starting with / (no spaces, backslashes or braces, "
            "4094 characters at most)"
        )
    return value


def _check_rps(value: float) -> float:
    if not value >= MIN_RPS:  # NaN fails it too
        raise ValueError(f"should be at least 1/60 (a request a minute), got {value:g}")
    if value > MAX_RPS:
        raise ValueError(f"should be at most {MAX_RPS:.0f} requests a second, got {value:g}")
    return value


class IPAddressKey(ConfigModel):
    """A limit per client: the address the proxy's connection comes from (docs/services.md#rate-limits)."""

    type: Literal["ip_address"] = "ip_address"


class HeaderKey(ConfigModel):
    """A limit per value of a request header (e.g. `Authorization`: per user)."""

    type: Literal["header"] = "header"
    header: Annotated[str, AfterValidator(_check_header_name)]


def _key_type(value: Any) -> str | None:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return f"<{kind}>" if kind in ("ip_address", "header") else None


_RateLimitKey = Annotated[
    Annotated[IPAddressKey, Tag("<ip_address>")] | Annotated[HeaderKey, Tag("<header>")],
    Discriminator(
        _key_type,
        custom_error_type="rate_limit_key",
        custom_error_message="expected {type: ip_address} or {type: header, header: NAME}",
    ),
]


class RateLimit(ConfigModel):
    """At most `rps` requests per second, and `burst` more at once, per key value, for the requests whose
    path starts with `prefix` (the longest prefix wins): dstack's nginx `limit_req ... nodelay`, enforced
    by Ferry's proxy (gateway/rate_limits.py, docs/services.md#rate-limits)."""

    prefix: Annotated[str, AfterValidator(_check_limit_prefix)] = "/"
    key: _RateLimitKey = IPAddressKey()
    rps: Annotated[float, AfterValidator(_check_rps)]
    burst: int = Field(default=0, ge=0)


def _check_rate_limits(limits: list[RateLimit]) -> list[RateLimit]:
    seen: set[str] = set()
    for index, limit in enumerate(limits):
        if limit.prefix in seen:
            raise ConfigFieldError(
                [index, "prefix"], f"{limit.prefix} has a limit already: give each prefix one limit"
            )
        seen.add(limit.prefix)
    return limits


_Gateway = Annotated[
    Annotated[bool, Tag("<bool>")] | Annotated[str, Tag("<string>")] | Annotated[Reference, Tag("<map>")],
    Discriminator(
        shape_of,
        custom_error_type="gateway_shape",
        custom_error_message="expected true, false, a name or {name, project}",
    ),
]
_ReplicasOrGroups = Annotated[
    Annotated[Replicas, Tag("<range>")] | Annotated[list[ReplicaGroupSpec], Tag("<list>")],
    Discriminator(
        lambda value: "<list>" if isinstance(value, list) else "<range>",
        custom_error_type="replicas_shape",
        custom_error_message="expected a count, a range such as 1..3, or a list of replica groups",
    ),
]
_Model = Annotated[
    Annotated[str, Tag("<string>")] | Annotated[ModelSpec, Tag("<map>")],
    Discriminator(shape_of, custom_error_type="model_shape", custom_error_message="expected a name or a map"),
]


class ServiceConfiguration(BaseRunConfiguration):
    NOT_ACTED_ON: ClassVar[frozenset[str]] = SERVICE_FIELDS_NOT_ACTED_ON

    type: Literal["service"] = "service"
    port: Port
    commands: Commands = Field(default_factory=list)
    replicas: _ReplicasOrGroups = ReplicaRange(min=1, max=1)
    scaling: ScalingSpec | None = None
    probes: list[ProbeSpec] = Field(default_factory=list)
    strip_prefix: bool = True
    auth: bool = True
    gateway: _Gateway | None = None
    https: bool | Literal["auto"] = True
    model: _Model | None = None
    rate_limits: Annotated[list[RateLimit], AfterValidator(_check_rate_limits)] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _groups_are_replicas(cls, data: Any) -> Any:
        """dstack's newer `groups:` is the list of replica groups `replicas:` also takes."""
        if not isinstance(data, dict) or "groups" not in data:
            return data
        data = dict(data)
        groups = data.pop("groups")
        if groups is None:
            return data
        if data.get("replicas") is not None:
            raise ConfigFieldError(["groups"], "cannot be used with `replicas`: give the groups once")
        return {**data, "replicas": groups}

    @model_validator(mode="after")
    def _check_service(self) -> ServiceConfiguration:
        if isinstance(self.replicas, ReplicaRange):
            self._needs_commands(self.commands)
            check_scaling(self.replicas, self.scaling, ["replicas"])
            return self
        check_groups(self.replicas)
        if self.retry is not None and any(g.router and g.router.type == "dynamo" for g in self.replicas):
            # As dstack: a retried router would come back at another address, which the workers already
            # running would never learn (docs/services.md#a-dynamo-router).
            raise ConfigFieldError(
                ["retry"], "cannot be used with a Dynamo router group: its workers keep the router's address"
            )
        for field in ("scaling", "commands"):
            if field in self.model_fields_set and getattr(self, field):
                raise ConfigFieldError([field], "set it in each replica group when `replicas` lists groups")
        return self

    @property
    def groups(self) -> list[ServiceGroup]:
        """The replica groups the run keeps: the single form is one group named None."""
        if isinstance(self.replicas, ReplicaRange):
            single = ServiceGroup(
                name=None,
                replicas=self.replicas,
                scaling=self.scaling,
                commands=list(self.commands),
                resources=self.resources,
            )
            return [single]
        return [
            ServiceGroup(
                name=group.name,
                replicas=group.count,
                scaling=group.scaling,
                commands=list(group.commands),
                resources=group.resources or self.resources,
                router=group.router,
                image=group.image,
                python=group.python,
                privileged=group.privileged,
            )
            for group in self.replicas
        ]

    @property
    def router_group(self) -> str | None:
        """The name of the group whose replicas get the service's requests and route them to the other
        groups' (docs/services.md#a-router-group); None when every group serves requests."""
        return next((group.name for group in self.groups if group.router is not None), None)

    @property
    def router_type(self) -> str | None:
        """The router group's `router.type` (sglang, dynamo); None without one."""
        return next((group.router.type for group in self.groups if group.router is not None), None)

    def group(self, name: str | None) -> ServiceGroup:
        """The group `name` (None: the single form); KeyError when there is no such group."""
        for group in self.groups:
            if group.name == name:
                return group
        raise KeyError(name)

    def templates(self) -> Iterator[tuple[list[str | int], str, Context]]:
        yield from super().templates()
        for at, command in enumerate(self.commands):
            yield ["commands", at], command, _COMMANDS
        for index, group in enumerate(self.replicas if isinstance(self.replicas, list) else []):
            for at, command in enumerate(group.commands):
                yield ["replicas", index, "commands", at], command, _COMMANDS
        for index, probe in enumerate(self.probes):
            texts = [("url", probe.url), ("body", probe.body)]
            texts += [(f"headers.{at}.value", header.value) for at, header in enumerate(probe.headers)]
            for where, text in texts:
                if text is not None:
                    yield ["probes", index, *where.split(".")], text, PROBE

    def _command_lists(self) -> list[list[str]]:
        groups = self.replicas if isinstance(self.replicas, list) else []
        return [self.commands, *(group.commands for group in groups)]

    def _env_references(self, values: Mapping[str, str]) -> dict[str, Any]:
        def resolved(probe: ProbeSpec) -> ProbeSpec:
            headers = [h.model_copy(update={"value": substitute(h.value, values)}) for h in probe.headers]
            body = None if probe.body is None else substitute(probe.body, values)
            return probe.model_copy(
                update={"url": substitute(probe.url, values), "body": body, "headers": headers}
            )

        return {**super()._env_references(values), "probes": [resolved(probe) for probe in self.probes]}

    def asks_for(self, field: str) -> bool:
        if field == "probes.until_ready":
            return any(probe.until_ready for probe in self.probes)
        if field in CONTAINER_FIELDS and any(group.has_own_container for group in self.groups):
            return False  # the container executor acts on it, for the groups with their own image
        return super().asks_for(field)

    def summary(self) -> ConfigSummary:
        if isinstance(self.replicas, ReplicaRange):
            return self._summary("service", f"replicas {self.replicas}")
        shown = ", ".join(f"{group.name} {group.replicas}" for group in self.groups)
        return self._summary("service", f"replica groups {shown}")
