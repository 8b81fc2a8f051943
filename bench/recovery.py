"""The `recovery` section: a host of an SSH fleet lost under a running job, on the bench's embedded stack.

The hosts are the testbed's, as in tests/fleet (`testbed.netns.HostNetwork`: OpenSSH `sshd` in network
namespaces on 10.203.X, reachable only from this machine), the fleet is applied and read through
`testbed.fleets.Cluster`, but the work is done by the stack's own worker (it deploys the agents with the
stack's settings: FERRY_SSH_KNOWN_HOSTS=none, see bench.ferry_side._stack_env, the hosts' own python3, and
the default SSH keepalives a user gets). Each trial is a fresh run of a task with `retry: {on_events:
[interruption]}`: once its job runs, its host is killed the way test_fleet_runs does it (every process in
the namespace, the namespace deleted), and two times are taken from the moment of the kill: to the job's
INSTANCE_UNREACHABLE (its event in the store) and to the `start` event of the run's new submission on
another host. A trial uses up a host, so the fleet has one host more than there are trials. At the end
(error or SIGTERM included) the runs are aborted, the fleet is deleted and the namespaces are removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import shutil
import signal
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bench.common import Clock, Report
from core.fleets.status import FleetStatus
from core.settings import Settings
from core.status import JobStatus, JobTerminationReason, RunStatus
from testbed.fleets import Cluster, task, until
from testbed.helpers import leftover_processes
from testbed.netns import HostNetwork
from worker.main import ssh_options

if TYPE_CHECKING:
    from bench.ferry_side import FerrySide
    from store import RunRecord

PROJECT = "recovery"
RETRY_ON_INTERRUPTION = {"on_events": ["interruption"], "duration": "1h"}
UNREACHABLE = "instance_unreachable"
LOSS_WAIT = 120.0  # seconds a lost job may take to fail, and its new submission to start: bounds, not figures


@dataclass
class Trial:
    host: int
    to_unreachable_s: float
    unreachable_event: str
    to_resubmitted_running_s: float
    resubmitted_host: int


async def measure(side: FerrySide, trials: int, workdir: Path) -> None:
    """`trials` host losses on a fleet of `trials + 1` test hosts; figures on `side.report`."""
    r = side.report
    hosts = trials + 1
    r.put("recovery_trials", trials)
    r.put("recovery_fleet_hosts", hosts)
    network = HostNetwork(hosts, workdir / "netns")
    done: list[Trial] = []
    with _sigterm_cancels():
        try:
            clock = Clock()
            await asyncio.to_thread(network.up)
            r.put("recovery_hosts_up_s", clock.elapsed())
            fleet = f"bench-{secrets.token_hex(2)}"
            options = ssh_options(Settings.from_env(side.env))
            cluster = Cluster(side.api(PROJECT), network, side.repo, fleet, options)
            try:
                clock = Clock()
                await cluster.apply()
                r.put("recovery_fleet_deploy_s", clock.elapsed())
                for k in range(trials):
                    done.append(await _trial(side, cluster, k))
            finally:
                await _tear_down(side, cluster)
        finally:
            network.down()  # not in a thread: a second cancellation must not leave it half done
            r.put("recovery_namespaces_left", len(network.namespaces()))
            r.put("recovery_processes_left", len(leftover_processes(network.workdir)))
            shutil.rmtree(workdir, ignore_errors=True)
            _figures(r, done)


async def _trial(side: FerrySide, cluster: Cluster, index: int) -> Trial:
    mark = side.marks / f"recovery-{index}-{secrets.token_hex(2)}"
    # The first submission marks the shared disk and sleeps; the second finds the mark and ends.
    command = f"if [ -e {mark} ]; then echo second on $(hostname); else touch {mark}; sleep 3600; fi"
    conf = task([command], retry=RETRY_ON_INTERRUPTION, fleets=[cluster.fleet])
    record = await cluster.submit(conf, f"recover-{index}")
    await until(
        "the first submission to run",
        lambda: mark.exists() and cluster.status(record) == JobStatus.RUNNING,
        LOSS_WAIT,
    )
    first = cluster.job(record)
    assert first is not None
    lost = cluster.host_index(first.instance_name)

    lost_at = time.time()
    await asyncio.to_thread(cluster.network.kill_host, lost)
    failed = await until("the job to fail", lambda: _finished(cluster, record), LOSS_WAIT)
    seen_at = time.time()
    assert failed.termination_reason == JobTerminationReason.INSTANCE_UNREACHABLE, (
        failed.termination_reason,
        failed.termination_message,
    )
    event, at = _unreachable_event(side, record, failed.id) or ("seen in the store", seen_at)

    final = await asyncio.wait_for(cluster.api.wait(record.run_name), LOSS_WAIT)
    assert final.status == RunStatus.DONE, (final.status, final.termination_reason)
    second = cluster.job(final, submission=1)
    assert second is not None and second.status == JobStatus.DONE, second
    moved = cluster.host_index(second.instance_name)
    assert moved != lost, f"the new submission ran on the lost host {lost}"
    [start] = [e for e in cluster.api.job_events(final, second.id) if e.name == "start"]
    return Trial(lost, at - lost_at, event, start.timestamp - lost_at, moved)


def _finished(cluster: Cluster, record: RunRecord) -> object:
    job = cluster.job(record)
    return job if job is not None and JobStatus(job.status).is_finished() else None


def _unreachable_event(side: FerrySide, record: RunRecord, job_id: str) -> tuple[str, float] | None:
    """The first event of the job that names instance_unreachable (a `clean` or `exception`...)."""
    for event in side.api(PROJECT).job_events(record, job_id):
        if UNREACHABLE in (str(value) for value in event.context.values()):
            return event.name, event.timestamp
    return None


async def _tear_down(side: FerrySide, cluster: Cluster) -> None:
    """Every run of the section aborted, then the fleet deleted (its agents stopped), within bounds."""
    api = side.api(PROJECT)
    for run in await asyncio.to_thread(api.store.list_runs, PROJECT, True):
        with contextlib.suppress(Exception):  # best effort: the fleet's deletion below is bounded anyway
            await asyncio.wait_for(api.stop(run.run_name, abort=True), 30)
            await asyncio.wait_for(api.wait(run.run_name), 60)
    record = await asyncio.to_thread(api.store.get_fleet, PROJECT, cluster.fleet)
    if record is None or record.status == FleetStatus.DELETED:
        side.report.put("recovery_fleet_deleted", "yes (never applied)")
        return
    try:
        await asyncio.wait_for(cluster.fleets.delete(cluster.fleet, wait=60), 90)
    except Exception as err:  # reported, and the hosts still go down
        side.report.put("recovery_fleet_deleted", f"NO ({type(err).__name__}: {err})")
        return
    gone = not await asyncio.to_thread(api.store.list_instances, PROJECT, cluster.fleet)
    side.report.put("recovery_fleet_deleted", "yes" if gone else "NO (instances left in the store)")


def _figures(r: Report, trials: list[Trial]) -> None:
    r.put("recovery_trials_completed", len(trials))
    if not trials:
        return
    for k, t in enumerate(trials):
        r.note(
            f"trial {k}: host {t.host} lost, INSTANCE_UNREACHABLE ({t.unreachable_event} event) after "
            f"{t.to_unreachable_s:.2f} s, new submission RUNNING on host {t.resubmitted_host} after "
            f"{t.to_resubmitted_running_s:.2f} s"
        )
    _spread(r, "recovery_loss_to_unreachable", [t.to_unreachable_s for t in trials])
    _spread(r, "recovery_loss_to_resubmitted_running", [t.to_resubmitted_running_s for t in trials])
    r.note(
        "loss -> resubmitted RUNNING includes the run's first pending backoff (15 s, docs/runs.md "
        "15/30/60.. s), which each trial's fresh run pays once"
    )


def _spread(r: Report, name: str, values: list[float]) -> None:
    if len(values) == 1:
        r.put(f"{name}_s", values[0])
    elif values:
        r.put(f"{name}_p50_s", statistics.median(values))
        r.put(f"{name}_max_s", max(values))


@contextlib.contextmanager
def _sigterm_cancels() -> Iterator[None]:
    """SIGTERM (`timeout`, a stop) cancels the bench instead of killing it, so the hosts go down. Once:
    `timeout` signals the process and then its group, and a second cancellation would cut the teardown
    short (it is bounded: SIGKILL is not needed)."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    if task is None:
        yield
        return
    cancelled = False

    def cancel() -> None:
        nonlocal cancelled
        if not cancelled:
            cancelled = True
            task.cancel()

    loop.add_signal_handler(signal.SIGTERM, cancel)
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
