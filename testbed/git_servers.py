"""Git remotes for tests of `repos` (docs/runs.md#repos): a bare repository with two branches served by
`git daemon` (git://, no credentials), one served by `git http-backend` behind a small HTTP server that
asks for a token by basic authentication, and any served over SSH by an `sshd` of the test's own that
takes one key (private remotes)."""

from __future__ import annotations

import base64
import contextlib
import getpass
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from testbed.containers import free_port

_GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(*args: str, cwd: Path | None = None) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, env={**os.environ, **_GIT_ENV}, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


@dataclass(frozen=True)
class Remote:
    """A bare repository: `main` (a.txt, two commits: `first` is the first's hash) and `dev` (dev.txt)."""

    bare: Path
    first: str
    main: str
    dev: str


def make_remote(root: Path, name: str, private_text: str = "") -> Remote:
    work, bare = root / f"{name}-work", root / "served" / f"{name}.git"
    git("init", "-q", "-b", "main", str(work))
    (work / "a.txt").write_text("main one\n")
    git("add", "a.txt", cwd=work)
    git("commit", "-q", "-m", "one", cwd=work)
    first = git("rev-parse", "HEAD", cwd=work)
    (work / "a.txt").write_text("main two\n")
    if private_text:
        (work / "secret.txt").write_text(private_text)
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", "two", cwd=work)
    main = git("rev-parse", "HEAD", cwd=work)
    git("checkout", "-q", "-b", "dev", first, cwd=work)
    (work / "dev.txt").write_text("on dev\n")
    git("add", "dev.txt", cwd=work)
    git("commit", "-q", "-m", "dev", cwd=work)
    dev = git("rev-parse", "HEAD", cwd=work)
    bare.parent.mkdir(parents=True, exist_ok=True)
    git("clone", "-q", "--bare", str(work), str(bare))
    git("symbolic-ref", "HEAD", "refs/heads/main", cwd=bare)
    return Remote(bare, first, main, dev)


@contextlib.contextmanager
def git_daemon(base: Path, address: str = "127.0.0.1") -> Iterator[str]:
    """`git daemon` serving every repository under `base` on `address`; yields `git://ADDRESS:PORT`."""
    port = free_port()
    daemon = subprocess.Popen(
        ["git", "daemon", "--reuseaddr", "--export-all", f"--base-path={base}", f"--listen={address}",
         f"--port={port}", str(base)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        url = f"git://{address}:{port}"
        for _ in range(100):
            probe = subprocess.run(["git", "ls-remote", f"{url}/"], capture_output=True, timeout=10)
            if probe.returncode == 0 or b"not exported" in probe.stderr or b"remote error" in probe.stderr:
                break
            time.sleep(0.1)
        yield url
    finally:
        daemon.terminate()
        daemon.wait(10)


def _handler(root: Path, token: str) -> type[BaseHTTPRequestHandler]:
    backend = shutil.which("git-http-backend") or "/usr/lib/git-core/git-http-backend"
    expected = "Basic " + base64.b64encode(f"x-access-token:{token}".encode()).decode()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:  # quiet
            pass

        def do_GET(self) -> None:
            self._serve()

        def do_POST(self) -> None:
            self._serve()

        def _serve(self) -> None:
            if self.headers.get("Authorization") != expected:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="test"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            path, _, query = self.path.partition("?")
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            env = {
                "PATH": os.environ["PATH"],
                "GIT_PROJECT_ROOT": str(root),
                "GIT_HTTP_EXPORT_ALL": "1",
                "PATH_INFO": path,
                "QUERY_STRING": query,
                "REQUEST_METHOD": self.command,
                "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                "CONTENT_LENGTH": str(len(body)),
                "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
                "REMOTE_USER": "x-access-token",
                "REMOTE_ADDR": "127.0.0.1",
            }
            done = subprocess.run([backend], input=body, env=env, capture_output=True, check=False)
            head, _, payload = done.stdout.partition(b"\r\n\r\n")
            headers = [line.split(":", 1) for line in head.decode().split("\r\n") if ":" in line]
            status = next((int(v.split()[0]) for k, v in headers if k.lower() == "status"), 200)
            self.send_response(status)
            for key, value in headers:
                if key.lower() != "status":
                    self.send_header(key, value.strip())
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    return Handler


@contextlib.contextmanager
def private_http(root: Path, token: str, address: str = "127.0.0.1") -> Iterator[str]:
    """Every repository under `root` over HTTP, only to `x-access-token:TOKEN`; yields the base URL."""
    server = ThreadingHTTPServer((address, 0), _handler(root, token))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{address}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def git_sshd(root: Path) -> Iterator[tuple[str, str]]:
    """An `sshd` on 127.0.0.1 letting in this user with one new key only: yields `ssh://USER@127.0.0.1:PORT`
    (a repository's absolute path follows) and that key's private part."""
    root.mkdir(parents=True, exist_ok=True)
    for name in ("host", "user"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(root / name)], check=True)
    (root / "authorized_keys").write_text((root / "user.pub").read_text())
    (root / "authorized_keys").chmod(0o600)
    port = free_port()
    (root / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {root / 'host'}\n"
        f"AuthorizedKeysFile {root / 'authorized_keys'}\nPasswordAuthentication no\n"
        f"KbdInteractiveAuthentication no\nPubkeyAuthentication yes\nStrictModes no\nUsePAM no\n"
        f"PidFile {root / 'sshd.pid'}\n"
    )
    sshd = subprocess.Popen(
        [shutil.which("sshd") or "/usr/sbin/sshd", "-D", "-e", "-f", str(root / "sshd_config")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            time.sleep(0.05)
        yield f"ssh://{getpass.getuser()}@127.0.0.1:{port}", (root / "user").read_text()
    finally:
        sshd.terminate()
        sshd.wait(10)
