"""Sampling profiles of the stack's processes with py-spy while a section runs (`--profile DIR`).

py-spy is not one of Ferry's dependencies: `.venv/bin/pip install py-spy` first. Each profile is written
as collapsed stacks (`frame;frame;... count`, loadable in speedscope or flamegraph.pl) and summarised
as `#` lines: the functions where the samples were (self) and those they were under (inclusive).
"""

from __future__ import annotations

import contextlib
import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from bench.common import Report

RATE = 250  # samples per second


def py_spy() -> str | None:
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


@contextlib.contextmanager
def profiled(report: Report, out_dir: Path | None, label: str, pids: dict[str, int | None]) -> Iterator[None]:
    """Record each of `pids` while the body runs, into out_dir/<name>.<label>.txt; then summarise."""
    binary = py_spy() if out_dir is not None else None
    if out_dir is None or binary is None:
        if out_dir is not None:
            report.note("py-spy not found: no profile (pip install py-spy)")
        yield
        return
    out_dir.mkdir(parents=True, exist_ok=True)
    recorders: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
    for name, pid in pids.items():
        if pid is None:
            continue
        path = out_dir / f"{name}.{label}.txt"
        command = [binary, "record", "--pid", str(pid), "--rate", str(RATE), "--format", "raw"]
        command += ["--output", str(path)]
        recorders[name] = (
            subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
            path,
        )
    try:
        yield
    finally:
        for name, (proc, path) in recorders.items():
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
            if path.exists():
                summarise(report, path, f"{name}.{label}")


_LINE = re.compile(r"^(.*) (\d+)$")
_FRAME = re.compile(r"^(?P<func>[^ ]+) \((?P<file>[^:]+)(?::\d+)?\)$")
# Leaf frames of a thread that waits: an event loop's select, an idle pool thread, a lock or a wake-up.
_IDLE = ("EpollSelector.select", "_worker (thread.py)", "Condition.wait", "_write_to_self", "_read_from_self")
# Frames every busy sample of a thread sits under (the event loop's, a pool thread's, the entry point's).
_SCAFFOLD_FILES: tuple[str, ...] = ("(base_events.py)", "(events.py)", "(runners.py)", "(<frozen runpy>)")
_SCAFFOLD_FILES += ("(threading.py)", "(thread.py)", "(_compat.py)", "(server.py)", "(stack_entry.py)")
_SCAFFOLD_FILES += ("(main.py)",)


def _short(frame: str) -> str:
    """`func (path/to/file.py:12)` -> `func (file.py)`: one entry per function, whatever the line."""
    found = _FRAME.match(frame)
    if not found:
        return frame
    return f"{found['func']} ({Path(found['file']).name})"


def summarise(report: Report, path: Path, label: str, top: int = 12) -> None:
    """`#` lines: busy samples (not waiting), and the functions with the most of them, self and inclusive
    (frames under which nearly every busy sample lies, such as the event loop's, are left out)."""
    own: Counter[str] = Counter()
    under: Counter[str] = Counter()
    busy = idle = 0
    for line in path.read_text(errors="replace").splitlines():
        found = _LINE.match(line)
        if not found:
            continue
        count = int(found.group(2))
        frames = [_short(f) for f in found.group(1).split(";")]
        # py-spy may put the process and thread first ("process 1:..." / "thread (0x...)").
        frames = [f for f in frames if f.strip() and not f.startswith(("process ", "thread "))]
        if not frames or frames[-1].startswith(_IDLE):
            idle += count
            continue
        busy += count
        own[frames[-1]] += count
        for frame in set(frames):
            under[frame] += count
    report.note(
        f"profile {label}: {busy / RATE:.1f} s busy, {idle / RATE:.1f} s waiting (thread-seconds) in {path}"
    )
    for title, counter in (("self", own), ("inclusive", under)):
        shown = [
            (frame, count)
            for frame, count in counter.most_common()
            if title == "self" or not frame.endswith(_SCAFFOLD_FILES)
        ][:top]
        for frame, count in shown:
            report.note(f"  {label} {title} {100 * count / max(busy, 1):5.1f}%  {frame}")
