"""Minimal Debian roots for test SSH hosts that run their distribution's own Python
(docs/fleets.md#what-a-host-needs): Debian 11 bullseye (Python 3.9), 12 bookworm (3.11) and 13 trixie
(3.13), each with python3 and openssh-server, made by debootstrap from the Debian mirror this machine's apt
uses. A host of testbed/netns.py runs its sshd chrooted into an overlay of one, so its agent runs on that
root's /usr/bin/python3.

Kept between runs on one machine, outside the repository (testbed.helpers.MACHINE_CACHE/roots): a root is
built in a temporary directory renamed into place once complete, so an interrupted build is never taken
for one, and under a lock, so two test runs build it once. The tests never write into a root.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from testbed.helpers import MACHINE_CACHE

PYTHONS = {"bullseye": (3, 9), "bookworm": (3, 11), "trixie": (3, 13)}
PACKAGES = ("python3", "openssh-server")
DEBIAN_SOURCES = Path("/etc/apt/sources.list.d/debian.sources")
DEFAULT_MIRROR = "http://deb.debian.org/debian"
_BUILD_TIMEOUT = 1200


class RootError(RuntimeError):
    pass


def mirror(sources: Path = DEBIAN_SOURCES) -> str:
    """The first Debian archive (not its security archive) among apt's deb822 sources; Debian's own else."""
    text = sources.read_text() if sources.is_file() else ""
    for stanza in re.split(r"\n\s*\n", text):
        fields = dict(re.findall(r"^(\w[\w-]*):\s*(.*)$", stanza, re.MULTILINE))
        suites = fields.get("Suites", "").split()
        if fields.get("URIs") and suites and not any(s.endswith("-security") for s in suites):
            return fields["URIs"].split()[0]
    return DEFAULT_MIRROR


def _unmount_below(path: Path) -> None:
    """What an interrupted debootstrap left mounted in its target (/proc, /sys), deepest first."""
    prefix = str(path.resolve()) + "/"
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    for mount in sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", "-l", mount], check=False)


def debian_root(suite: str, cache: Path | None = None) -> Path:
    """The root of `suite`, built unless an earlier run left it."""
    cache = cache or MACHINE_CACHE / "roots"
    root = cache / suite
    if root.is_dir():
        return root
    if shutil.which("debootstrap") is None:
        raise RootError("missing debootstrap: install it (scripts/test.sh does)")
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f".{suite}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if root.is_dir():  # another run built it while this one waited
            return root
        for stale in cache.glob(f".{suite}-*"):
            _unmount_below(stale)
            shutil.rmtree(stale, ignore_errors=True)
        building = Path(tempfile.mkdtemp(prefix=f".{suite}-", dir=cache))
        building.chmod(0o755)  # a root directory, as any system's
        try:
            _debootstrap(suite, building)
            for package in (building / "var/cache/apt/archives").glob("*.deb"):
                package.unlink()  # what debootstrap installed from: not needed again
            os.rename(building, root)
        finally:
            if building.exists():
                _unmount_below(building)
                shutil.rmtree(building, ignore_errors=True)
    return root


def _debootstrap(suite: str, target: Path) -> None:
    command = [
        "debootstrap",
        "--variant=minbase",
        f"--include={','.join(PACKAGES)}",
        suite,
        str(target),
        mirror(),
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=_BUILD_TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        raise RootError(f"debootstrap {suite} took over {_BUILD_TIMEOUT}s") from exc
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise RootError(f"debootstrap {suite} failed: {' | '.join(said)}")


def root_python(root: Path) -> tuple[int, int]:
    """The version of the root's /usr/bin/python3, run inside it."""
    done = subprocess.run(
        ["chroot", str(root), "/usr/bin/python3", "-c", "import sys; print(*sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
    )
    major, minor = done.stdout.split()
    return int(major), int(minor)
