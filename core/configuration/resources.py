"""Resources as configurations write them (whether an instance has them: core.fleets.matching).

`cpu: 2..8`, `memory: 8GB..`, `disk: 100GB..`, `shm_size: 1GB`, `gpu: A100:40GB:2` and dstack's other
spellings become inclusive ranges (None for an open end). Sizes are kept in GB, with 1024 between MB, GB
and TB as dstack counts them. A single value is an exact range (`cpu: 4` is 4..4), as in dstack.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Self

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from core.configuration.gpus import (
    GPU,
    common_vendor,
    gpu_names,
    gpu_vendor,
    normalise_vendor,
    split_gpu_spec,
)
from core.configuration.ranges import (
    MemoryRange,
    MemorySize,
    Range,
    bounds,
    format_memory,
    optional_memory,
    parse_count_range,
    parse_memory,
    parse_memory_range,
    size_gb,
    whole_number,
)

__all__ = [
    "GPU",
    "MinimumResources",
    "GPUSpec",
    "MemoryRange",
    "MemorySize",
    "Range",
    "ResourcesSpec",
    "allocation",
    "format_memory",
    "known_arch",
    "parse_count_range",
    "parse_cpu",
    "parse_gpu",
    "parse_memory",
    "parse_memory_range",
]

_ARCHES = {
    **{spelling: "x86" for spelling in ("x86", "x86_64", "amd64", "x64")},
    **{spelling: "arm" for spelling in ("arm", "arm64", "aarch64")},
}


# --- CPU -----------------------------------------------------------------------------------------------


def normalise_arch(value: str) -> str:
    """`x86` or `arm` from any usual spelling (`x86_64`, `amd64`, `arm64`, `aarch64`)."""
    arch = _ARCHES.get(value.strip().lower()) if isinstance(value, str) else None
    if arch is None:
        raise ValueError(f"unknown CPU architecture {value!r}: use x86 or arm")
    return arch


def known_arch(value: str | None) -> str | None:
    """`x86` or `arm` from any usual spelling; None for None or any other (what an agent may report)."""
    return _ARCHES.get(value.strip().lower()) if isinstance(value, str) else None


DEFAULT_CPU = Range[int](min=2)


def parse_cpu(value: Any) -> tuple[str | None, Range[int]]:
    """(architecture or None, count) from `4`, `"2..8"`, `"x86:4.."`, `"arm"`, {"min": 2},
    {"arch": "arm", "count": "2.."}. A spec with an architecture but no count asks for dstack's 2.."""
    if isinstance(value, str) and ":" in value:
        parts = [part.strip() for part in value.split(":")]
        if len(parts) != 2 or not all(parts):
            raise ValueError(
                f"invalid CPU spec {value!r}: expected an architecture and a count, as in x86:4.."
            )
        arch_part, count_part = parts if parts[0].lower() in _ARCHES else parts[::-1]
        if arch_part.lower() not in _ARCHES:
            raise ValueError(f"invalid CPU spec {value!r}: neither part is an architecture (x86 or arm)")
        return normalise_arch(arch_part), parse_count_range(count_part, "CPU count")
    if isinstance(value, str) and value.strip().lower() in _ARCHES:
        return normalise_arch(value), DEFAULT_CPU
    if isinstance(value, dict) and ({"arch", "count"} & set(value)):
        unknown = sorted(str(key) for key in set(value) - {"arch", "count"})
        if unknown:
            raise ValueError(f"invalid CPU spec {value!r}: unknown key {unknown[0]!r} (use arch and count)")
        arch = value.get("arch")
        count = value.get("count")
        return (
            None if arch is None else normalise_arch(arch),
            DEFAULT_CPU if count is None else parse_count_range(count, "CPU count"),
        )
    return None, parse_count_range(value, "CPU count")


# --- GPU -----------------------------------------------------------------------------------------------

_ONE = Range[int](min=1, max=1)


def _parse_gpu_string(text: str) -> dict[str, Any]:
    """GPUSpec fields from the shorthand; split_gpu_spec does the words, this the numbers."""

    def fail(reason: str) -> ValueError:
        return ValueError(f"invalid GPU spec {text!r}: {reason}")

    fields: dict[str, Any] = split_gpu_spec(text)
    try:
        if "count" in fields:
            low, high = bounds(fields["count"], whole_number, str)
            fields["count"] = Range[int](min=low, max=high)
        if "memory" in fields:
            low_gb, high_gb = bounds(fields["memory"], size_gb, format_memory)
            fields["memory"] = Range[float](min=low_gb, max=high_gb)
    except ValueError as error:
        raise fail(str(error)) from None
    if "count" in fields and fields["count"].max == 0 and len(fields) > 1:
        raise fail("a count of 0 means no GPU, so it cannot go with a name, a vendor or a memory size")
    return fields


