"""`type: volume`: a named volume (docs/volumes.md), a directory on one instance of a fleet.

dstack's volumes are cloud network disks (`backend`, `region`, `size`, `volume_id`...); Ferry creates no
cloud resource, so those fields are accepted and named in the warning line, and `volume_id` and a
Kubernetes `claim_name` (registering an existing disk) are refused (core.configuration.runnable). Ferry's
own fields say where the directory lives: `fleet` and, in a fleet of several instances, `instance`.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from core.configuration.base import ConfigSummary
from core.configuration.durations import OptionalDuration
from core.configuration.fields import Name
from core.configuration.model import ConfigModel

# dstack's fields about the cloud disk behind a volume (a Kubernetes one's too); `volume_id` and
# `claim_name` are refused (core.configuration.runnable).
VOLUME_FIELDS_NOT_ACTED_ON = frozenset(
    {"backend", "region", "availability_zone", "size", "auto_cleanup_duration", "tags"}
    | {"storage_class_name", "access_modes", "read_only"}
)


class VolumeConfiguration(ConfigModel):
    NOT_ACTED_ON: ClassVar[frozenset[str]] = VOLUME_FIELDS_NOT_ACTED_ON

    type: Literal["volume"] = "volume"
    name: Name | None = None  # None: `-n NAME` gives it
    fleet: Name | None = None  # None: where a run without `fleets` would go (docs/volumes.md)
    instance: str | None = Field(default=None, min_length=1)  # None: the fleet's first instance
    backend: str | None = None
    region: str | None = None
    availability_zone: str | None = None
    size: str | int | float | None = None
    volume_id: str | None = None
    auto_cleanup_duration: OptionalDuration = None
    tags: dict[str, str] | None = None
    claim_name: str | None = None
    storage_class_name: str | None = None
    access_modes: list[str] | None = None
    read_only: bool = False

    def summary(self) -> ConfigSummary:
        where = self.fleet or "-"
        if self.instance is not None:
            where += f"/{self.instance}"
        return ConfigSummary(
            type="volume",
            name=self.name or "-",
            resources="-",
            scale=f"fleet {where}",
            retry="-",
            schedule="-",
        )
