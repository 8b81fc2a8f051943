"""The proxy alone, for working on its hot path: `python -m bench.proxy_micro [--replica uvicorn] ...`.

No stack: a SQLite store in a temporary directory holds one public service run and its one replica (a process
on 127.0.0.1: bench.services_parts' stdlib or uvicorn replica, started with this interpreter), and `python -m
gateway` serves it. The load (services_parts.closed_load, from this process) goes to the replica directly and
through the proxy, in alternating rounds; it prints requests/s, latency and the proxy's CPU µs per request.
`--compare DIR` runs a second proxy beside it, `python -m gateway` started in DIR (so DIR/gateway, e.g. a copy
of the package before a change, is the one imported; it also finds the replica's URL in
FERRY_BENCH_REPLICA_URL), measured in the same rounds: an A/B comparison under the same noise. `--floor` runs
a third beside them, FLOOR_RELAY: a relay that passes bytes both ways on the same event loop and does nothing
else, the CPU any Python proxy on uvloop spends on the kernel's reads and writes. `--nginx` runs nginx beside
them too (bench.services_parts.Nginx, the services section's configuration): the peer, in the same rounds, and
each proxy's requests/s over nginx's. `--workers N` gives the proxy N processes (gateway.workers),
`--compare-workers N` runs another proxy beside them with N processes (its CPU: the supervisor's and its
workers'). Beside each target's figures, the client's (this process) and the replica's CPU µs per request.
`--profile FILE` runs the first proxy under cProfile and writes its stats there (the profiler inflates the
CPU figures; with `--workers 1` only). Takes seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import Report, cpu_seconds
from bench.services_parts import (
    REPLICA,
    UVICORN_REPLICA,
    LoadResult,
    Nginx,
    _ms,
    closed_load,
    free_port,
    nginx_binary,
    process_tree,
)
from store.models import RunRecord, ServiceReplicaRecord
from store.opening import open_store

REPO_ROOT = Path(__file__).resolve().parent.parent

# `python FILE REPLICA_PORT PORT`: each client connection gets a connection of its own to the replica, and
# the bytes pass as they come, the service path cut from the request line (plain GETs only).
FLOOR_RELAY = r"""
import asyncio, sys, uvloop

REPLICA_PORT, PORT = int(sys.argv[1]), int(sys.argv[2])


class ToReplica(asyncio.Protocol):
    def __init__(self, client):
        self.client = client

    def data_received(self, data):
        self.client.transport.write(data)


