"""`python -m gateway`: the services proxy as a process.

    python -m gateway [--host 127.0.0.1] [--port 8300] [--database-url URL] [--public-url URL]
                      [--hold-timeout SECONDS] [--head-timeout SECONDS] [--no-fast-path] [--workers N]
                      [--ready-file PATH] [--domain DOMAIN] [--tls-cert FILE --tls-key FILE]
                      [--tls-certs-dir DIR] [--https-port PORT]

Defaults come from the environment: FERRY_GATEWAY_HOST (127.0.0.1), FERRY_GATEWAY_PORT (8300),
FERRY_GATEWAY_PUBLIC_URL (http://<host>:<port>: where users reach it, what `gateway_seen` records),
FERRY_GATEWAY_HOLD_TIMEOUT (120 s, how long a request waits for a service's first ready replica),
FERRY_GATEWAY_HEAD_TIMEOUT (20 s, how long a request head may take to come whole: gateway.rules),
FERRY_GATEWAY_FAST_PATH (1; 0 leaves every request to the aiohttp app, gateway.fast_path.front_door),
FERRY_GATEWAY_WORKERS (DEFAULT_WORKERS: proxy processes sharing the port, gateway.workers; 1 serves in
this process itself, no supervisor) and FERRY_DATABASE_URL (core.settings). The ready file gets the
process's pid once it listens (with workers: the supervisor's, once every worker listens): the embedded
stack spawns the proxy and waits for that file.

HTTPS on a domain (docs/deployment.md#https-on-a-domain): FERRY_GATEWAY_DOMAIN (core.settings) routes
`<run>.<domain>` and `gateway.<domain>` by Host (core.services.domains) on every listener;
FERRY_GATEWAY_TLS_CERT and FERRY_GATEWAY_TLS_KEY (a wildcard certificate, most often), with
FERRY_GATEWAY_TLS_CERTS_DIR for per-host ones by SNI (gateway.tls), open a second, TLS listener on
FERRY_GATEWAY_HTTPS_PORT (443). The plain listener on --port keeps serving everything.

SIGTERM or SIGINT shut it down gracefully: it stops accepting, answers held requests 503, gives those in
flight a few seconds, then leaves the store's list of proxies (with workers: each of them does).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import ssl
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import uvloop

from core.settings import Settings
from gateway.app import Gateway, make_runner
from gateway.options import DEFAULT_HOLD_TIMEOUT, GatewayOptions
from gateway.rules import HEAD_TIMEOUT
from gateway.tls import server_context
from gateway.workers import check_port_free, supervise
from store.opening import open_store

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8300
DEFAULT_WORKERS = 1
DEFAULT_HTTPS_PORT = 443

log = logging.getLogger(__name__)


def parse_args(argv: list[str] | None = None, env: Mapping[str, str] | None = None) -> argparse.Namespace:
    env = os.environ if env is None else env
    parser = argparse.ArgumentParser(
        prog="python -m gateway", description="Ferry's services proxy (/proxy/services/, /proxy/models/)."
    )
    parser.add_argument("--host", default=env.get("FERRY_GATEWAY_HOST") or DEFAULT_HOST)
    parser.add_argument("--port", type=int, default=int(env.get("FERRY_GATEWAY_PORT") or DEFAULT_PORT))
    parser.add_argument(
        "--database-url",
        default=None,
        help="the store (default: FERRY_DATABASE_URL, else the SQLite file in FERRY_HOME)",
    )
    parser.add_argument(
        "--public-url",
        default=env.get("FERRY_GATEWAY_PUBLIC_URL") or None,
        help="where users reach this proxy (default: http://<host>:<port>)",
    )
    parser.add_argument(
        "--hold-timeout",
        type=float,
        default=float(env.get("FERRY_GATEWAY_HOLD_TIMEOUT") or DEFAULT_HOLD_TIMEOUT),
        help="seconds a request waits for a service's first ready replica before a 503 (default 120)",
    )
    parser.add_argument(
        "--fast-path",
        action=argparse.BooleanOptionalAction,
        default=env.get("FERRY_GATEWAY_FAST_PATH", "1") not in ("0", "false", "no"),
        help="plain requests on the fast path (default; FERRY_GATEWAY_FAST_PATH=0: all by the aiohttp app)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=int(env.get("FERRY_GATEWAY_WORKERS") or DEFAULT_WORKERS),
        help=f"proxy processes sharing the port (SO_REUSEPORT), under a supervisor (default "
        f"{DEFAULT_WORKERS}; 1: this process serves, no supervisor)",
    )
    parser.add_argument(
        "--head-timeout",
        type=float,
        default=float(env.get("FERRY_GATEWAY_HEAD_TIMEOUT") or HEAD_TIMEOUT),
        help=f"seconds a request head may take to come whole before a 408 (default {HEAD_TIMEOUT:g})",
    )
    parser.add_argument("--ready-file", type=Path, default=None, help="gets the pid once the proxy listens")
    _add_https_arguments(parser, env)
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error("--workers must be at least 1")
    if (args.tls_cert is None) != (args.tls_key is None):
        parser.error("--tls-cert and --tls-key go together")
    if args.tls_certs_dir is not None and args.tls_cert is None:
        parser.error("--tls-certs-dir needs --tls-cert and --tls-key (the certificate for other hosts)")
    if args.database_url is None:
        args.database_url = Settings.from_env(dict(env)).database_url
    if args.public_url is None:
        shown = "127.0.0.1" if args.host in ("0.0.0.0", "::", "") else args.host
        args.public_url = f"http://{shown}:{args.port}"
    return args


def _add_https_arguments(parser: argparse.ArgumentParser, env: Mapping[str, str]) -> None:
    def path(name: str) -> Path | None:
        return Path(env[name]).expanduser() if env.get(name) else None

    parser.add_argument(
        "--domain",
        default=Settings.from_env(dict(env)).gateway_domain,
        help="route <run>.DOMAIN and gateway.DOMAIN by Host (default: FERRY_GATEWAY_DOMAIN)",
    )
    parser.add_argument("--tls-cert", type=Path, default=path("FERRY_GATEWAY_TLS_CERT"))
    parser.add_argument("--tls-key", type=Path, default=path("FERRY_GATEWAY_TLS_KEY"))
    parser.add_argument(
        "--tls-certs-dir",
        type=Path,
        default=path("FERRY_GATEWAY_TLS_CERTS_DIR"),
        help="per-host certificates by SNI: <host>.crt and <host>.key",
    )
    parser.add_argument(
        "--https-port",
        type=int,
        default=int(env.get("FERRY_GATEWAY_HTTPS_PORT") or DEFAULT_HTTPS_PORT),
        help=f"the TLS listener's port, with --tls-cert (default {DEFAULT_HTTPS_PORT})",
    )


def tls_context(args: argparse.Namespace) -> ssl.SSLContext | None:
    """The TLS listener's context, None without --tls-cert."""
    if args.tls_cert is None:
        return None
    return server_context(args.tls_cert, args.tls_key, args.tls_certs_dir)


