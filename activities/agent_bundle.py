"""The agent bundle: Ferry's agent and every package it imports, in one tarball a bare host can run.

SSH hosts need nothing but `python3` (CPython 3.9 or later on Linux with glibc), and may have no network,
so nothing is installed there from an index. The worker finds the agent's import closure: what
`import agent.main` (plus uvicorn's protocol and loop choices) loads, in a subprocess. Ferry's own
top-level packages (`agent`, `core`) are copied whole from their source directories; `__pycache__` is left
out, the host compiles on first start. The third-party packages depend on the host's interpreter, since
some are compiled (pydantic_core, cffi, uvloop ...): there is one bundle for each `EXT_SUFFIX` (Python
minor version and platform, e.g. `.cpython-39-x86_64-linux-gnu.so`), and the deployment asks the host which
it has before anything is copied.

- **The worker's own** (any patch release of it: Debian 12's 3.11.2 for a 3.11.7 worker): every
  third-party distribution that owns a loaded file, copied whole out of the worker's environment
  (dist-info included, as `importlib.metadata` and entry points need it). Nothing is fetched.
- **Any other** (activities/agent_targets.py decides, activities/agent_wheels.py fetches): the same
  distributions as wheels for that Python, the worker's release of each where there is one for it, else
  the newest earlier one that has one, plus what only that Python needs (exceptiongroup, and
  eval_type_backport on 3.9); fetched once by the worker's pip into FERRY_HOME/agent-wheels, or taken from
  FERRY_AGENT_WHEELS. A failure to get them refuses the host in one line.

What the bundle runs keeps to Python 3.9's standard library (core/compat.py has the rest;
docs/fleets.md#what-a-host-needs).

The tarball is deterministic (sorted names, fixed times and owners) and named by a hash of its contents,
cached under FERRY_HOME/agent-bundles, so every worker with the same code and packages makes the same one
and a host that already has it is sent nothing. The agent starts from `ferry_agent.py` at the bundle's root,
under `ferry_supervisor.py` (agent/supervisor.py, which starts it again when it dies), both with
`python3 -I -S`: neither the host's site-packages nor PYTHONPATH can shadow the bundle, and the bundle
stays out of the environment the agent gives its jobs.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import threading
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from activities.agent_targets import HostPython
from activities.agent_wheels import WheelsError, fetch_wheels, wheel_files

LAUNCHER = "ferry_agent.py"
SUPERVISOR = "ferry_supervisor.py"
MANIFEST = "ferry_bundle.json"

_LAUNCHER_SOURCE = b'''"""Starts the Ferry agent from this bundle, whatever the host's site-packages hold."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from agent.main import main  # noqa: E402

main()
'''

_SUPERVISOR_SOURCE = b'''"""Keeps the Ferry agent of this bundle running: agent/supervisor.py, stdlib only."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from agent.supervisor import main  # noqa: E402

sys.exit(main())
'''

# Runs in a subprocess of the worker's interpreter: prints the files the agent's imports come from.
_CLOSURE_SCRIPT = r"""
import importlib.metadata as md, json, os, sys, sysconfig
preloaded = set(sys.modules)  # the interpreter's start (site, .pth hooks) is not the agent's
real = os.path.realpath
paths = sysconfig.get_paths()
sites = {real(paths["purelib"]), real(paths["platlib"])}
# The worker's own packages where it imported them from, e.g. a source tree on PYTHONPATH, which -I drops.
if len(sys.argv) > 1 and real(sys.argv[1]) not in sites:
    sys.path.insert(0, sys.argv[1])
import agent.main, agent.app
import uvicorn
async def app(scope, receive, send):
    pass
uvicorn.Config(app, http="auto", ws="auto", lifespan="auto").load()
try:
    from uvicorn.loops.auto import auto_loop_factory
    auto_loop_factory()
except ImportError:
    pass
stdlib = {real(paths["stdlib"]), real(paths["platstdlib"])}
def under(path, roots):
    return any(path.startswith(root + os.sep) for root in roots)
