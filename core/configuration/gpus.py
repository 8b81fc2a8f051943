"""GPU vendors and model names, the words of a `gpu:` shorthand, and the GPUs an instance has.

Knowing a name lets a spec infer its vendor (`A100` -> nvidia) and spell it canonically (`a100` -> `A100`);
unknown names are still accepted when they look like a model name (see `is_gpu_name`). The numbers of a
spec (memory, count) and GPUSpec itself are in core.configuration.resources, beside the ranges they
are made of.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

NVIDIA = "nvidia"
AMD = "amd"
INTEL = "intel"
GOOGLE = "google"
TENSTORRENT = "tenstorrent"

VENDORS = (NVIDIA, AMD, INTEL, GOOGLE, TENSTORRENT)
# dstack spells TPUs' vendor `tpu` and Tenstorrent's `tt` in some places.
_VENDOR_ALIASES = {
    NVIDIA: NVIDIA, AMD: AMD, INTEL: INTEL, GOOGLE: GOOGLE, TENSTORRENT: TENSTORRENT,
    "tpu": GOOGLE, "tt": TENSTORRENT,
}  # fmt: skip

# Model names, as Ferry spells them, with the memory sizes (GB) each is sold with: drivers report a little
# less (an H100 80GB shows 81559 MiB), and `H100:80GB` must still match it.
_MODELS: dict[str, dict[str, tuple[float, ...]]] = {
    NVIDIA: {
        "B200": (180, 192), "B100": (192,), "GB200": (186, 192), "H200": (141,), "H100": (80, 94, 96),
        "H800": (80,), "GH200": (96, 144), "A100": (40, 80), "A800": (40, 80), "A40": (48,), "A30": (24,),
        "A16": (16,), "A10": (24,), "A10G": (24,), "A2": (16,), "L40S": (48,), "L40": (48,), "L4": (24,),
        "T4": (16,), "V100": (16, 32), "P100": (16,), "P40": (24,), "P4": (8,), "K80": (12,), "M60": (8,),
        "A4000": (16,), "A4500": (20,), "A5000": (24,), "A6000": (48,), "RTX4000": (20,), "RTX5000": (32,),
        "RTX6000": (48,), "RTX3060": (12,), "RTX3070": (8,), "RTX3080": (10, 12), "RTX3090": (24,),
        "RTX4060": (8,), "RTX4070": (12,), "RTX4080": (16,), "RTX4090": (24,), "RTX5090": (32,),
    },
    AMD: {
        "MI100": (32,), "MI210": (64,), "MI250": (128,), "MI250X": (128,), "MI300A": (128,),
        "MI300X": (192,), "MI325X": (256,), "MI355X": (288,),
    },
    INTEL: {"Gaudi": (32,), "Gaudi2": (96,), "Gaudi3": (128,)},
}  # fmt: skip
_KNOWN = {vendor: tuple(models) for vendor, models in _MODELS.items()}
_MARKETED = {name.lower(): sizes for models in _MODELS.values() for name, sizes in models.items()}
_CANONICAL = {name.lower(): name for names in _KNOWN.values() for name in names}
_VENDOR_OF = {name.lower(): vendor for vendor, names in _KNOWN.items() for name in names}
# Families outside the table: future parts of a known line still get their vendor.
_PREFIXES = (
    (re.compile(r"^tpu-"), GOOGLE),
    (re.compile(r"^mi\d"), AMD),
    (re.compile(r"^[rg]tx"), NVIDIA),
    (re.compile(r"^(tt-|n150|n300|p150)"), TENSTORRENT),
)

# A model name starts with a letter; a digit or a dash (`tt-galaxy-wh`), or being in the table, keeps typos
# like `x` out.
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9._+-]*$")


def normalise_vendor(value: str) -> str:
    """The vendor a word names (`NVIDIA` -> `nvidia`, `tpu` -> `google`); ValueError for an unknown word."""
    vendor = _VENDOR_ALIASES.get(value.strip().lower())
    if vendor is None:
        raise ValueError(f"unknown GPU vendor {value!r}: use one of {', '.join(VENDORS)}")
    return vendor


def is_vendor(word: str) -> bool:
    return word.strip().lower() in _VENDOR_ALIASES


def is_gpu_name(word: str) -> bool:
    """Whether `word` can be a GPU model name: a known one, or a letter, then letters, digits, `.-_+`,
    with at least one digit or dash (`A100`, `RTX4090`, `tpu-v5e-8`, `MI300X`, `tt-galaxy-wh`)."""
    lowered = word.lower()
    if lowered in _CANONICAL:
        return True
    marked = any(ch.isdigit() or ch == "-" for ch in word)
    return bool(_NAME.match(word)) and marked and not is_vendor(word)


def canonical_gpu_name(name: str) -> str:
    """The table's spelling of a known name, TPU names in lower case, any other name as written."""
    lowered = name.lower()
    if lowered in _CANONICAL:
        return _CANONICAL[lowered]
    return lowered if lowered.startswith("tpu-") else name


def gpu_vendor(name: str) -> str | None:
    """The vendor of a GPU model name, None when Ferry does not know it."""
    lowered = name.lower()
    if lowered in _VENDOR_OF:
        return _VENDOR_OF[lowered]
    for pattern, vendor in _PREFIXES:
        if pattern.match(lowered):
            return vendor
    return None


def common_vendor(names: list[str]) -> str | None:
    """The vendor all of `names` share, None when one is unknown or they differ."""
    vendors = {gpu_vendor(name) for name in names}
    if len(vendors) == 1:
        return vendors.pop()
    return None


