"""The test Slurm cluster itself (testbed/slurm_cluster.py): what Ferry's Slurm backend will rely on, seen
from the login host over SSH, and what Slurm reports when jobs are preempted, refused, kept pending, or
lose their node. The states and reasons asserted here are the ones Slurm 22.05 showed on this cluster."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import asyncssh
import pytest

from testbed.slurm_cluster import SlurmCluster, leftovers, remove_leftovers
from tests.slurm.conftest import wait_no_jobs

T = TypeVar("T")
Snapshot = dict[str, dict[str, str]]
REPO = Path(__file__).resolve().parents[2]


def until(probe: Callable[[], T | None], timeout: float, what: str) -> T:
    """Polls until `probe` returns something but None or False (bounded waiting, not a timing assertion)."""
    deadline = time.monotonic() + timeout
    while not (result := probe()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout}s: {what}")
        time.sleep(0.2)
    return result


async def connect(cluster: SlurmCluster, **options: float) -> asyncssh.SSHClientConnection:
    login = cluster.login
    return await asyncssh.connect(
        login.address,
        login.port,
        username=login.user,
        client_keys=[str(login.identity_file)],
        known_hosts=None,  # the login host's key is made for the run
        agent_path=None,
        config=None,
        **options,
    )


async def on_login(cluster: SlurmCluster, command: str) -> asyncssh.SSHCompletedProcess:
    async with await connect(cluster) as conn:
        done = await conn.run(command, check=False)
    return done


async def sbatch(cluster: SlurmCluster, directory: Path, arguments: str) -> str:
    """A batch job submitted on the login host, from `directory`: its id."""
    done = await on_login(cluster, f"cd {directory} && sbatch --parsable {arguments}")
    assert done.exit_status == 0, done.stderr
    return str(done.stdout).strip().split(";")[0]


def snapshot(cluster: SlurmCluster, ids: list[str], nodes: tuple[str, ...] = ()) -> Snapshot:
    """Each job's squeue state and reason (%T, %r), and scontrol's JobState, Reason and Restarts; and each
    of `nodes`' sinfo state and reason (%t, %E)."""
    queue = {job["id"]: job for job in cluster.jobs()}
    seen = {
        name: {"sinfo": cluster.slurm("sinfo", "-h", "-N", "-p", "low", "-n", name, "-o", "%t %E").strip()}
        for name in nodes
    }
    for job_id in ids:
        fields = cluster.job(job_id)
        seen[job_id] = {
            "state": queue[job_id]["state"],
            "reason": queue[job_id]["reason"],
            **{key: fields[key] for key in ("JobState", "Reason", "Restarts")},
        }
    return seen


def observe(
    cluster: SlurmCluster,
    ids: list[str],
    done: Callable[[Snapshot], bool],
    timeout: float,
    nodes: tuple[str, ...] = (),
) -> list[Snapshot]:
    """Every distinct snapshot of these jobs until `done` says so; printed with the seconds it took."""
    start, seen = time.monotonic(), [snapshot(cluster, ids, nodes)]
    print(f"\n  0.0s {seen[-1]}")
    while not done(seen[-1]):
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"not within {timeout}s; seen: {seen}")
        time.sleep(0.2)
        if (now := snapshot(cluster, ids, nodes)) != seen[-1]:
            seen.append(now)
            print(f"  {time.monotonic() - start:.1f}s {now}")
    return seen


def node_states(cluster: SlurmCluster, name: str) -> set[str]:
    return set(cluster.slurm("sinfo", "-h", "-N", "-n", name, "-o", "%t").split())


async def test_sinfo_on_the_login_host_lists_every_node_idle_in_both_partitions(slurm: SlurmCluster) -> None:
    done = await on_login(slurm, "hostname && sinfo -h -N -o '%N %P %t'")
    assert done.exit_status == 0, done.stderr
    hostname, *lines = str(done.stdout).splitlines()
    assert hostname == slurm.login.hostname
    names = [name for name, _ in slurm.nodes]
    assert len(names) == 3
    assert sorted(lines) == sorted(f"{name} {part} idle" for name in names for part in ("low*", "high"))


