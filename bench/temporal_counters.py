"""Temporal's own counters, read from the stack's dev server (its Prometheus `/metrics`, which `ferry server
status` names: docs/deployment.md#the-embedded-stack): what Temporal did for a burst, per run, beside the
skeleton's on the same server.

Counted: persistence requests (every read and write of Temporal's store, by operation: the work its one
SQLite writer serialises, docs/scaling.md#the-hot-path) and requests to its frontend by operation (a
signal sent by a workflow's local activity is one `SignalWorkflowExecution`).
"""

from __future__ import annotations

import re
import urllib.request
from collections import defaultdict

from bench.common import Report

# `name{labels} value`: the counters summed over their other labels, by operation.
_SAMPLE = re.compile(r"^(persistence_requests|service_requests)\{([^}]*)\} ([0-9.e+]+)$")
_OPERATION = re.compile(r'operation="([^"]*)"')
_SERVICE = re.compile(r'service_name="([^"]*)"')
SHOWN_OPERATIONS = 6  # the persistence operations printed one by one, most per run first


Counts = dict[str, float]


def read(url: str | None) -> Counts | None:
    """The counters now: `persistence` (all), `persistence:<operation>`, `frontend:<operation>`; None
    without a URL or when the server does not answer."""
    if url is None:
        return None
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            text = answer.read().decode()
    except OSError:
        return None
    counters: defaultdict[str, float] = defaultdict(float)
    for line in text.splitlines():
        sample = _SAMPLE.match(line)
        if sample is None:
            continue
        name, labels, value = sample.groups()
        operation = _OPERATION.search(labels)
        what = operation.group(1) if operation else "other"
        if name == "persistence_requests":
            counters["persistence"] += float(value)
            counters[f"persistence:{what}"] += float(value)
        else:
            service = _SERVICE.search(labels)
            if service is not None and service.group(1) == "frontend":
                counters[f"frontend:{what}"] += float(value)
    return dict(counters)


def since(before: Counts | None, url: str | None) -> Counts | None:
    """What the counters grew by since `before` (read now from `url`)."""
    after = read(url)
    if before is None or after is None:
        return None
    return {key: value - before.get(key, 0.0) for key, value in after.items() if value > before.get(key, 0.0)}


def put_per_run(report: Report, prefix: str, grown: Counts | None, runs: int) -> None:
    """`<prefix>_temporal_persistence_per_run` and its largest operations, and the frontend's signals."""
    if grown is None or not runs:
        return
    report.put(f"{prefix}_temporal_persistence_per_run", grown.get("persistence", 0.0) / runs, 1)
    for kind in ("persistence", "frontend"):
        operations = sorted(
            ((key.split(":", 1)[1], value) for key, value in grown.items() if key.startswith(f"{kind}:")),
            key=lambda item: -item[1],
        )
        for operation, value in operations[:SHOWN_OPERATIONS]:
            report.put(f"{prefix}_temporal_{kind}_{operation}_per_run", value / runs, 1)
    signals = grown.get("frontend:SignalWorkflowExecution", 0.0)
    report.put(f"{prefix}_temporal_signals_per_run", signals / runs, 1)
