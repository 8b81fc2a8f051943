"""The `containers` section: what a trivial container job costs over the same job on the process executor.

Issue 16 asks for "the measured overhead of a trivial container job against the process executor (submit ->
RUNNING and -> DONE, p50)". On the bench's embedded stack, whose agent reaches a `podman system service` of
the section's own through DOCKER_HOST (testbed/containers.py: `runc` as its runtime, the test images built
here from busybox-static, no registry reached), N runs of each kind alternate: a process task
(`commands: [true]`) and a container task (`image: <the busybox image>`, `commands: [true]`), both with the
latency section's shareable resources. Times as the latency section takes them (bench.ferry_side): RUNNING
is the job's `start` event, DONE the moment the client hears the run's workflow completed.

The engine must be served before the stack starts: the local agent takes DOCKER_HOST from the environment
it is started with (the bench's own process, `embedded.stack.Stack.start`), so `engine` comes first and the
section's runs come after the other sections' warm-up.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import statistics
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from agent.containers.config import AGENT_LABEL, agent_key
from bench.common import Report, percentile
from bench.ferry_side import SHARED, FerrySide
from core.configuration import TaskConfiguration, parse_configuration
from core.status import RunStatus
from embedded.local_agent import agent_data_dir
from store import RunRecord
from testbed.containers import BUSYBOX, IMAGE, PodmanService, podman_service, remove_containers

PROJECT = "containers"
KINDS = ("process", "container")
# Where Podman looks for `runc` when containers.conf names it by name (its default runtime paths).
RUNC_PATHS = (
    "/usr/bin/runc",
    "/usr/sbin/runc",
    "/usr/local/bin/runc",
    "/usr/local/sbin/runc",
    "/sbin/runc",
    "/bin/runc",
    "/usr/lib/cri-o-runc/sbin/runc",
)
INFO_FORMAT = "{{.Version.Version}} {{.Host.OCIRuntime.Name}} {{.Host.OCIRuntime.Version}}"
RUN_TIMEOUT = 120.0  # seconds one trivial run may take: a bound, not a figure


def unavailable() -> str | None:
    """Why the section cannot run here (no podman, no runc, no busybox-static), or None."""
    if shutil.which("podman") is None:
        return "no podman: apt-get install podman"
    if shutil.which("runc") is None and not any(os.access(path, os.X_OK) for path in RUNC_PATHS):
        return "no runc, the runtime Podman 4.3 runs containers with here: apt-get install runc"
    if not BUSYBOX.exists():
        return f"no {BUSYBOX} to build the image from: apt-get install busybox-static"
    return None


@contextlib.contextmanager
def engine(workdir: Path, side: FerrySide) -> Iterator[str | None]:
    """The section's podman service, its images built, named to the stack that `side` has yet to start
    (DOCKER_HOST and CONTAINERS_CONF in its environment and in this process's, whose child the local
    agent is); yields None, or why the section is skipped. Stopped after, once the stack is (the caller's
    order); the containers of this stack's agent that are left are counted and removed before."""
    why = unavailable()
    if why is not None:
        yield why
        return
    with contextlib.ExitStack() as stack:
        try:
            service = stack.enter_context(podman_service(workdir))
        except (AssertionError, OSError, subprocess.SubprocessError) as err:
            detail = getattr(err, "stderr", None) or err
            text = detail.decode(errors="replace") if isinstance(detail, bytes) else str(detail)
            yield f"the podman service did not start: {text.strip()[-300:]}"
            return
        settings = {**service.env, "DOCKER_HOST": service.url}
        side.env.update(settings)  # the worker's (an agent it would start again)
        os.environ.update(settings)  # the agent's: Stack.start starts it from this process
        stack.callback(_leftovers, service, side)
        yield None


def _leftovers(service: PodmanService, side: FerrySide) -> None:
    """`containers_left` (must be 0: a finished job's container is removed), then those removed."""
    podman = shutil.which("podman")
    if podman is None:
        return
    env = {**os.environ, **service.env}
    label = f"{AGENT_LABEL}={agent_key(agent_data_dir(side.home))}"
    found = subprocess.run(
        [podman, "ps", "-aq", "--filter", f"label={label}"], env=env, capture_output=True, text=True
    )
    side.report.put("containers_left", len(found.stdout.split()))
    remove_containers(podman, label, env)


@dataclass
class Sample:
    """One run's times from its submission, in seconds; the job's events as the store has them."""

    to_running: float  # the job's `start` event
    to_done: float  # the client hears the run's workflow completed
    to_alloc: float  # `alloc`: placed on the local instance
    to_pull: float  # `pull`: the agent has the task (PREPARE_TASK); START_JOB follows


def task(kind: str) -> TaskConfiguration:
    """The trivial task of `kind`, with the latency section's shareable resources (bench.ferry_side)."""
    data: dict[str, object] = {"type": "task", "commands": ["true"], "resources": SHARED}
    if kind == "container":
        data["image"] = IMAGE
    conf = parse_configuration(data)
    assert isinstance(conf, TaskConfiguration)
    return conf