async def test_a_two_node_batch_job_runs_a_step_on_each_node(slurm: SlurmCluster, tmp_path: Path) -> None:
    job = await sbatch(slurm, tmp_path, "-N 2 -o out.txt --wrap 'srun hostname'")
    try:
        until(lambda: slurm.job(job)["JobState"] == "COMPLETED", 60, f"job {job} to complete")
    finally:
        slurm.slurm("scancel", job)
    allocated = slurm.slurm("scontrol", "show", "hostnames", slurm.job(job)["NodeList"]).split()
    assert len(allocated) == 2 and set(allocated) <= {name for name, _ in slurm.nodes}
    # the output file is on the filesystem the login and compute hosts share
    assert sorted((tmp_path / "out.txt").read_text().split()) == sorted(allocated)


@pytest.mark.parametrize("requeue", [True, False], ids=["requeue", "no-requeue"])
async def test_a_high_job_preempts_a_low_job_holding_every_node(
    slurm: SlurmCluster, tmp_path: Path, requeue: bool
) -> None:
    flag = "--requeue" if requeue else "--no-requeue"
    low = await sbatch(slurm, tmp_path, f"-p low -N 3 --exclusive {flag} -J low --wrap 'sleep 300'")
    high = ""
    try:
        until(lambda: slurm.job(low)["JobState"] == "RUNNING", 30, "the low job to run")
        high = await sbatch(slurm, tmp_path, "-p high -N 3 --exclusive -J high --wrap 'sleep 3'")
        if requeue:
            # Seen, about a second after the high job's sbatch: low COMPLETING (reason None, Restarts=1
            # already; for ~4s, or missed) while high is PENDING (Resources) -> high RUNNING and low PENDING,
            # squeue reason and scontrol Reason `BeginTime` (a requeued job waits AuthInfo's cred_expire,
            # 10s here) -> high COMPLETED -> low RUNNING again, Restarts=1, ~13-17s after the sbatch.
            seen = observe(
                slurm,
                [low, high],
                lambda s: s[low]["state"] == "RUNNING" and s[high]["state"] == "COMPLETED",
                90,
            )
            # squeue's state and scontrol's are read one after the other: a sample taken as the job starts
            # again may have squeue still PENDING and scontrol RUNNING already (seen once in CI).
            requeued = [s[low] for s in seen if s[low]["state"] == s[low]["JobState"] == "PENDING"]
            assert requeued and requeued[-1] == {
                "state": "PENDING",
                "reason": "BeginTime",
                "JobState": "PENDING",
                "Reason": "BeginTime",
                "Restarts": "1",
            }
            assert any(s[high]["state"] == "RUNNING" and s[low]["state"] == "PENDING" for s in seen)
            assert seen[-1][low] == {
                "state": "RUNNING",
                "reason": "None",
                "JobState": "RUNNING",
                "Reason": "None",
                "Restarts": "1",
            }
        else:
            # Seen: low COMPLETING (reason None, Restarts=0) about a second after the high job's sbatch, high
            # PENDING (Resources) -> ~4s later low PREEMPTED (reason None; ExitCode=0:15) and high RUNNING.
            seen = observe(slurm, [low, high], lambda s: s[low]["state"] == "PREEMPTED", 60)
            assert seen[-1][low] == {
                "state": "PREEMPTED",
                "reason": "None",
                "JobState": "PREEMPTED",
                "Reason": "None",
                "Restarts": "0",
            }
            assert slurm.job(low)["ExitCode"] == "0:15"
            until(lambda: slurm.job(high)["JobState"] in ("RUNNING", "COMPLETED"), 30, "the high job to run")
    finally:
        slurm.slurm("scancel", low, *[high] if high else [])


