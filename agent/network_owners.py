"""Who owns each task namespace on the machine, so that namespaces whose agent is gone get removed.

An agent that is killed, or whose data dir is deleted (a test's, a reinstalled host's), never tears its
tasks' namespaces down. So each namespace has an owner file, `/run/ferry-agent-netns/<netns>`, written
before the namespace is made and holding the path of the task record that names it. Any agent, when it
starts, removes the `ferry-*` namespaces whose record is gone, and those older than a grace period that
have no owner file (left by an agent before owner files, or by a half-done setup) and run nothing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

logger = logging.getLogger(__name__)

OWNERS_DIR = Path("/run/ferry-agent-netns")
UNOWNED_GRACE = 120.0  # seconds: a setup writes its owner file first, so this only covers strays


def claim(netns: str, record_path: Path) -> None:
    """Say that `record_path` (a task's record) owns `netns`; best effort: without the file, the namespace
    is only swept once it runs nothing."""
    try:
        OWNERS_DIR.mkdir(mode=0o700, exist_ok=True)
        (OWNERS_DIR / netns).write_text(str(record_path))
    except OSError as exc:
        logger.warning("cannot record the owner of network namespace %s: %s", netns, exc)


def release(netns: str) -> None:
    with contextlib.suppress(OSError):
        (OWNERS_DIR / netns).unlink()


def owner_of(netns: str) -> Path | None:
    try:
        return Path((OWNERS_DIR / netns).read_text().strip())
    except OSError:
        return None


def _age(path: Path) -> float:
    try:
        return time.time() - os.stat(path).st_mtime
    except OSError:
        return 0.0  # removed meanwhile: not ours to judge


def is_abandoned(netns: str, netns_dir: Path, runs_anything: Callable[[str], bool]) -> bool:
    owner = owner_of(netns)
    if owner is not None:
        # A submission sets its namespace up before it writes the record: give it the grace to do so.
        return not owner.exists() and _age(OWNERS_DIR / netns) > UNOWNED_GRACE
    return _age(netns_dir / netns) > UNOWNED_GRACE and not runs_anything(netns)


def abandoned(netns_dir: Path, prefix: str, runs_anything: Callable[[str], bool]) -> list[str]:
    """The namespaces named `prefix*` under `netns_dir` that no living task record owns."""
    try:
        names = sorted(entry.name for entry in os.scandir(netns_dir) if entry.name.startswith(prefix))
    except OSError:
        return []
    return [name for name in names if is_abandoned(name, netns_dir, runs_anything)]


def sweep(netns_names: Sequence[str], teardown: Callable[[str], None]) -> list[str]:
    """Tear each namespace down; those removed. One that cannot be is left, with one log line."""
    removed = []
    for netns in netns_names:
        try:
            teardown(netns)
        except OSError as exc:
            logger.warning("abandoned network namespace %s was not fully removed: %s", netns, exc)
            continue
        removed.append(netns)
    if removed:
        logger.info("removed %d abandoned network namespaces: %s", len(removed), " ".join(removed))
    return removed
