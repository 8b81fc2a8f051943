"""Ferry's speed and scale, side by side with Slurm on the same machine: `python -m bench.run`.

Prints `name: value` lines (the unit ends the name; `#` lines are comments). See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import (
    burst_sections,
    containers_bench,
    logs_section,
    recovery,
    services_bench,
    skeleton_section,
    slurm_backend_section,
)
from bench.common import Clock, Report
from bench.ferry_side import REPO_ROOT, BurstResult, FerrySide
from bench.profile import profiled
from bench.recovery_hosts import unavailable
from bench.scale_section import ScaleSection
from bench.slurm_side import SlurmError, SlurmSide

SECTIONS = (
    "latency",
    "containers",
    "throughput",
    "slots",
    "workers",
    "array",
    "skeleton",
    "logs",
    "scale",
    "recovery",
    "services",
    "slurm",
    "slurm-backend",
)
DEFAULT_PEERS = REPO_ROOT.parent / "shared" / "peers"


@dataclass
class Plan:
    sections: set[str]
    latency_runs: int
    containers_runs: int
    burst: int
    slots_burst: int
    array: int  # the array section's elements
    scale: int
    log_bytes: int
    skeleton_runs: int
    recovery_trials: int
    slurm_backend_tasks: int
    services_requests: int
    services_trials: int
    profile_dir: Path | None
    peers: Path
    workers: int = 1  # the stack's worker and workers - 1 more (embedded.extra_workers)
    store: str = "sqlite"  # or "postgres": each stack's store a database of one PostgreSQL the bench starts


def plan_from(args: argparse.Namespace) -> Plan:
    sections = set(SECTIONS) if args.only is None else {s.strip() for s in args.only.split(",") if s.strip()}
    unknown = sections - set(SECTIONS)
    if unknown:
        raise SystemExit(f"unknown section(s): {', '.join(sorted(unknown))}; known: {', '.join(SECTIONS)}")
    if args.no_slurm:
        sections.discard("slurm")
        sections.discard("slurm-backend")
    quick = args.quick
    return Plan(
        sections=sections,
        latency_runs=args.latency_runs or (10 if quick else 20),
        containers_runs=args.containers_runs or (5 if quick else 20),
        burst=args.burst or (100 if quick else 500),
        # The same burst as the unqueued one, so that their completion rates compare (issue 19).
        slots_burst=args.slots_burst or args.burst or (100 if quick else 500),
        array=args.array or (200 if quick else 1000),
        scale=args.scale or (100 if quick else 1000),
        log_bytes=int((args.log_mb or (20 if quick else 200)) * 1e6) // 100_000 * 100_000,
        skeleton_runs=100 if quick else 500,
        recovery_trials=args.recovery_trials or (1 if quick else 3),
        slurm_backend_tasks=args.slurm_backend_tasks or (30 if quick else 100),
        services_requests=args.services_requests or (10000 if quick else 50000),
        services_trials=1 if quick else 3,
        profile_dir=args.profile,
        peers=args.peers,
        workers=args.workers,
        store=args.store,
    )


def header(report: Report) -> None:
    report.put("bench_started", time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    report.put("machine", f"{platform.node()} {platform.machine()} {os.cpu_count()} CPUs")
    with contextlib.suppress(OSError, ValueError):
        kib = int(Path("/proc/meminfo").read_text().split()[1])
        report.put("machine_memory_gb", kib * 1024 / 1e9, 1)
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        commit = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "describe", "--always", "--dirty"], capture_output=True, text=True
        ).stdout.strip()
        report.put("ferry_commit", commit or "unknown")
    report.put("python", platform.python_version())


class Bench:
    def __init__(self, plan: Plan, report: Report, work: Path) -> None:
        self.plan = plan
        self.report = report
        self.work = work
        self.slurm: SlurmSide | None = None
        self.exits = contextlib.ExitStack()  # what a section started before the stack: closed after its stop
        self._postgres: Any = None
        if plan.store == "postgres":
            # Debian's binaries, as the store's tests run them (tests/store/postgres_server.py).
            try:
                from tests.store.postgres_server import find_binaries, start_server
            except ImportError as err:  # psycopg: the `postgres` extra (or `dev`)
                raise SystemExit(f"--store postgres: {err}: pip install -e '.[postgres]'") from None

            binaries = find_binaries()
            if binaries is None:
                raise SystemExit("--store postgres: no PostgreSQL binaries (Debian's `postgresql` package)")
            self._postgres = start_server(binaries)
            self.exits.callback(self._postgres.stop)
        self.ferry = self.side("ferry-home", report)

    def side(self, name: str, report: Report, workers: int | None = None) -> FerrySide:
        """A stack in `work/name` (with `workers`, else `--workers`); with `--store postgres`, its store is
        a database of its own there."""
        url = None if self._postgres is None else self._postgres.create_database(name.replace("-", "_"))
        return FerrySide(self.work / name, report, workers or self.plan.workers, url)

    def wants(self, section: str) -> bool:
        return section in self.plan.sections

    @contextlib.contextmanager
    def profile(self, label: str, side: FerrySide | None = None) -> Iterator[None]:
        pids = {name: (side or self.ferry).pid(name) for name in ("worker", "agent")}
        with profiled(self.report, self.plan.profile_dir, label, pids):
            yield

    # --- Slurm ------------------------------------------------------------------------------------

    def start_slurm(self, profile: str) -> bool:
        if not self.wants("slurm"):
            return False
        if self.slurm is None:
            side = SlurmSide(self.plan.peers / "slurm", self.work / "slurm", self.report)
            why = side.unavailable()
            if why is not None:
                self.report.put("slurm", f"skipped ({why})")
                self.plan.sections.discard("slurm")
                return False
            self.slurm = side
        try:
            self.slurm.setup(profile)
        except (SlurmError, subprocess.SubprocessError) as err:
            self.report.put("slurm", f"failed ({err})")
            self.plan.sections.discard("slurm")
            self.slurm = None
            return False
        return True

    def stop_slurm(self) -> None:
        if self.slurm is not None:
            self.slurm.stop()

    # --- sections ---------------------------------------------------------------------------------

    async def run(self) -> None:
        r = self.report
        header(r)
        comparing = self.wants("latency") or self.wants("throughput")
        if comparing and self.start_slurm("tuned"):
            assert self.slurm is not None
            r.put("slurm_version", self.slurm.version())
        if self.wants("containers"):  # its engine before the stack: the agent is started with DOCKER_HOST
            engine = containers_bench.engine(self.work / "podman", self.ferry)
            why = await asyncio.to_thread(self.exits.enter_context, engine)
            if why is not None:
                r.put("containers", f"skipped ({why})")
                self.plan.sections.discard("containers")
        status = await asyncio.to_thread(self.ferry.start)
        await self.ferry.connect()
        r.put("ferry_stack", f"temporal {status.address}, home {self.ferry.home}")
        # Warm up: the first runs pay for connections, imports and caches.
        for i in range(2):
            await self.ferry.latency_sample(-1 - i)
        if self.wants("latency"):
            await self.section("latency", self.latency())
        if self.wants("containers"):
            runs = self.plan.containers_runs
            await self.section("containers", containers_bench.measure(self.ferry, r, runs))
        if self.wants("throughput"):
            await self.section("throughput", burst_sections.throughput(self))
        if self.wants("workers"):
            await self.section("workers", burst_sections.workers(self))
        if self.wants("array"):
            await self.section("array", burst_sections.arrays(self))
        if self.wants("skeleton"):
            await asyncio.to_thread(
                skeleton_section.measure, self.ferry, r, self.plan.peers, self.plan.skeleton_runs
            )
            await self.section("events", skeleton_section.events_per_run(self.ferry, r))
        if self.wants("logs"):
            await self.section("logs", logs_section.measure(self.ferry, self.plan.log_bytes))
        if self.wants("scale"):
            await self.section("scale", ScaleSection(self.ferry).run(self.plan.scale))
        if self.wants("recovery"):
            why = unavailable()
            if why is not None:
                r.put("recovery", f"skipped ({why})")
            else:
                trials = self.plan.recovery_trials
                await self.section("recovery", recovery.measure(self.ferry, trials, self.work / "recovery"))
        if self.wants("services"):
            await self.section("services", self.services())
        if self.wants("slurm-backend"):
            why = slurm_backend_section.unavailable()
            if why is not None:
                r.put("slurm_backend", f"skipped ({why})")
            else:
                work, tasks = self.work / "slurm-backend", self.plan.slurm_backend_tasks
                with self.profile("slurm_backend"):
                    await self.section(
                        "slurm_backend", slurm_backend_section.measure(self.ferry, work, tasks)
                    )
        self.ratios()
        await self.ferry.close_http()

    async def section(self, name: str, body: Coroutine[Any, Any, None]) -> None:
        clock = Clock()
        try:
            await body
        except Exception as err:  # a broken section must not lose the figures of the others
            self.report.put(f"{name}_error", f"{type(err).__name__}: {err}")
        self.report.put(f"{name}_wall_s", clock.elapsed(), 1)

    async def services(self) -> None:
        """Ferry's services proxy beside the replica reached directly and nginx's: bench.services_bench."""
        plan = self.plan
        await services_bench.measure(self.ferry, self.report, plan.services_requests, plan.services_trials)

    async def latency(self) -> None:
        """N sequential trivial runs, Ferry's and Slurm's alternating sample by sample."""
        r, n = self.report, self.plan.latency_runs
        ferry: list[tuple[float, float, float]] = []
        api: list[tuple[float, float, float]] = []
        slurm: list[tuple[float, float]] = []
        with self.profile("latency"):
            for i in range(n):
                ferry.append(await self.ferry.latency_sample(i))
                api.append(await self.ferry.latency_sample(n + i, through_api=True))
                if self.slurm is not None:
                    slurm.append(await asyncio.to_thread(self.slurm.latency_sample, i))
        r.put("latency_runs", n)
        r.distribution("latency_submit_to_running", "ms", [s[0] for s in ferry], 1000)
        r.distribution("latency_submit_to_process_start", "ms", [s[1] for s in ferry], 1000)
        r.distribution("latency_submit_to_done", "ms", [s[2] for s in ferry], 1000)
        # The same runs as `ferry apply` submits them, through Ferry's API (issue 42: <= 5 ms more p50).
        r.distribution("api_latency_submit_to_running", "ms", [s[0] for s in api], 1000)
        r.distribution("api_latency_submit_to_done", "ms", [s[2] for s in api], 1000)
        for what in ("running", "done"):
            direct = r.figures.get(f"latency_submit_to_{what}_p50_ms")
            through = r.figures.get(f"api_latency_submit_to_{what}_p50_ms")
            if isinstance(direct, float | int) and isinstance(through, float | int):
                r.put(f"api_added_submit_to_{what}_p50_ms", through - direct, 1)
        if slurm:
            r.distribution("slurm_latency_submit_to_process_start", "ms", [s[0] for s in slurm], 1000)
            r.distribution("slurm_latency_submit_to_completed", "ms", [s[1] for s in slurm], 1000)

    async def burst_alone(
        self,
        label: str,
        count: int,
        *,
        through_api: bool = False,
        workers: int | None = None,
        **resources: str,
    ) -> BurstResult:
        """A burst on a stack of its own, the main one idle beside it: a stack's Temporal slows as its
        closed runs accumulate (three identical bursts of 500 in a row on one stack: 8.8, 8.4, 7.6 runs/s),
        so bursts compared must each start on a fresh one, warmed up alike."""
        async with self.fresh_side(label, workers) as side:
            with self.profile(label, side):
                return await side.burst(count, label, through_api=through_api, **resources)

    @contextlib.asynccontextmanager
    async def fresh_side(self, label: str, workers: int | None = None) -> AsyncIterator[FerrySide]:
        """A stack of its own, started and warmed up by two runs (its start unsaid); stopped after."""
        side = self.side(f"ferry-home-{label}", Report(out=io.StringIO()), workers)
        try:
            await asyncio.to_thread(side.start)
            await side.connect()
            for i in range(2):
                await side.latency_sample(-1 - i)
            yield side
        finally:
            await side.close_http()
            await asyncio.to_thread(side.stop)

    def ratios(self) -> None:
        r, f = self.report, self.report.figures
        if not any(k.startswith("slurm_") for k in f):
            return
        r.note("ratios: Ferry's figure / Slurm's (latency: < 1 is Ferry faster; rates: > 1 is Ferry faster)")
        r.ratio(
            "latency_submit_to_running_p50",
            "latency_submit_to_running_p50_ms",
            "slurm_latency_submit_to_process_start_p50_ms",
        )
        r.ratio(
            "latency_submit_to_process_start_p50",
            "latency_submit_to_process_start_p50_ms",
            "slurm_latency_submit_to_process_start_p50_ms",
        )
        r.ratio(
            "latency_submit_to_done_p50",
            "latency_submit_to_done_p50_ms",
            "slurm_latency_submit_to_completed_p50_ms",
        )
        r.ratio(
            "latency_submit_to_done_p90",
            "latency_submit_to_done_p90_ms",
            "slurm_latency_submit_to_completed_p90_ms",
        )
        for ferry, slurm in (
            ("throughput", "slurm_throughput_16slots"),  # Ferry unlimited, Slurm 16 job slots
            ("slots_16slots", "slurm_slots_16slots"),  # both at most 16 jobs at once
            ("slots_64slots", "slurm_slots_64slots"),  # both at most 64
        ):
            if f"{slurm}_runs" not in f or f"{ferry}_runs" not in f:
                continue
            for figure in (
                "completion_rate_runs_per_s",
                "submit_rate_runs_per_s",
                "all_done_s",
                "slowest_submit_to_done_s",
            ):
                r.ratio(f"{ferry}_{figure}", f"{ferry}_{figure}", f"{slurm}_{figure}")
        if "skeleton_completion_rate_runs_per_s" in f and "throughput_completion_rate_runs_per_s" in f:
            r.put(
                "ratio_throughput_ferry_over_skeleton",
                f["throughput_completion_rate_runs_per_s"] / f["skeleton_completion_rate_runs_per_s"],
                2,
            )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller workloads: about 3 minutes")
    parser.add_argument("--only", help=f"comma-separated sections, of: {','.join(SECTIONS)}")
    parser.add_argument("--no-slurm", action="store_true", help="Ferry alone")
    parser.add_argument("--latency-runs", type=int, help="sequential runs (20; quick 10)")
    parser.add_argument("--containers-runs", type=int, help="process and container runs each (20; quick 5)")
    parser.add_argument("--burst", type=int, help="runs submitted at once (500; quick 100)")
    parser.add_argument("--slots-burst", type=int, help="runs of the slots section's bursts (--burst's)")
    parser.add_argument("--array", type=int, help="elements of the array section's array (1000; quick 200)")
    parser.add_argument("--scale", type=int, help="concurrent long runs (1000; quick 100), e.g. 10000")
    parser.add_argument("--log-mb", type=float, help="MB the logs job prints (200; quick 20)")
    parser.add_argument("--recovery-trials", type=int, help="host losses (3; quick 1), one host each")
    parser.add_argument(
        "--slurm-backend-tasks", type=int, help="short tasks through a Slurm fleet and sbatch (100; quick 30)"
    )
    parser.add_argument("--services-requests", type=int, help="GETs per services target (50000; quick 10000)")
    parser.add_argument("--profile", type=Path, help="py-spy the worker and agent into this directory")
    parser.add_argument("--peers", type=Path, default=DEFAULT_PEERS, help=f"default {DEFAULT_PEERS}")
    parser.add_argument("--workers", type=int, default=1, help="workers on the stack (1): CPU and RSS summed")
    parser.add_argument(
        "--store", choices=("sqlite", "postgres"), default="sqlite", help="each stack's store (sqlite)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary FERRY_HOME and Slurm files")
    args = parser.parse_args(argv)
    plan = plan_from(args)
    report = Report()
    work = Path(tempfile.mkdtemp(prefix="ferry-bench-"))
    bench = Bench(plan, report, work)
    clock = Clock()
    # SIGTERM (`kill`, a timeout) ends the benchmark as Ctrl-C does: through the `finally` below, which
    # stops its stacks; by default it would leave them running, with their jobs.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        asyncio.run(bench.run())
    finally:
        bench.stop_slurm()
        bench.ferry.stop()
        bench.exits.close()  # the containers section's podman service, once the agent is gone
        report.put("bench_wall_s", clock.elapsed(), 1)
        if args.keep:
            report.note(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
