"""Each activity a workflow calls (workflows/activity_stubs.py) is one the worker implements under the same
name, with the same message in and the same result out: the declarations the type checker holds the
workflows to are the activities that run."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import typing
from collections.abc import Callable
from typing import Any

from temporalio import activity

import activities
from workflows import activity_stubs


def _name(fn: Callable[..., Any]) -> str | None:
    defn = activity._Definition.from_callable(fn)
    return defn.name if defn is not None else None


def declarations() -> dict[str, Callable[..., Any]]:
    return {
        name: fn
        for fn in vars(activity_stubs).values()
        if inspect.isfunction(fn) and (name := _name(fn)) is not None
    }


def implementations() -> dict[str, Callable[..., Any]]:
    """Every activity method of a class in `activities/`, by the name it is registered under."""
    found: dict[str, Callable[..., Any]] = {}
    for info in pkgutil.iter_modules(activities.__path__, "activities."):
        module = importlib.import_module(info.name)
        for cls in vars(module).values():
            if not inspect.isclass(cls) or cls.__module__ != module.__name__:
                continue
            for fn in vars(cls).values():
                if inspect.isfunction(fn) and (name := _name(fn)) is not None:
                    assert name not in found, f"{name} is implemented twice"
                    found[name] = fn
    return found


def _signature(fn: Callable[..., Any], *, method: bool) -> tuple[list[Any], Any]:
    hints = typing.get_type_hints(fn)
    params = list(inspect.signature(fn).parameters)[1 if method else 0 :]
    return [hints[param] for param in params], hints["return"]


def test_every_declaration_is_an_implemented_activity_of_the_same_types() -> None:
    declared, implemented = declarations(), implementations()
    assert "start_job" in declared and "record_run" in implemented  # the scans see them
    assert sorted(declared) == sorted(implemented)
    for name, stub in declared.items():
        assert stub.__name__ == name, f"{stub.__name__} is registered as {name}: one name for both"
        assert _signature(stub, method=False) == _signature(implemented[name], method=True), name