async def sample(side: FerrySide, kind: str, index: int) -> Sample:
    """One trivial run of `kind`, submitted through FerryAPI, until its workflow has completed."""
    api = side.api(PROJECT)
    name = f"{kind[:4]}-{index}-{secrets.token_hex(2)}"
    submitted = time.time()
    record = await api.submit(task(kind), repo_dir=side.repo, run_name=name)
    await asyncio.wait_for(side.result(record), RUN_TIMEOUT)
    done = time.time()
    final = await asyncio.to_thread(side.store.get_run, record.id)
    assert final is not None, name
    assert final.status == RunStatus.DONE, f"{name}: {final.status} ({final.termination_reason})"
    events = await asyncio.to_thread(_job_events, side, record)
    return Sample(
        to_running=events["start"] - submitted,
        to_done=done - submitted,
        to_alloc=events["alloc"] - submitted,
        to_pull=events["pull"] - submitted,
    )


def _job_events(side: FerrySide, record: RunRecord) -> dict[str, float]:
    """The first time of each event of the run's one job."""
    [job] = side.store.list_job_submissions(record.id)
    seen: dict[str, float] = {}
    for event in side.api(PROJECT).job_events(record, job.id):
        seen.setdefault(event.name, event.timestamp)
    missing = {"alloc", "pull", "start"} - seen.keys()
    assert not missing, f"{record.run_name}: no {', '.join(sorted(missing))} event"
    return seen


async def measure(side: FerrySide, report: Report, runs: int) -> None:
    """`runs` trivial runs of each kind, alternating; figures on `report`."""
    r = report
    r.put("containers_runs", runs)
    r.put("containers_image", IMAGE)
    r.put("containers_engine", await asyncio.to_thread(_engine_words))
    r.note(
        "no image pull is measured: the image is built here (podman import of busybox-static) and no "
        "registry is reached, so every container job uses the image as the host has it"
    )
    # The first container job after the agent's start connects to the engine: its times, apart.
    first = await sample(side, "container", -1)
    r.put("containers_container_first_submit_to_running_ms", first.to_running * 1000, 0)
    r.put("containers_container_first_submit_to_done_ms", first.to_done * 1000, 0)
    samples: dict[str, list[Sample]] = {kind: [] for kind in KINDS}
    for i in range(runs):
        for kind in KINDS:
            samples[kind].append(await sample(side, kind, i))
    for kind in KINDS:
        _kind_figures(r, kind, samples[kind])
    _overhead(r, samples)


def _engine_words() -> str:
    """`podman <version>, runtime <name> <version>` of the service's configuration (CONTAINERS_CONF)."""
    podman = shutil.which("podman")
    assert podman is not None
    done = subprocess.run(
        [podman, "info", "--format", INFO_FORMAT],
        capture_output=True,
        text=True,
        timeout=60,
    )
    # The runtime's version is its `--version` output: the first of its lines says enough.
    words = done.stdout.strip().split("\n", 1)[0].split(maxsplit=2)
    if done.returncode != 0 or len(words) < 3:
        return f"podman (info failed: {(done.stderr or done.stdout).strip()[-200:]})"
    return f"podman {words[0]}, runtime {words[1]} ({words[2]})"


def _kind_figures(r: Report, kind: str, samples: list[Sample]) -> None:
    prefix = f"containers_{kind}"
    r.distribution(f"{prefix}_submit_to_running", "ms", [s.to_running for s in samples], 1000)
    r.distribution(f"{prefix}_submit_to_done", "ms", [s.to_done for s in samples], 1000)
    # Where the time goes, p50 of each step: submit -> alloc -> pull (the agent has the task) -> start
    # (START_JOB: the executor's prepare and start) -> DONE (the job's exit seen, resources released).
    steps = {
        "submit_to_alloc": [s.to_alloc for s in samples],
        "alloc_to_pull": [s.to_pull - s.to_alloc for s in samples],
        "pull_to_running": [s.to_running - s.to_pull for s in samples],
        "running_to_done": [s.to_done - s.to_running for s in samples],
    }
    for step, values in steps.items():
        r.put(f"{prefix}_{step}_p50_ms", statistics.median(values) * 1000, 0)


def _overhead(r: Report, samples: dict[str, list[Sample]]) -> None:
    """Container over process: the ratio of each p50 and p90, and the milliseconds a container adds."""
    r.note("container over process: ratio (> 1: the container job is slower), added ms (container - process)")
    for figure in ("submit_to_running", "submit_to_done"):
        for name, fraction in (("p50", 0.5), ("p90", 0.9)):
            values = {
                kind: _stat([getattr(s, figure.replace("submit_", "")) for s in samples[kind]], fraction)
                for kind in KINDS
            }
            process, container = values["process"], values["container"]
            ratio = container / process if process > 0 else float("nan")
            r.put(f"containers_container_over_process_{figure}_{name}", ratio, 2)
            r.put(f"containers_container_added_{figure}_{name}_ms", (container - process) * 1000, 0)


def _stat(values: list[float], fraction: float) -> float:
    """The median (as Report.distribution's p50) or the nearest-rank percentile (its p90)."""
    return statistics.median(values) if fraction == 0.5 else percentile(values, fraction)
