"""The services section: Ferry's proxy (gateway/, docs/services.md) in front of a typical Python replica,
side by side with the replica reached directly and with nginx as the same reverse proxy.

Everything is on this machine, on FerrySide's embedded stack: the replicas are real service runs
(`auth: false`) of a threaded stdlib HTTP server started with the host's `python3` (REPLICA below), each in
the network namespace the local agent gives it (10.214.x); Ferry's proxy is the stack's own (its URL in
`Stack.status()`); nginx, when it can be had (installed from Debian's packages when missing, as root), runs
in the foreground from a generated configuration in a temporary directory. The load generator is an
asyncio client (aiohttp) with keep-alive connections; every load is bounded in count and in time.

1. Steady state, one replica: requests/s and latency p50/p99 at N connections, and sequential latency
   (1 connection), direct / through Ferry's proxy / through nginx; what each proxy adds.
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
import re
import shutil
import signal
import socket
import statistics
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from bench.common import Clock, Report, cpu_seconds, percentile
from bench.ferry_side import SHARED, FerrySide
from cli.api import FerryAPI
from core.configuration import ServiceConfiguration, parse_configuration
from core.services.replicas import service_path, service_url
from core.status import RunStatus
from store import RunRecord

PROJECT = "bench-services"
PORT = 8100  # every replica listens on it: each has its own network namespace
CONCURRENCY = 16  # the load's connections (keep-alive)
ROUNDS = 4  # each target's measurement is split in rounds, the targets' order reversed every round
MEASURE_LIMIT_S = 120.0  # a measurement stops after this long, whatever its count
SCALING_TARGET = 10  # requests/s per replica
HIGH_RATE = 30  # requests/s: ceil(30 / 10) = 3, within 1..2: two replicas
LOW_RATE = 5  # requests/s: one replica
SLOW_REQUESTS = 10  # in flight while a run is stopped, 1 s each

# A typical Python replica: a threaded stdlib HTTP server. GET /slow?s=N answers after N seconds, anything
# else at once with a small body. It prints the time its process started (taken before any import) on its
# first line, and appends `<replica> <pid> <time>` to the file named by its second argument.
REPLICA = r"""
import time
STARTED = time.time()
import os, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

PORT, MARKS = int(sys.argv[1]), sys.argv[2]
NUM = os.environ.get("FERRY_REPLICA_NUM", "?")
BODY = f"hello from replica {NUM}\n".encode()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # As servers made for it do (uvicorn, gunicorn): the answer in one write, sent at once. Unbuffered,
    # with Nagle, the body waits for the ACK of the headers: the client's delayed ACK, 40 ms a request.
    wbufsize = 64 * 1024  # flushed by handle_one_request after each answer
    disable_nagle_algorithm = True

    def do_GET(self):
        url = urlparse(self.path)
        if url.path == "/slow":
            time.sleep(float(parse_qs(url.query).get("s", ["1"])[0]))
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)

    def log_message(self, *args):
        pass


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # socketserver's 5 would drop the SYNs of a pool opening its connections


print(f"started {STARTED:.6f} replica {NUM} pid {os.getpid()} port {PORT}", flush=True)
with open(MARKS, "a") as marks:
    marks.write(f"{NUM} {os.getpid()} {STARTED:.6f}\n")
