"""What every section of the benchmark shares: figures printed as `name: value`, statistics, processes."""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile (0 < fraction <= 1) of a non-empty sample."""
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


@dataclass
class Report:
    """Prints `name: value` lines as they come (flushed: a long run shows progress) and keeps the numbers,
    so that ratios can be computed at the end. Names end with their unit: _s, _ms, _mb, _per_s ..."""

    figures: dict[str, float] = field(default_factory=dict)
    out: object = sys.stdout

    def put(self, name: str, value: float | int | str, digits: int = 3) -> None:
        if isinstance(value, float):
            text = f"{value:.{digits}f}" if math.isfinite(value) else str(value)
            self.figures[name] = value
        elif isinstance(value, int) and not isinstance(value, bool):
            text = str(value)
            self.figures[name] = float(value)
        else:
            text = str(value)
        print(f"{name}: {text}", file=self.out, flush=True)  # type: ignore[call-overload]

    def note(self, text: str) -> None:
        """A comment line: starts with '#', so that a parser of `name: value` lines skips it."""
        print(f"# {text}", file=self.out, flush=True)  # type: ignore[call-overload]

    def distribution(self, name: str, unit: str, values: Sequence[float], scale: float = 1.0) -> None:
        """`name_p50_<unit>`, `name_p90_<unit>` (and min, max) of a sample, multiplied by `scale`."""
        if not values:
            self.put(f"{name}_samples", 0)
            return
        digits = 0 if unit == "ms" else 3
        self.put(f"{name}_p50_{unit}", statistics.median(values) * scale, digits)
        self.put(f"{name}_p90_{unit}", percentile(values, 0.9) * scale, digits)
        self.put(f"{name}_max_{unit}", max(values) * scale, digits)

    def ratio(self, name: str, ferry: str, slurm: str) -> None:
        """`ratio_<name>_ferry_over_slurm`, when both figures were measured."""
        a, b = self.figures.get(ferry), self.figures.get(slurm)
        if a is None or b is None or b == 0:
            self.put(f"ratio_{name}_ferry_over_slurm", "n/a")
            return
        self.put(f"ratio_{name}_ferry_over_slurm", a / b, 2)


class Clock:
    """Wall time of a section, for a `<section>_wall_s` line."""

    def __init__(self) -> None:
        self.start = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.start


def rss_mb(pid: int | None) -> float | None:
    """Resident set size of one process in MB (10**6 bytes), from /proc; None if it is gone."""
    if pid is None:
        return None
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024 / 1e6
    except OSError:
        return None
    return None


def cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU time a process has used so far, in seconds."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def written_bytes(pid: int | None) -> int | None:
    """Bytes a process has caused to be written to storage so far (/proc/PID/io write_bytes)."""
    if pid is None:
        return None
    try:
        for line in Path(f"/proc/{pid}/io").read_text().splitlines():
            if line.startswith("write_bytes:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def files_mb(paths: Iterable[Path]) -> float:
    """Size of these files together (missing ones count 0), in MB."""
    total = 0
    for path in paths:
        with contextlib.suppress(OSError):
            total += path.stat().st_size
    return total / 1e6


def processes_mentioning(text: str) -> list[int]:
    """Pids of the processes whose command line contains `text`."""
    found: list[int] = []
    needle = text.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found
