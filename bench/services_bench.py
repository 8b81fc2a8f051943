"""The services section: Ferry's proxy (gateway/, docs/services.md) in front of a typical Python replica,
side by side with the replica reached directly and with nginx as the same reverse proxy.

Everything is on this machine, on FerrySide's embedded stack: the replicas are real service runs
(`auth: false`), each in the network namespace the local agent gives it (10.214.x), of one of two typical
Python replicas (bench.services_parts): a threaded stdlib HTTP server started with the host's `python3`
(REPLICA), and an ASGI app (FastAPI) served by uvicorn (UVICORN_REPLICA), started with the interpreter that
runs the bench (sys.executable: its environment has them; the replica runs on this machine, so that path
is valid there). Ferry's proxy is the stack's own (its URL in `Stack.status()`); nginx, when it can be had
(installed from Debian's packages when missing, as root), runs in the foreground from a generated
configuration in a temporary directory. The load generator is an asyncio client (aiohttp) with keep-alive
connections; every load is bounded in count and in time.

1. Steady state, one replica: requests/s and latency p50/p99 at N connections, and sequential latency
   (1 connection), direct / through Ferry's proxy / through nginx; what each proxy adds. First for the
   stdlib replica (`services_<target>_...`), then for the uvicorn one (`services_uvicorn_<target>_...`).
2. Scale from zero (`replicas: 0..1`): once the run waits PENDING, one request through the proxy:
   request -> response, and the replica's process start -> response.
3. Requests lost while a service scales down from 2 replicas to 1 under a steady paced load, and while a
   run is stopped with slow requests in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

from bench import services_scaling
from bench.common import Clock, Report, cpu_seconds
from bench.ferry_side import FerrySide
from bench.services_parts import (
    PROJECT,
    REPLICA,
    SCALING_TARGET,
    UVICORN_REPLICA,
    LoadResult,
    Nginx,
    _get,
    _ms,
    _session,
    closed_load,
    ensure_nginx,
    process_tree,
)
from bench.services_runs import STDLIB_SCRIPT, UVICORN_SCRIPT, ServiceRuns
from core.services.replicas import service_path, service_url
from core.status import RunStatus
from store import RunRecord

CONCURRENCY = 16  # the load's connections (keep-alive)
ROUNDS = 4  # each target's measurement is split in rounds, the targets' order reversed every round
SLOW_REQUESTS = 10  # in flight while a run is stopped, 1 s each

# --- the section ----------------------------------------------------------------------------------


def _local(url: str) -> bool:
    """Only this machine: loopback, or a replica namespace of the local agent (10.214.0.0/16)."""
    try:
        address = ipaddress.ip_address(urlsplit(url).hostname or "")
    except ValueError:
        return False
    return address.is_loopback or address in ipaddress.ip_network("10.214.0.0/16")


class ServicesBench(ServiceRuns):
    """The services section: the steady load beside the replica direct and nginx, and from zero."""

    # --- the section ------------------------------------------------------------------------------

    async def measure(self) -> None:
        r = self.report
        self.repo.mkdir(parents=True)
        self.marks.mkdir(parents=True)
        (self.repo / STDLIB_SCRIPT).write_text(REPLICA)
        (self.repo / UVICORN_SCRIPT).write_text(UVICORN_REPLICA)
        status = await asyncio.to_thread(self.ferry.stack.status)
        proxy = next((p for p in status.processes if p.name == "proxy" and p.alive), None)
        if proxy is None or proxy.address is None:
            raise RuntimeError("the stack's proxy is not running")
        self.proxy, self.proxy_pid = proxy.address, proxy.pid
        nginx_dir = Path(tempfile.mkdtemp(prefix="ferry-bench-nginx-"))
        try:
            binary, why = await asyncio.to_thread(ensure_nginx, r)
            nginx = Nginx(binary, nginx_dir) if binary is not None else None
            try:
                await self.steady(nginx, why)
            finally:
                if nginx is not None:
                    await asyncio.to_thread(nginx.stop)
            await self.from_zero()
            await services_scaling.scale_down(self)
            await services_scaling.rolling(self)
        finally:
            await self.stop_all()
            shutil.rmtree(nginx_dir, ignore_errors=True)

    async def steady(self, nginx: Nginx | None, nginx_why: str | None) -> None:
        """One replica of each kind: direct, through Ferry's proxy, through nginx. The stdlib one is then
        stopped with requests in flight."""
        r = self.report
        clock = Clock()
        record = await self.submit("steady", replicas=1)
        [direct] = await self.ready(record, 1)
        r.put("services_replica_ready_s", clock.elapsed())  # submit -> the replica ready
        r.note(
            f"steady: {self.requests} GETs per target at {CONCURRENCY} keep-alive connections "
            f"({ROUNDS} rounds, order reversed each round), then {self.sequential} sequential; the client, "
            f"the replica and the proxies share this machine's {os.cpu_count()} CPUs"
        )
        ferry = await self.compare("services", "steady", direct, nginx, nginx_why)
        await self.stop_in_flight(record, ferry)

        clock = Clock()
        record = await self.submit("steady-uvicorn", uvicorn=True, replicas=1)
        [direct] = await self.ready(record, 1)
        r.put("services_uvicorn_replica_ready_s", clock.elapsed())
        r.note("steady, uvicorn: the same load on the FastAPI app served by uvicorn")
        await self.compare("services_uvicorn", "steady-uvicorn", direct, nginx, nginx_why)
        await self.stop_run("steady-uvicorn")

    async def compare(
        self, prefix: str, name: str, direct: str, nginx: Nginx | None, nginx_why: str | None
    ) -> str:
        """The run's one replica direct, through Ferry's proxy and through nginx: `<prefix>_<target>_...`
        figures; the URL through Ferry's proxy."""
        r = self.report
        if not _local(direct):
            raise RuntimeError(f"the replica's address {direct} is not on this machine")
        ferry = service_url(self.proxy, PROJECT, name)
        targets = {"direct": direct.rstrip("/") + "/", "ferry": ferry}
        if nginx is not None:
            try:
                await asyncio.to_thread(nginx.stop)  # serving another run's replica, if any
                split = urlsplit(direct)
                location = service_path(PROJECT, name)
                targets["nginx"] = await asyncio.to_thread(nginx.start, split.netloc, location)
                if prefix == "services":
                    r.put("services_nginx_version", await asyncio.to_thread(nginx.version))
            except (RuntimeError, OSError, subprocess.SubprocessError) as err:
                nginx_why = f"nginx did not start: {err}"
        if "nginx" not in targets:
            r.note(f"nginx: skipped ({nginx_why})")
        # The proxy re-reads its routes every 0.1 s: until it answers.
        for target, url in targets.items():
            await self.until(f"an answer {target}", functools.partial(self.answers, url), 15)

        loaded = {t: LoadResult() for t in targets}
        sequential = {t: LoadResult() for t in targets}
        # The CPU time each proxy's processes used under the load (Ferry's: its process, with its workers if
        # it has any, gateway.workers; nginx: one worker).
        pids = {"ferry": process_tree(self.proxy_pid), "nginx": nginx.pids() if nginx else []}
        cpu = dict.fromkeys(targets, 0.0)
        order = list(targets)
        for url in targets.values():  # warm-up: connections, caches
            await closed_load(url, 200, CONCURRENCY)
            await closed_load(url, 50, 1)
        for i in range(ROUNDS):
            for target in order if i % 2 == 0 else reversed(order):
                used = sum(cpu_seconds(pid) or 0.0 for pid in pids.get(target, []))
                loaded[target].add(await closed_load(targets[target], self.requests // ROUNDS, CONCURRENCY))
                cpu[target] += sum(cpu_seconds(pid) or 0.0 for pid in pids.get(target, [])) - used
        for i in range(ROUNDS):
            for target in order if i % 2 == 0 else reversed(order):
                sequential[target].add(await closed_load(targets[target], self.sequential // ROUNDS, 1))
        which = "" if prefix == "services" else " (uvicorn replica)"
        if prefix == "services":
            r.put("services_concurrency", CONCURRENCY)
        for target in order:
            done, alone = loaded[target], sequential[target]
            r.put(f"{prefix}_{target}_requests", done.sent)
            r.put(f"{prefix}_{target}_failed_requests", done.failed + alone.failed)
            r.put(f"{prefix}_{target}_requests_per_s", done.ok / done.elapsed_s, 0)
            r.put(f"{prefix}_{target}_latency_p50_ms", _ms(done.latencies, 0.5), 2)
            r.put(f"{prefix}_{target}_latency_p99_ms", _ms(done.latencies, 0.99), 2)
            r.put(f"{prefix}_{target}_sequential_latency_p50_ms", _ms(alone.latencies, 0.5), 2)
            r.put(f"{prefix}_{target}_sequential_latency_p99_ms", _ms(alone.latencies, 0.99), 2)
            if pids.get(target):
                r.put(f"{prefix}_{target}_proxy_cpu_us_per_request", cpu[target] / done.sent * 1e6, 0)
            failures = done.failures + alone.failures
            if failures:
                r.note(f"{target}{which}: failures {dict(failures)}")
        f = r.figures
        for target in ("ferry", "nginx"):
            if target not in targets:
                continue
            rps = f[f"{prefix}_{target}_requests_per_s"] / f[f"{prefix}_direct_requests_per_s"]
            added = (
                f[f"{prefix}_{target}_sequential_latency_p50_ms"]
                - f[f"{prefix}_direct_sequential_latency_p50_ms"]
            )
            tail = (
                f[f"{prefix}_{target}_sequential_latency_p99_ms"]
                - f[f"{prefix}_direct_sequential_latency_p99_ms"]
            )
            r.put(f"{prefix}_{target}_rps_over_direct", rps, 2)
            r.put(f"{prefix}_{target}_added_p50_ms", added, 2)
            r.put(f"{prefix}_{target}_added_p99_ms", tail, 2)  # sequential too, as added_p50
        added, rps = f[f"{prefix}_ferry_added_p50_ms"], f[f"{prefix}_ferry_rps_over_direct"]
        r.note(
            f"goal{which}: Ferry's proxy adds <= 1 ms p50 (sequential): {'met' if added <= 1 else 'NOT met'} "
            f"({added:.2f} ms)"
        )
        r.note(
            f"goal{which}: Ferry's proxy serves >= 0.8x direct requests/s: "
            f"{'met' if rps >= 0.8 else 'NOT met'} ({rps:.2f}x)"
        )
        return ferry

    async def stop_in_flight(self, record: RunRecord, url: str) -> None:
        """SLOW_REQUESTS of 1 s each through the proxy; `ferry stop` while they are in flight."""
        r = self.report
        result = LoadResult()
        async with _session(SLOW_REQUESTS, timeout=60) as session:
            slow = url + "slow?s=1"
            in_flight = [asyncio.create_task(_get(session, slow, result)) for _ in range(SLOW_REQUESTS)]
            await asyncio.sleep(0.3)
            clock = Clock()
            await self.api.stop(record.run_name)
            await asyncio.wait_for(asyncio.gather(*in_flight), 60)
            await asyncio.wait_for(self.api.wait(record.run_name), 60)
        r.put("services_stop_requests_in_flight", result.sent)
        r.put("services_stop_failed_requests", result.failed)
        r.put("services_stop_to_finished_s", clock.elapsed())
        r.put("services_stop_run_status", await self.status(record))
        if result.failures:
            r.note(f"stop: failures {dict(result.failures)}")

    def _starts(self, name: str) -> list[float]:
        """The start times the run's replicas wrote, in order."""
        with contextlib.suppress(OSError):
            return [float(line.split()[2]) for line in (self.marks / name).read_text().splitlines() if line]
        return []

    async def from_zero(self) -> None:
        """`replicas: 0..1`: scaled to zero (PENDING), then one request through the proxy wakes it."""
        r = self.report
        name = "from-zero"
        scaling = {"target": SCALING_TARGET, "window": "2s", "scale_up_delay": "0s", "scale_down_delay": "1s"}
        record = await self.submit(name, replicas="0..1", scaling=scaling)
        url = service_url(self.proxy, PROJECT, name)
        await self.ready(record, 1)  # a `0..N` service starts with one replica
        first: list[float] = []
        after_start: list[float] = []
        to_zero: list[float] = []

        async def scaled_to_zero() -> bool:
            return await self.status(record) == RunStatus.PENDING and not await self.replicas(record)

        for _ in range(self.trials):
            to_zero.append(await self.until("scaled to zero", scaled_to_zero, 90))
            await asyncio.sleep(0.5)  # the proxy's routes know it too
            before = len(self._starts(name))
            result = LoadResult()
            async with _session(1, timeout=130) as session:
                sent = time.perf_counter()
                await _get(session, url, result)
                answered_wall, answered = time.time(), time.perf_counter()
            if result.failed:
                raise RuntimeError(f"the request that wakes {name} failed: {dict(result.failures)}")
            starts = self._starts(name)[before:]
            if not starts:
                raise RuntimeError(f"no new replica start in {self.marks / name}")
            first.append(answered - sent)
            after_start.append(answered_wall - starts[-1])
        r.put("services_from_zero_trials", len(first))
        r.put("services_scale_to_zero_s", statistics.median(to_zero))  # until PENDING with no replica
        r.put("services_from_zero_first_response_s", statistics.median(first))
        r.put("services_from_zero_after_process_start_s", statistics.median(after_start))
        if len(first) > 1:
            r.put("services_from_zero_first_response_max_s", max(first))
            r.put("services_from_zero_after_process_start_max_s", max(after_start))
        goal = statistics.median(after_start)
        r.note(
            f"goal: the replica's process start -> its first answer <= 2 s: "
            f"{'met' if goal <= 2 else 'NOT met'} ({goal:.3f} s)"
        )
        await self.stop_run(name)


async def measure(ferry: FerrySide, report: Report, requests: int, trials: int) -> None:
    """The services section, in a temporary directory removed at the end (the runs stopped first)."""
    work = Path(tempfile.mkdtemp(prefix="ferry-bench-services-"))
    try:
        await ServicesBench(ferry, report, requests, trials, work).measure()
    finally:
        shutil.rmtree(work, ignore_errors=True)