async def serve(
    *,
    host: str,
    port: int,
    database_url: str,
    public_url: str,
    options: GatewayOptions | None = None,
    ready_file: Path | None = None,
    stop: asyncio.Event | None = None,
    gateway_id: str | None = None,
    reuse_port: bool = False,
    on_ready: Callable[[], None] | None = None,
    https_port: int | None = None,
    tls: ssl.SSLContext | None = None,
) -> None:
    """Serves until `stop` is set (by default: until SIGTERM or SIGINT), then shuts down gracefully.
    A worker of gateway.workers: its `gateway_id`, the port shared (`reuse_port`), `on_ready` once it
    listens. With `tls`, a second listener on `https_port` (docs/deployment.md#https-on-a-domain)."""
    store = await asyncio.to_thread(open_store, database_url)
    gateway = Gateway(store, public_url=public_url, options=options, gateway_id=gateway_id)
    runner = make_runner(gateway)
    await runner.setup()
    try:
        site = gateway.site(runner, host, port, backlog=1024, reuse_address=True, reuse_port=reuse_port)
        await site.start()
        log.info("proxy %s (pid %d) listening on %s:%s (%s)", gateway.id, os.getpid(), host, port, public_url)
        if tls is not None:
            assert https_port is not None
            secure = gateway.site(
                runner,
                host,
                https_port,
                backlog=1024,
                reuse_address=True,
                reuse_port=reuse_port,
                ssl_context=tls,
            )
            await secure.start()
            log.info(
                "proxy %s: TLS on %s:%s (domain %s)", gateway.id, host, https_port, options and options.domain
            )
        if ready_file is not None:
            _write_atomically(ready_file, str(os.getpid()))
        if on_ready is not None:
            on_ready()
        if stop is None:
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, stop.set)
        await stop.wait()
        log.info("proxy %s shutting down", gateway.id)
    finally:
        await runner.cleanup()


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    partial.replace(path)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    options = GatewayOptions(
        hold_timeout=args.hold_timeout,
        fast_path=args.fast_path,
        head_timeout=args.head_timeout,
        workers=args.workers,
        domain=args.domain,
    )
    try:
        tls_context(args)  # the files checked once, before any worker starts
    except (OSError, ssl.SSLError) as err:
        log.error("proxy: cannot use the TLS certificate %s and key %s: %s", args.tls_cert, args.tls_key, err)
        sys.exit(1)
    if args.workers == 1:
        _run(args, options, ready_file=args.ready_file)
        return
    try:
        port = check_port_free(args.host, args.port)
        if args.tls_cert is not None:
            args.https_port = check_port_free(args.host, args.https_port)
    except OSError as err:
        log.error("proxy: cannot listen on %s: %s", args.host, err.strerror or err)
        sys.exit(1)

    def serve_worker(gateway_id: str, ready: Callable[[], None]) -> None:
        _run(args, options, port=port, gateway_id=gateway_id, reuse_port=True, on_ready=ready)

    status = supervise(
        args.workers,
        serve_worker,
        ready_file=args.ready_file,
        shutdown_timeout=options.shutdown_timeout,
        write_ready=_write_atomically,
    )
    sys.exit(status)


def _run(args: argparse.Namespace, options: GatewayOptions, **how: Any) -> None:
    # uvloop's event loop (libuv, in C) costs less CPU per request than asyncio's own: 117 against 136 µs
    # in bench.run's services section (--quick), where the proxy's CPU bounds its requests/s.
    how.setdefault("port", args.port)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(
            serve(
                host=args.host,
                database_url=args.database_url,
                public_url=args.public_url,
                options=options,
                https_port=args.https_port,
                tls=tls_context(args),  # each worker its own, made after the fork
                **how,
            )
        )
