"""A real Slurm cluster for the session (testbed/slurm_cluster.py): a login host reached over SSH and three
compute hosts, in network namespaces; skipped where it cannot run (not root, or Slurm/munge missing)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

from testbed.helpers import leftover_processes
from testbed.slurm_cluster import SlurmCluster, missing_tools


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    if os.geteuid() != 0:
        pytest.skip("a Slurm cluster in network namespaces needs root")
    if missing := missing_tools():
        pytest.skip(f"missing {', '.join(missing)}: install slurm-wlm and munge (scripts/test.sh does)")
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm")).up()
    yield cluster
    cluster.down()
    assert cluster.namespaces() == []
    assert cluster.processes() == []
    assert leftover_processes(cluster.workdir) == []


def wait_no_jobs(cluster: SlurmCluster, timeout: float = 60.0) -> None:
    """Until squeue shows no job that is not finished (a cancelled one completes in a few seconds)."""
    deadline = time.monotonic() + timeout
    while jobs := cluster.jobs(finished=False):
        if time.monotonic() > deadline:
            raise AssertionError(f"squeue is not empty after the test: {jobs}")
        time.sleep(0.2)


@pytest.fixture
def slurm(slurm_cluster: SlurmCluster) -> Iterator[SlurmCluster]:
    """The session's cluster; after the test, squeue must be empty (tests scancel what they submit)."""
    yield slurm_cluster
    wait_no_jobs(slurm_cluster)
