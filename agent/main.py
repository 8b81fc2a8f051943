"""`ferry-agent`: one per host, on loopback, behind a token; the worker reaches it through an SSH tunnel."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import socket
import stat
import sys
from pathlib import Path

import uvicorn

from agent.app import create_app
from agent.containers.engine import EngineFinder
from agent.gpus import detect_gpus
from agent.instance import host_capacity
from agent.retention import remove_stale
from agent.ssh_server import AgentSSHServer
from agent.tasks import TaskRegistry
from core.wire.agent_api import PYTHON_IMAGE

logger = logging.getLogger("agent")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="ferry-agent", description=__doc__)
    parser.add_argument("--port", type=int, required=True, help="TCP port to listen on")
    parser.add_argument("--token-file", type=Path, required=True, help="file holding the bearer token")
    parser.add_argument("--data-dir", type=Path, required=True, help="where tasks, logs and state live")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    parser.add_argument(
        "--allow-remote", action="store_true", help="allow binding to an address other than loopback"
    )
    parser.add_argument(
        "--ssh-port",
        type=int,
        default=0,
        help="TCP port of the SSH server into the jobs (docs/attach.md); 0, the default: a free one",
    )
    parser.add_argument(
        "--ssh-host", default="127.0.0.1", help="address the SSH server binds (default: 127.0.0.1)"
    )
    parser.add_argument(
        "--container-engine",
        default=None,
        help="the Docker Engine API of the engine that runs jobs with `image`, e.g. "
        "unix:///run/podman/podman.sock (default: DOCKER_HOST, Docker's or Podman's socket, else a podman "
        "service the agent starts; docs/containers.md)",
    )
    parser.add_argument(
        "--python-image",
        default=os.environ.get("FERRY_PYTHON_IMAGE", PYTHON_IMAGE),
        help='the image of a job\'s `python: "3.x"`, `{version}` replaced (default: FERRY_PYTHON_IMAGE, '
        f"else {PYTHON_IMAGE}; docs/containers.md#python)",
    )
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    return parser.parse_args(argv)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name could resolve anywhere


def read_token(path: Path) -> str:
    try:
        token = path.read_text().strip()
        mode = path.stat().st_mode
    except OSError as exc:
        raise SystemExit(f"ferry-agent: cannot read the token file {path}: {exc.strerror}") from exc
    if not token:
        raise SystemExit(f"ferry-agent: the token file {path} is empty")
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        # Whoever reads the token runs commands as this user: made 0600, or refused if it is not ours.
        wide = stat.S_IMODE(mode)
        try:
            os.chmod(path, wide & 0o600)
        except OSError as exc:
            raise SystemExit(
                f"ferry-agent: the token file {path} is mode {wide:04o}, readable by others, and cannot be "
                f"made private: {exc.strerror}"
            ) from exc
        print(
            f"ferry-agent: {path} was mode {wide:04o}, readable by others: now {wide & 0o600:04o}",
            file=sys.stderr,
            flush=True,
        )
    return token


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    for host in (args.host, args.ssh_host):
        if not is_loopback(host) and not args.allow_remote:
            print(
                f"ferry-agent: refusing to bind to {host}: the agent listens on loopback only and is "
                "reached through an SSH tunnel; pass --allow-remote to bind elsewhere",
                file=sys.stderr,
            )
            raise SystemExit(2)
    if not 0 <= args.ssh_port <= 65535:
        raise SystemExit(f"ferry-agent: --ssh-port {args.ssh_port} is not a TCP port")
    # asyncssh says a line per connection and channel at INFO: the agent's own lines say what matters.
    logging.getLogger("asyncssh").setLevel(max(logging.getLogger().level, logging.WARNING))
    token = read_token(args.token_file)
    data_dir = args.data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(data_dir, 0o700)  # job specs carry secrets and logs may too
    engines = EngineFinder(data_dir, args.container_engine, args.python_image)
    logger.info("container engine: %s", engines.name or "none")
    registry = TaskRegistry(data_dir, host_capacity(), detect_gpus(), engines)
    registry.load()
    # Tasks that ended long ago and that nobody removed: their worker never came back (agent/retention.py).
    remove_stale(registry)
    ssh_server = AgentSSHServer(registry, args.ssh_host, args.ssh_port, data_dir)
    app = create_app(registry, token, ssh_server)
    # The standard event loop, not uvloop, which keeps SIGCHLD to itself: the watcher is woken by it the
    # moment a job's process ends, where otherwise it would notice at its next poll (agent/task_watch.py).
    # On SIGTERM (a stop, an upgrade), the held pulls of the instance watches would keep it open until they
    # end: they are reads, which the watch repeats against the next agent, so they are cut after a second.
    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        access_log=False,
        loop="asyncio",
        timeout_graceful_shutdown=1,
    )
    # The API's port, which the deployer only probed, is held before the app's startup binds the SSH
    # server to a free port: that one could otherwise be the same (docs/fleets.md#ssh-fleets).
    uvicorn.Server(config).run(sockets=[bind_api_socket(args.host, args.port)])


def bind_api_socket(host: str, port: int) -> socket.socket:
    """The API's listening socket, made as the event loop would make it: a TCP socket that says so, since
    asyncio turns Nagle's algorithm off (TCP_NODELAY) only on those; with it on, every answer of a
    request would wait for the client's delayed acknowledgement, 40 ms."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
    )[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as err:
        sock.close()
        print(f"ferry-agent: cannot listen on {host}:{port}: {err}", file=sys.stderr)
        raise SystemExit(1) from None
    return sock  # not inheritable: a job holding it would keep a killed agent's port accepting


if __name__ == "__main__":
    main()
