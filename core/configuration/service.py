"""`type: service`: commands that serve a port, as replicas behind Ferry's proxy (docs/services.md).

The proxy (gateway/) serves each service at /proxy/services/<project>/<run>/, checks `auth`, routes by
`model`, and sends requests only to replicas whose `probes` pass; `replicas` as a range with `scaling`
autoscales. A separate gateway (`gateway`), its `https`, and `rate_limits` are not acted on: `ferry
validate` names them in its warning line.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import AfterValidator, Discriminator, Field, Tag, model_validator

from core.configuration.base import RUN_FIELDS_NOT_ACTED_ON, BaseRunConfiguration, ConfigSummary
from core.configuration.durations import Duration
from core.configuration.fields import Commands, Port
from core.configuration.model import ConfigFieldError, ConfigModel, shape_of
from core.configuration.specs import ReplicaRange, Replicas

# Ferry's proxy is in its server: no separate gateway, so no HTTPS of its own, and no rate limits yet.
SERVICE_FIELDS_NOT_ACTED_ON = RUN_FIELDS_NOT_ACTED_ON | {"gateway", "https", "rate_limits"}


class ScalingSpec(ConfigModel):
    """How the autoscaler picks a replica count within `replicas`: keep `metric` near `target` per replica."""

    metric: Literal["rps"] = "rps"
    target: float = Field(gt=0)
    window: Duration = 60  # the requests of the last `window` make up the rate
    scale_up_delay: Duration = 300
    scale_down_delay: Duration = 600


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


class ModelSpec(ConfigModel):
    type: Literal["chat"] = "chat"
    name: str
    format: Literal["openai", "tgi"] = "openai"
    prefix: str = "/v1"


class IPAddressKey(ConfigModel):
    type: Literal["ip_address"]


class HeaderKey(ConfigModel):
    type: Literal["header"]
    header: str


class RateLimit(ConfigModel):
    prefix: str = "/"
    key: Annotated[IPAddressKey | HeaderKey, Field(discriminator="type")] = IPAddressKey(type="ip_address")
    rps: float = Field(gt=0)
    burst: int = Field(default=0, ge=0)


_Gateway = Annotated[
    Annotated[bool, Tag("<bool>")] | Annotated[str, Tag("<string>")],
    Discriminator(
        shape_of, custom_error_type="gateway_shape", custom_error_message="expected true, false or a name"
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
    replicas: Replicas = ReplicaRange(min=1, max=1)
    scaling: ScalingSpec | None = None
    probes: list[ProbeSpec] = Field(default_factory=list)
    strip_prefix: bool = True
    auth: bool = True
    gateway: _Gateway | None = None
    https: bool = True
    model: _Model | None = None
    rate_limits: list[RateLimit] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check_service(self) -> ServiceConfiguration:
        self._needs_commands(self.commands)
        if not self.replicas.is_fixed and self.scaling is None:
            raise ConfigFieldError(
                ["replicas"], "a range of replicas needs `scaling` to choose a count within it"
            )
        if self.replicas.is_fixed and self.scaling is not None:
            raise ConfigFieldError(
                ["scaling"], "needs `replicas` to be a range such as 1..4, not a fixed count"
            )
        return self

    def asks_for(self, field: str) -> bool:
        if field == "https":
            # On by default (dstack's), but it is about a gateway's domain: asked for only with one.
            return self.https and self.gateway not in (None, False)
        return super().asks_for(field)

    def summary(self) -> ConfigSummary:
        return self._summary("service", f"replicas {self.replicas}")
