"""Every activity takes one message (docs/README.md: one pydantic model in, one out): the SDK decodes a
workflow's one argument into an activity's parameters by their type hints, and a second parameter, even
one with a default, makes it decode the message as a dict (a container job's start failed so, each attempt,
until its run was stopped)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import activities


def test_every_activity_of_the_worker_takes_one_argument() -> None:
    found = []
    for module_info in pkgutil.iter_modules(activities.__path__):
        module = importlib.import_module(f"activities.{module_info.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ != module.__name__:
                continue
            for name, method in inspect.getmembers(cls, inspect.isfunction):
                if hasattr(method, "__temporal_activity_definition"):
                    parameters = list(inspect.signature(method).parameters)[1:]  # after self
                    found.append((f"{cls.__name__}.{name}", parameters))
    assert len(found) > 30  # the worker's activities were all found
    several = [(name, parameters) for name, parameters in found if len(parameters) > 1]
    assert several == []
