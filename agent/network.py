"""Per-task network isolation: a network namespace per task, joined to the host by a veth pair.

A task submitted with network "isolated" gets the namespace `ferry-<hash>`; its job runs inside it, so it
may listen on any port, whatever the instance's other jobs listen on, and the instance's host (the proxy)
reaches it at the namespace side's address. Each task has a /30 of `10.214.0.0/16`:

    host:       veth `fy-<hash>`, address .1/30 (the /30's route comes with it)
    namespace:  `lo` up; veth `eth0`, address .2/30; default route via .1

Outbound traffic is forwarded and masqueraded (an nft rule in the table `ip ferry`, else an iptables rule,
each tagged with the host veth's name); without them the job still runs, reachable from the host only.

Every step checks or replaces what is there, so that `setup` and `teardown` can run again after an agent
restart or a half-done attempt. The /30 is chosen among those no host address or route uses, under a lock
file shared by every agent on the machine, so that two agents never take the same one.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import ipaddress
import logging
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from agent import network_owners

logger = logging.getLogger(__name__)

POOL = ipaddress.IPv4Network("10.214.0.0/16")
SUBNET_PREFIX = 30
NETNS_DIR = Path("/run/netns")
SYS_NET = Path("/sys/class/net")
LOCK_PATH = Path("/run/ferry-agent-network.lock")
IP_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")
NETNS_PREFIX = "ferry-"
VETH_PREFIX = "fy-"
NS_VETH = "eth0"
NFT_TABLE = "ferry"  # family ip
NFT_CHAIN = "postrouting"
COMMAND_TIMEOUT = 10.0  # seconds, for one `ip`, `nft` or `iptables` call
_HASH_CHARS = 12  # "fy-" + 12 = 15 characters, the longest name an interface may have


class NetworkError(OSError):
    """Isolation could not be set up or torn down; the message says why."""


@dataclass(frozen=True)
class Isolation:
    netns: str
    address: str  # the namespace side's: where the job's ports are reached from the host
    outbound_error: str | None = None  # why the job has no outbound access, None when it has


def namespace_name(key: str) -> str:
    """A short, safe namespace name for `key` (the agent's data dir and the task id: two agents on one
    machine may run tasks of the same id)."""
    return NETNS_PREFIX + hashlib.sha256(key.encode()).hexdigest()[:_HASH_CHARS]


def host_veth(netns: str) -> str:
    return VETH_PREFIX + netns.removeprefix(NETNS_PREFIX)


def _tool(name: str) -> str | None:
    # sbin is often left out of PATH for non-login shells; the tools live there.
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin:/usr/bin:/bin")


def unavailable_reason() -> str | None:
    """Why this agent cannot isolate a task; None when it can try."""
    if os.geteuid() != 0:
        return "the agent does not run as root"
    if _tool("ip") is None:
        return "`ip` (iproute2) is not installed"
    return None


def _run(argv: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            argv, input=stdin, capture_output=True, text=True, timeout=COMMAND_TIMEOUT, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NetworkError(f"{argv[0]} failed: {exc}") from exc


def _checked(argv: list[str], stdin: str | None = None) -> str:
    done = _run(argv, stdin)
    if done.returncode != 0:
        command = " ".join(argv[:4]) + (" ..." if len(argv) > 4 else "")
        raise NetworkError(f"`{command}` failed: {done.stderr.strip() or f'exit status {done.returncode}'}")
    return done.stdout


def _ip(*args: str, stdin: str | None = None) -> str:
    ip = _tool("ip")
    if ip is None:
        raise NetworkError("`ip` (iproute2) is not installed")
    return _checked([ip, *args], stdin)


@contextlib.contextmanager
def _machine_lock() -> Iterator[None]:
    """Held while a /30 is chosen and taken, or the nft table changed: one agent at a time, machine-wide."""
    try:
        fd = os.open(LOCK_PATH, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        yield  # no lock to be had: the hash-chosen start of the search still makes a clash unlikely
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


# --- the namespace and its veth pair -----------------------------------------------------------------


def namespace_exists(netns: str) -> bool:
    return (NETNS_DIR / netns).exists()


def is_intact(netns: str) -> bool:
    """Whether the namespace and its veth pair are there (a reboot, or a person, may have removed them)."""
    return namespace_exists(netns) and (SYS_NET / host_veth(netns)).exists()


def leaves_trace(netns: str) -> bool:
    """Whether any of the namespace or its veth pair is there."""
    return namespace_exists(netns) or (SYS_NET / host_veth(netns)).exists()


def _host_subnet(veth: str) -> ipaddress.IPv4Network | None:
    """The /30 whose host side `veth` holds, or None when it does not exist or holds none."""
    if not (SYS_NET / veth).exists():
        return None
    try:
        out = _ip("-o", "-4", "addr", "show", "dev", veth)
    except NetworkError:
        return None
    for interface in _inet_addresses(out):
        if interface.network.prefixlen == SUBNET_PREFIX and interface.network.subnet_of(POOL):
            return interface.network
    return None


def _inet_addresses(out: str) -> list[ipaddress.IPv4Interface]:
    found = []
    for match in re.finditer(r"\binet (\S+)", out):
        with contextlib.suppress(ValueError):
            found.append(ipaddress.IPv4Interface(match.group(1)))
    return found


def _used_networks() -> list[ipaddress.IPv4Network]:
    """The host's networks that a /30 of the pool must not overlap: its addresses' and its routes'.
    Broader ones than the pool (a VPN's 10.0.0.0/8) do not count: a /30's route is more specific."""
    used = [interface.network for interface in _inet_addresses(_ip("-o", "-4", "addr", "show"))]
    for line in _ip("-4", "route", "show", "table", "all").splitlines():
        words = line.split()
        if words and words[0] in ("unicast", "local", "broadcast", "blackhole", "unreachable", "prohibit"):
            words = words[1:]
        if words:
            with contextlib.suppress(ValueError):
                used.append(ipaddress.IPv4Network(words[0], strict=False))
    return [network for network in used if network.prefixlen >= POOL.prefixlen and network.overlaps(POOL)]


def _free_subnet(netns: str) -> ipaddress.IPv4Network:
    used = _used_networks()
    count = 2 ** (SUBNET_PREFIX - POOL.prefixlen)
    # Start where the name's hash points: agents that cannot share the lock rarely probe the same /30.
    start = int(hashlib.sha256(netns.encode()).hexdigest(), 16) % count
    base = int(POOL.network_address)
    size = 2 ** (32 - SUBNET_PREFIX)
    for step in range(count):
        subnet = ipaddress.IPv4Network((base + ((start + step) % count) * size, SUBNET_PREFIX))
        if not any(subnet.overlaps(network) for network in used):
            return subnet
    raise NetworkError(f"no free /{SUBNET_PREFIX} left in {POOL}")


def _sides(subnet: ipaddress.IPv4Network) -> tuple[ipaddress.IPv4Address, ipaddress.IPv4Address]:
    return subnet.network_address + 1, subnet.network_address + 2


def setup(netns: str, owner: Path) -> Isolation:
    """Create the task's namespace and veth pair, or complete them: idempotent. `owner` is the task's
    record, whose removal makes the namespace abandoned (agent/network_owners.py). NetworkError when the
    namespace cannot be had; the job's outbound access is best effort (see `Isolation.outbound_error`)."""
    reason = unavailable_reason()
    if reason is not None:
        raise NetworkError(reason)
    network_owners.claim(netns, owner)
    try:
        return _setup(netns)
    except NetworkError:
        with contextlib.suppress(NetworkError):
            teardown(netns)  # what the attempt left
        raise


def _setup(netns: str) -> Isolation:
    if not namespace_exists(netns):
        try:
            _ip("netns", "add", netns)
        except NetworkError:
            if not namespace_exists(netns):  # not merely made meanwhile by another attempt
                raise
    veth = host_veth(netns)
    subnet = _host_subnet(veth)
    if subnet is None:
        with _machine_lock():
            if (SYS_NET / veth).exists():
                _ip("link", "del", veth)  # half made: it never got its address
            subnet = _free_subnet(netns)
            host_side, _ = _sides(subnet)
            # The peer is made right inside the namespace: it is never seen on the host. The address is
            # taken before the lock is let go, so that the next agent's search sees the /30 in use.
            _ip("link", "add", veth, "type", "veth", "peer", "name", NS_VETH, "netns", netns)
            _ip("addr", "add", f"{host_side}/{SUBNET_PREFIX}", "dev", veth)
    host_side, ns_side = _sides(subnet)
    inside = (
        f"addr replace {ns_side}/{SUBNET_PREFIX} dev {NS_VETH}\n"
        f"link set lo up\n"
        f"link set {NS_VETH} up\n"
        f"route replace default via {host_side} dev {NS_VETH}\n"
    )
    _ip("link", "set", veth, "up")
    _ip("-n", netns, "-batch", "-", stdin=inside)
    return Isolation(netns, str(ns_side), _enable_outbound(veth, subnet))


def teardown(netns: str) -> None:
    """Kill what still runs in the namespace, remove it, its veth pair and its outbound rules: idempotent.
    NetworkError, after doing all it can, when something could not be removed."""
    errors: list[str] = []
    veth = host_veth(netns)
    if namespace_exists(netns):
        _kill_namespace_processes(netns)
    try:
        if (SYS_NET / veth).exists():
            _ip("link", "del", veth)  # takes the peer with it
        if namespace_exists(netns):
            _ip("netns", "del", netns)
    except NetworkError as exc:
        errors.append(str(exc))
    errors += _disable_outbound(veth)
    if errors:
        raise NetworkError("; ".join(errors))
    network_owners.release(netns)


def sweep_abandoned() -> list[str]:
    """Tear down the namespaces of tasks whose agent is gone (agent/network_owners.py); those removed."""
    if unavailable_reason() is not None:
        return []
    return network_owners.sweep(network_owners.abandoned(NETNS_DIR, NETNS_PREFIX, _runs_anything), teardown)


def _namespace_pids(netns: str) -> list[int]:
    try:
        target = os.stat(NETNS_DIR / netns)
    except OSError:
        return []
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            ns = os.stat(f"/proc/{entry.name}/ns/net")
        except OSError:
            continue
        if (ns.st_dev, ns.st_ino) == (target.st_dev, target.st_ino):
            pids.append(int(entry.name))
    return pids


def _runs_anything(netns: str) -> bool:
    return bool(_namespace_pids(netns))


def _kill_namespace_processes(netns: str) -> None:
    """SIGKILL every process in the namespace: the task has ended, what is left there is its strays'."""
    for pid in _namespace_pids(netns):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def exec_prefix(netns: str) -> list[str]:
    """What runs a command inside the namespace; both exec it in place, so its pid stays the job's.
    nsenter enters the network namespace alone; `ip netns exec` also remounts /sys in a mount namespace
    of its own (which hides /sys/fs/cgroup), hence only when nsenter is missing."""
    if not is_intact(netns):
        raise NetworkError(f"the task's network namespace {netns} is gone")
    nsenter = _tool("nsenter")
    if nsenter is not None:
        return [nsenter, f"--net={NETNS_DIR / netns}", "--"]
    ip = _tool("ip")
    if ip is None:
        raise NetworkError("neither nsenter nor `ip` is installed")
    return [ip, "netns", "exec", netns]


# --- outbound access -------------------------------------------------------------------------------


def _enable_outbound(veth: str, subnet: ipaddress.IPv4Network) -> str | None:
    """Forward and masquerade the namespace's traffic; why not, or None when done."""
    try:
        if IP_FORWARD.read_text().strip() != "1":
            IP_FORWARD.write_text("1\n")
            logger.info("enabled IPv4 forwarding, for the outbound traffic of isolated tasks")
    except OSError as exc:
        return f"cannot enable IPv4 forwarding: {exc}"
    nft = _tool("nft")
    iptables = _tool("iptables")
    try:
        if nft is not None:
            _nft_masquerade(nft, veth, subnet)
        elif iptables is not None:
            _iptables_masquerade(iptables, veth, subnet)
        else:
            return "neither nft nor iptables is installed to masquerade its traffic"
    except NetworkError as exc:
        return str(exc)
    return None


def _nft_rule_handles(listing: str, veth: str) -> tuple[list[str], int]:
    """The handles of the rules tagged `veth`, and how many rules the chain holds."""
    rules = [line for line in listing.splitlines() if "# handle" in line and " masquerade" in line]
    mine = [m.group(1) for line in rules if (m := re.search(rf'comment "{veth}" # handle (\d+)', line))]
    return mine, len(rules)


def _nft_masquerade(nft: str, veth: str, subnet: ipaddress.IPv4Network) -> None:
    with _machine_lock():
        _checked(
            [nft, "-f", "-"],
            f"add table ip {NFT_TABLE}\n"
            f"add chain ip {NFT_TABLE} {NFT_CHAIN} "
            "{ type nat hook postrouting priority 100; policy accept; }\n",
        )
        listing = _checked([nft, "-a", "list", "chain", "ip", NFT_TABLE, NFT_CHAIN])
        if _nft_rule_handles(listing, veth)[0]:
            return
        rule = f'ip saddr {subnet} oifname != "{veth}" masquerade comment "{veth}"'
        _checked([nft, "add", "rule", "ip", NFT_TABLE, NFT_CHAIN, rule])


def _iptables_spec(veth: str, subnet: ipaddress.IPv4Network) -> list[str]:
    return ["-s", str(subnet), "!", "-o", veth, "-m", "comment", "--comment", veth, "-j", "MASQUERADE"]


def _iptables_masquerade(iptables: str, veth: str, subnet: ipaddress.IPv4Network) -> None:
    spec = _iptables_spec(veth, subnet)
    if _run([iptables, "-w", "-t", "nat", "-C", "POSTROUTING", *spec]).returncode != 0:
        _checked([iptables, "-w", "-t", "nat", "-A", "POSTROUTING", *spec])


def _disable_outbound(veth: str) -> list[str]:
    """Remove the rules tagged `veth` (the nft table too once it holds none); what went wrong."""
    errors = []
    nft = _tool("nft")
    if nft is not None:
        with _machine_lock():
            listed = _run([nft, "-a", "list", "chain", "ip", NFT_TABLE, NFT_CHAIN])
            if listed.returncode == 0:  # else there is no such chain: nothing of ours
                mine, total = _nft_rule_handles(listed.stdout, veth)
                try:
                    for handle in mine:
                        _checked([nft, "delete", "rule", "ip", NFT_TABLE, NFT_CHAIN, "handle", handle])
                    if total == len(mine):
                        _checked([nft, "delete", "table", "ip", NFT_TABLE])
                except NetworkError as exc:
                    errors.append(str(exc))
    iptables = _tool("iptables")
    if iptables is not None:
        listed = _run([iptables, "-w", "-t", "nat", "-S", "POSTROUTING"])
        for line in listed.stdout.splitlines() if listed.returncode == 0 else []:
            words = line.split()
            if words[:2] == ["-A", "POSTROUTING"] and f"--comment {veth} " in line + " ":
                try:
                    _checked([iptables, "-w", "-t", "nat", "-D", *words[1:]])
                except NetworkError as exc:
                    errors.append(str(exc))
    return errors