class FromClient(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport, self.replica, self.early = transport, None, []
        asyncio.get_running_loop().create_task(self.open())

    async def open(self):
        loop = asyncio.get_running_loop()
        self.replica, _ = await loop.create_connection(lambda: ToReplica(self), "127.0.0.1", REPLICA_PORT)
        for data in self.early:
            self.replica.write(data)

    def data_received(self, data):
        data = data.replace(b"/proxy/services/bench/micro/", b"/", 1)
        if self.replica is None:
            self.early.append(data)
        else:
            self.replica.write(data)


async def main():
    await asyncio.get_running_loop().create_server(FromClient, "127.0.0.1", PORT)
    await asyncio.Event().wait()


uvloop.run(main())
"""


def _wait_listening(port: int, proc: subprocess.Popen[bytes], limit: float = 20.0) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port} after {limit} s")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def _profiled_gateway(argv: list[str], out: str) -> None:
    """`python -m gateway` under cProfile, its stats written to `out` once it stops (SIGTERM)."""
    from gateway.main import main

    profile = cProfile.Profile()
    try:
        profile.runcall(main, argv)
    finally:
        profile.dump_stats(out)


async def _measure(args: argparse.Namespace, work: Path, report: Report) -> None:
    db = f"sqlite:///{work}/ferry.db"
    store = open_store(db)
    replica_port = free_port()
    script = work / "replica.py"
    script.write_text(UVICORN_REPLICA if args.replica == "uvicorn" else REPLICA)
    replica = subprocess.Popen(
        [sys.executable, str(script), str(replica_port), str(work / "marks")],
        stdout=subprocess.DEVNULL,
        cwd=work,
    )
    config = {"type": "service", "port": replica_port, "commands": ["serve"], "auth": False}
    store.put_run(
        RunRecord(
            id="run-micro",
            project="bench",
            run_name="micro",
            user="bench",
            type="service",
            status="running",
            configuration=json.dumps(config),
            workflow_id="ferry/bench/micro",
        )
    )
    store.register_replica(
        ServiceReplicaRecord(
            id="replica-0",
            run_id="run-micro",
            replica_num=0,
            submission_num=0,
            url=f"http://127.0.0.1:{replica_port}",
            state="ready",
        )
    )
    plain = [sys.executable, "-m", "gateway"]
    profiled = [sys.executable, "-m", "bench.proxy_micro", "--serve-profiled", str(args.profile), "--"]
    commands = {
        "ferry": [*(profiled if args.profile else plain), "--workers", str(args.workers)],
        "other": plain,
        "workers": [*plain, "--workers", str(args.compare_workers)],
    }
    # `-m gateway` imports the package found first from its working directory.
    dirs = {"ferry": REPO_ROOT, **({"other": Path(args.compare)} if args.compare else {})}
    if args.compare_workers:
        dirs["workers"] = REPO_ROOT
    ports = {name: free_port() for name in dirs}
    env = {**os.environ, "FERRY_BENCH_REPLICA_URL": f"http://127.0.0.1:{replica_port}"}
    gateways: dict[str, subprocess.Popen[bytes]] = {}
    nginx = None
    try:  # each started inside: one that fails to start leaves none behind (the finally stops them)
        for name in dirs:
            command = [*commands[name], "--port", str(ports[name]), "--database-url", db]
            gateways[name] = subprocess.Popen(command, stderr=subprocess.DEVNULL, cwd=dirs[name], env=env)
        if args.floor:
            relay = work / "floor_relay.py"
            relay.write_text(FLOOR_RELAY)
            ports["floor"] = free_port()
            command = [sys.executable, str(relay), str(replica_port), str(ports["floor"])]
            gateways["floor"] = subprocess.Popen(command, stderr=subprocess.DEVNULL, cwd=work)
        _wait_listening(replica_port, replica)
        for name, proc in gateways.items():
            _wait_listening(ports[name], proc)
        targets = {"direct": f"http://127.0.0.1:{replica_port}/"}
        targets.update({n: f"http://127.0.0.1:{p}/proxy/services/bench/micro/" for n, p in ports.items()})
        if args.nginx:
            binary = nginx_binary()
            if binary is None:
                raise SystemExit("--nginx: no nginx here (Debian's nginx-light)")
            (work / "nginx").mkdir()
            nginx = Nginx(binary, work / "nginx")
            targets["nginx"] = nginx.start(f"127.0.0.1:{replica_port}", "/proxy/services/bench/micro/")
        for url in targets.values():
            await closed_load(url, 300, args.concurrency)
            await closed_load(url, 50, 1)
        loaded = {t: LoadResult() for t in targets}
        alone = {t: LoadResult() for t in targets}
        cpu = dict.fromkeys(targets, 0.0)
        # The load's other two parties: this process (the client) and the replica.
        others = {t: {"client": 0.0, "replica": 0.0} for t in targets}
        sides = {"client": os.getpid(), "replica": replica.pid}
        for i in range(args.rounds):
            for target in list(targets) if i % 2 == 0 else reversed(targets):
                pids = process_tree(gateways[target].pid) if target in gateways else []
                if target == "nginx" and nginx is not None:
                    pids = nginx.pids()
                before = sum(cpu_seconds(pid) or 0.0 for pid in pids)
                side_before = {side: cpu_seconds(pid) or 0.0 for side, pid in sides.items()}
                done = await closed_load(targets[target], args.requests // args.rounds, args.concurrency)
                cpu[target] += sum(cpu_seconds(pid) or 0.0 for pid in pids) - before
                for side, pid in sides.items():
                    others[target][side] += (cpu_seconds(pid) or 0.0) - side_before[side]
                loaded[target].add(done)
                alone[target].add(await closed_load(targets[target], args.sequential // args.rounds, 1))
        for target in targets:
            done = loaded[target]
            report.put(f"{target}_requests_per_s", done.ok / done.elapsed_s, 0)
            report.put(f"{target}_p50_ms", _ms(done.latencies, 0.5), 2)
            report.put(f"{target}_p99_ms", _ms(done.latencies, 0.99), 2)
            report.put(f"{target}_sequential_p50_ms", _ms(alone[target].latencies, 0.5), 3)
            for side, used in others[target].items():
                report.put(f"{target}_{side}_cpu_us_per_request", used / done.sent * 1e6, 1)
            if done.failed or alone[target].failed:
                report.note(f"{target}: failures {dict(done.failures + alone[target].failures)}")
        f = report.figures
        for name in [*gateways, *(["nginx"] if nginx is not None else [])]:
            report.put(f"{name}_rps_over_direct", f[f"{name}_requests_per_s"] / f["direct_requests_per_s"], 2)
            added = f[f"{name}_sequential_p50_ms"] - f["direct_sequential_p50_ms"]
            report.put(f"{name}_added_p50_ms", added, 3)
            report.put(f"{name}_cpu_us_per_request", cpu[name] / loaded[name].sent * 1e6, 1)
        if nginx is not None:
            for name in gateways:
                ratio = f[f"{name}_requests_per_s"] / f["nginx_requests_per_s"]
                report.put(f"{name}_rps_over_nginx", ratio, 2)
    finally:
        if nginx is not None:
            nginx.stop()
        for proc in gateways.values():
            _stop(proc)
        _stop(replica)
        store.engine.dispose()


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--serve-profiled":
        _profiled_gateway(sys.argv[4:], sys.argv[2])
        return
    parser = argparse.ArgumentParser(prog="python -m bench.proxy_micro")
    parser.add_argument("--replica", choices=("stdlib", "uvicorn"), default="stdlib")
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--sequential", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--profile", default=None, help="cProfile the proxies into this file")
    parser.add_argument("--compare", default=None, help="a directory with another gateway/ package")
    parser.add_argument("--floor", action="store_true", help="a bare relay beside: the CPU floor")
    parser.add_argument("--nginx", action="store_true", help="nginx beside: the peer")
    parser.add_argument("--workers", type=int, default=1, help="the proxy's processes (gateway --workers)")
    parser.add_argument(
        "--compare-workers", type=int, default=0, help="a second proxy beside, with this many processes"
    )
    args = parser.parse_args()
    if args.compare and not (Path(args.compare) / "gateway").is_dir():
        parser.error(f"--compare {args.compare}: no gateway/ package there")
    work = Path(tempfile.mkdtemp(prefix="ferry-proxy-micro-"))
    os.environ.setdefault("FERRY_HOME", str(work))
    try:
        asyncio.run(_measure(args, work, Report()))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
