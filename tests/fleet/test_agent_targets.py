"""Which Pythons a host may run the agent on, and what its bundle asks of a package index for one
(activities/agent_targets.py): pure decisions."""

from __future__ import annotations

import sys

from activities.agent_targets import HostPython, needed, requirements_of, top_requirements, unsupported

PY39 = HostPython(3, 9, ".cpython-39-x86_64-linux-gnu.so")
PY313 = HostPython(3, 13, ".cpython-313-aarch64-linux-gnu.so")

ANYIO = [
    'exceptiongroup>=1.0.2; python_version < "3.11"',
    "idna>=2.8",
    'typing_extensions>=4.5; python_version < "3.13"',
    'trio>=0.31.0; extra == "trio"',
]


def test_a_host_python_is_read_from_its_version_line() -> None:
    assert HostPython.parse("3 9 .cpython-39-x86_64-linux-gnu.so\n") == PY39
    assert PY39.line == "3 9 .cpython-39-x86_64-linux-gnu.so" and (PY39.tag, PY39.machine) == (
        "cp39",
        "x86_64",
    )
    assert HostPython.parse("sh: 1: python3: not found") is None
    assert HostPython.this_interpreter().line.startswith(f"{sys.version_info[0]} {sys.version_info[1]} ")


def test_cpython_3_9_and_later_on_glibc_runs_the_agent_and_nothing_else() -> None:
    assert unsupported(PY39) is None and unsupported(PY313) is None
    assert unsupported(HostPython(3, 8, ".cpython-38-x86_64-linux-gnu.so")) == "Python 3.9 or later"
    others = [
        HostPython(3, 12, ".cpython-312-x86_64-linux-musl.so"),  # Alpine
        HostPython(3, 10, ".pypy310-pp73-x86_64-linux-gnu.so"),
        HostPython(3, 12, ".cpython-312-riscv64-linux-gnu.so"),
        HostPython(3, 12, ".cpython-311-x86_64-linux-gnu.so"),  # a line that contradicts itself
    ]
    assert {unsupported(python) for python in others} == {"CPython on Linux x86_64 or aarch64 with glibc"}


def test_the_index_is_asked_for_the_workers_releases_at_most_and_what_the_python_needs_besides() -> None:
    installed = {"anyio": "4.16.0", "Typing_Extensions": "4.16.0", "pydantic": "2.14.4"}
    assert top_requirements(installed, PY39) == [
        "anyio<=4.16.0",
        "eval-type-backport",  # pydantic evaluates `X | None` on 3.9 through it
        "pydantic<=2.14.4",
        "typing-extensions<=4.16.0",
    ]
    assert top_requirements(installed, PY313) == [
        "anyio<=4.16.0",
        "pydantic<=2.14.4",
        "typing-extensions<=4.16.0",
    ]


def test_dependencies_are_those_whose_markers_hold_on_the_hosts_python_not_the_workers() -> None:
    assert requirements_of({"anyio": ANYIO}, PY39) == [
        "exceptiongroup>=1.0.2",
        "idna>=2.8",
        "typing-extensions>=4.5",
    ]
    assert requirements_of({"anyio": ANYIO}, PY313) == ["idna>=2.8"]


def test_the_bundle_takes_the_wheels_its_python_needs_and_not_one_fetched_for_the_workers() -> None:
    requires = {
        "anyio": ANYIO,
        "exceptiongroup": ['typing-extensions>=4.6.0; python_version < "3.13"'],
        "idna": [],
        "Typing_Extensions": [],
        "trio": [],
    }
    assert needed(["anyio<=4.16.0"], requires, PY39) == {
        "anyio",
        "exceptiongroup",
        "idna",
        "typing-extensions",
    }
    assert needed(["anyio<=4.16.0"], requires, PY313) == {"anyio", "idna"}
