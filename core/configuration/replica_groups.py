"""A service's replicas: one homogeneous set (`replicas: 2`, `replicas: 1..4` with `scaling`) or, in
dstack's newer form, a list of replica groups, each with its own count, `scaling`, `commands` and
`resources` (docs/services.md#replica-groups). Every group serves the same service behind the proxy; each
group's count follows the service's load by its own `scaling.target`. One group may be the service's router
(`router: {type: sglang}` or `dynamo`): the proxy sends every request to it. The worker registers the
other groups' ready replicas with an SGLang router (docs/services.md#a-router-group); Dynamo's workers are
told the router's address instead (docs/services.md#a-dynamo-router). A group's `image`, `python` and
`privileged` are its jobs' own, over the service's (docs/services.md#replica-groups).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, model_validator

from core.configuration.durations import Duration
from core.configuration.fields import Commands
from core.configuration.model import ConfigFieldError, ConfigModel
from core.configuration.resources import ResourcesSpec
from core.configuration.specs import ReplicaRange, Replicas

# Group fields dstack documents that Ferry takes but does not act on (named in `validate`'s warning line).
GROUP_FIELDS_NOT_ACTED_ON = ("nvcc", "spot_policy", "reservation")  # `docker: true` is refused, as a run's


_GROUP_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,40}$")


def _check_group_name(value: str) -> str:
    if not _GROUP_NAME.match(value):
        raise ValueError(
            f"invalid name {value!r}: use up to 41 lowercase letters, digits, dashes and underscores"
        )
    return value


GroupName = Annotated[str, AfterValidator(_check_group_name)]


class RouterSpec(ConfigModel):
    """A replica group that runs a router in front of the service's other groups (dstack's `router`)."""

    type: Literal["sglang", "dynamo"] = "sglang"


class ScalingSpec(ConfigModel):
    """How the autoscaler picks a replica count within `replicas`: keep `metric` near `target` per replica."""

    metric: Literal["rps"] = "rps"
    target: float = Field(gt=0)
    window: Duration = 60  # the requests of the last `window` make up the rate
    scale_up_delay: Duration = 300
    scale_down_delay: Duration = 600


def check_scaling(replicas: ReplicaRange, scaling: ScalingSpec | None, at: list[str | int]) -> None:
    """A range needs `scaling` to choose a count within it; a fixed count has nothing to scale."""
    if not replicas.is_fixed and scaling is None:
        raise ConfigFieldError(at, "a range of replicas needs `scaling` to choose a count within it")
    if replicas.is_fixed and scaling is not None:
        raise ConfigFieldError(
            [*at[:-1], "scaling"], "needs `replicas` to be a range such as 1..4, not a fixed count"
        )


class ReplicaGroupSpec(ConfigModel):
    """One group of a service's replicas (dstack writes its count as `count`, or `replicas`)."""

    name: GroupName | None = None  # the group's position ("0", "1", ...) when not given
    count: Replicas
    scaling: ScalingSpec | None = None
    commands: Commands = Field(default_factory=list)
    resources: ResourcesSpec | None = None  # None: the service's
    router: RouterSpec | None = None
    image: str | None = None
    python: str | float | None = None
    nvcc: bool | None = None
    docker: bool | None = None
    privileged: bool | None = None
    spot_policy: str | None = None
    reservation: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _count_spelled_replicas(cls, data: Any) -> Any:
        if isinstance(data, dict) and "replicas" in data:
            if "count" in data:
                raise ConfigFieldError(["replicas"], "give the group's count once: `count` or `replicas`")
            data = {("count" if key == "replicas" else key): value for key, value in data.items()}
        return data

    @model_validator(mode="after")
    def _check_group(self) -> ReplicaGroupSpec:
        check_scaling(self.count, self.scaling, ["count"])
        if self.image is not None and self.python is not None:
            raise ConfigFieldError(["python"], "cannot be used with `image`: the image decides the Python")
        return self


class ServiceGroup(ConfigModel):
    """A group as the run acts on it: the single form is one group named None."""

    name: str | None
    replicas: ReplicaRange
    scaling: ScalingSpec | None
    commands: list[str]
    resources: ResourcesSpec
    router: RouterSpec | None = None
    # The group's own container (None: the service's): `image` or `python`, and `privileged`.
    image: str | None = None
    python: str | float | None = None
    privileged: bool | None = None

    @property
    def has_own_container(self) -> bool:
        """Whether the group names its own image (or Python), which replaces the service's."""
        return self.image is not None or self.python is not None

    @property
    def starting_count(self) -> int:
        """The lower bound of `replicas`, but at least one: a service scaled to zero still starts one."""
        return max(self.replicas.min, 1)


def check_groups(groups: list[ReplicaGroupSpec]) -> None:
    """Named by position when unnamed; names unique; each group has something to run."""
    if not groups:
        raise ConfigFieldError(["replicas"], "an empty list: give a count, a range, or at least one group")
    for index, group in enumerate(groups):
        if group.name is None:
            group.name = str(index)
    for name, count in Counter(group.name for group in groups).items():
        if count > 1:
            index = [group.name for group in groups].index(name)
            later = [i for i, group in enumerate(groups) if group.name == name][1]
            raise ConfigFieldError(
                ["replicas", later, "name"], f"two groups are named {name!r} (groups {index} and {later})"
            )
    for index, group in enumerate(groups):
        if not group.commands and group.image is None:
            raise ConfigFieldError(["replicas", index, "commands"], "required: each group lists its commands")
    check_router(groups)


def check_router(groups: list[ReplicaGroupSpec]) -> None:
    """As dstack: at most one group is the router, and it has exactly one replica."""
    routers = [index for index, group in enumerate(groups) if group.router is not None]
    if len(routers) > 1:
        raise ConfigFieldError(
            ["replicas", routers[1], "router"], f"only one group may be the router (group {routers[0]} is)"
        )
    if routers:
        count = groups[routers[0]].count
        if count.min != 1 or count.max != 1:
            raise ConfigFieldError(["replicas", routers[0], "count"], "a router group has exactly 1 replica")