class GPUSpec(BaseModel):
    """The GPUs a job asks for. Validates from dstack's shorthand (`A100:40GB:2`, `24GB..:1..2`,
    `nvidia:H100:8`, `A100,H100:2`, `2..4`), an int count, or a mapping of these fields.

    `vendor` is inferred when every name is a known model of one vendor; an unbounded memory range is kept
    as None, so each spec has one form and `str()` reads back to an equal spec (total_memory aside, which
    the shorthand cannot express)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    vendor: str | None = None
    name: list[str] | None = None
    memory: Range[float] | None = None  # per GPU, GB
    total_memory: Range[float] | None = None  # over the GPUs counted, GB
    count: Range[int] = _ONE
    compute_capability: tuple[int, int] | None = None  # the least (major, minor), e.g. 7.5

    @model_validator(mode="before")
    @classmethod
    def _from_shorthand(cls, data: Any) -> Any:
        if isinstance(data, bool):
            raise ValueError(f"expected a GPU spec such as A100:2 or a count, got {data!r}")
        if isinstance(data, int):
            data = {"count": data}
        elif isinstance(data, str):
            data = _parse_gpu_string(data)
        if isinstance(data, dict) and data.get("vendor") is None and data.get("name") is not None:
            try:
                vendor = common_vendor(gpu_names(data["name"]))
            except ValueError:
                return data  # the name field reports it, with its location
            return {**data, "vendor": vendor}
        return data

    @field_validator("vendor", mode="before")
    @classmethod
    def _vendor(cls, value: Any) -> Any:
        return normalise_vendor(value) if isinstance(value, str) else value

    @field_validator("name", mode="before")
    @classmethod
    def _names(cls, value: Any) -> Any:
        return None if value is None else gpu_names(value)

    @field_validator("memory", "total_memory", mode="before")
    @classmethod
    def _memory(cls, value: Any) -> Any:
        if value is None:
            return None
        parsed = parse_memory_range(value, "GPU memory")
        return None if parsed.min is None and parsed.max is None else parsed

    @field_validator("count", mode="before")
    @classmethod
    def _count(cls, value: Any) -> Any:
        return parse_count_range(value, "GPU count")

    @field_validator("compute_capability", mode="before")
    @classmethod
    def _compute_capability(cls, value: Any) -> Any:
        """`7.5`, `"7.5"` or `[7, 5]`."""
        if value is None:
            return None
        parts = str(value).strip().split(".") if isinstance(value, float | str) else value
        if not isinstance(parts, list | tuple) or len(parts) != 2 or not all(str(p).isdigit() for p in parts):
            raise ValueError(f"expected a compute capability such as 7.5, got {value!r}")
        return int(parts[0]), int(parts[1])

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.count.max == 0:
            raise ValueError("a GPU spec asks for at least one GPU; for none, leave gpu out or write gpu: 0")
        for name in self.name or []:
            known = gpu_vendor(name)
            if self.vendor is not None and known is not None and known != self.vendor:
                raise ValueError(f"{name} is a GPU from {known}, not from {self.vendor}")
        return self

    def kind(self) -> str:
        """The shorthand without the count (`A100:40GB`, `nvidia`), `` for any GPU."""
        parts: list[str] = []
        if self.vendor is not None and (not self.name or common_vendor(self.name) != self.vendor):
            parts.append(self.vendor)  # written only when the names do not imply it
        if self.name:
            parts.append(",".join(self.name))
        if self.memory is not None:
            parts.append(self.memory.format(format_memory))
        return ":".join(parts)

    def __str__(self) -> str:
        kind = self.kind()
        if not kind:
            return str(self.count)
        return kind if self.count == _ONE else f"{kind}:{self.count}"

    def pretty(self) -> str:
        """The shorthand, plus the total memory when one is asked for."""
        if self.total_memory is None:
            return str(self)
        return f"{self} gpu_total={self.total_memory.format(format_memory)}"


def _means_no_gpu(value: Any) -> bool:
    """`gpu: 0`, `"0"`, `"..0"` or {"count": 0}: the job asks for no GPU at all."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return value == 0
    try:
        if isinstance(value, str):
            fields = _parse_gpu_string(value)
            return set(fields) == {"count"} and fields["count"].max == 0
        if isinstance(value, dict) and all(value.get(key) is None for key in set(value) - {"count"}):
            return "count" in value and parse_count_range(value["count"]).max == 0
    except ValueError:
        return False  # GPUSpec validation reports it
    return False


