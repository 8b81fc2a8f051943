"""The container executor: a job with `image` runs as a container, through the Docker Engine API.

`prepare` (in a thread) writes the script, pulls the image unless the host has it, and creates the
container; `start` (in a thread too) starts it and reads the host ports the engine published. A thread per
running container copies its output into the task's log and waits for its exit (agent/containers/output.py);
the watcher's `check` only reads what that thread found. Signals go through the engine's kill; a finished
job's container is removed. A restarted agent finds each running job's container by the id kept in the
task's directory and follows it again: nothing is killed, nothing started twice (docs/containers.md).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal as signals
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from docker.errors import APIError, DockerException, ImageNotFound, NotFound
from requests.exceptions import RequestException

from agent.containers.config import (
    MPI_HOSTFILE_PATH,
    WORKFLOW_DIR,
    ContainerConfigError,
    EngineTraits,
    agent_key,
    container_dir,
    container_name,
    create_request,
    host_ulimits,
)
from agent.containers.engine import Engine, EngineError, EngineFinder
from agent.containers.output import ContainerOutput
from agent.containers.pulls import PullProgress
from agent.executors.base import Executor, JobCheck, JobContext, JobHandle, JobLiveness
from agent.executors.environment import JobPlaces, job_environment
from agent.files import container_binds, container_home, container_path, placed_files, placed_repos
from agent.records import TaskPaths, TaskRecord, write_atomically
from core.files_manifest import Placed
from core.wire.agent_api import ContainerSpec, JobSpec, python_image

logger = logging.getLogger(__name__)

NO_ENGINE = "the job has `image`, and this host has no container engine: install Docker or Podman"
_CDI_DIRS = (Path("/etc/cdi"), Path("/var/run/cdi"))
_ENGINE_ERRORS = (DockerException, RequestException)


def cdi_names_nvidia_gpus() -> bool:
    for directory in _CDI_DIRS:
        with contextlib.suppress(OSError):
            for spec in directory.iterdir():
                if spec.suffix in (".yaml", ".yml", ".json") and b"nvidia.com" in spec.read_bytes():
                    return True
    return False


def _engine_error(action: str, exc: Exception) -> EngineError:
    explanation = getattr(exc, "explanation", None) or str(exc)
    return EngineError(f"{action}: {one_line(str(explanation))}")


def one_line(text: str) -> str:
    """An engine's message, which may span lines, as the one line a job's termination message is."""
    return " ".join(text.split())


class ContainerExecutor(Executor):
    starts_blocking = True

    def __init__(self, engines: EngineFinder | None, data_dir: Path) -> None:
        self._engines = engines
        self._key = agent_key(data_dir)
        self._tasks_dir = data_dir / "tasks"
        self._outputs: dict[str, ContainerOutput] = {}
        self._lock = threading.Lock()
        # Kills and removals leave the event loop at once, in order (a SIGTERM before its SIGKILL).
        self._calls = ThreadPoolExecutor(max_workers=1, thread_name_prefix="engine-calls")
        self.ended: Callable[[], None] = lambda: None  # set by the registry: wakes its watcher

    @property
    def engine(self) -> Engine | None:
        """The engine if it has been found (a served socket, or the service started for a first job)."""
        return self._engines.engine if self._engines is not None else None

    @property
    def engine_name(self) -> str | None:
        return self._engines.name if self._engines is not None else None

    # --- the job's start ---------------------------------------------------------------------------

    def close(self) -> None:
        """The agent is stopping: the podman service it started stops too (its containers go on)."""
        if self._engines is not None:
            self._engines.close()

    def connect(self) -> None:
        """Blocking: find the engine now (an agent restarting with container jobs to follow)."""
        if self._engines is not None:
            self._engines.get()

    def _api(self) -> Engine:
        """Blocking the first time, when the agent may start a podman service."""
        engine = self._engines.get() if self._engines is not None else None
        if engine is None:
            raise EngineError(NO_ENGINE)
        return engine

    def prepare(self, paths: TaskPaths, record: TaskRecord, spec: JobSpec) -> Path:
        engine = self._api()
        container = record.container
        assert container is not None
        if spec.commands:
            # One stream, in order: the engine keeps stdout and stderr apart, and gives them back apart.
            paths.script.write_text("exec 2>&1\n" + "\n".join(spec.commands) + "\n")
        paths.workdir.mkdir(exist_ok=True)
        image = self._image(container)
        self._pull(engine, image, record)
        # The code is unpacked and the repos cloned by now (agent.jobs._prepare).
        placed = placed_files(paths) + placed_repos(paths, spec.repos)
        home = self._home(engine, image, container.user, placed)
        env = self._environment(record, spec, home, paths)
        traits = EngineTraits(kind=engine.kind, cdi_gpus=cdi_names_nvidia_gpus())
        try:
            body = create_request(
                record=record,
                spec=spec,
                paths=paths,
                env=env,
                traits=traits,
                key=self._key,
                ulimits=host_ulimits(),
                image=image,
                file_binds=container_binds(paths, placed, home),
            )
        except ContainerConfigError as exc:
            raise EngineError(str(exc)) from exc
        name = container_name(self._key, record.id)
        with contextlib.suppress(NotFound, *_ENGINE_ERRORS):
            engine.api.remove_container(
                name, force=True
            )  # left by an attempt that died before its id was kept
        try:
            created = engine.api.create_container_from_config(body, name=name)
        except _ENGINE_ERRORS as exc:
            raise _engine_error(f"could not create the container of {image}", exc) from exc
        write_atomically(paths.container_id, created["Id"].encode())
        return paths.workdir

    def _image(self, container: ContainerSpec) -> str:
        """The job's image: a `python` job's is this host's (`--python-image`, docs/containers.md#python)."""
        if container.python is None or self._engines is None:
            return container.image
        return python_image(container.python, self._engines.python_image)

    def _pull(self, engine: Engine, image: str, record: TaskRecord) -> None:
        """Pull `image` unless the host has it (one built or imported locally is used as it is); the
        task's `progress` says how far the pull is (docs/containers.md#pulls)."""
        with contextlib.suppress(ImageNotFound):
            engine.api.inspect_image(image)
            return
        auth = record.container.registry_auth if record.container is not None else None
        credentials = None
        if auth is not None:
            credentials = {"username": auth.username, "password": auth.password}
        repository, _, tag = image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", "")
        progress = PullProgress(image)
        record.progress = progress.line()
        try:
            for event in engine.api.pull(
                repository, tag=tag or "latest", stream=True, decode=True, auth_config=credentials
            ):
                if "error" in event:
                    raise EngineError(f"could not pull {image}: {one_line(str(event['error']))}")
                progress.feed(event)
                record.progress = progress.line()
        except _ENGINE_ERRORS as exc:
            raise _engine_error(f"could not pull {image}", exc) from exc
        finally:
            record.progress = None

    def _home(self, engine: Engine, image: str, user: str | None, placed: list[Placed]) -> str | None:
        """The container's home, where `~` of `files` and `repos` goes: asked of the image only when one
        does."""
        if not any((entry.destination or "").startswith("~") for entry in placed):
            return None
        try:
            config = engine.api.inspect_image(image).get("Config") or {}
        except _ENGINE_ERRORS as exc:
            raise _engine_error(f"could not inspect {image}", exc) from exc
        return container_home(user or config.get("User"), _env_of(config.get("Env")))

    def _environment(
        self, record: TaskRecord, spec: JobSpec, home: str | None, paths: TaskPaths
    ) -> dict[str, str]:
        # The image's own environment (PATH...) stays: the engine adds these to it. The host's does not.
        placed = placed_files(paths)
        places = JobPlaces(
            repo_dir=WORKFLOW_DIR,
            working_dir=container_dir(spec),
            mpi_hostfile=MPI_HOSTFILE_PATH,
            files=tuple(container_path(entry, WORKFLOW_DIR, home) for entry in placed),
        )
        env = job_environment({}, record, spec, False, places)
        # The container sees only its GPUs, numbered from 0: host indices would name ones it has not.
        env.pop("CUDA_VISIBLE_DEVICES", None)
        return env

    def start(
        self, paths: TaskPaths, record: TaskRecord, spec: JobSpec, cwd: Path, host_has_gpus: bool
    ) -> JobHandle:
        engine = self._api()
        container_id = paths.container_id.read_text()
        try:
            try:
                engine.api.start(container_id)
            except _ENGINE_ERRORS as exc:
                # Podman 4.3 may answer the start of a container that ran and ended at once with an error
                # (`read /proc/<pid>/cgroup: no such process`): the container's own state decides.
                if not ran_despite_error(engine.api.inspect_container(container_id)):
                    raise
                logger.info("container %s ran, though its start said: %s", container_id, one_line(str(exc)))
            details = engine.api.inspect_container(container_id)
        except _ENGINE_ERRORS as exc:
            raise _engine_error("could not start the container", exc) from exc
        self._follow(record.id, container_id, paths)
        return JobHandle(None, None, host_ports=published_ports(details))

    def find_started(self, paths: TaskPaths) -> JobHandle | None:
        engine = self.engine
        try:
            container_id = paths.container_id.read_text()
        except OSError:
            return None
        if engine is None:
            return JobHandle(None, None)  # the check finds it gone, and says so
        try:
            details = engine.api.inspect_container(container_id)
        except NotFound:
            return None
        except _ENGINE_ERRORS:
            return JobHandle(None, None)
        if not _has_run(details):
            with contextlib.suppress(*_ENGINE_ERRORS):
                engine.api.remove_container(container_id, force=True)
            return None  # created, never started
        return JobHandle(None, None, host_ports=published_ports(details))

    # --- the running job ---------------------------------------------------------------------------

    def _follow(self, task_id: str, container_id: str, paths: TaskPaths) -> ContainerOutput:
        assert self.engine is not None
        with self._lock:
            output = self._outputs.get(task_id)
            if output is None:
                api = self.engine.streaming_client()
                output = ContainerOutput(api, container_id, paths, lambda: self.ended())
                self._outputs[task_id] = output
                output.start()
        return output

    def tells_its_end(self, record: TaskRecord) -> bool:
        return record.id in self._outputs  # its output stream's end calls `ended`

    def check(self, record: TaskRecord, paths: TaskPaths) -> JobCheck:
        output = self._outputs.get(record.id)
        if output is None:
            # A container an earlier agent started: follow it again (its output from where it was left).
            try:
                container_id = paths.container_id.read_text()
            except OSError:
                return JobCheck(JobLiveness.GONE)
            if self.engine is None:
                return JobCheck(JobLiveness.GONE)
            output = self._follow(record.id, container_id, paths)
        if not output.done.is_set():
            return JobCheck(JobLiveness.RUNNING)
        if output.gone or output.exit_status is None:
            return JobCheck(JobLiveness.GONE)
        return JobCheck(JobLiveness.EXITED, output.exit_status)

    def signal(self, record: TaskRecord, signum: int) -> None:
        container_id = self._container_id(record)
        if container_id is not None and self.engine is not None:
            self._calls.submit(self._kill, self.engine, container_id, signum)

    @staticmethod
    def _kill(engine: Engine, container_id: str, signum: int) -> None:
        try:
            if signum != signals.SIGKILL:
                # As the process executor signals the job's group: every process of the container. Its
                # first process alone would be the engine's way, and a shell there ignores SIGTERM.
                pid = int(engine.api.inspect_container(container_id)["State"].get("Pid") or 0)
                if pid > 0 and signal_pid_namespace(pid, signum):
                    return
            engine.api.kill(container_id, signal=signals.Signals(signum).name)
        except (NotFound, *_ENGINE_ERRORS) as exc:
            logger.info("container %s: %s not sent: %s", container_id, signals.Signals(signum).name, exc)

    def kill_strays(self, record: TaskRecord) -> None:
        pass  # the container's processes ended with it

    def release(self, record: TaskRecord) -> None:
        """The job has ended and its output is copied: its container goes."""
        container_id = self._container_id(record)
        self._outputs.pop(record.id, None)
        if container_id is not None and self.engine is not None:
            self._calls.submit(self._remove, self.engine, container_id)

    @staticmethod
    def _remove(engine: Engine, container_id: str) -> None:
        with contextlib.suppress(NotFound, *_ENGINE_ERRORS):
            engine.api.remove_container(container_id, force=True)

    def _container_id(self, record: TaskRecord) -> str | None:
        output = self._outputs.get(record.id)
        if output is not None:
            return output.container_id
        try:
            return TaskPaths(self._tasks_dir / record.id).container_id.read_text()
        except OSError:
            return None

    def job_context(
        self, record: TaskRecord, paths: TaskPaths, spec: JobSpec, host_has_gpus: bool
    ) -> JobContext:
        """A command beside the job runs in its container's namespaces (nsenter), where the job starts."""
        engine = self._api()
        output = self._outputs.get(record.id)
        if output is None:
            raise EngineError("the job's container is not running")
        try:
            details = engine.api.inspect_container(output.container_id)
        except (APIError, *_ENGINE_ERRORS) as exc:
            raise _engine_error("the job's container cannot be reached", exc) from exc
        pid = int(details["State"].get("Pid") or 0)
        if pid <= 0:
            raise EngineError("the job's container is not running")
        image_env = _env_of(details["Config"].get("Env"))
        prefix = [
            "nsenter",
            "-t",
            str(pid),
            "-m",
            "-u",
            "-i",
            "-n",
            "-p",
            f"--wd={container_dir(spec)}",
            "--",
        ]
        # A bridged container has its own network: forwards connect and listen on its loopback, as the
        # job sees it, whether or not its ports are published (docs/containers.md#networks).
        netns = None if record.network == "host" else f"/proc/{pid}/ns/net"
        user = record.container.user if record.container is not None else None
        home = container_home(user or details["Config"].get("User"), image_env)
        env = {**image_env, **self._environment(record, spec, home, paths)}
        return JobContext(prefix, env, paths.workdir, netns)


