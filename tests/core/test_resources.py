"""Resources: every spelling dstack configurations use, every rejection, matching, and round trips."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from pydantic import ValidationError

from core.configuration.gpus import gpu_memory_from_driver, gpu_name_from_driver
from core.configuration.ranges import format_measured_memory
from core.configuration.resources import (
    GPU,
    GPUSpec,
    MinimumResources,
    Range,
    ResourcesSpec,
    allocation,
    format_memory,
    parse_count_range,
    parse_cpu,
    parse_gpu,
    parse_memory,
    parse_memory_range,
)
from core.fleets.matching import InstanceResources, matching_gpus, satisfies, unsatisfied


def ints(low: int | None, high: int | None) -> Range[int]:
    return Range[int](min=low, max=high)


def gbs(low: float | None, high: float | None) -> Range[float]:
    return Range[float](min=low, max=high)


def messages(error: ValidationError) -> str:
    return " | ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())


# --- memory sizes --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "gb"),
    [
        ("512MB", 0.5),
        ("1TB", 1024.0),
        (16, 16.0),
        (16.5, 16.5),
        ("16", 16.0),
        ("8GB", 8.0),
        ("8gb", 8.0),
        (" 8 GB ", 8.0),
        ("1.5GB", 1.5),
        ("0.5TB", 512.0),
        ("2GiB", 2.0),
        ("256MiB", 0.25),
        (".5GB", 0.5),
        ("0", 0.0),
    ],
)
def test_parse_memory(value: str | int | float, gb: float) -> None:
    assert parse_memory(value) == gb


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("", "empty"),
        ("-1GB", "negative"),
        (-1, "negative"),
        ("8XB", "unknown unit 'XB'"),
        ("8KB", "unknown unit 'KB'"),
        ("abc", "not a size"),
        ("8 G B", "not a size"),
        (True, "expected a size"),
        (None, "expected a size"),
        ("1e999GB", "not a finite size"),
        (math.nan, "not a finite size"),
        (math.inf, "not a finite size"),
    ],
)
def test_parse_memory_rejects(value: Any, reason: str) -> None:
    with pytest.raises(ValueError, match=reason) as caught:
        parse_memory(value)
    assert str(caught.value).startswith(f"invalid memory size {value!r}")


@pytest.mark.parametrize(
    ("gb", "text"),
    [
        (0.5, "512MB"),
        (8, "8GB"),
        (1024, "1TB"),
        (2048, "2TB"),
        (1536, "1536GB"),
        (1.5, "1.5GB"),
        (0.25, "256MB"),
        (0, "0GB"),
        (80.0, "80GB"),
    ],
)
def test_format_memory(gb: float, text: str) -> None:
    assert format_memory(gb) == text


@pytest.mark.parametrize(
    ("gb", "text"),
    [(23.540584564208984, "23.5GB"), (0.3, "307MB"), (2048, "2TB"), (1800.04, "1800GB"), (0, "0GB")],
)
def test_a_measured_amount_is_rounded_for_reading(gb: float, text: str) -> None:
    assert format_measured_memory(gb) == text


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("8GB..", gbs(8, None)),
        ("..64GB", gbs(None, 64)),
        ("8GB..64GB", gbs(8, 64)),
        ("8GB .. 64GB", gbs(8, 64)),
        ("16GB", gbs(16, 16)),
        (16, gbs(16, 16)),
        ("512MB..1TB", gbs(0.5, 1024)),
        ({"min": "8GB"}, gbs(8, None)),
        ({"min": 8, "max": "64GB"}, gbs(8, 64)),
        (gbs(1, 2), gbs(1, 2)),
        ("..", gbs(None, None)),
    ],
)
def test_parse_memory_range(value: Any, expected: Range[float]) -> None:
    assert parse_memory_range(value) == expected


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("64GB..8GB", "the lower bound 64GB is above the upper bound 8GB"),
        ("-8GB..", "negative"),
        ("8XB..", "unknown unit 'XB'"),
        ("1..2..3", "not a range"),
        ({"min": "8GB", "mux": 1}, "unknown key 'mux'"),
        (None, "empty"),
        ("", "empty"),
    ],
)
def test_parse_memory_range_rejects(value: Any, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_memory_range(value)


# --- ranges --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected", "text"),
    [
        (4, ints(4, 4), "4"),
        ("2..8", ints(2, 8), "2..8"),
        ("4..", ints(4, None), "4.."),
        ("..8", ints(None, 8), "..8"),
        ({"min": 2, "max": 8}, ints(2, 8), "2..8"),
        ("..", ints(None, None), ".."),
    ],
)
def test_count_range(value: Any, expected: Range[int], text: str) -> None:
    parsed = parse_count_range(value)
    assert parsed == expected
    assert str(parsed) == text
    assert Range[int].model_validate(value) == expected  # Range reads the plain forms on its own too


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("8..2", "the lower bound 8 is above the upper bound 2"),
        ("-1", "negative"),
        (-1, "negative"),
        ("2.5", "not a whole number"),
        (2.5, "not a whole number"),
        (True, "not a whole number"),
        ("x..4", "'x' is not a whole number"),
        ("", "empty"),
    ],
)
def test_count_range_rejects(value: Any, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_count_range(value)


def test_range_checks_its_bounds() -> None:
    with pytest.raises(ValidationError, match="above the upper bound"):
        Range[int](min=3, max=2)
    with pytest.raises(ValidationError, match="negative"):
        Range[float](min=-1.0)


def test_range_contains_and_formats() -> None:
    assert ints(2, 8).contains(2) and ints(2, 8).contains(8) and not ints(2, 8).contains(9)
    assert ints(None, None).contains(0)
    assert gbs(8, None).format(format_memory) == "8GB.."
    assert gbs(0.5, 64).format(format_memory) == "512MB..64GB"
    assert str(gbs(1.5, None)) == "1.5.."


# --- CPU -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "arch", "count"),
    [
        (4, None, ints(4, 4)),
        ("2..8", None, ints(2, 8)),
        ("4..", None, ints(4, None)),
        ({"min": 2, "max": 8}, None, ints(2, 8)),
        ("x86:4", "x86", ints(4, 4)),
        ("arm:2..", "arm", ints(2, None)),
        ("4..:arm64", "arm", ints(4, None)),
        ("arm", "arm", ints(2, None)),
        ({"arch": "arm", "count": "2.."}, "arm", ints(2, None)),
        ({"arch": "x86_64"}, "x86", ints(2, None)),
        ({"count": 8}, None, ints(8, 8)),
    ],
)
def test_cpu_spellings(value: Any, arch: str | None, count: Range[int]) -> None:
    assert parse_cpu(value) == (arch, count)
    spec = ResourcesSpec.model_validate({"cpu": value})
    assert (spec.cpu_arch, spec.cpu) == (arch, count)


# --- GPU -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "vendor", "name", "memory", "count"),
    [
        ("A100", "nvidia", ["A100"], None, ints(1, 1)),
        ("a100", "nvidia", ["A100"], None, ints(1, 1)),
        ("A100:2", "nvidia", ["A100"], None, ints(2, 2)),
        ("A100:40GB:2", "nvidia", ["A100"], gbs(40, 40), ints(2, 2)),
        ("24GB..:1..2", None, None, gbs(24, None), ints(1, 2)),
        ("nvidia:H100:8", "nvidia", ["H100"], None, ints(8, 8)),
        ("A100,H100:2", "nvidia", ["A100", "H100"], None, ints(2, 2)),
        ("A100, H100 : 2", "nvidia", ["A100", "H100"], None, ints(2, 2)),
        ("2..4", None, None, None, ints(2, 4)),
        ("2..", None, None, None, ints(2, None)),
        ("2", None, None, None, ints(2, 2)),
        (2, None, None, None, ints(2, 2)),
        ("40GB..80GB", None, None, gbs(40, 80), ints(1, 1)),
        ("2:A100", "nvidia", ["A100"], None, ints(2, 2)),
        ("MI300X:192GB:8", "amd", ["MI300X"], gbs(192, 192), ints(8, 8)),
        ("amd:2", "amd", None, None, ints(2, 2)),
        ("NVIDIA", "nvidia", None, None, ints(1, 1)),
        ("tpu-v5e-8", "google", ["tpu-v5e-8"], None, ints(1, 1)),
        ("tpu:v3-8", "google", ["v3-8"], None, ints(1, 1)),
        ("Gaudi2:8", "intel", ["Gaudi2"], None, ints(8, 8)),
        ("A100,MI300X", None, ["A100", "MI300X"], None, ints(1, 1)),
        ("nvidia:Foo1", "nvidia", ["Foo1"], None, ints(1, 1)),
        ("A100:0..2", "nvidia", ["A100"], None, ints(0, 2)),
        ({"name": "A100", "memory": "40GB", "count": "1..2"}, "nvidia", ["A100"], gbs(40, 40), ints(1, 2)),
        ({"name": ["A100", "H100"], "count": 2}, "nvidia", ["A100", "H100"], None, ints(2, 2)),
        ({"name": "A100,H100"}, "nvidia", ["A100", "H100"], None, ints(1, 1)),
        ({"vendor": "amd", "count": {"min": 1}}, "amd", None, None, ints(1, None)),
        (
            {"name": "A100", "vendor": "nvidia", "memory": "..80GB"},
            "nvidia",
            ["A100"],
            gbs(None, 80),
            ints(1, 1),
        ),
        ({"memory": "24GB..", "total_memory": "80GB.."}, None, None, gbs(24, None), ints(1, 1)),
    ],
)
def test_gpu_spellings(
    value: Any, vendor: str | None, name: list[str] | None, memory: Range[float] | None, count: Range[int]
) -> None:
    spec = parse_gpu(value)
    assert spec is not None
    assert (spec.vendor, spec.name, spec.memory, spec.count) == (vendor, name, memory, count)
    assert ResourcesSpec.model_validate({"gpu": value}).gpu == spec
    assert GPUSpec.model_validate(value) == spec


@pytest.mark.parametrize("value", [None, 0, "0", "..0", "0..0", {"count": 0}, {"count": "0", "name": None}])
def test_gpu_none(value: Any) -> None:
    assert parse_gpu(value) is None
    assert ResourcesSpec.model_validate({"gpu": value}).gpu is None


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("A100:x", "invalid GPU spec 'A100:x': 'x' is not a count, a memory size or a GPU name"),
        ("x", "'x' is not a count, a memory size or a GPU name"),
        ("A100,x:2", "'x' is not a count, a memory size or a GPU name"),
        ("A100:2:4", "more than one count ('2' and '4')"),
        ("A100:40GB:80GB", "more than one memory size ('40GB' and '80GB')"),
        (
            "A100:H100",
            "more than one list of names ('A100' and 'H100'); list names with commas, as in A100,H100",
        ),
        ("A100:0", "a count of 0 means no GPU"),
        ("nvidia:0", "a count of 0 means no GPU"),
        ("24GB:0", "a count of 0 means no GPU"),
        ("A100:..0", "a count of 0 means no GPU"),
        ("A100:nvidia", "the vendor 'nvidia' must come first"),
        ("nvidia:amd", "the vendor 'amd' must come first"),
        ("", "a GPU spec cannot be empty"),
        ("  ", "a GPU spec cannot be empty"),
        ("A100::2", "it has an empty part"),
        ("A100,,H100", "empty name"),
        ("40XB", "unknown unit 'XB'"),
        ("A100:-2", "'-2' is negative"),
        (-1, "negative"),
        ("A100:2..1", "the lower bound 2 is above the upper bound 1"),
        ("A100:80GB..40GB", "the lower bound 80GB is above the upper bound 40GB"),
        ("A100:1.5", "'1.5' is not a count, a memory size or a GPU name"),
        ("amd:A100", "A100 is a GPU from nvidia, not from amd"),
        (True, "expected a GPU spec"),
        ({"name": "x"}, "'x' is not a GPU name"),
        ({"name": []}, "the list of GPU names is empty"),
        ({"name": "A100", "count": 0}, "at least one GPU"),
        ({"vendor": "acme"}, "unknown GPU vendor 'acme'"),
        ({"count": -1}, "negative"),
        ({"size": 2}, "Extra inputs are not permitted"),
    ],
)
def test_gpu_rejects(value: Any, reason: str) -> None:
    with pytest.raises(ValidationError) as caught:
        ResourcesSpec.model_validate({"gpu": value})
    assert reason in messages(caught.value)
    assert messages(caught.value).startswith("gpu")


def test_gpu_errors_point_at_the_field() -> None:
    with pytest.raises(ValidationError) as caught:
        ResourcesSpec.model_validate({"gpu": {"name": "A100", "memory": "40XB"}})
    assert messages(caught.value).startswith("gpu.memory: Value error, invalid GPU memory '40XB'")


# --- the whole spec ------------------------------------------------------------------------------------


def test_defaults_are_dstacks() -> None:
    spec = ResourcesSpec()
    assert (spec.cpu, spec.memory, spec.disk) == (ints(2, None), gbs(8, None), gbs(100, None))
    assert spec.gpu is None and spec.shm_size is None and spec.cpu_arch is None
    assert spec.pretty() == "cpu=2.. mem=8GB.. disk=100GB.."


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("memory", "8GB", gbs(8, 8)),
        ("memory", "8GB..", gbs(8, None)),
        ("memory", "..64GB", gbs(None, 64)),
        ("memory", "512MB", gbs(0.5, 0.5)),
        ("memory", "1TB", gbs(1024, 1024)),
        ("memory", 16, gbs(16, 16)),
        ("memory", {"min": "8GB"}, gbs(8, None)),
        ("disk", "100GB..", gbs(100, None)),
        ("disk", {"size": "100GB.."}, gbs(100, None)),
        ("disk", {"size": "1TB"}, gbs(1024, 1024)),
        ("disk", 200, gbs(200, 200)),
        ("disk", {"min": "50GB", "max": "1TB"}, gbs(50, 1024)),
        ("shm_size", "1GB", 1.0),
        ("shm_size", "512MB", 0.5),
        ("shm_size", 2, 2.0),
        ("shm_size", None, None),
    ],
)
def test_field_spellings(field: str, value: Any, expected: Any) -> None:
    assert getattr(ResourcesSpec.model_validate({field: value}), field) == expected


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        ({"cpu": "-1"}, "cpu: Value error, invalid CPU count '-1': '-1' is negative"),
        ({"cpu": "8..2"}, "cpu: Value error, invalid CPU count '8..2': the lower bound 8 is above"),
        ({"cpu": "2.5"}, "cpu: Value error, invalid CPU count '2.5': '2.5' is not a whole number"),
        ({"cpu": "mips:4"}, "cpu: Value error, invalid CPU spec 'mips:4': neither part is an architecture"),
        ({"cpu": "arm:x86"}, "cpu: Value error, invalid CPU count 'x86'"),
        ({"cpu": "arm:4:2"}, "cpu: Value error, invalid CPU spec 'arm:4:2'"),
        ({"cpu": {"arch": "mips"}}, "cpu: Value error, unknown CPU architecture 'mips'"),
        ({"cpu": {"arch": "arm", "min": 2}}, "cpu: Value error, invalid CPU spec"),
        ({"cpu": ""}, "cpu: Value error, invalid CPU count '': the value is empty"),
        ({"cpu": None}, "cpu: Value error, invalid CPU count None"),
        ({"cpu": True}, "cpu: Value error, invalid CPU count True"),
        ({"cpu": "arm:4", "cpu_arch": "x86"}, "cpu asks for arm but cpu_arch says 'x86'"),
        ({"cpu_arch": "sparc"}, "cpu_arch: Value error, unknown CPU architecture 'sparc'"),
        ({"memory": "8XB"}, "memory: Value error, invalid memory size '8XB': unknown unit 'XB'"),
        (
            {"memory": "64GB..8GB"},
            "memory: Value error, invalid memory size '64GB..8GB': the lower bound 64GB",
        ),
        ({"memory": "-8GB"}, "memory: Value error, invalid memory size '-8GB': '-8GB' is negative"),
        ({"memory": ""}, "memory: Value error, invalid memory size '': the value is empty"),
        ({"disk": "1PB"}, "disk: Value error, invalid disk size '1PB': unknown unit 'PB'"),
        ({"disk": {"size": "1TB", "type": "ssd"}}, "disk: Value error, invalid disk"),
        ({"shm_size": "-1GB"}, "shm_size: Value error, invalid memory size '-1GB'"),
        ({"gpus": 2}, "gpus: Extra inputs are not permitted"),
    ],
)
def test_spec_rejects(data: dict[str, Any], reason: str) -> None:
    with pytest.raises(ValidationError) as caught:
        ResourcesSpec.model_validate(data)
    assert reason in messages(caught.value)


@pytest.mark.parametrize(
    ("data", "pretty"),
    [
        ({"gpu": "A100:40GB:2"}, "cpu=2.. mem=8GB.. disk=100GB.. gpu=A100:40GB:2"),
        (
            {"cpu": "arm:4..", "memory": "..64GB", "shm_size": "512MB"},
            "cpu=arm:4.. mem=..64GB shm=512MB disk=100GB..",
        ),
        ({"cpu": 8, "memory": "16GB..32GB", "disk": {"size": "1TB.."}}, "cpu=8 mem=16GB..32GB disk=1TB.."),
        ({"gpu": "nvidia:H100:8"}, "cpu=2.. mem=8GB.. disk=100GB.. gpu=H100:8"),
        ({"gpu": "24GB..:1..2"}, "cpu=2.. mem=8GB.. disk=100GB.. gpu=24GB..:1..2"),
        ({"gpu": "nvidia:2"}, "cpu=2.. mem=8GB.. disk=100GB.. gpu=nvidia:2"),
        ({"gpu": {"count": "1.."}}, "cpu=2.. mem=8GB.. disk=100GB.. gpu=1.."),
        (
            {"gpu": {"name": "A100", "count": 2, "total_memory": "80GB.."}},
            "cpu=2.. mem=8GB.. disk=100GB.. gpu=A100:2 gpu_total=80GB..",
        ),
    ],
)
def test_pretty(data: dict[str, Any], pretty: str) -> None:
    assert ResourcesSpec.model_validate(data).pretty() == pretty


def test_spec_survives_its_own_dump() -> None:
    spec = ResourcesSpec.model_validate(
        {
            "cpu": "arm:4..",
            "memory": "..64GB",
            "shm_size": "512MB",
            "disk": {"size": "1TB.."},
            "gpu": {"name": "A100,H100", "memory": "40GB..", "total_memory": "160GB", "count": "2..4"},
        }
    )
    assert ResourcesSpec.model_validate(spec.model_dump()) == spec
    assert ResourcesSpec.model_validate_json(spec.model_dump_json()) == spec


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({}, MinimumResources(cpu=2.0, memory_gb=8.0, gpu_count=0)),
        (
            {"cpu": "..8", "memory": "..64GB", "gpu": "..4"},
            MinimumResources(cpu=0.0, memory_gb=0.0, gpu_count=0),
        ),
        (
            {"cpu": 4, "memory": "512MB", "gpu": "A100:2"},
            MinimumResources(cpu=4.0, memory_gb=0.5, gpu_count=2),
        ),
        ({"gpu": "24GB..:1..2"}, MinimumResources(cpu=2.0, memory_gb=8.0, gpu_count=1)),
    ],
)
def test_allocation(data: dict[str, Any], expected: MinimumResources) -> None:
    assert allocation(ResourcesSpec.model_validate(data)) == expected
    cpu, memory_gb, gpu_count = allocation(ResourcesSpec.model_validate(data))
    assert (cpu, memory_gb, gpu_count) == tuple(expected)


# --- matching ------------------------------------------------------------------------------------------

LAPTOP = InstanceResources(cpus=8, memory_gb=16, disk_gb=512)
H100_BOX = InstanceResources(
    cpus=208,
    memory_gb=1800,
    disk_gb=30 * 1024,
    gpus=[GPU(name="H100", memory_gb=80, index=i) for i in range(8)],
    cpu_arch="x86_64",
)
A100_BOX = InstanceResources(
    cpus=24,
    memory_gb=170,
    disk_gb=1024,
    gpus=[GPU(vendor="NVIDIA", name="a100", memory_gb=40, index=i) for i in range(2)],
)


@pytest.mark.parametrize(
    ("instance", "text"),
    [
        (LAPTOP, "cpu=8 mem=16GB disk=512GB"),
        (H100_BOX, "cpu=x86:208 mem=1800GB disk=30TB gpu=8xH100:80GB"),
        (A100_BOX, "cpu=24 mem=170GB disk=1TB gpu=2xA100:40GB"),
        (
            InstanceResources(
                cpus=0.5,
                memory_gb=0.5,
                disk_gb=10,
                gpus=[GPU(name="A100", memory_gb=80), GPU(name="T4", memory_gb=16)],
            ),
            "cpu=0.5 mem=512MB disk=10GB gpu=1xA100:80GB+1xT4:16GB",
        ),
    ],
)
def test_instance_pretty(instance: InstanceResources, text: str) -> None:
    assert instance.pretty() == text


@pytest.mark.parametrize(
    ("data", "laptop", "h100_box", "a100_box"),
    [
        ({}, [], [], []),
        ({"gpu": 0}, [], [], []),
        ({"cpu": "4.."}, [], [], []),
        (
            {"cpu": 4},
            ["needs 4 CPUs, instance has 8"],
            ["needs 4 CPUs, instance has 208"],
            ["needs 4 CPUs, instance has 24"],
        ),
        ({"cpu": "16.."}, ["needs 16.. CPUs, instance has 8"], [], []),
        (
            {"memory": "..64GB"},
            [],
            ["needs ..64GB memory, instance has 1800GB"],
            ["needs ..64GB memory, instance has 170GB"],
        ),
        ({"memory": "32GB.."}, ["needs 32GB.. memory, instance has 16GB"], [], []),
        ({"disk": "1TB.."}, ["needs 1TB.. disk, instance has 512GB"], [], []),
        (
            {"gpu": "A100:2"},
            ["needs 2 GPUs A100, instance has no GPUs"],
            ["needs 2 GPUs A100, instance has 0 matching (8xH100:80GB)"],
            [],
        ),
        (
            {"gpu": "nvidia:H100:8"},
            ["needs 8 GPUs H100, instance has no GPUs"],
            [],
            ["needs 8 GPUs H100, instance has 0 matching (2xA100:40GB)"],
        ),
        (
            {"gpu": "A100:40GB:2"},
            ["needs 2 GPUs A100:40GB, instance has no GPUs"],
            ["needs 2 GPUs A100:40GB, instance has 0 matching (8xH100:80GB)"],
            [],
        ),
        (
            {"gpu": "A100:80GB:2"},
            ["needs 2 GPUs A100:80GB, instance has no GPUs"],
            ["needs 2 GPUs A100:80GB, instance has 0 matching (8xH100:80GB)"],
            ["needs 2 GPUs A100:80GB, instance has 0 matching (2xA100:40GB)"],
        ),
        (
            {"gpu": "24GB..:1..2"},
            ["needs 1..2 GPUs 24GB.., instance has no GPUs"],
            ["needs 1..2 GPUs 24GB.., instance has 8 matching (8xH100:80GB)"],
            [],
        ),
        (
            {"gpu": "A100,H100:2"},
            ["needs 2 GPUs A100,H100, instance has no GPUs"],
            ["needs 2 GPUs A100,H100, instance has 8 matching (8xH100:80GB)"],
            [],
        ),
        ({"gpu": "1.."}, ["needs 1.. GPUs, instance has no GPUs"], [], []),
        (
            {"gpu": "amd:1.."},
            ["needs 1.. GPUs amd, instance has no GPUs"],
            ["needs 1.. GPUs amd, instance has 0 matching (8xH100:80GB)"],
            ["needs 1.. GPUs amd, instance has 0 matching (2xA100:40GB)"],
        ),
        ({"gpu": "A100:0..2"}, [], [], []),
        (
            {"gpu": "A100:1..2"},
            ["needs 1..2 GPUs A100, instance has no GPUs"],
            ["needs 1..2 GPUs A100, instance has 0 matching (8xH100:80GB)"],
            [],
        ),
        ({"gpu": "A100:..2"}, [], [], []),
        (
            {"gpu": {"name": "A100", "count": 2, "total_memory": "100GB.."}},
            [
                "needs 2 GPUs A100, instance has no GPUs",
                "needs 100GB.. of GPU memory in total, matching GPUs have 0GB",
            ],
            [
                "needs 2 GPUs A100, instance has 0 matching (8xH100:80GB)",
                "needs 100GB.. of GPU memory in total, matching GPUs have 0GB",
            ],
            ["needs 100GB.. of GPU memory in total, matching GPUs have 80GB"],
        ),
        (
            {"gpu": {"count": "1..", "total_memory": "80GB.."}},
            [
                "needs 1.. GPUs, instance has no GPUs",
                "needs 80GB.. of GPU memory in total, matching GPUs have 0GB",
            ],
            [],
            [],
        ),
        (
            {"cpu": "arm:2.."},
            ["needs arm CPUs, instance has CPUs of an unknown architecture"],  # no architecture assumed
            ["needs arm CPUs, instance has x86"],
            ["needs arm CPUs, instance has CPUs of an unknown architecture"],
        ),
        (
            {"cpu": "16..", "memory": "32GB..", "disk": "1TB..", "gpu": "H100:8"},
            [
                "needs 16.. CPUs, instance has 8",
                "needs 32GB.. memory, instance has 16GB",
                "needs 1TB.. disk, instance has 512GB",
                "needs 8 GPUs H100, instance has no GPUs",
            ],
            [],
            ["needs 8 GPUs H100, instance has 0 matching (2xA100:40GB)"],
        ),
    ],
)
def test_unsatisfied(
    data: dict[str, Any], laptop: list[str], h100_box: list[str], a100_box: list[str]
) -> None:
    spec = ResourcesSpec.model_validate(data)
    for instance, reasons in ((LAPTOP, laptop), (H100_BOX, h100_box), (A100_BOX, a100_box)):
        assert unsatisfied(instance, spec) == reasons
        assert satisfies(instance, spec) is (not reasons)


@pytest.mark.parametrize(
    ("data", "instance"),
    [
        ({"cpu": 4}, LAPTOP),
        ({"memory": "..64GB"}, H100_BOX),
        ({"gpu": "24GB..:1..2"}, H100_BOX),
        ({"gpu": "A100,H100:2"}, H100_BOX),
        ({"gpu": {"name": "H100", "total_memory": "..80GB"}}, H100_BOX),
    ],
)
def test_lower_bounds_only(data: dict[str, Any], instance: InstanceResources) -> None:
    spec = ResourcesSpec.model_validate(data)
    assert not satisfies(instance, spec)
    assert satisfies(instance, spec, check_max=False)


def test_matching_gpus_ignores_others() -> None:
    mixed = InstanceResources(
        cpus=16,
        memory_gb=64,
        disk_gb=500,
        gpus=[GPU(name="A100", memory_gb=80), GPU(name="T4", memory_gb=16)],
    )
    spec = ResourcesSpec.model_validate({"gpu": "A100"})
    assert [gpu.name for gpu in matching_gpus(mixed, spec.gpu or GPUSpec())] == ["A100"]
    assert satisfies(mixed, spec)
    assert not satisfies(mixed, ResourcesSpec.model_validate({"gpu": "amd"}))
    assert satisfies(
        InstanceResources(
            cpus=8, memory_gb=32, disk_gb=200, gpus=[GPU(vendor="amd", name="MI300X", memory_gb=192)]
        ),
        ResourcesSpec.model_validate({"gpu": "amd:192GB"}),
    )


def test_instance_rejects_nonsense() -> None:
    with pytest.raises(ValidationError):
        InstanceResources(cpus=-1, memory_gb=1, disk_gb=1)
    with pytest.raises(ValidationError, match="unknown GPU vendor"):
        GPU(vendor="acme", name="X1", memory_gb=1)


@pytest.mark.parametrize(
    ("reported", "memory_mib", "expected"),
    [
        ("NVIDIA H100 80GB HBM3", 81559, GPU(vendor="nvidia", name="H100", memory_gb=80, index=0)),
        ("NVIDIA H100 NVL", 95830, GPU(vendor="nvidia", name="H100", memory_gb=94, index=0)),
        ("NVIDIA A100-SXM4-40GB", 40960, GPU(vendor="nvidia", name="A100", memory_gb=40, index=0)),
        ("NVIDIA A100-SXM4-80GB", 81920, GPU(vendor="nvidia", name="A100", memory_gb=80, index=0)),
        ("NVIDIA GeForce RTX 4090", 24564, GPU(vendor="nvidia", name="RTX4090", memory_gb=24, index=0)),
        ("Tesla T4", 15360, GPU(vendor="nvidia", name="T4", memory_gb=16, index=0)),
        ("NVIDIA L4", 23034, GPU(vendor="nvidia", name="L4", memory_gb=24, index=0)),
        ("NVIDIA RTX A6000", 49140, GPU(vendor="nvidia", name="A6000", memory_gb=48, index=0)),
        ("AMD Instinct MI300X", 196592, GPU(vendor="amd", name="MI300X", memory_gb=192, index=0)),
        ("NVIDIA GeForce GTX 1080 Ti", 11264, GPU(vendor="nvidia", name="GTX1080Ti", memory_gb=11, index=0)),
    ],
)
def test_gpu_from_driver(reported: str, memory_mib: int, expected: GPU) -> None:
    assert GPU.from_driver(reported, memory_mib, index=0) == expected


def test_driver_reports_match_marketed_specs() -> None:
    box = InstanceResources(
        cpus=32,
        memory_gb=256,
        disk_gb=500,
        gpus=[GPU.from_driver("NVIDIA H100 80GB HBM3", 81559, i) for i in range(2)],
    )
    assert satisfies(box, ResourcesSpec.model_validate({"gpu": "H100:80GB:2"}))
    assert gpu_name_from_driver("Some Card") == "SomeCard"
    assert gpu_memory_from_driver("Unknown9", 512) == 0.5


# --- round trips ---------------------------------------------------------------------------------------

sizes = st.floats(min_value=0, max_value=1e18, allow_nan=False, allow_infinity=False) | st.sampled_from(
    [0.5, 8.0, 40.0, 80.0, 100.0, 1024.0, 1536.0, 2048.0]
)
counts = st.integers(min_value=0, max_value=10_000)


def ranges(bounds: st.SearchStrategy[Any]) -> st.SearchStrategy[tuple[Any, Any]]:
    def ordered(pair: tuple[Any, Any]) -> tuple[Any, Any]:
        low, high = pair
        return (min(low, high), max(low, high)) if low is not None and high is not None else (low, high)

    return st.tuples(st.none() | bounds, st.none() | bounds).map(ordered)


@given(sizes)
def test_memory_round_trip(gb: float) -> None:
    assert parse_memory(format_memory(gb)) == gb


@given(ranges(sizes))
def test_memory_range_round_trip(bounds: tuple[float | None, float | None]) -> None:
    memory = gbs(*bounds)
    assert parse_memory_range(memory.format(format_memory)) == memory


@given(ranges(counts))
def test_count_range_round_trip(bounds: tuple[int | None, int | None]) -> None:
    count = ints(*bounds)
    assert parse_count_range(str(count)) == count


known_names = st.sampled_from(["A100", "H100", "T4", "L40S", "MI300X", "Gaudi2", "tpu-v5e-8", "RTX4090"])
other_names = st.from_regex(r"[A-Z][a-z]{0,3}[0-9]{1,3}[A-Za-z-]{0,2}", fullmatch=True)
gpu_specs = st.fixed_dictionaries(
    {
        "vendor": st.none() | st.sampled_from(["nvidia", "amd", "intel", "google"]),
        "name": st.none() | st.lists(known_names | other_names, min_size=1, max_size=3),
        "memory": st.none() | ranges(sizes).map(lambda pair: gbs(*pair)),
        "count": ranges(counts).map(lambda pair: ints(*pair)),
    }
)


@given(gpu_specs)
def test_gpu_round_trip(fields: dict[str, Any]) -> None:
    try:
        spec = GPUSpec(**fields)
    except ValidationError:
        assume(False)  # a vendor that contradicts a name, or a count of 0: rejected by design
        raise
    assert parse_gpu(str(spec)) == spec
    assert GPUSpec.model_validate(spec.model_dump()) == spec


@given(ranges(counts), ranges(sizes), ranges(sizes), st.none() | sizes, gpu_specs)
def test_spec_dump_round_trip(
    cpu: tuple[Any, Any],
    memory: tuple[Any, Any],
    disk: tuple[Any, Any],
    shm: float | None,
    gpu: dict[str, Any],
) -> None:
    try:
        gpu_spec = GPUSpec(**gpu)
    except ValidationError:
        assume(False)
        raise
    spec = ResourcesSpec(cpu=ints(*cpu), memory=gbs(*memory), disk=gbs(*disk), shm_size=shm, gpu=gpu_spec)
    assert ResourcesSpec.model_validate(spec.model_dump()) == spec
    assert ResourcesSpec.model_validate_json(spec.model_dump_json()) == spec
