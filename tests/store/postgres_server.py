"""A throwaway PostgreSQL server for the store's tests, run by the test from Debian's `postgresql` binaries.

It listens on 127.0.0.1 at a free port with password authentication, so the store reaches it by the URL
a deployment sets (docker-compose.yml: postgresql+psycopg://ferry:ferry@host:port/ferry). PostgreSQL
refuses to run as root: as root (CI), the server runs as `nobody`, in a directory given to it.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

USER = PASSWORD = "ferry"
# Where Debian's `postgresql` puts the server (/usr/lib/postgresql/<major>/bin); PATH is tried after.
DEBIAN_BINARIES = Path("/usr/lib/postgresql")
START_SECONDS = 60.0
PORT_ATTEMPTS = 3  # another process may take the free port before the server binds it


def find_binaries() -> Path | None:
    """The directory holding initdb and postgres: Debian's newest major version, else PATH's."""
    majors = sorted(DEBIAN_BINARIES.glob("*/bin"), key=lambda path: _major(path.parent.name), reverse=True)
    for directory in majors:
        if (directory / "initdb").is_file() and (directory / "postgres").is_file():
            return directory
    initdb = shutil.which("initdb")
    if initdb is not None and (Path(initdb).resolve().parent / "postgres").is_file():
        return Path(initdb).resolve().parent
    return None


@dataclass
class PostgresServer:
    directory: Path
    port: int
    process: subprocess.Popen[bytes]

    def url(self, database: str = "ferry") -> str:
        return f"postgresql+psycopg://{USER}:{PASSWORD}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str, template: str | None = None) -> str:
        """Creates the database (a copy of `template`, if given) and returns its URL."""
        statement = f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else "")
        with self._admin() as connection:
            connection.execute(statement.encode())
        return self.url(name)

    def stop(self) -> None:
        self.process.send_signal(signal.SIGINT)  # PostgreSQL's fast shutdown
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)

    def _admin(self) -> psycopg.Connection[Any]:
        return psycopg.connect(
            host="127.0.0.1", port=self.port, user=USER, password=PASSWORD, dbname="postgres", autocommit=True
        )


def start_server(binaries: Path) -> PostgresServer:
    """initdb into a new directory, then a server on a free port; RuntimeError with its log if it fails."""
    directory = Path(tempfile.mkdtemp(prefix="ferry-postgres-"))
    try:
        owner = _server_user()
        if owner is not None:
            os.chown(directory, owner.pw_uid, owner.pw_gid)
        (directory / "password").write_text(PASSWORD)
        _run_as(
            owner,
            [str(binaries / "initdb"), "-D", str(directory / "data"), "-U", USER, "--auth=scram-sha-256"]
            + [f"--pwfile={directory / 'password'}", "--no-sync", "--no-locale", "--encoding=UTF8"],
        )
        for _ in range(PORT_ATTEMPTS):
            server = _start(binaries, directory, owner, _free_port())
            if server is not None:
                return server
        log = (directory / "server.log").read_text(errors="replace")
        raise RuntimeError(f"PostgreSQL did not start: {log[-2000:]}")
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise


@contextlib.contextmanager
def running_server(binaries: Path) -> Iterator[PostgresServer]:
    """start_server's server for the `with` block; stopped, and its directory removed, after it."""
    server = start_server(binaries)
    try:
        yield server
    finally:
        server.stop()


def _start(
    binaries: Path, directory: Path, owner: pwd.struct_passwd | None, port: int
) -> PostgresServer | None:
    """The server on this port once it answers, or None if it exited (the port was taken)."""
    command = [str(binaries / "postgres"), "-D", str(directory / "data"), "-h", "127.0.0.1", "-p", str(port)]
    # Its Unix socket and lock file in its own directory; no fsync: the tests' data is thrown away.
    command += ["-k", str(directory), "-c", "fsync=off", "-c", "full_page_writes=off"]
    with open(directory / "server.log", "ab") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, **_identity(owner))
    server = PostgresServer(directory, port, process)
    deadline = time.monotonic() + START_SECONDS
    while process.poll() is None:
        try:
            server._admin().close()
            return server
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                server.stop()
                raise RuntimeError(f"PostgreSQL did not answer within {START_SECONDS:.0f} s") from None
            time.sleep(0.1)
    return None


def _server_user() -> pwd.struct_passwd | None:
    """Who runs the server: `nobody` when we are root (PostgreSQL refuses root), else ourselves (None)."""
    return pwd.getpwnam("nobody") if os.geteuid() == 0 else None


def _identity(owner: pwd.struct_passwd | None) -> dict[str, Any]:
    if owner is None:
        return {}
    return {"user": owner.pw_uid, "group": owner.pw_gid, "extra_groups": [], "env": _environment(owner)}


def _environment(owner: pwd.struct_passwd) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(owner.pw_dir), "LC_ALL": "C"}


def _run_as(owner: pwd.struct_passwd | None, command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False, **_identity(owner))
    if done.returncode != 0:
        raise RuntimeError(f"{Path(command[0]).name} failed: {(done.stdout + done.stderr).strip()[-2000:]}")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _major(name: str) -> float:
    try:
        return float(name)
    except ValueError:
        return -1.0