def _env_of(items: list[str] | None) -> dict[str, str]:
    """An engine's `NAME=value` list as a mapping."""
    return dict(item.split("=", 1) for item in items or [] if "=" in item)


def signal_pid_namespace(pid: int, signum: int) -> bool:
    """Send `signum` to every process in the PID namespace of `pid` (a container's first process, as the
    host sees it); False when the agent cannot see them, or the namespace is its own."""
    try:
        namespace = os.readlink(f"/proc/{pid}/ns/pid")
        if namespace == os.readlink("/proc/self/ns/pid"):
            return False  # a container on the host's PID namespace: its processes are not its own
    except OSError:
        return False
    sent = False
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{entry}/ns/pid") == namespace:
                    os.kill(int(entry), signum)
                    sent = True
    return sent


def published_ports(details: dict[str, object]) -> dict[int, int]:
    """Container port -> host port, as the engine published them (bridge network); empty on the host's."""
    settings = details.get("NetworkSettings") or {}
    ports = settings.get("Ports") or {} if isinstance(settings, dict) else {}
    mapped: dict[int, int] = {}
    for name, bindings in ports.items():
        if not bindings:
            continue
        port, _, protocol = name.partition("/")
        if protocol in ("", "tcp") and bindings[0].get("HostPort"):
            mapped[int(port)] = int(bindings[0]["HostPort"])
    return mapped


def ran_despite_error(details: dict[str, Any]) -> bool:
    """After the engine answered a container's start with an error: whether the container ran anyway (it
    says it started, or its process ran and ended). Podman 4.3 reads the cgroup of the container's process
    after starting it, and fails the start when a quick command has ended already (a race of its own,
    podman issue 16383): the job then ended, and its exit status and output are the engine's to tell."""
    state = details.get("State") or {}
    return bool(state) and (_has_run(details) or state.get("Status") in ("running", "exited", "stopped"))


def _has_run(details: dict[str, Any]) -> bool:
    """Whether the engine's inspection of a container says it was started (it may have ended since): a
    container never started has the zero time as its StartedAt."""
    return not str((details.get("State") or {}).get("StartedAt", "")).startswith("0001-")
