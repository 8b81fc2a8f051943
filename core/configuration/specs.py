"""Field types shared by the configurations, continued: replica ranges, schedules, retry, and small values."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Any

from croniter import croniter
from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from core.configuration.durations import Duration
from core.configuration.fields import Name, Reference
from core.configuration.model import ConfigFieldError, ConfigModel
from core.configuration.retry import RetryPolicy

# --- replicas ----------------------------------------------------------------------------------------

_RANGE = re.compile(r"^\s*(\d*)\s*\.\.\s*(\d*)\s*$")


def parse_int_range(value: Any, what: str) -> tuple[int | None, int | None] | None:
    """(min, max) for `n`, `"n"`, `"a..b"`, `"a.."`, `"..b"`; None when `value` is not such a spelling."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value, value
    if isinstance(value, str):
        if value.strip().isdigit():
            return int(value), int(value)
        match = _RANGE.match(value)
        if match:
            low, high = match.groups()
            return (int(low) if low else None), (int(high) if high else None)
        raise ValueError(f"expected a number of {what} or a range such as 1..3, got {value!r}")
    return None


class ReplicaRange(ConfigModel):
    """How many replicas a service keeps: `min..max` (a plain count n is n..n)."""

    min: int = Field(ge=0)
    max: int = Field(ge=1)

    @field_validator("max")
    @classmethod
    def _max_not_below_min(cls, value: int, info: ValidationInfo) -> int:
        low = info.data.get("min")
        if low is not None and value < low:
            raise ValueError(f"the maximum ({value}) is below the minimum ({low})")
        return value

    @property
    def is_fixed(self) -> bool:
        return self.min == self.max

    def __str__(self) -> str:
        return str(self.min) if self.is_fixed else f"{self.min}..{self.max}"


def _replicas(value: Any) -> Any:
    parsed = parse_int_range(value, "replicas")
    if parsed is None:
        if isinstance(value, dict | ReplicaRange):
            return value
        raise ValueError(f"expected a number of replicas or a range such as 1..3, got {value!r}")
    low, high = parsed
    if low == high and low is not None and low < 1:
        raise ValueError(
            "a fixed number of replicas must be at least 1 (a range such as 0..2 scales to zero)"
        )
    if high is None:
        raise ValueError(f"a range of replicas needs a maximum, e.g. {low or 0}..4")
    return {"min": low or 0, "max": high}


Replicas = Annotated[ReplicaRange, BeforeValidator(_replicas)]


# --- schedule ----------------------------------------------------------------------------------------


def _check_cron(expression: str) -> str:
    fields = expression.split()
    # Five fields, minute precision: croniter would also take a sixth (seconds) field dstack does not.
    if not (len(fields) == 5 or (len(fields) == 1 and fields[0].startswith("@"))) or not croniter.is_valid(
        expression
    ):
        raise ValueError(
            f"invalid cron expression {expression!r}: expected five fields, e.g. '0 8 * * mon-fri'"
        )
    return expression