def gpu_names(value: Any) -> list[str]:
    """Canonical names, in order, without repeats, from `"A100,H100"` or a list of names."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(item, str) for item in items):
        raise ValueError(f"expected a GPU name or a list of names, got {value!r}")
    names: list[str] = []
    for item in (item.strip() for item in items):
        if not item:
            raise ValueError(f"{value!r} has an empty name")
        if not is_gpu_name(item):
            raise ValueError(f"{item!r} is not a GPU name")
        if canonical_gpu_name(item) not in names:
            names.append(canonical_gpu_name(item))
    if not names:
        raise ValueError("the list of GPU names is empty")
    return names


_WHOLE_OR_EMPTY = re.compile(r"^[0-9]*$")
_LABELS = {"name": "list of names", "memory": "memory size", "count": "count"}


def split_gpu_spec(text: str) -> dict[str, Any]:
    """The parts of `[vendor:]names[:memory][:count]`: {"vendor": str, "name": list[str], "memory": str,
    "count": str}, each only when present. After the vendor, parts may come in any order; a part is a count
    when made of whole numbers (`2`, `1..2`), a memory size when a bound ends in a unit (`40GB`, `24GB..`),
    and otherwise a comma-separated list of names. ValueError says what is wrong with which part."""

    def fail(reason: str) -> ValueError:
        return ValueError(f"invalid GPU spec {text!r}: {reason}")

    if not isinstance(text, str) or not text.strip():
        raise ValueError("a GPU spec cannot be empty")
    fields: dict[str, Any] = {}
    seen: dict[str, str] = {}
    for position, part in enumerate(part.strip() for part in text.split(":")):
        parsed: Any
        sides = [side.strip() for side in part.split("..")]
        if not part:
            raise fail("it has an empty part")
        if is_vendor(part):
            if position != 0:
                raise fail(f"the vendor {part!r} must come first, as in nvidia:H100:8")
            kind, parsed = "vendor", normalise_vendor(part)
        elif part[0].isalpha():
            bad = [name.strip() for name in part.split(",") if name.strip() and not is_gpu_name(name.strip())]
            if bad:
                raise fail(f"{bad[0]!r} is not a count, a memory size or a GPU name")
            try:
                kind, parsed = "name", gpu_names(part)
            except ValueError as error:
                raise fail(str(error)) from None
        elif all(_WHOLE_OR_EMPTY.match(side) for side in sides):
            kind, parsed = "count", part
        elif any(side[-1:].isalpha() for side in sides):
            kind, parsed = "memory", part
        elif part.startswith("-"):
            raise fail(f"{part!r} is negative")
        else:
            raise fail(f"{part!r} is not a count, a memory size or a GPU name")
        if kind in seen:
            hint = f"; list names with commas, as in {seen[kind]},{part}" if kind == "name" else ""
            raise fail(f"more than one {_LABELS[kind]} ({seen[kind]!r} and {part!r}){hint}")
        seen[kind] = part
        fields[kind] = parsed
    return fields


# Words drivers put around a model name: `NVIDIA GeForce RTX 4090`, `Tesla T4`, `AMD Instinct MI300X`.
_BRANDS = {
    "nvidia",
    "geforce",
    "tesla",
    "quadro",
    "amd",
    "instinct",
    "radeon",
    "intel",
    "habana",
    "labs",
    "pcie",
}


def gpu_name_from_driver(reported: str) -> str:
    """Ferry's name for a model as a driver reports it: `NVIDIA H100 80GB HBM3` -> `H100`,
    `NVIDIA A100-SXM4-40GB` -> `A100`, `NVIDIA GeForce RTX 4090` -> `RTX4090`; an unknown model keeps
    its words without the brand and the spaces (`NVIDIA GeForce GTX 1080 Ti` -> `GTX1080Ti`)."""
    words = [word for word in re.split(r"[\s_-]+", reported.strip()) if word]
    for first, second in zip(words, [*words[1:], ""], strict=True):
        for candidate in (first + second, first):  # `RTX 4090` before `RTX`
            if candidate.lower() in _CANONICAL:
                return _CANONICAL[candidate.lower()]
    kept = [word for word in reported.split() if word.lower() not in _BRANDS]
    return "".join(kept) or reported.strip()


def gpu_memory_from_driver(name: str, memory_mib: float) -> float:
    """GB as the model is sold when the reported size is within 10% below one of its sizes, else the
    reported size rounded to a whole GB (cards are sold in whole GB)."""
    reported = memory_mib / 1024
    for size in _MARKETED.get(name.lower(), ()):
        if size * 0.9 <= reported <= size * 1.01:
            return float(size)
    return float(round(reported)) if reported >= 1 else reported


class GPU(BaseModel):
    """A GPU an instance has, named as Ferry spells models (`H100`, not `NVIDIA H100 80GB HBM3`): see
    `from_driver`."""

    model_config = ConfigDict(extra="forbid")

    vendor: str = NVIDIA
    name: str
    memory_gb: float = Field(ge=0)
    index: int | None = None

    @field_validator("vendor", mode="before")
    @classmethod
    def _vendor(cls, value: Any) -> Any:
        return normalise_vendor(value) if isinstance(value, str) else value

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return canonical_gpu_name(value.strip())

    @classmethod
    def from_driver(cls, name: str, memory_mib: float, index: int | None = None, vendor: str = NVIDIA) -> GPU:
        """A GPU as `nvidia-smi` (or another driver) reports it, in Ferry's names and sizes."""
        ferry_name = gpu_name_from_driver(name)
        return cls(
            vendor=gpu_vendor(ferry_name) or vendor,
            name=ferry_name,
            memory_gb=gpu_memory_from_driver(ferry_name, memory_mib),
            index=index,
        )