loaded, first_party = set(), set()
for name, module in list(sys.modules.items()):
    if name in preloaded:
        continue
    locations = [module.__file__] if getattr(module, "__file__", None) else []
    locations += list(getattr(module, "__path__", None) or [])
    for location in map(real, locations):
        if under(location, sites):
            loaded.add(location)
        elif not under(location, stdlib) and "." not in name and getattr(module, "__path__", None):
            first_party.add((name, location))
owners = {}
for top, dists in md.packages_distributions().items():
    for dist_name in dists:
        owners.setdefault(top, set()).add(dist_name)
files, distributions = [], {}
for dist_name in sorted({d for tops in owners.values() for d in tops}):
    dist = md.distribution(dist_name)
    entries = [f for f in dist.files or [] if not str(f).startswith("..")]
    located = {real(str(dist.locate_file(f))): str(f) for f in entries}
    if loaded & set(located):
        files += [(arc, path) for path, arc in located.items() if os.path.isfile(path)]
        distributions[dist.metadata["Name"]] = dist.version
print(json.dumps({"files": files, "first_party": sorted(first_party), "distributions": distributions}))
"""


class BundleError(RuntimeError):
    pass


@dataclass(frozen=True)
class AgentClosure:
    """What the agent imports on the worker: Ferry's own files, the third-party ones (from the worker's
    environment), both by path in the bundle, and the third-party distributions, by name, with versions."""

    first_party: dict[str, Path]
    third_party: dict[str, Path]
    distributions: dict[str, str]


@dataclass(frozen=True)
class AgentBundle:
    path: Path
    digest: str  # sha256 of the contents; names the bundle on hosts
    size: int  # bytes of the tarball
    files: int
    python: HostPython  # the interpreter it is for: a host's must say the same (VERSION_SCRIPT)
    archive_sha256: str  # of the tarball: the host checks what it received

    @property
    def name(self) -> str:
        return self.digest[:20]

    @property
    def ext_suffix(self) -> str:
        return self.python.ext_suffix


def _skipped(arcname: str) -> bool:
    parts = arcname.split("/")
    return "__pycache__" in parts or arcname.endswith((".pyc", ".pyo"))


_closure: AgentClosure | None = None  # this process's code and packages do not change under it
_closure_lock = threading.Lock()


def this_workers_closure() -> AgentClosure:
    """agent_closure() of this worker, listed once for all the bundles it builds."""
    global _closure
    with _closure_lock:
        if _closure is None:
            _closure = agent_closure()
        return _closure


def agent_closure(python: str = sys.executable) -> AgentClosure:
    """The files and distributions the agent imports, found by importing it in a subprocess of `python`."""
    import agent  # the worker deploys the agent of the code it runs, wherever that code was imported from

    imported_from = str(Path(agent.__file__).resolve().parent.parent)
    try:
        done = subprocess.run(
            [python, "-I", "-c", _CLOSURE_SCRIPT, imported_from],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        )
    except subprocess.CalledProcessError as exc:
        raise BundleError(f"could not list the agent's imports: {exc.stderr.strip()[-2000:]}") from exc
    found = json.loads(done.stdout)
    third_party = {arc.replace(os.sep, "/"): Path(path) for arc, path in found["files"]}
    first_party: dict[str, Path] = {}
    for name, location in found["first_party"]:
        root = Path(location)
        for path in root.rglob("*"):
            if path.is_file():
                first_party[f"{name}/{path.relative_to(root).as_posix()}"] = path
    if "agent/main.py" not in first_party:
        raise BundleError("the agent's own package was not found in its import closure")
    return AgentClosure(
        {arc: path for arc, path in sorted(first_party.items()) if not _skipped(arc)},
        {arc: path for arc, path in sorted(third_party.items()) if not _skipped(arc)},
        dict(sorted(found["distributions"].items())),
    )


def _extra_files() -> dict[str, bytes]:
    try:
        ferry_version = version("ferry")
    except PackageNotFoundError:
        ferry_version = "0+unknown"
    metadata = f"Metadata-Version: 2.1\nName: ferry\nVersion: {ferry_version}\n".encode()
    return {
        LAUNCHER: _LAUNCHER_SOURCE,
        SUPERVISOR: _SUPERVISOR_SOURCE,
        f"ferry-{ferry_version}.dist-info/METADATA": metadata,
    }


Contents = dict[str, tuple[bytes | Path, int]]


def _digest(contents: Contents) -> str:
    total = hashlib.sha256(b"ferry-agent-bundle/1\0")
    for arc, (source, mode) in contents.items():
        data = source if isinstance(source, bytes) else source.read_bytes()
        total.update(f"{arc}\0{mode:o}\0{hashlib.sha256(data).hexdigest()}\0".encode())
    return total.hexdigest()


def _write_tarball(contents: Contents, target: Path) -> None:
    tmp = target.with_name(f"{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with (
        open(tmp, "wb") as raw,
        # No name in the gzip header: it would be the temporary file's, which names the pid and thread.
        gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for arc, (source, mode) in contents.items():
            data = source if isinstance(source, bytes) else source.read_bytes()
            info = tarfile.TarInfo(arc)
            info.size, info.mode, info.mtime = len(data), mode, 0
            tar.addfile(info, io.BytesIO(data))
    os.replace(tmp, target)


def _mode(path: Path) -> int:
    return 0o755 if os.access(path, os.X_OK) else 0o644


_built: dict[tuple[Path, HostPython], AgentBundle] = {}
_building: dict[tuple[Path, HostPython], threading.Lock] = {}  # one build of each at a time
_locks_lock = threading.Lock()


def build_bundle(
    cache_dir: Path,
    python: HostPython | None = None,
    wheel_cache: Path | None = None,
    wheelhouse: Path | None = None,
) -> AgentBundle:
    """The bundle of this worker's agent for `python` (this interpreter's when None), built once per process
    and cached on disk by content hash. Another Python's takes its packages as wheels
    (activities.agent_wheels: fetched into `wheel_cache`, FERRY_HOME/agent-wheels beside `cache_dir` when
    None, or taken from `wheelhouse`): BundleError if they cannot be had."""
    python = python or HostPython.this_interpreter()
    with _locks_lock:
        lock = _building.setdefault((cache_dir, python), threading.Lock())
    with lock:
        built = _built.get((cache_dir, python))
        if built is not None and built.path.exists():
            return built
        closure = this_workers_closure()
        contents: Contents = {arc: (path, _mode(path)) for arc, path in closure.first_party.items()}
        if python == HostPython.this_interpreter():
            contents.update({arc: (path, _mode(path)) for arc, path in closure.third_party.items()})
        else:
            try:
                wheels = fetch_wheels(
                    python,
                    closure.distributions,
                    wheel_cache or cache_dir.parent / "agent-wheels",
                    wheelhouse,
                )
            except WheelsError as exc:
                raise BundleError(
                    f"cannot get the agent's packages for Python {python.version}: {exc}"
                ) from exc
            contents.update(wheel_files(wheels, python))
        extra = _extra_files()
        extra[MANIFEST] = json.dumps(
            {"ext_suffix": python.ext_suffix, "python": [python.major, python.minor]}
        ).encode()
        contents.update({arc: (data, 0o644) for arc, data in extra.items()})
        contents = dict(sorted(contents.items()))
        digest = _digest(contents)
        cache_dir.mkdir(parents=True, exist_ok=True)
        target = cache_dir / f"{digest[:20]}.tar.gz"
        if not target.exists():
            _write_tarball(contents, target)
        archive_sha256 = hashlib.sha256(target.read_bytes()).hexdigest()
        bundle = AgentBundle(target, digest, target.stat().st_size, len(contents), python, archive_sha256)
        _built[(cache_dir, python)] = bundle
        return bundle
