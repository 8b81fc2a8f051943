"""The embedded stack listens on loopback only (docs/deployment.md#the-embedded-stack): every listening TCP
socket of its processes (the Temporal dev server and its Web UI, the worker, the services proxy with its
codec endpoint, the local agent, and whatever they started) is bound to 127.0.0.1 or ::1; and none of them
takes the variables of a remote server's TLS or API key."""

from __future__ import annotations

import ipaddress
import json
import os
import urllib.request
from pathlib import Path

from cli.exit_codes import NOT_FOUND
from tests.e2e.conftest import Ferry, ferry_env

LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's `st` column


def descendants(roots: set[int]) -> set[int]:
    """`roots` and every process whose parent is among them, to any depth."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue  # gone meanwhile
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])  # the comm may hold spaces
    found, grown = set(roots), True
    while grown:
        more = {pid for pid, parent in parents.items() if parent in found} - found
        found |= more
        grown = bool(more)
    return found


def socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes


def listening(pid: int) -> list[tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]]:
    """(address, port) of each TCP socket `pid` listens on, from its network namespace's /proc/net/tcp{,6}."""
    inodes = socket_inodes(pid)
    found = []
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == LISTEN and fields[9] in inodes:
                address, port = fields[1].split(":")
                # Each 32-bit word in host (little-endian) order.
                raw = b"".join(bytes.fromhex(address[i : i + 8])[::-1] for i in range(0, len(address), 8))
                found.append((ipaddress.ip_address(raw), int(port, 16)))
    return found


def is_loopback(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    return (mapped or address).is_loopback


# For a remote server only: the stack, plain TCP on loopback, must not take them (a worker that did would
# speak TLS to the plain dev server and never start).
REMOTE_ONLY = {"TEMPORAL_API_KEY": "not-for-the-stack", "TEMPORAL_TLS_SERVER_CA_CERT_PATH": "/no/such/ca.pem"}


def test_every_socket_of_the_embedded_stack_listens_on_loopback(tmp_path: Path) -> None:
    ferry = Ferry(tmp_path, ferry_env(tmp_path) | REMOTE_ONLY)
    try:
        started = ferry("server", "start", timeout=120)
        assert started.returncode == 0, started.stderr
        status = json.loads(ferry("server", "status", "--json").stdout)
        assert status["running"] is True
        roots = {process["pid"] for process in status["processes"]}
        pids = descendants(roots)
        for pid in pids:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            assert not [v for v in environ if v.startswith((b"TEMPORAL_API_KEY=", b"TEMPORAL_TLS"))], pid
        sockets = {(pid, address, port) for pid in pids for address, port in listening(pid)}
        wide = sorted(
            f"pid {pid}: {address}:{port}" for pid, address, port in sockets if not is_loopback(address)
        )
        assert wide == []
        # The test sees the sockets it must: Temporal's gRPC, Web UI and metrics, the proxy's, the agent's and
        # Ferry's APIs.
        ports = {port for _, _, port in sockets}
        expected = {
            int(status["address"].rsplit(":", 1)[1]),
            int(status["ui_url"].rsplit(":", 1)[1]),
            int(status["metrics_url"].rsplit(":", 1)[1].split("/")[0]),
            *(
                int(p["address"].rsplit(":", 1)[1])
                for p in status["processes"]
                if p["name"] in ("proxy", "agent", "api")
            ),
        }
        assert expected <= ports, (expected, sockets)
        # Temporal's counters are where the status says (docs/deployment.md#the-embedded-stack).
        with urllib.request.urlopen(status["metrics_url"], timeout=10) as answer:
            assert b"\npersistence_requests{" in answer.read()
        # A run command goes through the stack's API and sends the key nowhere (docs/teams.md#one-way-in).
        listed = ferry("ps")
        assert listed.returncode == 0, listed.stderr
        # So do the commands that once reached Temporal themselves (docs/teams.md#one-way-in): the key is
        # needed by none, and a run that is not there is said as such.
        missing = ferry("schedule", "trigger", "nope")
        assert missing.returncode == NOT_FOUND and "Traceback" not in missing.stderr
        assert missing.stderr == "ferry schedule trigger: no run named 'nope' in project 'main'\n"
    finally:
        ferry("server", "stop")
