"""The agent bundle for a host whose Python is not the worker's: the agent's own code as for the worker,
every third-party package from wheels for that Python, fetched with the worker's pip from its index (kept
between runs in testbed.helpers.MACHINE_CACHE) or taken from a wheelhouse (FERRY_AGENT_WHEELS). Every
agent module imports from it on Debian 11's 3.9 and 13's 3.13 (testbed/debian_roots.py); its agent serves
a fleet on them in tests/fleet/test_distribution_hosts.py."""

from __future__ import annotations

import json
import subprocess
import tarfile
from pathlib import Path

import pytest

from activities.agent_bundle import MANIFEST, AgentBundle, BundleError, build_bundle
from activities.agent_targets import HostPython
from testbed.debian_roots import debian_root
from testbed.helpers import MACHINE_CACHE
from tests.fleet.test_deployment_units import IMPORT_ALL

PY39 = HostPython(3, 9, ".cpython-39-x86_64-linux-gnu.so")
WHEELS = MACHINE_CACHE / "agent-wheels"


@pytest.fixture(scope="module")
def bundle39(bundle_cache: Path) -> AgentBundle:
    return build_bundle(bundle_cache, PY39, WHEELS)


def _names(bundle: AgentBundle) -> set[str]:
    with tarfile.open(bundle.path) as tar:
        return set(tar.getnames())


def test_another_pythons_bundle_has_the_agents_code_and_packages_built_for_that_python(
    bundle39: AgentBundle, bundle: AgentBundle
) -> None:
    names, native = _names(bundle39), _names(bundle)
    assert {name for name in native if name.startswith(("agent/", "core/"))} <= names
    compiled = {name for name in names if name.endswith(".so")}
    assert any(name.startswith("pydantic_core/") and name.endswith(PY39.ext_suffix) for name in compiled)
    assert not any(name.endswith(bundle.ext_suffix) for name in compiled)
    tops = {name.split("/")[0] for name in names}
    # What only 3.9 needs: anyio's exceptiongroup, and pydantic's `X | None` through eval_type_backport.
    assert {"exceptiongroup", "eval_type_backport", "fastapi", "uvicorn", "asyncssh", "docker"} <= tops
    assert not any(top.endswith(".data") for top in tops)
    with tarfile.open(bundle39.path) as tar:
        manifest = tar.extractfile(MANIFEST)
        assert manifest is not None
        assert json.load(manifest) == {"ext_suffix": PY39.ext_suffix, "python": [3, 9]}
    assert bundle39.python == PY39 and bundle39.name != bundle.name


@pytest.mark.parametrize(
    ("suite", "python"),
    [("bullseye", PY39), ("trixie", HostPython(3, 13, ".cpython-313-x86_64-linux-gnu.so"))],
)
def test_every_agent_module_imports_from_its_bundle_on_the_releases_python(
    suite: str, python: HostPython, bundle_cache: Path, tmp_path: Path
) -> None:
    """As a host runs it (`-I -S`), chrooted into the release's root, the bundle mounted at its /mnt (in a
    mount namespace of its own: the root is not written to). An API newer than that Python fails here."""
    root = debian_root(suite)
    unpacked = tmp_path / "bundle"
    with tarfile.open(build_bundle(bundle_cache, python, WHEELS).path) as tar:
        tar.extractall(unpacked, filter="data")
    inside = f'mount --bind {unpacked} {root}/mnt && exec chroot {root} /usr/bin/python3 -I -S -c "$0" /mnt'
    done = subprocess.run(
        ["unshare", "--mount", "sh", "-c", inside, IMPORT_ALL], capture_output=True, text=True, check=True
    )
    found = json.loads(done.stdout)
    assert found["failed"] == {} and found["count"] >= 30, found
    assert found["version"][:2] == [python.major, python.minor]


def test_a_wheelhouse_serves_a_worker_without_an_index_and_makes_the_same_bundle(
    bundle39: AgentBundle, tmp_path: Path
) -> None:
    [fetched] = [d for d in WHEELS.glob(f"{PY39.tag}-x86_64-*") if d.is_dir()]
    wheelhouse = tmp_path / "wheelhouse"
    wheelhouse.mkdir()
    for wheel in fetched.glob("*.whl"):
        (wheelhouse / wheel.name).symlink_to(wheel)
    again = build_bundle(tmp_path / "bundles", PY39, tmp_path / "wheels", wheelhouse)
    assert again.digest == bundle39.digest


def test_packages_that_cannot_be_had_refuse_the_bundle_in_one_line(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(BundleError) as error:
        build_bundle(tmp_path / "bundles", PY39, tmp_path / "wheels", empty)
    message = str(error.value)
    assert (
        message.startswith("cannot get the agent's packages for Python 3.9: ERROR: ") and "\n" not in message
    )
    assert not list((tmp_path / "wheels").iterdir())  # nothing half-fetched is left to be taken for wheels
