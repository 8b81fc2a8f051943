"""The Python a host runs the agent on, and what the agent's bundle for it takes from a package index: pure
decisions (activities.agent_wheels fetches the wheels, activities.agent_bundle builds the bundle).

A host's interpreter says `major minor EXT_SUFFIX` (activities/host_scripts.py, VERSION_SCRIPT). The agent
runs on CPython 3.9 and later, on Linux with glibc (docs/fleets.md#what-a-host-needs). On the worker's own
interpreter (the same EXT_SUFFIX) the bundle is the worker's own packages; on any other, every third-party
distribution the agent imports comes as a wheel for that Python: the worker's release of it where one
exists for it, else the newest earlier release that does (`name<=worker's version`: pip takes the newest
it can), for manylinux up to glibc 2.17.

pip evaluates environment markers for the Python it runs on, not for the target it downloads for, so the
dependencies only an older Python needs (anyio's `exceptiongroup; python_version < "3.11"`) are found here,
from the downloaded wheels' metadata, and fetched in another pass (`requirements_of`).
"""

from __future__ import annotations

import re
import sys
import sysconfig
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

OLDEST = (3, 9)
MACHINES = ("x86_64", "aarch64")
_EXT_SUFFIX = re.compile(r"^\.cpython-(\d)(\d+)-([a-z0-9_]+)-linux-gnu\.so$")
# manylinux tags a host with glibc 2.17 or later can load, newest first, with their legacy aliases.
_MANYLINUX = (
    "manylinux_2_17",
    "manylinux2014",
    "manylinux_2_12",
    "manylinux2010",
    "manylinux_2_5",
    "manylinux1",
)
# What the agent needs on some Pythons beyond the worker's packages: pydantic evaluates the models'
# `X | None` annotations, which Python 3.9 can do only through eval_type_backport.
EXTRA_REQUIREMENTS = ('eval_type_backport; python_version < "3.10"',)


@dataclass(frozen=True)
class HostPython:
    major: int
    minor: int
    ext_suffix: str  # `.cpython-39-x86_64-linux-gnu.so`: the implementation, version and platform

    @classmethod
    def this_interpreter(cls) -> HostPython:
        return cls(sys.version_info[0], sys.version_info[1], str(sysconfig.get_config_var("EXT_SUFFIX")))

    @classmethod
    def parse(cls, line: str) -> HostPython | None:
        """From VERSION_SCRIPT's line; None for anything else."""
        found = re.match(r"^(\d+) (\d+) (\S+)$", line.strip())
        return cls(int(found.group(1)), int(found.group(2)), found.group(3)) if found else None

    @property
    def line(self) -> str:
        """What VERSION_SCRIPT prints on this interpreter."""
        return f"{self.major} {self.minor} {self.ext_suffix}"

    @property
    def version(self) -> str:
        return f"{self.major}.{self.minor}"

    @property
    def tag(self) -> str:
        """The wheels' interpreter and ABI tag: `cp39`."""
        return f"cp{self.major}{self.minor}"

    @property
    def machine(self) -> str | None:
        found = _EXT_SUFFIX.match(self.ext_suffix)
        return found.group(3) if found else None


def unsupported(python: HostPython) -> str | None:
    """What the agent needs that this interpreter is not, in words that follow `but the agent needs`;
    None when the agent can run on it."""
    if (python.major, python.minor) < OLDEST:
        return f"Python {OLDEST[0]}.{OLDEST[1]} or later"
    found = _EXT_SUFFIX.match(python.ext_suffix)
    if (
        found is None
        or (int(found.group(1)), int(found.group(2))) != (python.major, python.minor)
        or found.group(3) not in MACHINES
    ):
        return f"CPython on Linux {' or '.join(MACHINES)} with glibc"
    return None


def wheel_platforms(machine: str) -> list[str]:
    return [f"{tag}_{machine}" for tag in _MANYLINUX]


def marker_environment(python: HostPython) -> dict[str, str]:
    """The environment markers of the host's interpreter, as far as its version line tells them."""
    return {
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "python_version": python.version,
        "python_full_version": f"{python.version}.0",
        "implementation_version": f"{python.version}.0",
        "os_name": "posix",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": python.machine or "",
        "extra": "",
    }


def _holds(requirement: Requirement, python: HostPython) -> bool:
    return requirement.marker is None or requirement.marker.evaluate(marker_environment(python))


def _without_marker(requirement: Requirement) -> str:
    extras = f"[{','.join(sorted(requirement.extras))}]" if requirement.extras else ""
    return f"{canonicalize_name(requirement.name)}{extras}{requirement.specifier}"


def top_requirements(installed: Mapping[str, str], python: HostPython) -> list[str]:
    """What the bundle for `python` asks of the index: each distribution the agent imports on the worker
    (name to the worker's version), at most the worker's release, and what that Python needs besides."""
    wanted = [f"{canonicalize_name(name)}<={version}" for name, version in installed.items()]
    extra = [Requirement(text) for text in EXTRA_REQUIREMENTS]
    wanted += [_without_marker(requirement) for requirement in extra if _holds(requirement, python)]
    return sorted(wanted)


def requirements_of(requires: Mapping[str, Iterable[str]], python: HostPython) -> list[str]:
    """The dependencies (`Requires-Dist`, by distribution) that hold on `python`, without their markers."""
    found = set()
    for texts in requires.values():
        for text in texts:
            requirement = Requirement(text)
            if _holds(requirement, python):
                found.add(_without_marker(requirement))
    return sorted(found)


def needed(top: Iterable[str], requires: Mapping[str, Iterable[str]], python: HostPython) -> set[str]:
    """The distributions (canonical names) that `top`'s requirements need on `python`, themselves included:
    a wheel pip fetched for a marker that holds only on the worker's Python is left out."""
    names = {canonicalize_name(name): list(texts) for name, texts in requires.items()}
    todo = [canonicalize_name(Requirement(text).name) for text in top]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for text in names.get(name, []):
            requirement = Requirement(text)
            if _holds(requirement, python):
                todo.append(canonicalize_name(requirement.name))
    return seen
