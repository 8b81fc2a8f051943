"""The agent's third-party packages as wheels for a host's Python other than the worker's
(activities.agent_targets decides which), and their files as the bundle holds them.

The worker's own pip fetches them (`pip download --only-binary=:all: --python-version X.Y --platform
manylinux... --implementation cp`), so pip's own configuration holds (its index URL, proxy, certificates),
once per target into FERRY_HOME/agent-wheels/<cp39-x86_64-hash>/, named by what was asked: a directory
renamed into place when complete, so an interrupted fetch is never taken for one. A worker without an index
points FERRY_AGENT_WHEELS at a wheelhouse that has them (a copy of such a directory, say): pip then looks
there alone (`--no-index --find-links`). A wheel is unpacked as pip would install it: its root and its
`.data/purelib` and `.data/platlib`, dist-info included (importlib.metadata needs it); scripts, headers
and data are left out.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from email.parser import HeaderParser
from pathlib import Path

from packaging.utils import canonicalize_name, parse_wheel_filename

from activities.agent_targets import HostPython, needed, requirements_of, top_requirements, wheel_platforms

_ASKED = "ferry-requirements.json"  # beside the wheels: what they were fetched for
_PASSES = 4  # each pass adds the dependencies only the target's Python needs; two settle it in practice
_PIP_TIMEOUT = 600


class WheelsError(RuntimeError):
    """The wheels could not be had; the message says why, in one line."""


def _pip_download(python: HostPython, requirements: list[str], into: Path, wheelhouse: Path | None) -> None:
    assert python.machine is not None
    platforms = [arg for platform in wheel_platforms(python.machine) for arg in ("--platform", platform)]
    source = ["--no-index", "--find-links", str(wheelhouse)] if wheelhouse is not None else []
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--disable-pip-version-check",
        "--progress-bar",
        "off",
        "--only-binary=:all:",
        "--python-version",
        python.version,
        "--implementation",
        "cp",
        *("--abi", python.tag, "--abi", "abi3", "--abi", "none"),
        *platforms,
        *source,
        "--dest",
        str(into),
        *requirements,
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=_PIP_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise WheelsError(f"pip download failed: {exc}") from exc
    if done.returncode != 0:
        said = [line.strip() for line in (done.stderr + done.stdout).splitlines() if line.strip()]
        errors = [line for line in said if line.startswith("ERROR:")]
        raise WheelsError(" ".join((errors or said or [f"pip exited {done.returncode}"])[:2])[:400])


def _metadata(wheel: Path) -> tuple[str, list[str]]:
    """The wheel's distribution (canonical name) and its Requires-Dist."""
    name = parse_wheel_filename(wheel.name)[0]
    with zipfile.ZipFile(wheel) as archive:
        [path] = [n for n in archive.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
        headers = HeaderParser().parsestr(archive.read(path).decode("utf-8", "replace"))
    return str(name), list(headers.get_all("Requires-Dist") or [])


def _requires(directory: Path) -> dict[str, list[str]]:
    return dict(_metadata(wheel) for wheel in sorted(directory.glob("*.whl")))


def fetch_wheels(
    python: HostPython, installed: dict[str, str], cache_root: Path, wheelhouse: Path | None = None
) -> Path:
    """The directory of the wheels the agent needs on `python` (`installed`: the worker's distributions
    the agent imports, by name, with their versions); fetched unless an earlier fetch left it."""
    if python.machine is None:
        raise WheelsError(f"no wheels for {python.ext_suffix}")
    asked = top_requirements(installed, python)
    key = hashlib.sha256(json.dumps([python.line, asked, str(wheelhouse or "")]).encode()).hexdigest()
    target = cache_root / f"{python.tag}-{python.machine}-{key[:12]}"
    if (target / _ASKED).is_file():
        return target
    cache_root.mkdir(parents=True, exist_ok=True)
    wanted = asked
    for _ in range(_PASSES):
        fetching = Path(tempfile.mkdtemp(prefix=".fetching-", dir=cache_root))
        try:
            _pip_download(python, wanted, fetching, wheelhouse)
            more = sorted(set(wanted) | set(requirements_of(_requires(fetching), python)))
            if more == wanted:
                (fetching / _ASKED).write_text(json.dumps({"python": python.line, "requirements": asked}))
                try:
                    os.rename(fetching, target)
                except OSError:  # another worker's fetch got there first: the same wheels
                    if not (target / _ASKED).is_file():
                        raise
                return target
            wanted = more
        finally:
            shutil.rmtree(fetching, ignore_errors=True)
    raise WheelsError(f"the requirements did not settle in {_PASSES} passes: {' '.join(wanted)}")


def wheel_files(directory: Path, python: HostPython) -> dict[str, tuple[bytes, int]]:
    """The files of the wheels the agent needs (from fetch_wheels' directory), by path in the bundle, with
    their modes."""
    asked = json.loads((directory / _ASKED).read_text())["requirements"]
    keep = needed(asked, _requires(directory), python)
    files: dict[str, tuple[bytes, int]] = {}
    for wheel in sorted(directory.glob("*.whl")):
        if canonicalize_name(parse_wheel_filename(wheel.name)[0]) not in keep:
            continue
        with zipfile.ZipFile(wheel) as archive:
            for info in archive.infolist():
                arc = _installed_path(info.filename)
                if arc is not None and not info.is_dir():
                    executable = (info.external_attr >> 16) & 0o111
                    files[arc] = (archive.read(info), 0o755 if executable else 0o644)
    return files


def _installed_path(name: str) -> str | None:
    """Where pip would install a wheel's member, relative to site-packages; None if not there."""
    top, _, rest = name.partition("/")
    if not top.endswith(".data"):
        return name
    scheme, _, path = rest.partition("/")
    return path if scheme in ("purelib", "platlib") and path else None
