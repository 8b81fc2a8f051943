"""The agent bundle's contents and determinism, and the SSH targets a fleet configuration resolves to."""

from __future__ import annotations

import json
import subprocess
import tarfile
from pathlib import Path

from activities.agent_bundle import LAUNCHER, MANIFEST, SUPERVISOR, AgentBundle, build_bundle
from activities.ssh import SSHLogin, ssh_targets
from core.configuration.fleet import FleetConfiguration
from testbed.helpers import host_python


def test_the_bundle_holds_the_agent_and_its_imports_and_nothing_of_the_worker(bundle: AgentBundle) -> None:
    with tarfile.open(bundle.path) as tar:
        names = set(tar.getnames())
        members = tar.getmembers()
    tops = {name.split("/")[0] for name in names}
    assert {"agent/main.py", "core/wire/agent_api.py", LAUNCHER, SUPERVISOR, MANIFEST} <= names
    assert {
        "fastapi",
        "starlette",
        "uvicorn",
        "pydantic",
        "pydantic_core",
        "anyio",
        "websockets",
        "asyncssh",  # the agent's SSH server into its jobs (docs/attach.md)
        "cryptography",
        "docker",  # the container executor's Docker Engine API client (docs/containers.md)
        "requests",
        "urllib3",
    } <= tops
    assert {"h11", "httptools"} & tops  # uvicorn's HTTP parser: httptools where installed, else h11
    assert any(name.startswith("pydantic_core/") and name.endswith(bundle.ext_suffix) for name in names)
    assert any(top.startswith("pydantic-") and top.endswith(".dist-info") for top in tops)
    assert not {"temporalio", "sqlmodel", "workflows", "activities", "cli", "tests", "setuptools"} & tops
    assert not any("__pycache__" in name or name.endswith(".pyc") for name in names)
    assert all(member.mtime == 0 and member.uid == 0 for member in members)
    assert bundle.files == len(names) and bundle.size == bundle.path.stat().st_size


IMPORT_ALL = """
import importlib, json, pkgutil, sys
sys.path.insert(0, sys.argv[1])
failed, count = {}, 0
for info in pkgutil.walk_packages(importlib.import_module("agent").__path__, "agent."):
    count += 1
    try:
        importlib.import_module(info.name)
    except Exception as exc:
        failed[info.name] = "%s: %s" % (type(exc).__name__, exc)
print(json.dumps({"count": count, "failed": failed, "version": list(sys.version_info[:3])}))
"""


def test_every_agent_module_imports_from_the_bundle_on_the_distributions_python(
    bundle: AgentBundle, tmp_path: Path
) -> None:
    """As a host runs it (`-I -S`: nothing but the bundle and the standard library), on Debian's 3.11.2
    rather than the worker's interpreter: an API newer than the host's Python fails here."""
    with tarfile.open(bundle.path) as tar:
        tar.extractall(tmp_path, filter="data")
    done = subprocess.run(
        [host_python(), "-I", "-S", "-c", IMPORT_ALL, str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    found = json.loads(done.stdout)
    assert found["failed"] == {} and found["count"] >= 30, found


def test_the_same_code_and_packages_make_the_same_bundle(bundle: AgentBundle, tmp_path: Path) -> None:
    again = build_bundle(tmp_path / "other-cache")
    assert again.digest == bundle.digest and again.path.read_bytes() == bundle.path.read_bytes()
    assert again.path.name == f"{bundle.name}.tar.gz"


def test_a_fleets_hosts_resolve_to_targets_host_settings_first() -> None:
    fleet = FleetConfiguration.model_validate(
        {
            "type": "fleet",
            "blocks": 2,
            "ssh_config": {
                "user": "ubuntu",
                "identity_file": "~/.ssh/fleet",
                "proxy_jump": {"hostname": "bastion", "user": "jump"},
                "hosts": [
                    "10.0.0.1",
                    {"hostname": "gpu-box", "port": 2222, "user": "root", "identity_file": "~/.ssh/gpu"},
                    {"hostname": "10.0.0.3", "internal_ip": "192.168.1.3", "blocks": "auto"},
                ],
            },
        }
    )
    first, second, third = ssh_targets(fleet, "my-fleet")
    assert (first.name, first.hostname, first.port, first.user) == ("my-fleet-0", "10.0.0.1", 22, "ubuntu")
    assert first.identity_file == "~/.ssh/fleet" and first.blocks == 2
    assert first.proxy_jump == SSHLogin(
        hostname="bastion", port=22, user="jump", identity_file="~/.ssh/fleet"
    )
    assert (second.port, second.user, second.identity_file) == (2222, "root", "~/.ssh/gpu")
    assert second.proxy_jump is not None and second.proxy_jump.identity_file == "~/.ssh/gpu"
    assert (third.internal_ip, third.blocks) == ("192.168.1.3", "auto")
