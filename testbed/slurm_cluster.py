"""A real Slurm cluster on this machine, started and stopped by the tests (Debian's slurm-wlm, Slurm 22.05).

Ferry's Slurm backend submits `sbatch` jobs through SSH to a login node, and each allocation runs Ferry's
agent on its compute nodes: its tests need the real thing. `SlurmCluster(workdir, nodes).up()` starts its
own `munged` (key and socket under the workdir), `slurmctld` in the root network namespace on a free port
(10.204.X.1), `slurmd` in a namespace per compute host (10.204.X.11..), and a login host (10.204.X.10)
whose key-only `sshd` gives sessions `SLURM_CONF`, so `sinfo`, `sbatch`, `srun`... work bare. Each host
has its own hostname; all share this machine's filesystem, as a cluster's shared directory. Nothing in /etc.
Daemons carry `FERRY_SLURM_CLUSTER=<tag>` in their environment, and namespaces and links are named after
the test process (`fs<pid>...`): a later `up()` removes what a killed run left (`remove_leftovers`).
slurmd enters its namespace with `nsenter --net`, not `ip netns exec`: the latter mounts a fresh /sys,
and slurmd (even with proctrack/pgid) then stops at "No filesystem mounted on /sys/fs/cgroup" (the by-hand
script binds the hierarchy back); nsenter leaves every mount as it is, so there is no mount to undo.
One cluster per process at a time.
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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from testbed.netns import SSHD, _alive, _ip, _keygen, _kill_namespace, _kill_processes

_PREFIX = "fs"
_WALL = "ferry_wall"  # wall_off_nodes' nftables table
_MARKER = "FERRY_SLURM_CLUSTER"
_OWNED_TAG = re.compile(rf"^{_PREFIX}(\d+)$")
_OWNED_NAMESPACE = re.compile(rf"^{_PREFIX}(\d+)-")
_OWNED_LINK = re.compile(rf"^{_PREFIX}(\d+)[rhb][l\d]*$")
SLURMCTLD, SLURMD, MUNGED = "/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/sbin/munged"


class SlurmClusterError(RuntimeError):
    pass


def missing_tools() -> list[str]:
    """What this fixture needs and this machine lacks (empty when it can run)."""
    tools = ("ip", "nsenter", "unshare", "ssh-keygen", SSHD, SLURMCTLD, SLURMD, MUNGED, "sinfo", "munge")
    return [tool for tool in tools if shutil.which(tool) is None]


def _marked(tag: str | None = None) -> dict[int, str]:
    """Live processes carrying this module's marker (`tag`'s only, or any): pid -> the marker's value."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            for variable in environ:
                name, _, value = variable.decode(errors="replace").partition("=")
                if name == _MARKER and (tag is None or value == tag):
                    found[int(entry)] = value
    return found


def _dead_owner(name: str, pattern: re.Pattern[str]) -> bool:
    owner = pattern.match(name)
    return owner is not None and not _alive(int(owner.group(1)))


def leftovers() -> list[str]:
    """What earlier runs, now dead, left: `process PID`, `namespace NAME`, `link NAME`."""
    found = [f"process {pid}" for pid, tag in _marked().items() if _dead_owner(tag, _OWNED_TAG)]
    namespaces = [line.split()[0] for line in _ip("netns", "list", check=False).splitlines() if line.split()]
    found += [f"namespace {name}" for name in namespaces if _dead_owner(name, _OWNED_NAMESPACE)]
    links = re.findall(r"^\d+: ([^:@]+)", _ip("-o", "link", "show", check=False), re.MULTILINE)
    return found + [f"link {link}" for link in links if _dead_owner(link, _OWNED_LINK)]


def remove_leftovers() -> None:
    """Removes what earlier runs, now dead, left: their daemons, namespaces and root-side interface."""
    for leftover in leftovers():
        kind, _, name = leftover.partition(" ")
        if kind == "process":
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(name), signal.SIGKILL)
        elif kind == "namespace":
            _kill_namespace(name)
        else:
            _ip("link", "del", name, check=False)


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"({path} not written)"


@dataclass(frozen=True)
class Login:
    hostname: str
    address: str
    port: int
    user: str
    identity_file: Path