Server(("0.0.0.0", PORT), Handler).serve_forever()
"""

NGINX_CONF = """\
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{
    worker_connections 1024;
}}
http {{
    access_log off;
    client_body_temp_path {dir}/client_body_temp;
    proxy_temp_path {dir}/proxy_temp;
{more_temp_paths}
    upstream replica {{
        server {upstream};
        keepalive 64;
    }}
    server {{
        listen 127.0.0.1:{port};
        location {location} {{
            proxy_pass http://replica/;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_request_buffering off;
        }}
    }}
}}
"""


# --- load -----------------------------------------------------------------------------------------


@dataclass
class LoadResult:
    sent: int = 0
    ok: int = 0
    elapsed_s: float = 0.0
    latencies: list[float] = field(default_factory=list)  # seconds, of every request (answered or not)
    failures: Counter[str] = field(default_factory=Counter)

    @property
    def failed(self) -> int:
        return self.sent - self.ok

    def add(self, other: LoadResult) -> None:
        self.sent += other.sent
        self.ok += other.ok
        self.elapsed_s += other.elapsed_s
        self.latencies.extend(other.latencies)
        self.failures.update(other.failures)


def _session(connections: int, timeout: float = 30.0) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(limit=connections, limit_per_host=connections, keepalive_timeout=30)
    return aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=timeout), trust_env=False
    )


async def _get(session: aiohttp.ClientSession, url: str, result: LoadResult) -> bool:
    """One GET, its body read; its latency and outcome counted in `result`."""
    result.sent += 1
    started = time.perf_counter()
    try:
        async with session.get(url) as response:
            await response.read()
            ok = 200 <= response.status < 300
            if not ok:
                result.failures[f"HTTP {response.status}"] += 1
    except (aiohttp.ClientError, TimeoutError, OSError) as err:
        ok = False
        result.failures[type(err).__name__] += 1
    result.latencies.append(time.perf_counter() - started)
    result.ok += ok
    return ok


async def closed_load(url: str, total: int, connections: int, limit_s: float = MEASURE_LIMIT_S) -> LoadResult:
    """`total` GETs over `connections` keep-alive connections, each sending its next request once it has
    its answer; stops early after `limit_s`."""
    result = LoadResult()
    async with _session(connections) as session:
        stop_at = time.monotonic() + limit_s
        issued = 0

        async def connection() -> None:
            nonlocal issued
            while issued < total and time.monotonic() < stop_at:
                issued += 1
                await _get(session, url, result)

        started = time.perf_counter()
        await asyncio.gather(*(connection() for _ in range(connections)))
        result.elapsed_s = time.perf_counter() - started
    return result


class Pacer:
    """GETs at `rate` per second (changeable while it runs), each on its own as its time comes, whether or
    not the earlier ones were answered; at most `cap` of them and for at most `limit_s`."""

    def __init__(self, url: str, rate: float, cap: int, limit_s: float) -> None:
        self.url = url
        self.rate = rate
        self.cap = cap
        self.limit_s = limit_s
        self.result = LoadResult()
        self._stopping = False

    def stop(self) -> None:
        self._stopping = True

    async def run(self) -> LoadResult:
        tasks: set[asyncio.Task[bool]] = set()
        async with _session(0, timeout=30.0) as session:
            started = time.monotonic()
            next_at, stop_at = started, started + self.limit_s
            while not self._stopping and self.result.sent < self.cap and time.monotonic() < stop_at:
                task = asyncio.create_task(_get(session, self.url, self.result))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                next_at = max(next_at + 1 / self.rate, time.monotonic() - 1.0)  # behind: no burst to catch up
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            if tasks:
                await asyncio.wait(tasks, timeout=60)
            self.result.elapsed_s = time.monotonic() - started
        return self.result


# --- nginx ----------------------------------------------------------------------------------------


def nginx_binary() -> str | None:
    return shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if os.access(p, os.X_OK)), None
    )


def ensure_nginx(report: Report) -> tuple[str | None, str | None]:
    """nginx's path, installed from Debian's packages (nginx-light, else nginx) when missing; or None and
    why not."""
    found = nginx_binary()
    if found is not None:
        return found, None
    if os.geteuid() != 0:
        return None, "not installed, and installing it needs root"
    if shutil.which("apt-get") is None:
        return None, "not installed, and no apt-get"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    clock = Clock()
    output = ""
    for _ in range(3):
        try:
            update = subprocess.run(
                ["apt-get", "update", "-q"], capture_output=True, text=True, env=env, timeout=300
            )
            output = update.stdout + update.stderr
            for package in ("nginx-light", "nginx"):
                done = subprocess.run(
                    ["apt-get", "install", "-y", "-q", "--no-install-recommends", package],
                    capture_output=True,
                    text=True,
                    env=env,
                    timeout=600,
                )
                output = done.stdout + done.stderr
                if done.returncode == 0 and nginx_binary() is not None:
                    report.put("services_nginx_install_s", clock.elapsed(), 1)
                    return nginx_binary(), None
        except subprocess.TimeoutExpired:
            return None, "apt-get took too long"
        if "lock" not in output.lower():
            break
        time.sleep(20)  # another apt-get holds the lock
    last = output.strip().splitlines()[-1:] or ["?"]
    return None, f"apt-get install nginx-light failed: {last[0][:200]}"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Nginx:
    """nginx in the foreground (`daemon off`), its configuration, pid, error log and temp files in `dir`."""

    def __init__(self, binary: str, dir: Path) -> None:
        self.binary = binary
        self.dir = dir
        self.proc: subprocess.Popen[bytes] | None = None

    def version(self) -> str:
        done = subprocess.run([self.binary, "-v"], capture_output=True, text=True, timeout=10)
        found = re.search(r"nginx/(\S+)", done.stderr + done.stdout)
        return found.group(1) if found else "unknown"

    def start(self, upstream: str, location: str) -> str:
        """Serves `location` from `upstream` (host:port); the URL of `location`."""
        built = subprocess.run([self.binary, "-V"], capture_output=True, text=True, timeout=10).stderr
        more = "".join(
            f"    {module}_temp_path {self.dir}/{module}_temp;\n"
            for module in ("fastcgi", "uwsgi", "scgi")
            if f"--without-http_{module}_module" not in built
        )
        port = free_port()
        conf = self.dir / "nginx.conf"
        conf.write_text(
            NGINX_CONF.format(
                dir=self.dir, more_temp_paths=more, upstream=upstream, port=port, location=location
            )
        )
        command = [self.binary, "-p", str(self.dir), "-e", str(self.dir / "error.log"), "-c", str(conf)]
        self.proc = subprocess.Popen(
            [*command, "-g", "daemon off;"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nginx exited with status {self.proc.returncode}: {self._last_error()}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return f"http://127.0.0.1:{port}{location}"
            time.sleep(0.05)
        raise RuntimeError(f"nginx did not listen in 10 s: {self._last_error()}")

    def pids(self) -> list[int]:
        """The master's and its workers'."""
        if self.proc is None:
            return []
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        with contextlib.suppress(OSError):
            return [self.proc.pid, *map(int, children.read_text().split())]
        return [self.proc.pid]

    def _last_error(self) -> str:
        with contextlib.suppress(OSError):
            lines = (self.dir / "error.log").read_text(errors="replace").strip().splitlines()
            if lines:
                return lines[-1][:300]
        return "no error log"

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()  # the master stops its workers
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


# --- the section ----------------------------------------------------------------------------------


def _local(url: str) -> bool:
    """Only this machine: loopback, or a replica namespace of the local agent (10.214.0.0/16)."""
    try:
        address = ipaddress.ip_address(urlsplit(url).hostname or "")
    except ValueError:
        return False
    return address.is_loopback or address in ipaddress.ip_network("10.214.0.0/16")


def _ms(values: list[float], fraction: float) -> float:
    if fraction == 0.5:
        return statistics.median(values) * 1000
    return percentile(values, fraction) * 1000


class ServicesBench:
    def __init__(self, ferry: FerrySide, report: Report, requests: int, trials: int, work: Path) -> None:
        self.ferry = ferry
        self.report = report
        self.requests = requests
        self.sequential = max(100, requests // 4)
        self.trials = trials
        self.work = work
        self.repo = work / "repo"
        self.marks = work / "marks"
        self.api: FerryAPI = ferry.api(PROJECT)
        self.started: list[str] = []  # the runs to stop, whatever happens
        self.proxy = ""
        self.proxy_pid: int | None = None

    # --- runs -------------------------------------------------------------------------------------

    def conf(self, name: str, **fields: Any) -> ServiceConfiguration:
        data = {
            "type": "service",
            "port": PORT,
            "commands": [f"exec python3 replica.py {PORT} {self.marks / name}"],
            "resources": SHARED,
            "auth": False,
            "stop_duration": "20s",
            **fields,
        }
        conf = parse_configuration(data)
        assert isinstance(conf, ServiceConfiguration)
        return conf

    async def submit(self, name: str, **fields: Any) -> RunRecord:
        record = await self.api.submit(self.conf(name, **fields), repo_dir=self.repo, run_name=name)
        self.started.append(name)
        return record

    async def replicas(self, record: RunRecord) -> list[tuple[str, str]]:
        """(state, url) of the run's registered replicas."""
        rows = await asyncio.to_thread(self.ferry.store.list_service_replicas, [record.id])
        return [(r.state, r.url) for r in rows]

    async def until(self, what: str, check: Callable[[], Awaitable[bool]], limit: float) -> float:
        """Seconds until `check()` holds (every 0.05 s); RuntimeError after `limit`."""
        clock = Clock()
        while clock.elapsed() < limit:
            if await check():
                return clock.elapsed()
            await asyncio.sleep(0.05)
        raise RuntimeError(f"{what}: not within {limit:.0f} s")

    async def ready(self, record: RunRecord, count: int, limit: float = 90) -> list[str]:
        """Until `count` replicas are ready and no other is registered; their URLs."""

        async def check() -> bool:
            found = await self.replicas(record)
            if len(found) == count and all(state == "ready" for state, _ in found):
                return True
            run = await asyncio.to_thread(self.ferry.store.get_run, record.id)
            if run is not None and RunStatus(run.status).is_finished():
                raise RuntimeError(f"run {record.run_name} {run.status}: {run.status_message}")
            return False

        await self.until(f"{count} replica(s) of {record.run_name} ready", check, limit)
        return [url for _, url in await self.replicas(record)]

    async def status(self, record: RunRecord) -> str:
        run = await asyncio.to_thread(self.ferry.store.find_run, record.project, record.run_name)
        return run.status if run is not None else "missing"

    async def stop_run(self, name: str) -> None:
        """Stopped (aborted if a graceful stop does not finish in 60 s), and waited for."""
        run = await asyncio.to_thread(self.ferry.store.find_run, PROJECT, name)
        if run is None or RunStatus(run.status).is_finished():
            return
        try:
            await self.api.stop(name)
            await asyncio.wait_for(self.api.wait(name), 60)
        except Exception:
            await self.api.stop(name, abort=True)
            await asyncio.wait_for(self.api.wait(name), 60)

    async def stop_all(self) -> None:
        for name in self.started:
            try:
                await self.stop_run(name)
            except Exception as err:
                self.report.note(f"services: could not stop run {name}: {type(err).__name__}: {err}")

    # --- the section ------------------------------------------------------------------------------

    async def measure(self) -> None:
        r = self.report
        self.repo.mkdir(parents=True)
        self.marks.mkdir(parents=True)
        (self.repo / "replica.py").write_text(REPLICA)
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
            await self.scale_down()
            await self.rolling()
        finally:
            await self.stop_all()
            shutil.rmtree(nginx_dir, ignore_errors=True)

    async def steady(self, nginx: Nginx | None, nginx_why: str | None) -> None:
        """One replica: direct, through Ferry's proxy, through nginx; then stopped with requests in flight."""
        r = self.report
        name = "steady"
        clock = Clock()
        record = await self.submit(name, replicas=1)
        [direct] = await self.ready(record, 1)
        r.put("services_replica_ready_s", clock.elapsed())  # submit -> the replica ready
        if not _local(direct):
            raise RuntimeError(f"the replica's address {direct} is not on this machine")
        ferry = service_url(self.proxy, PROJECT, name)
        targets = {"direct": direct.rstrip("/") + "/", "ferry": ferry}
        if nginx is not None:
            try:
                split = urlsplit(direct)
                location = service_path(PROJECT, name)
                targets["nginx"] = await asyncio.to_thread(nginx.start, split.netloc, location)
                r.put("services_nginx_version", await asyncio.to_thread(nginx.version))
            except (RuntimeError, OSError, subprocess.SubprocessError) as err:
                nginx_why = f"nginx did not start: {err}"
        if "nginx" not in targets:
            r.note(f"nginx: skipped ({nginx_why})")
        # The proxy re-reads its routes every 0.1 s: until it answers.
        for target, url in targets.items():
            await self.until(f"an answer {target}", functools.partial(self._answers, url), 15)

        r.note(
            f"steady: {self.requests} GETs per target at {CONCURRENCY} keep-alive connections "
            f"({ROUNDS} rounds, order reversed each round), then {self.sequential} sequential; the client, "
            f"the replica and the proxies share this machine's {os.cpu_count()} CPUs"
        )
        loaded = {t: LoadResult() for t in targets}
        sequential = {t: LoadResult() for t in targets}
        # The CPU time each proxy's processes used under the load (Ferry's: one process; nginx: one worker).
        pids = {"ferry": [self.proxy_pid] if self.proxy_pid else [], "nginx": nginx.pids() if nginx else []}
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
        r.put("services_concurrency", CONCURRENCY)
        for target in order:
            done, alone = loaded[target], sequential[target]
            r.put(f"services_{target}_requests", done.sent)
            r.put(f"services_{target}_failed_requests", done.failed + alone.failed)
            r.put(f"services_{target}_requests_per_s", done.ok / done.elapsed_s, 0)
            r.put(f"services_{target}_latency_p50_ms", _ms(done.latencies, 0.5), 2)
            r.put(f"services_{target}_latency_p99_ms", _ms(done.latencies, 0.99), 2)
            r.put(f"services_{target}_sequential_latency_p50_ms", _ms(alone.latencies, 0.5), 2)
            r.put(f"services_{target}_sequential_latency_p99_ms", _ms(alone.latencies, 0.99), 2)
            if pids.get(target):
                r.put(f"services_{target}_proxy_cpu_us_per_request", cpu[target] / done.sent * 1e6, 0)
            failures = done.failures + alone.failures
            if failures:
                r.note(f"{target}: failures {dict(failures)}")
        f = r.figures
        for target in ("ferry", "nginx"):
            if target not in targets:
                continue
            rps = f[f"services_{target}_requests_per_s"] / f["services_direct_requests_per_s"]
            added = (
                f[f"services_{target}_sequential_latency_p50_ms"]
                - f["services_direct_sequential_latency_p50_ms"]
            )
            r.put(f"services_{target}_rps_over_direct", rps, 2)
            r.put(f"services_{target}_added_p50_ms", added, 2)
        added, rps = f["services_ferry_added_p50_ms"], f["services_ferry_rps_over_direct"]
        r.note(
            f"goal: Ferry's proxy adds <= 1 ms p50 (sequential): {'met' if added <= 1 else 'NOT met'} "
            f"({added:.2f} ms)"
        )
        r.note(
            f"goal: Ferry's proxy serves >= 0.8x direct requests/s: {'met' if rps >= 0.8 else 'NOT met'} "
            f"({rps:.2f}x)"
        )
        await self.stop_in_flight(record, ferry)

    async def _answers(self, url: str) -> bool:
        with contextlib.suppress(aiohttp.ClientError, TimeoutError, OSError):
            async with _session(1, timeout=5) as session, session.get(url) as response:
                await response.read()
                return response.status == 200
        return False

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

    async def scale_down(self) -> None:
        """`replicas: 1..2` under a paced load that holds two replicas, then a low one: one replica."""
        r = self.report
        name = "scale-down"
        scaling = {"target": SCALING_TARGET, "window": "2s", "scale_up_delay": "0s", "scale_down_delay": "2s"}
        record = await self.submit(name, replicas="1..2", scaling=scaling)
        await self.ready(record, 1)
        url = service_url(self.proxy, PROJECT, name)
        await self.until("an answer through the proxy", functools.partial(self._answers, url), 15)
        pacer = Pacer(url, HIGH_RATE, cap=HIGH_RATE * 150, limit_s=150)
        load = asyncio.create_task(pacer.run())
        try:
            up = await self.until_ready_or_load_ends(record, 2, load, 60)
            r.put("services_scale_up_s", up)  # the high rate's start -> two replicas ready
            await asyncio.sleep(3)  # both serve
            pacer.rate = LOW_RATE
            down = await self.until_ready_or_load_ends(record, 1, load, 60)
            r.put("services_scale_down_s", down)  # the low rate's start -> the second replica gone
            await asyncio.sleep(3)
        finally:
            pacer.stop()
            result = await load
        r.put("services_scale_down_rates_per_s", f"{HIGH_RATE} then {LOW_RATE} (target {SCALING_TARGET})")
        r.put("services_scale_down_requests_sent", result.sent)
        r.put("services_scale_down_failed_requests", result.failed)
        if result.failures:
            r.note(f"scale-down: failures {dict(result.failures)}")
        await self.stop_run(name)

    async def rolling(self) -> None:
        """Two replicas under a paced load, re-applied with a changed env: a rolling deployment."""
        r = self.report
        name = "rolling"
        record = await self.submit(name, replicas=2)
        await self.ready(record, 2)
        url = service_url(self.proxy, PROJECT, name)
        await self.until("an answer through the proxy", functools.partial(self._answers, url), 15)
        pacer = Pacer(url, LOW_RATE * 4, cap=LOW_RATE * 4 * 150, limit_s=150)
        load = asyncio.create_task(pacer.run())
        try:
            await asyncio.sleep(1)
            reply = await self.api.deploy(name, self.conf(name, replicas=2, env={"DEPLOYMENT": "1"}))
            if reply.refused is not None:
                raise RuntimeError(f"rolling deployment refused: {reply.refused}")

            async def rolled() -> bool:
                if load.done():
                    raise RuntimeError("the load ended first")
                rows = await asyncio.to_thread(self.ferry.store.list_service_replicas, [record.id])
                return len(rows) == 2 and all(
                    row.deployment_num == 1 and row.state == "ready" for row in rows
                )

            r.put("services_rolling_s", await self.until("the new deployment alone", rolled, 90))
            await asyncio.sleep(1)
        finally:
            pacer.stop()
            result = await load
        r.put("services_rolling_requests_sent", result.sent)
        r.put("services_rolling_failed_requests", result.failed)
        if result.failures:
            r.note(f"rolling: failures {dict(result.failures)}")
        await self.stop_run(name)

    async def until_ready_or_load_ends(
        self, record: RunRecord, count: int, load: asyncio.Task[LoadResult], limit: float
    ) -> float:
        async def check() -> bool:
            if load.done():
                raise RuntimeError("the load ended first")
            found = await self.replicas(record)
            return len(found) == count and all(state == "ready" for state, _ in found)

        return await self.until(f"{count} replica(s) of {record.run_name} ready", check, limit)


async def measure(ferry: FerrySide, report: Report, requests: int, trials: int) -> None:
    """The services section, in a temporary directory removed at the end (the runs stopped first)."""
    work = Path(tempfile.mkdtemp(prefix="ferry-bench-services-"))
    try:
        await ServicesBench(ferry, report, requests, trials, work).measure()
    finally:
        shutil.rmtree(work, ignore_errors=True)
