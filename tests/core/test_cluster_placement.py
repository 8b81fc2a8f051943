"""An SSH fleet's `placement: cluster` (docs/fleets.md#cluster-placement): what a host's routes to its peers
say, as `ip -4 -o route get` prints them. Pure: core.fleets.cluster."""

from __future__ import annotations

import subprocess

import pytest

from core.fleets.cluster import NotAClusterError, RouteProbe, cluster_address, parse_probes, probe_script

ON_LINK = "10.0.0.12 dev eth1 src 10.0.0.11 uid 0 \\    cache "
ROUTED = "10.9.0.12 via 192.0.2.1 dev eth0 src 192.0.2.2 uid 0 \\    cache "


def probe(peer: str, route: str, address: str | None = None) -> RouteProbe:
    return RouteProbe(peer=peer, address=address or peer, route=route)


def test_peers_reached_directly_give_the_hosts_address_on_their_network() -> None:
    probes = [probe("10.0.0.12", ON_LINK), probe("b", ON_LINK.replace("12", "13", 1), "10.0.0.13")]
    assert cluster_address("f-0", probes, None) == "10.0.0.11"
    assert cluster_address("f-0", probes, "10.0.0.0/24") == "10.0.0.11"
    assert cluster_address("f-0", [], None) is None  # a fleet of one host
    itself = probe("f-0.lan", "local 10.0.0.11 dev lo src 10.0.0.11 uid 0 \\    cache <local> ", "10.0.0.11")
    assert cluster_address("f-0", [itself, *probes], None) == "10.0.0.11"


@pytest.mark.parametrize(
    ("probes", "network", "line"),
    [
        (
            [probe("b", ROUTED, "10.9.0.12")],
            None,
            "placement: cluster: f-0 reaches b (10.9.0.12) through a router (192.0.2.1), not on a network "
            "they share",
        ),
        (
            [probe("10.0.0.12", ON_LINK)],
            "192.168.77.0/24",
            "placement: cluster: f-0 reaches 10.0.0.12 from 10.0.0.11, which is not in ssh_config.network "
            "192.168.77.0/24",
        ),
        (
            [probe("gone", "RTNETLINK answers: Network is unreachable")],
            None,
            "placement: cluster: f-0 cannot reach gone: RTNETLINK answers: Network is unreachable",
        ),
        (
            [probe("b", "sh: 1: ip: not found", "10.0.0.12")],
            None,
            "placement: cluster: f-0 has no `ip` (iproute2) to tell how it reaches its peers",
        ),
        (
            [probe("10.0.0.12", ON_LINK), probe("c", "10.1.0.5 dev eth2 src 10.1.0.4 uid 0", "10.1.0.5")],
            None,
            "placement: cluster: f-0 reaches its peers on different networks (10.0.0.12 from 10.0.0.11, "
            "c from 10.1.0.4)",
        ),
    ],
)
def test_a_host_not_on_a_shared_network_is_said_in_one_line(
    probes: list[RouteProbe], network: str | None, line: str
) -> None:
    with pytest.raises(NotAClusterError) as refused:
        cluster_address("f-0", probes, network)
    assert str(refused.value) == line


def test_the_probe_runs_in_sh_and_reads_back() -> None:
    """The script as a host runs it (here: this machine's own sh, getent and ip)."""
    done = subprocess.run(
        ["sh", "-c", probe_script(["127.0.0.1", "localhost"])], capture_output=True, text=True, check=True
    )
    probes = parse_probes(done.stdout)
    assert [(p.peer, p.address) for p in probes] == [("127.0.0.1", "127.0.0.1"), ("localhost", "127.0.0.1")]
    assert all(p.route.startswith("local 127.0.0.1 dev lo src 127.0.0.1") for p in probes)