class SlurmCluster:
    def __init__(self, workdir: Path, nodes: int = 3) -> None:
        self.tag = f"{_PREFIX}{os.getpid()}"
        self.workdir = workdir
        self.subnet = self._free_subnet()
        self.address = f"10.204.{self.subnet}.1"  # slurmctld's, on the bridge
        self.node_names = [f"{self.tag}n{k}" for k in range(1, nodes + 1)]
        self.node_addresses = [f"10.204.{self.subnet}.{10 + k}" for k in range(1, nodes + 1)]
        self.switch, self.login_namespace = f"{self.tag}-sw", f"{self.tag}-login"
        self.root_link = f"{self.tag}r"
        self.key = workdir / "id_ed25519"
        self.login = Login(f"{self.tag}login", f"10.204.{self.subnet}.10", 22, "root", self.key)
        self.conf = workdir / "slurm.conf"
        self.munge_socket = workdir / "munge" / "munge.socket"
        self.port = 0
        self._daemons: dict[str, subprocess.Popen[bytes]] = {}

    @staticmethod
    def _free_subnet() -> int:
        addresses = _ip("-o", "-4", "addr", "show", check=False)
        taken, start = {int(x) for x in re.findall(r"inet 10\.204\.(\d+)\.", addresses)}, os.getpid() % 200
        return next(x for x in [*range(start, 250), *range(0, start)] if x not in taken)

    @property
    def nodes(self) -> list[tuple[str, str]]:
        """(node name, address) of each compute host."""
        return list(zip(self.node_names, self.node_addresses, strict=True))

    def namespace(self, k: int) -> str:
        return f"{self.tag}-n{k}"

    def backend(self, directory: Path) -> dict[str, object]:
        """A `type: slurm` backend of this cluster (docs/backends.md): its login host, `low` preemptible and
        `high`, `directory` shared (the namespaces share this filesystem), the nodes' python3 (this one's)."""
        login = self.login
        return {
            "type": "slurm",
            "login": {
                "hostname": login.address,
                "user": login.user,
                "identity_file": str(login.identity_file),
            },
            "partitions": [{"name": "low", "preemptible": True}, "high"],
            "directory": str(directory),
            "python": "/usr/bin/python3",
        }

    def namespaces(self) -> list[str]:
        """This cluster's namespaces that still exist."""
        names = [line.split()[0] for line in _ip("netns", "list", check=False).splitlines() if line.split()]
        return [name for name in names if name.startswith(f"{self.tag}-")]

    def processes(self) -> list[int]:
        """Live processes this cluster started (its daemons; what runs in its namespaces is theirs)."""
        return sorted(_marked(self.tag))

    # --- starting --------------------------------------------------------------------------------------

    def up(self) -> SlurmCluster:
        if os.geteuid() != 0:
            raise SlurmClusterError("a Slurm cluster in network namespaces needs root")
        if missing := missing_tools():
            raise SlurmClusterError(f"missing {', '.join(missing)}: install slurm-wlm, munge, openssh-server")
        remove_leftovers()
        try:
            self._make()
        except BaseException:
            self.down()
            raise
        return self

    def _make(self) -> None:
        for directory in ("log", "munge", "state", "spool", "login"):
            shutil.rmtree(self.workdir / directory, ignore_errors=True)
            (self.workdir / directory).mkdir(parents=True)
        self._network()
        self._start_munged()
        self.port = self._free_port()
        self._write_conf()
        self._start("slurmctld", f"hostname {self.tag}ctl && exec {SLURMCTLD} -D -c -f {self.conf}", [])
        self._wait(lambda: "UP" in self._run("scontrol", "ping"), "slurmctld answering", ["slurmctld"])
        for k in range(1, len(self.node_names) + 1):
            self.start_slurmd(k, wait=False)
        self._start_sshd()
        self._wait(self._sshd_listening, "sshd listening", ["sshd"])
        slurmds = [f"slurmd-{name}" for name in self.node_names]
        self._wait(lambda: self._idle(*self.node_names), "nodes idle", ["slurmctld", *slurmds], timeout=60)

    def _network(self) -> None:
        _ip("netns", "add", self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        for link in ("br0", "lo"):
            _ip("-n", self.switch, "link", "set", link, "up")
        hosts = [(self.login_namespace, "l", self.login.address)]
        hosts += [(self.namespace(k), str(k), address) for k, address in enumerate(self.node_addresses, 1)]
        for namespace, suffix, address in hosts:
            _ip("netns", "add", namespace)
            inner, outer = f"{self.tag}h{suffix}", f"{self.tag}b{suffix}"
            _ip("link", "add", inner, "type", "veth", "peer", "name", outer)
            _ip("link", "set", inner, "netns", namespace)
            self._plug(outer)
            _ip("-n", namespace, "link", "set", "lo", "up")
            _ip("-n", namespace, "link", "set", inner, "name", "eth0")
            _ip("-n", namespace, "addr", "add", f"{address}/24", "dev", "eth0")
            _ip("-n", namespace, "link", "set", "eth0", "up")
        _ip("link", "add", self.root_link, "type", "veth", "peer", "name", f"{self.tag}b0")
        self._plug(f"{self.tag}b0")
        _ip("addr", "add", f"{self.address}/24", "dev", self.root_link)
        _ip("link", "set", self.root_link, "up")

    def _plug(self, bridge_end: str) -> None:
        _ip("link", "set", bridge_end, "netns", self.switch)
        _ip("-n", self.switch, "link", "set", bridge_end, "master", "br0")
        _ip("-n", self.switch, "link", "set", bridge_end, "up")

    def _start(self, name: str, script: str, enter: list[str]) -> None:
        """Starts a daemon in the foreground, in its own UTS namespace (`script` sets the hostname)."""
        with open(self.workdir / "log" / f"{name}.out", "wb") as log:
            self._daemons[name] = subprocess.Popen(
                [*enter, "unshare", "--uts", "sh", "-c", script],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                env={**os.environ, "SLURM_CONF": str(self.conf), _MARKER: self.tag},
            )

    def _start_munged(self) -> None:
        key = self.workdir / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        home = self.workdir / "munge"
        # --force: the socket's directory is under the test's private tmp dir, which only root may enter
        # (munged wants every parent open to all); every client here is root.
        command = (
            f"exec {MUNGED} --foreground --force --socket={self.munge_socket} --key-file={key} "
            f"--pid-file={home / 'munged.pid'} --seed-file={home / 'munged.seed'}"
        )
        self._start("munged", command, [])
        probe = ["munge", "-n", "-S", str(self.munge_socket)]
        self._wait(lambda: subprocess.run(probe, capture_output=True).returncode == 0, "munge -n", ["munged"])

    @staticmethod
    def _free_port() -> int:
        """A port slurmctld can listen on here (never 6817, where a by-hand cluster may be)."""
        with socket.socket() as probe:
            probe.bind(("", 0))
            return int(probe.getsockname()[1])

    def _write_conf(self) -> None:
        w, names = self.workdir, ",".join(self.node_names)
        nodes = "".join(
            f"NodeName={name} NodeAddr={address} CPUs=2 RealMemory=2000 State=UNKNOWN\n"
            for name, address in self.nodes
        )
        self.conf.write_text(
            f"ClusterName={self.tag}\nSlurmctldHost={self.tag}ctl({self.address})\n"
            f"SlurmctldPort={self.port}\nSlurmdPort=6818\nSlurmUser=root\nSlurmdUser=root\n"
            f"AuthType=auth/munge\nCredType=cred/munge\n"
            # Its own munged; a requeued (preempted) job may start again 10s later (cred_expire, not 120s).
            f"AuthInfo=socket={self.munge_socket},cred_expire=10\n"
            f"StateSaveLocation={w}/state\nSlurmdSpoolDir={w}/spool/%n\n"
            f"SlurmctldPidFile={w}/state/slurmctld.pid\nSlurmdPidFile={w}/spool/slurmd-%n.pid\n"
            f"SlurmctldLogFile={w}/log/slurmctld.log\nSlurmdLogFile={w}/log/slurmd-%n.log\n"
            # No cgroups in a namespace here: process groups track a job's processes.
            "ProctrackType=proctrack/pgid\nTaskPlugin=task/none\nJobAcctGatherType=jobacct_gather/none\n"
            "AccountingStorageType=accounting_storage/none\nJobCompType=jobcomp/none\n"
            "SwitchType=switch/none\nMpiDefault=none\nMailProg=/bin/true\n"
            # A node that was down comes back by itself once its slurmd registers (start_slurmd).
            "ReturnToService=2\n"
            # The nodes' CPUs and memory are what this file says, whatever the machine has.
            "SlurmdParameters=config_overrides\n"
            "SchedulerType=sched/backfill\nSelectType=select/cons_tres\nSelectTypeParameters=CR_Core_Memory\n"
            # Quick for tests: the main scheduler every 2s (not 60s), backfill every second (not 30s).
            "SchedulerParameters=sched_interval=2,bf_interval=1\n"
            # A node whose slurmd stops answering is DOWN, its jobs NODE_FAIL, within ~30s (not 5 minutes);
            # MessageTimeout stays 10s: a dead slurmd refuses connections at once anyway.
            "SlurmdTimeout=10\n"
            # A preempted or cancelled job gets SIGKILL 2s after SIGTERM (not 30s), with no grace time.
            "KillWait=2\n"
            # Finished jobs stay visible to squeue and scontrol for 2 minutes (the default is 5).
            "MinJobAge=120\n"
            "PreemptType=preempt/partition_prio\nPreemptMode=REQUEUE\n"
            f"{nodes}"
            f"PartitionName=low Nodes={names} Default=YES MaxTime=INFINITE State=UP PriorityTier=1 "
            "PreemptMode=REQUEUE GraceTime=0\n"
            f"PartitionName=high Nodes={names} MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF\n"
        )

    def start_slurmd(self, k: int, wait: bool = True) -> None:
        """Starts node k's slurmd (again); with `wait`, until sinfo shows the node idle again."""
        name = self.node_names[k - 1]
        (self.workdir / "spool" / name).mkdir(parents=True, exist_ok=True)
        enter = ["nsenter", f"--net=/run/netns/{self.namespace(k)}"]
        self._start(f"slurmd-{name}", f"hostname {name} && exec {SLURMD} -D -f {self.conf} -N {name}", enter)
        if wait:
            self._wait(lambda: self._idle(name), f"{name} idle", [f"slurmd-{name}"])

    def _start_sshd(self) -> None:
        home = self.workdir / "login"
        (home / "home").mkdir()
        _keygen(self.key)
        shutil.copy(f"{self.key}.pub", home / "authorized_keys")
        _keygen(home / "hostkey")
        config = home / "sshd_config"
        config.write_text(
            f"Port {self.login.port}\nListenAddress {self.login.address}\nHostKey {home / 'hostkey'}\n"
            f"PidFile {home / 'sshd.pid'}\nAuthorizedKeysFile {home / 'authorized_keys'}\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n"
            "UsePAM no\nStrictModes no\nAllowTcpForwarding yes\nUseDNS no\nPrintMotd no\n"
            "MaxStartups 50\nMaxSessions 50\n"
            f"SetEnv HOME={home / 'home'} SLURM_CONF={self.conf}\n"
        )
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        script = f"hostname {self.login.hostname} && exec {SSHD} -D -e -f {config}"
        self._start("sshd", script, ["ip", "netns", "exec", self.login_namespace])

    # --- waiting ---------------------------------------------------------------------------------------

    def _wait(self, ready: Callable[[], bool], what: str, daemons: list[str], timeout: float = 30.0) -> None:
        """Until `ready`; raises, with the daemons' log tails, if one of them exits or time runs out."""
        deadline = time.monotonic() + timeout
        while not ready():
            dead = [name for name in daemons if (proc := self._daemons.get(name)) and proc.poll() is not None]
            if dead or time.monotonic() > deadline:
                why = f"{', '.join(dead)} exited" if dead else f"{what}: not within {timeout}s"
                logs = [
                    self.workdir / "log" / f"{name}{suffix}"
                    for name in dead or daemons
                    for suffix in (".out", ".log")
                ]
                tails = "".join(f"\n--- {path}:\n{_tail(path)}" for path in logs if path.exists())
                raise SlurmClusterError(f"{why}{tails}")
            time.sleep(0.1)

    def _sshd_listening(self) -> bool:
        with contextlib.suppress(OSError), socket.create_connection((self.login.address, 22), 0.5) as sock:
            return sock.recv(4).startswith(b"SSH-")
        return False

    def _run(self, *command: str) -> str:
        """A Slurm command's stdout, empty if it fails (while waiting for the daemons)."""
        done = subprocess.run(command, capture_output=True, text=True, env=self._env(), timeout=30)
        return done.stdout if done.returncode == 0 else ""

    def _idle(self, *names: str) -> bool:
        states = self._node_states()
        return all(states.get(name) == {"idle"} for name in names)

    def _node_states(self) -> dict[str, set[str]]:
        """Each node's states as sinfo shows them, one per partition (`idle`, `alloc`, `down*`...)."""
        states: dict[str, set[str]] = {}
        for line in self._run("sinfo", "-h", "-N", "-o", "%N %t").splitlines():
            name, _, state = line.partition(" ")
            states.setdefault(name, set()).add(state)
        return states

    # --- using it --------------------------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def slurm(self, *args: str, timeout: float = 60.0) -> str:
        """Runs a Slurm command here (the root namespace) on this cluster; its stdout."""
        done = subprocess.run(args, capture_output=True, text=True, env=self._env(), timeout=timeout)
        if done.returncode != 0:
            raise SlurmClusterError(f"{' '.join(args)} exited {done.returncode}: {done.stderr.strip()}")
        return done.stdout

    def jobs(self, finished: bool = True) -> list[dict[str, str]]:
        """Every job squeue knows (the finished ones too, for MinJobAge, unless `finished` is False)."""
        states = ["--states=all"] if finished else []
        out = self.slurm("squeue", "--all", "-h", *states, "-o", "%i|%j|%T|%r|%N")
        keys = ("id", "name", "state", "reason", "nodes")
        return [dict(zip(keys, line.split("|", 4), strict=True)) for line in out.splitlines() if line]

    def job(self, job_id: str) -> dict[str, str]:
        """`scontrol show job`'s fields (JobState, Reason, Restarts, NodeList...)."""
        out = self.slurm("scontrol", "show", "job", "-o", job_id)
        return dict(re.findall(r"(\w+)=(\S*)", out))

    def cut_login(self) -> None:
        """The login host off the network (its processes keep running)."""
        _ip("-n", self.switch, "link", "set", f"{self.tag}bl", "down")

    def heal_login(self) -> None:
        _ip("-n", self.switch, "link", "set", f"{self.tag}bl", "up")

    def wall_off_nodes(self) -> None:
        """The compute hosts refuse every new TCP connection from this machine's side of the bridge but
        slurmctld's to slurmd, as a cluster's private network does: Ferry's worker, proxy and CLI then reach
        the nodes only through the login host (nftables in each compute namespace)."""
        for k in range(1, len(self.node_names) + 1):
            nft = ["ip", "netns", "exec", self.namespace(k), "nft"]
            subprocess.run([*nft, "add", "table", "inet", _WALL], check=True)
            hook = "{ type filter hook input priority 0; policy accept; }"
            subprocess.run([*nft, "add", "chain", "inet", _WALL, "input", hook], check=True)
            rule = f"ip saddr {self.address} tcp dport != 6818 ct state new drop"
            subprocess.run([*nft, "add", "rule", "inet", _WALL, "input", *rule.split()], check=True)

    def open_nodes(self) -> None:
        """Undoes wall_off_nodes (idempotent)."""
        for k in range(1, len(self.node_names) + 1):
            nft = ["ip", "netns", "exec", self.namespace(k), "nft"]
            subprocess.run([*nft, "delete", "table", "inet", _WALL], check=False, capture_output=True)

    def kill_slurmd(self, k: int) -> None:
        """Node k fails: every process in its namespace (slurmd, its job steps) killed; the node keeps its
        address and files, so start_slurmd(k) brings it back."""
        _kill_processes(self.namespace(k))
        proc = self._daemons.pop(f"slurmd-{self.node_names[k - 1]}", None)
        if proc is not None:
            proc.wait(10)

    # --- stopping --------------------------------------------------------------------------------------

    def down(self) -> None:
        """Cancels every job, stops every daemon, removes the namespaces and links; idempotent."""
        ctld = self._daemons.get("slurmctld")
        if ctld is not None and ctld.poll() is None:
            with contextlib.suppress(SlurmClusterError, subprocess.TimeoutExpired):
                if ids := [job["id"] for job in self.jobs(finished=False)]:
                    self.slurm("scancel", *ids, timeout=15)
        for namespace in (self.login_namespace, *map(self.namespace, range(1, len(self.node_names) + 1))):
            _kill_namespace(namespace)
        for name in ("slurmctld", "munged"):  # SIGTERM: slurmctld stops its slurmscriptd
            if (proc := self._daemons.get(name)) and proc.poll() is None:
                proc.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(10)
        for proc in self._daemons.values():
            proc.kill()  # a no-op for those already gone
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
        self._daemons.clear()
        for pid in _marked(self.tag):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _kill_namespace(self.switch)
        _ip("link", "del", self.root_link, check=False)