def parse_gpu(value: Any) -> GPUSpec | None:
    """A GPU spec from any spelling; None when it asks for no GPU (None, 0, `"0"`)."""
    if value is None or _means_no_gpu(value):
        return None
    return GPUSpec.model_validate(value)


# --- a job's resources ----------------------------------------------------------------------------------

DEFAULT_MEMORY = Range[float](min=8.0)
DEFAULT_DISK = Range[float](min=100.0)


class ResourcesSpec(BaseModel):
    """`resources:` in a configuration, with dstack's defaults (2.. CPUs, 8GB.. memory, 100GB.. disk).

    The CPU architecture of `cpu: arm:4` or `cpu: {arch: arm, count: 4}` is kept apart in `cpu_arch`
    (`x86` or `arm`, None for any), so `cpu` is always a plain range. Sizes are GB."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cpu: Range[int] = DEFAULT_CPU
    cpu_arch: str | None = None
    memory: Range[float] = DEFAULT_MEMORY
    shm_size: float | None = None
    disk: Range[float] = DEFAULT_DISK
    gpu: GPUSpec | None = None

    @model_validator(mode="before")
    @classmethod
    def _split_cpu_arch(cls, data: Any) -> Any:
        if not isinstance(data, dict) or "cpu" not in data:
            return data
        try:
            arch, count = parse_cpu(data["cpu"])
        except ValueError:
            return data  # the cpu field reports it, with its location
        if arch is None:
            return data
        given = data.get("cpu_arch")
        if given is not None and _ARCHES.get(str(given).strip().lower()) != arch:
            raise ValueError(f"cpu asks for {arch} but cpu_arch says {given!r}")
        return {**data, "cpu": count, "cpu_arch": arch}

    @field_validator("cpu", mode="before")
    @classmethod
    def _cpu(cls, value: Any) -> Any:
        return parse_cpu(value)[1]

    @field_validator("cpu_arch", mode="before")
    @classmethod
    def _cpu_arch(cls, value: Any) -> Any:
        return None if value is None else normalise_arch(value)

    @field_validator("memory", mode="before")
    @classmethod
    def _memory(cls, value: Any) -> Any:
        return parse_memory_range(value, "memory size")

    @field_validator("shm_size", mode="before")
    @classmethod
    def _shm_size(cls, value: Any) -> Any:
        return optional_memory(value)

    @field_validator("disk", mode="before")
    @classmethod
    def _disk(cls, value: Any) -> Any:
        if isinstance(value, dict) and "size" in value:
            if set(value) != {"size"}:
                raise ValueError(f"invalid disk {value!r}: a disk mapping has only size")
            value = value["size"]
        return parse_memory_range(value, "disk size")

    @field_validator("gpu", mode="before")
    @classmethod
    def _gpu(cls, value: Any) -> Any:
        return None if _means_no_gpu(value) else value

    def pretty(self) -> str:
        """One short line: `cpu=2.. mem=8GB.. disk=100GB.. gpu=A100:40GB:2`."""
        cpu = f"{self.cpu_arch}:{self.cpu}" if self.cpu_arch else str(self.cpu)
        words = [f"cpu={cpu}", f"mem={self.memory.format(format_memory)}"]
        if self.shm_size is not None:
            words.append(f"shm={format_memory(self.shm_size)}")
        words.append(f"disk={self.disk.format(format_memory)}")
        if self.gpu is not None:
            words.append(f"gpu={self.gpu.pretty()}")
        return " ".join(words)


class MinimumResources(NamedTuple):
    """What a job reserves on an instance: the lower bound of each range, 0 when it has none."""

    cpu: float
    memory_gb: float
    gpu_count: int


def allocation(spec: ResourcesSpec) -> MinimumResources:
    gpus = 0 if spec.gpu is None else spec.gpu.count.min or 0
    return MinimumResources(cpu=float(spec.cpu.min or 0), memory_gb=spec.memory.min or 0.0, gpu_count=gpus)
