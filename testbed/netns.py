"""Test SSH hosts: OpenSSH `sshd` in network namespaces, each with its own hostname and address.

`HostNetwork(n, workdir).up()` makes a switch namespace with a bridge, one namespace per host wired to it
by a veth pair (10.203.X.11.., X picked free), and a veth from the root namespace (10.203.X.1), so only
this machine reaches the hosts. Each host runs `sshd -D` under `unshare --uts` with its own hostname,
key-only root login with an ed25519 key made for the run, TCP forwarding and internal SFTP (none with
`sftp=False`: a deployment must not need it, docs/fleets.md#ssh-fleets). Namespaces
and interfaces are named after the test process (`ft<pid>-...`), so parallel runs do not meet, and `up()`
first removes what a crashed earlier run left behind. `down()` removes everything it made.

A host given a root (`roots`, testbed/debian_roots.py) runs that root's own sshd chrooted into an overlay of
it, in a mount namespace of its own with /proc, /dev and /sys (the agent reads cgroups there) and the
`shared` directories (the workdir by default) mounted in at the same paths: its sessions, its agent and
its jobs see that distribution's /usr/bin/python3 and libraries; the root itself is never written to.

The hosts share this machine's filesystem and users: give each its own remote directory. Each host's
sessions get a home of their own (`SetEnv HOME`), so root's dotfiles here stay out of them: a shell
startup that takes a lock (pyenv's rehash) and is killed with its host would otherwise hold up every
later SSH session on this machine.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

SSHD = "/usr/sbin/sshd"
_PREFIX = "ft"
_OWNED_NAMESPACE = re.compile(rf"^{_PREFIX}(\d+)-")
_OWNED_LINK = re.compile(rf"^{_PREFIX}(\d+)[rhb]\d*$")


class NamespaceError(RuntimeError):
    pass


def _ip(*args: str, check: bool = True) -> str:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and done.returncode != 0:
        raise NamespaceError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_processes(namespace: str) -> None:
    """SIGKILL every process in the namespace, and wait until they are gone."""
    for _ in range(100):
        pids = [int(pid) for pid in _ip("netns", "pids", namespace, check=False).split()]
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)


def _kill_namespace(namespace: str) -> None:
    """SIGKILL every process in the namespace, wait until they are gone, delete the namespace."""
    _kill_processes(namespace)
    _ip("netns", "del", namespace, check=False)


def remove_leftovers() -> None:
    """What an earlier run, now dead, left: its namespaces and its root-side interface."""
    for line in _ip("netns", "list", check=False).splitlines():
        namespace = line.split()[0] if line.split() else ""
        owner = _OWNED_NAMESPACE.match(namespace)
        if owner and not _alive(int(owner.group(1))):
            _kill_namespace(namespace)
    for link in re.findall(r"^\d+: ([^:@]+)", _ip("-o", "link", "show", check=False), re.MULTILINE):
        owner = _OWNED_LINK.match(link)
        if owner and not _alive(int(owner.group(1))):
            _ip("link", "del", link, check=False)


def _keygen(path: Path) -> None:
    for stale in (path, path.with_name(f"{path.name}.pub")):
        stale.unlink(missing_ok=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


def preflight() -> None:
    """Fails, saying what is missing, where these hosts cannot be made (the tests are never skipped)."""
    if os.geteuid() != 0:
        raise NamespaceError("the SSH fleet tests make network namespaces: run them as root (CI does)")
    missing = [tool for tool in ("ip", "unshare", "ssh-keygen", SSHD) if shutil.which(tool) is None]
    if missing:
        raise NamespaceError(f"missing {', '.join(missing)}: install openssh-server and iproute2")


@dataclass
class Host:
    index: int
    hostname: str
    namespace: str
    address: str
    port: int = 22
    root: Path | None = None  # a distribution's root its sshd runs chrooted into; None: this machine's


class HostNetwork:
    def __init__(
        self,
        count: int,
        workdir: Path,
        sftp: bool = True,
        roots: Sequence[Path | None] = (),
        shared: Sequence[Path] = (),
    ) -> None:
        """`roots`: host k's root is roots[k - 1] (none past its end); `shared`: what the chrooted hosts see
        of this machine's filesystem besides the workdir."""
        self.tag = f"{_PREFIX}{os.getpid()}"
        self.workdir = workdir
        self.sftp = sftp
        self.shared = [workdir, *shared]
        self.key = workdir / "id_ed25519"
        self.switch = f"{self.tag}-sw"
        self.root_link = f"{self.tag}r"
        self.subnet = self._free_subnet()
        self.hosts = [
            Host(
                k,
                f"{self.tag}h{k}",
                f"{self.tag}-h{k}",
                f"10.203.{self.subnet}.{10 + k}",
                root=roots[k - 1] if k <= len(roots) else None,
            )
            for k in range(1, count + 1)
        ]
        self._sshd: dict[int, subprocess.Popen[bytes]] = {}

    @staticmethod
    def _free_subnet() -> int:
        taken = {
            int(x) for x in re.findall(r"inet 10\.203\.(\d+)\.", _ip("-o", "-4", "addr", "show", check=False))
        }
        start = os.getpid() % 200
        return next(x for x in [*range(start, 250), *range(0, start)] if x not in taken)

    def up(self) -> HostNetwork:
        preflight()
        remove_leftovers()
        try:
            self._make()
        except BaseException:
            self.down()
            raise
        return self

    def _make(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        _keygen(self.key)
        shutil.copy(f"{self.key}.pub", self.workdir / "authorized_keys")
        _ip("netns", "add", self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        for link in ("br0", "lo"):
            _ip("-n", self.switch, "link", "set", link, "up")
        for host in self.hosts:
            self._make_host(host)
        _ip("link", "add", self.root_link, "type", "veth", "peer", "name", f"{self.tag}b0")
        self._plug(f"{self.tag}b0")
        _ip("addr", "add", f"10.203.{self.subnet}.1/24", "dev", self.root_link)
        _ip("link", "set", self.root_link, "up")
        for host in self.hosts:
            self._start_sshd(host)
        for host in self.hosts:
            self._wait_listening(host)

    def _plug(self, bridge_end: str) -> None:
        _ip("link", "set", bridge_end, "netns", self.switch)
        _ip("-n", self.switch, "link", "set", bridge_end, "master", "br0")
        _ip("-n", self.switch, "link", "set", bridge_end, "up")

    def _make_host(self, host: Host) -> None:
        _ip("netns", "add", host.namespace)
        inner, outer = f"{self.tag}h{host.index}", f"{self.tag}b{host.index}"
        _ip("link", "add", inner, "type", "veth", "peer", "name", outer)
        _ip("link", "set", inner, "netns", host.namespace)
        self._plug(outer)
        _ip("-n", host.namespace, "link", "set", "lo", "up")
        _ip("-n", host.namespace, "link", "set", inner, "name", "eth0")
        _ip("-n", host.namespace, "addr", "add", f"{host.address}/24", "dev", "eth0")
        _ip("-n", host.namespace, "link", "set", "eth0", "up")

    def _start_sshd(self, host: Host) -> None:
        home = self.workdir / host.hostname
        home.mkdir(exist_ok=True)
        (home / "home").mkdir(exist_ok=True)
        _keygen(home / "hostkey")
        config = home / "sshd_config"
        config.write_text(
            f"Port {host.port}\nListenAddress {host.address}\nHostKey {home / 'hostkey'}\n"
            f"PidFile {home / 'sshd.pid'}\nAuthorizedKeysFile {self.workdir / 'authorized_keys'}\n"
            # Debian 11's OpenSSH (8.4) predates KbdInteractiveAuthentication; without PAM it offers none.
            f"PasswordAuthentication no\n{'' if host.root else 'KbdInteractiveAuthentication no'}\n"
            "PermitRootLogin prohibit-password\n"
            "UsePAM no\nStrictModes no\nAllowTcpForwarding yes\nUseDNS no\nPrintMotd no\n"
            f"{'Subsystem sftp internal-sftp' if self.sftp else ''}\nMaxStartups 50\nMaxSessions 50\n"
            f"SetEnv HOME={home / 'home'}\n"
        )
        sshd = f"{SSHD} -D -e -f {config}"
        if host.root is None:
            script, unshare = f"hostname {host.hostname} && exec {sshd}", ["unshare", "--uts"]
        else:
            mounts = self._mount_root(host, home)
            script = f"hostname {host.hostname} && {mounts} && exec chroot {self._merged(home)} {sshd}"
            unshare = ["unshare", "--uts", "--mount"]
        command = ["ip", "netns", "exec", host.namespace, *unshare, "sh", "-c", script]
        with open(home / "sshd.log", "wb") as log:
            self._sshd[host.index] = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
            )

    def _mount_root(self, host: Host, home: Path) -> str:
        """Shell commands, run in the host's own mount namespace, that make its root: an overlay of the
        distribution's (writes land in the host's directory), with this machine's /proc, /dev, /sys and
        the shared directories mounted in."""
        upper, work, merged = home / "root" / "upper", home / "root" / "work", self._merged(home)
        for directory in (upper, work, merged):
            directory.mkdir(parents=True, exist_ok=True)
        steps = [
            f"mount -t overlay overlay -o lowerdir={host.root},upperdir={upper},workdir={work} {merged}",
            f"mount -t proc proc {merged}/proc",
            f"mount --rbind /dev {merged}/dev",
            f"mount --rbind /sys {merged}/sys",
            f"mkdir -p {merged}/run/sshd",
        ]
        for path in self.shared:
            steps += [f"mkdir -p {merged}{path}", f"mount --rbind {path} {merged}{path}"]
        return " && ".join(steps)

    @staticmethod
    def _merged(home: Path) -> Path:
        return home / "root" / "merged"

    def _wait_listening(self, host: Host, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            with (
                contextlib.suppress(OSError),
                socket.create_connection((host.address, host.port), 0.5) as sock,
            ):
                if sock.recv(4).startswith(b"SSH-"):
                    return
            if self._sshd[host.index].poll() is not None or time.monotonic() > deadline:
                log = (self.workdir / host.hostname / "sshd.log").read_text(errors="replace")
                raise NamespaceError(f"sshd of {host.hostname} did not start:\n{log}")
            time.sleep(0.05)

    # --- losing hosts ------------------------------------------------------------------------------------

    def host(self, k: int) -> Host:
        return self.hosts[k - 1]

    def kill_host(self, k: int) -> None:
        """Host k gone at once: every process in its namespace killed, the namespace deleted."""
        _kill_namespace(self.host(k).namespace)
        proc = self._sshd.pop(k, None)
        if proc is not None:
            proc.wait(10)

    def power_cycle(self, k: int) -> None:
        """Host k loses power and comes back: every process in its namespace killed (its agent, its jobs,
        its sshd), then its sshd started again; its files stay, as a disk does."""
        host = self.host(k)
        _kill_processes(host.namespace)
        proc = self._sshd.pop(k, None)
        if proc is not None:
            proc.wait(10)
        self._start_sshd(host)
        self._wait_listening(host)

    def cut_host(self, k: int) -> None:
        """Host k off the network (its processes keep running)."""
        _ip("-n", self.switch, "link", "set", f"{self.tag}b{k}", "down")

    def heal_host(self, k: int) -> None:
        _ip("-n", self.switch, "link", "set", f"{self.tag}b{k}", "up")

    def namespaces(self) -> list[str]:
        """This network's namespaces that still exist."""
        names = [line.split()[0] for line in _ip("netns", "list", check=False).splitlines() if line.split()]
        return [name for name in names if name.startswith(f"{self.tag}-")]

    def down(self) -> None:
        for host in self.hosts:
            _kill_namespace(host.namespace)
        for proc in self._sshd.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
        self._sshd.clear()
        _kill_namespace(self.switch)
        _ip("link", "del", self.root_link, check=False)