def _cron_list(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


class Schedule(ConfigModel):
    """When a run starts on its own: every cron expression in `cron` (UTC) triggers it."""

    cron: Annotated[list[Annotated[str, AfterValidator(_check_cron)]], BeforeValidator(_cron_list)] = Field(
        min_length=1
    )


# --- dependencies ------------------------------------------------------------------------------------


class DependencyCondition(StrEnum):
    """What the run waited for must have done (Flux's afterok, afterany, afternotok, after)."""

    DONE = "done"  # ended DONE
    FINISHED = "finished"  # ended, however
    FAILED = "failed"  # ended, but not DONE (failed, stopped or aborted)
    STARTED = "started"  # reached RUNNING

    @property
    def wording(self) -> str:
        """How `ferry ps` says it: waiting for NAME <wording>."""
        return {"done": "to be done", "finished": "to finish", "failed": "to fail", "started": "to start"}[
            self.value
        ]


def parse_dependency(value: Any) -> Any:
    """`NAME` or `NAME:condition` (as `ferry apply --after` takes it) for {run: NAME, condition: ...}."""
    if not isinstance(value, str):
        return value
    run, sep, condition = value.partition(":")
    return {"run": run, "condition": condition} if sep else {"run": run}


class DependencySpec(ConfigModel):
    """A run this one waits for (docs/dependencies.md): it starts once `run` meets `condition`."""

    run: Name
    condition: DependencyCondition = DependencyCondition.DONE

    def description(self) -> str:
        """The dependency as its events name it, NAME:condition (their `description`,
        docs/dependencies.md#waiting)."""
        return f"{self.run}:{self.condition.value}"


Dependency = Annotated[DependencySpec, BeforeValidator(parse_dependency)]


# --- retry -------------------------------------------------------------------------------------------


def _retry(value: Any) -> Any:
    if value is True:
        return RetryPolicy()
    if value is False or value is None:
        return None
    if isinstance(value, dict | RetryPolicy):
        return value
    raise ValueError(f"expected true, false or {{on_events: [...], duration: ...}}, got {value!r}")


def _retry_events(value: RetryPolicy | None) -> RetryPolicy | None:
    if value is None:
        return None
    if not value.on_events:
        raise ConfigFieldError(["on_events"], "name at least one of no-capacity, interruption, error")
    return value.model_copy(update={"on_events": list(dict.fromkeys(value.on_events))})


# Normalised to RetryPolicy | None: false or absent -> None, true -> every event for 1h.
Retry = Annotated[RetryPolicy | None, BeforeValidator(_retry), AfterValidator(_retry_events)]


# --- small scalars -----------------------------------------------------------------------------------


def _python_version(value: Any) -> Any:
    if isinstance(value, float):
        # YAML reads 3.10 as the number 3.1: refuse to guess.
        text = repr(value)
        if text in {"3.1", "3.2"}:
            raise ValueError(f"write the version as a string, e.g. '{text}0' (YAML read {text})")
        return text
    return value


def _check_python_version(value: str) -> str:
    match = re.match(r"^3\.(\d+)$", value)
    if not match or not 9 <= int(match.group(1)) <= 14:
        raise ValueError(f"expected a Python version from 3.9 to 3.14, got {value!r}")
    return value


PythonVersion = Annotated[str, BeforeValidator(_python_version), AfterValidator(_check_python_version)]


def _check_shell(value: str) -> str:
    if value not in {"sh", "bash"} and not value.startswith("/"):
        raise ValueError(f"expected sh, bash or an absolute path to a shell, got {value!r}")
    return value


Shell = Annotated[str, AfterValidator(_check_shell)]


class RegistryAuth(ConfigModel):
    username: str
    password: str


class UtilizationPolicy(ConfigModel):
    min_gpu_utilization: int = Field(ge=0, le=100)
    time_window: Duration


# --- instances ---------------------------------------------------------------------------------------


def _instance_selector(value: Any) -> Any:
    return {"name": value} if isinstance(value, str) else value


class InstanceSpec(ConfigModel):
    """One of dstack's `instances`, where a run's jobs may go (docs/fleets.md#pinned-instances): an
    instance by `name`, by `hostname` (the address Ferry reaches it at), or a fleet's instance by its number
    (`fleet` and `instance`: an SSH fleet's host by its place in `ssh_config.hosts`, from 0)."""

    name: str | None = Field(default=None, min_length=1)
    hostname: str | None = Field(default=None, min_length=1)
    fleet: Reference | None = None
    instance: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _one_way(self) -> InstanceSpec:
        given = {name for name in type(self).model_fields if getattr(self, name) is not None}
        if given not in ({"name"}, {"hostname"}, {"fleet", "instance"}):
            raise ValueError("expected a name, {name}, {hostname}, or {fleet, instance}")
        return self

    def picks(self, name: str, address: str, fleet: str) -> bool:
        """Whether it names this instance (`fleet`: the instance's fleet, within the run's project)."""
        if self.name is not None:
            return name == self.name
        if self.hostname is not None:
            return address == self.hostname
        return fleet == self.fleet and name == f"{fleet}-{self.instance}"  # core.fleets.book.instance_name

    def shown(self) -> str:
        return self.name or self.hostname or f"{self.fleet} #{self.instance}"


InstanceSelector = Annotated[InstanceSpec, BeforeValidator(_instance_selector)]
