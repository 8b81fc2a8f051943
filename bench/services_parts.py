"""The services section's parts: its replicas' sources, the load it sends, and nginx beside Ferry's proxy.

Used by bench.services_bench (on the stack) and bench.proxy_micro (the proxy alone).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from bench.common import Clock, Report, percentile

PROJECT = "bench-services"
SCALING_TARGET = 10  # requests/s per replica
HIGH_RATE = 30  # requests/s: ceil(30 / 10) = 3, within 1..2: two replicas
LOW_RATE = 5  # requests/s: one replica
MEASURE_LIMIT_S = 120.0  # a measurement stops after this long, whatever its count

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

# The other typical Python replica: an ASGI app (FastAPI) served by uvicorn, the same answers as REPLICA.
# Run with this interpreter (sys.executable), whose environment has them; uvicorn picks its fastest
# installed parts itself (uvloop; httptools if present, else h11).
UVICORN_REPLICA = r"""
import time
STARTED = time.time()
import asyncio, os, sys
import uvicorn
from fastapi import FastAPI
from fastapi.responses import PlainTextResponse

PORT, MARKS = int(sys.argv[1]), sys.argv[2]
NUM = os.environ.get("FERRY_REPLICA_NUM", "?")
BODY = f"hello from replica {NUM}\n"
app = FastAPI()


@app.get("/slow")
async def slow(s: float = 1.0) -> PlainTextResponse:
    await asyncio.sleep(s)
    return PlainTextResponse(BODY)


@app.get("/{path:path}")
async def hello(path: str) -> PlainTextResponse:
    return PlainTextResponse(BODY)


print(f"started {STARTED:.6f} replica {NUM} pid {os.getpid()} port {PORT}", flush=True)
with open(MARKS, "a") as marks:
    marks.write(f"{NUM} {os.getpid()} {STARTED:.6f}\n")
uvicorn.run(app, host="0.0.0.0", port=PORT, log_level="warning", access_log=False)
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
            # The headers Ferry's proxy gives every request (gateway/fast_path/routing.py): each costs
            # the replica its parse, so the two proxies hand it the same work.
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_set_header X-Forwarded-Host $http_host;
            proxy_set_header X-Forwarded-Proto $scheme;
            proxy_set_header X-Forwarded-Prefix {location_prefix};
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


def process_tree(pid: int | None) -> list[int]:
    """The process and its children (a proxy's workers, gateway.workers); [] for None."""
    if pid is None:
        return []
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        children = []
    return [pid, *(int(child) for child in children)]


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
                dir=self.dir,
                more_temp_paths=more,
                upstream=upstream,
                port=port,
                location=location,
                location_prefix=location.rstrip("/"),
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


def _ms(values: list[float], fraction: float) -> float:
    if fraction == 0.5:
        return statistics.median(values) * 1000
    return percentile(values, fraction) * 1000