async def test_a_job_bigger_than_the_nodes_is_refused_or_stays_pending(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    # more memory or CPUs than a node has: sbatch refuses it (exit 1)
    memory = await on_login(slurm, f"cd {tmp_path} && sbatch --mem=5000 --wrap true")
    assert memory.exit_status == 1
    assert str(memory.stderr).splitlines() == [
        "sbatch: error: Memory specification can not be satisfied",
        "sbatch: error: Batch job submission failed: Requested node configuration is not available",
    ]
    cpus = await on_login(slurm, f"cd {tmp_path} && sbatch -c 3 --wrap true")
    assert cpus.exit_status == 1
    assert str(cpus.stderr).splitlines() == [
        "sbatch: error: CPU count per node can not be satisfied",
        "sbatch: error: Batch job submission failed: Requested node configuration is not available",
    ]
    # more nodes than the partition has: accepted, and pending for ever (EnforcePartLimits is NO)
    nodes = await sbatch(slurm, tmp_path, "-N 4 --wrap true")
    try:
        # Seen: reason `PartitionConfig` at first, `PartitionNodeLimit` once the scheduler has looked at it.
        start = time.monotonic()
        seen = observe(slurm, [nodes], lambda s: time.monotonic() - start > 5, 30)
        assert {s[nodes]["state"] for s in seen} == {"PENDING"}
        assert {s[nodes]["Reason"] for s in seen} <= {"None", "PartitionConfig", "PartitionNodeLimit"}
        assert seen[-1][nodes]["Reason"] in ("PartitionConfig", "PartitionNodeLimit")
    finally:
        slurm.slurm("scancel", nodes)


async def test_jobs_waiting_for_busy_nodes_say_why(slurm: SlurmCluster, tmp_path: Path) -> None:
    busy = await sbatch(slurm, tmp_path, "-N 3 --exclusive -J busy --wrap 'sleep 300'")
    first = await sbatch(slurm, tmp_path, "-N 1 -J first --wrap true")
    second = await sbatch(slurm, tmp_path, "-N 1 -J second --wrap true")
    try:
        # Seen: both `Priority` at first; then `Resources` for the first (the scheduler, every second here,
        # reserves the nodes for it) while the second stays `Priority` (behind the first).
        start = time.monotonic()
        seen = observe(
            slurm,
            [busy, first, second],
            lambda s: time.monotonic() - start > 5 and s[first]["reason"] == "Resources",
            30,
        )
        assert seen[-1][busy]["state"] == "RUNNING"
        assert {s[job]["reason"] for s in seen for job in (first, second)} <= {
            "None",
            "Priority",
            "Resources",
        }
        assert seen[-1][first]["Reason"] == "Resources"
        assert seen[-1][second]["Reason"] in ("Priority", "Resources")
    finally:
        slurm.slurm("scancel", busy, first, second)


FETCH = """import sys, time, urllib.request
deadline = time.monotonic() + 30
while True:
    try:
        print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode()); break
    except OSError:
        if time.monotonic() > deadline: raise
        time.sleep(0.2)
"""


async def test_the_login_host_reaches_a_port_opened_in_an_allocation(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    name, address = slurm.nodes[1]
    port = random.randrange(20000, 30000)
    (tmp_path / "served").mkdir()
    (tmp_path / "served" / "marker.txt").write_text("from the compute node\n")
    (tmp_path / "fetch.py").write_text(FETCH)
    server = f"python3 -m http.server --bind 0.0.0.0 {port} --directory {tmp_path / 'served'}"
    job = await sbatch(slurm, tmp_path, f"-w {name} -J agent --wrap 'srun {server}'")
    try:
        fetched = await on_login(slurm, f"python3 {tmp_path / 'fetch.py'} http://{address}:{port}/marker.txt")
        assert (fetched.exit_status, fetched.stdout) == (0, "from the compute node\n\n"), fetched.stderr
        # as the worker will: a direct-tcpip channel of its SSH connection to the login host
        async with await connect(slurm) as conn:
            reader, writer = await conn.open_connection(address, port)
            writer.write(b"GET /marker.txt HTTP/1.0\r\n\r\n")
            reply = await reader.read()
        assert reply.startswith(b"HTTP/1.0 200") and reply.endswith(b"from the compute node\n")
    finally:
        slurm.slurm("scancel", job)


async def test_a_killed_slurmd_takes_its_node_down_and_its_jobs_with_it(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    name = slurm.nodes[0][0]
    one = f"-w {name} -n 1 --mem=500 --wrap 'sleep 300'"
    doomed = await sbatch(slurm, tmp_path, f"--no-requeue -J doomed {one}")
    requeued = await sbatch(slurm, tmp_path, f"--requeue -J requeued {one}")
    try:
        until(
            lambda: {slurm.job(job)["JobState"] for job in (doomed, requeued)} == {"RUNNING"}, 30, "jobs run"
        )
        slurm.kill_slurmd(1)
        # Seen (SlurmdTimeout=10): the node `alloc*` (not responding, no reason yet) after ~17s; `down*`,
        # reason `Not responding`, after ~30s, as the --no-requeue job ends NODE_FAIL (reason NodeDown) and
        # the --requeue one goes back to PENDING (reason None, Restarts=1).
        seen = observe(slurm, [doomed, requeued], lambda s: s[doomed]["state"] == "NODE_FAIL", 90, (name,))
        assert seen[-1][doomed] == {
            "state": "NODE_FAIL",
            "reason": "NodeDown",
            "JobState": "NODE_FAIL",
            "Reason": "NodeDown",
            "Restarts": "0",
        }
        assert any(s[name]["sinfo"].startswith(("mix*", "alloc*")) for s in seen)  # not responding, first
        until(lambda: node_states(slurm, name) == {"down*"}, 30, "the node down")
        assert set(slurm.slurm("sinfo", "-h", "-N", "-n", name, "-o", "%E").splitlines()) == {
            "Not responding"
        }
        until(lambda: slurm.job(requeued)["Restarts"] == "1", 30, "the requeue")
        requeue = slurm.job(requeued)
        assert (requeue["JobState"], requeue["Reason"]) in {("PENDING", "None"), ("PENDING", "BeginTime")}
    finally:
        slurm.slurm("scancel", doomed, requeued)
        slurm.start_slurmd(1)
    assert node_states(slurm, name) == {"idle"}


async def test_a_cut_login_host_cannot_be_reached_until_healed(slurm: SlurmCluster) -> None:
    slurm.cut_login()
    try:
        with pytest.raises((OSError, TimeoutError)):
            async with await connect(slurm, connect_timeout=2):
                pass
    finally:
        slurm.heal_login()
    assert (await on_login(slurm, "squeue -h")).exit_status == 0


def test_a_killed_run_leaves_nothing_the_next_one_keeps(slurm: SlurmCluster, tmp_path: Path) -> None:
    """A second cluster (another process) killed with SIGKILL: remove_leftovers, as up() calls it, removes
    its daemons and namespaces, and leaves this session's cluster alone."""
    script = "import sys, time; from pathlib import Path; from testbed.slurm_cluster import SlurmCluster\n"
    script += "SlurmCluster(Path(sys.argv[1]), nodes=1).up(); print('up', flush=True); time.sleep(600)\n"
    child = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path)], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "up\n"
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        left = leftovers()
        tag = f"fs{child.pid}"
        assert {f"namespace {tag}-{name}" for name in ("sw", "login", "n1")} <= set(left)
        assert len([item for item in left if item.startswith("process ")]) >= 2  # its slurmctld, munged...
    finally:
        child.kill()
        child.wait()
        remove_leftovers()
    assert leftovers() == []
    assert len(slurm.namespaces()) == 5 and len(slurm.processes()) >= 6
    wait_no_jobs(slurm)
    assert node_states(slurm, slurm.nodes[0][0]) == {"idle"}
