"""The embedded dev server keeps its search attributes cached (docs/deployment.md#the-embedded-stack): a
run costs Temporal no read of its cluster metadata or namespace, which the dev server's default (a read
through on every use, for attributes added while it runs) cost every run 28 of its 85 persistence requests
(docs/scaling.md#the-hot-path). Read from Temporal's own counters, around three runs."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

from tests.e2e.conftest import Ferry, last_line, task

# `persistence_requests{...operation="GetNamespace"...} 12`: Prometheus text, one sample a line.
_SAMPLE = re.compile(r"^persistence_requests\{([^}]*)\} ([0-9.e+]+)$", re.MULTILINE)
_OPERATION = re.compile(r'operation="([^"]*)"')
READS = ("GetCurrentClusterMetadata", "GetNamespace")


def persistence_reads(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    counts = dict.fromkeys(READS, 0.0)
    for labels, value in _SAMPLE.findall(text):
        operation = _OPERATION.search(labels)
        if operation is not None and operation.group(1) in counts:
            counts[operation.group(1)] += float(value)
    return counts


def test_runs_read_no_cluster_metadata_or_namespace(ferry: Ferry, tmp_path: Path) -> None:
    conf = task(tmp_path, "tuned", "echo tuned")
    first = ferry("apply", "-y", "-f", conf)  # starts the stack: its own reads at start are not counted
    assert first.returncode == 0, first.stderr
    url = json.loads(ferry("server", "status", "--json").stdout)["metrics_url"]
    before = persistence_reads(url)
    for _ in range(3):
        done = ferry("apply", "-y", "-f", conf)
        assert last_line(done.stderr) == "run tuned: done (all jobs done)", done.stderr
    grown = {name: count - before[name] for name, count in persistence_reads(url).items()}
    # With the dev server's default, three runs read them about 85 times; a refresh of the caches (once
    # a minute, or a namespace's every 10 s) may fall within the test.
    assert sum(grown.values()) <= 6, grown
