"""The agent reports its host's CPU architecture as placement matches it (docs/fleets.md), with core's
spellings though it does not import core.configuration (agent/instance.py)."""

from __future__ import annotations

import ast
import inspect
import os

import pytest

from agent import instance
from core.configuration.resources import known_arch


def test_this_machine_reports_what_uname_says() -> None:
    expected = {"x86_64": "x86", "aarch64": "arm", "arm64": "arm"}.get(os.uname().machine)
    assert instance.cpu_arch() == expected


@pytest.mark.parametrize(
    ("machine", "arch"),
    [
        ("x86_64", "x86"),
        ("AMD64", "x86"),
        ("aarch64", "arm"),
        ("arm64", "arm"),
        ("ppc64le", None),
        ("", None),
    ],
)
def test_machine_names_are_normalised_as_core_does(machine: str, arch: str | None) -> None:
    assert instance.cpu_arch(machine) == arch == known_arch(machine)


def test_the_agent_knows_every_spelling_core_does() -> None:
    from core.configuration import resources

    assert instance._ARCHES == resources._ARCHES


def test_the_instance_module_does_not_import_core_configuration() -> None:
    tree = ast.parse(inspect.getsource(instance))
    imported = [
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    ]
    assert not [name for name in imported if name and name.startswith("core")]
