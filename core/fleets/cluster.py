"""An SSH fleet's `placement: cluster` (docs/fleets.md#cluster-placement): its hosts must reach one another
on a network they share, with no router between them, as dstack asks of such a fleet; each host's address
for the other nodes is its own on that network (where `ssh_config.network` names it, in that network).

Each host is asked, over SSH, how it reaches every other host (`PROBE_SCRIPT`: the address a peer resolves
to there, and `ip -4 -o route get` of it); `cluster_address` reads the answers. Pure: no SSH here.
"""

from __future__ import annotations

import ipaddress
import shlex
from dataclasses import dataclass


@dataclass(frozen=True)
class RouteProbe:
    """How a host reaches one peer: the name it was given, the address it resolved to, and the route
    (`ip -4 -o route get` of that address, or its error)."""

    peer: str
    address: str
    route: str


class NotAClusterError(ValueError):
    """The host does not reach its peers on a network they share: the one line why."""


def probe_script(peers: list[str]) -> str:
    """What the host runs (POSIX sh): one line per peer, `<peer> <address> <route or error>`."""
    names = " ".join(shlex.quote(peer) for peer in peers)
    return (
        f"for p in {names}; do "
        "a=$(getent ahostsv4 \"$p\" 2>/dev/null | awk 'NR==1{print $1}'); "
        '[ -n "$a" ] || a="$p"; '
        'r=$(ip -4 -o route get "$a" 2>&1 | head -n 1); '
        'echo "$p $a $r"; '
        "done"
    )


def parse_probes(output: str) -> list[RouteProbe]:
    probes = []
    for line in output.splitlines():
        parts = line.split(maxsplit=2)
        if len(parts) >= 2:
            probes.append(
                RouteProbe(peer=parts[0], address=parts[1], route=parts[2] if len(parts) > 2 else "")
            )
    return probes


def cluster_address(host: str, probes: list[RouteProbe], network: str | None) -> str | None:
    """The host's address for the others: the one it reaches every peer from, directly; None with no peer
    (a fleet of one host: nothing to check). NotAClusterError naming the first peer it does not reach so."""
    within = ipaddress.ip_network(network, strict=False) if network is not None else None
    sources: dict[str, str] = {}
    for probe in probes:
        words = probe.route.split()
        where = f"{probe.peer} ({probe.address})" if probe.peer != probe.address else probe.peer
        if "not found" in probe.route:
            raise NotAClusterError(
                f"placement: cluster: {host} has no `ip` (iproute2) to tell how it reaches its peers"
            )
        if "src" not in words or words[0] in {"unreachable", "prohibit", "blackhole"}:
            said = " ".join(words) or "no route"
            raise NotAClusterError(f"placement: cluster: {host} cannot reach {where}: {said}")
        if words[0] == "local":
            continue  # the peer is this host (two names of one machine)
        if "via" in words:
            router = words[words.index("via") + 1]
            raise NotAClusterError(
                f"placement: cluster: {host} reaches {where} through a router ({router}), not on a "
                "network they share"
            )
        source = words[words.index("src") + 1]
        if within is not None and ipaddress.ip_address(source) not in within:
            raise NotAClusterError(
                f"placement: cluster: {host} reaches {where} from {source}, which is not in "
                f"ssh_config.network {network}"
            )
        sources[probe.peer] = source
    if len(set(sources.values())) > 1:
        shown = ", ".join(f"{peer} from {source}" for peer, source in sorted(sources.items()))
        raise NotAClusterError(
            f"placement: cluster: {host} reaches its peers on different networks ({shown})"
        )
    return next(iter(sources.values()), None)
