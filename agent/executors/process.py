"""The process executor: a job's commands in a shell, in their own session, logging straight to disk.

Each job starts through a tiny `sh` wrapper that leads a new session and process group. The wrapper's
stdout and stderr are one file description on the task's log file (opened O_APPEND), so the job's output
lands on disk interleaved and in order, and the job is never blocked by the agent. When the commands end
the wrapper writes their exit status to a file. The agent can therefore die and come back: the job keeps
running, and the files tell the restarted agent what happened.

A task with its own network namespace (agent.network) has its wrapper started through `nsenter` (or `ip
netns exec`), which enters the namespace and execs the wrapper in place: the pid the agent records, the
session and the process group are the wrapper's, as for any other job.
"""

from __future__ import annotations

import contextlib
import enum
import os
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from agent import network
from agent.executors.base import Executor, JobCheck, JobContext, JobHandle, JobLiveness
from agent.executors.environment import JobPlaces, host_base_environment, job_environment
from agent.files import files_dir, host_paths, placed_files, placed_repos
from agent.records import TaskPaths, TaskRecord
from core.wire.agent_api import JobSpec

# $1: task dir, $2: working dir, then the command. Trapping (not ignoring) TERM, INT and HUP keeps the
# wrapper alive while the job handles the signal sent to the whole group; a trap's handler, unlike an
# ignored signal, is reset in the job, so the job's own traps work. The wrapper's own stderr is /dev/null
# (its "Terminated" notices are not the job's output); the job's is the log. The exit status is renamed
# into place so that the agent never reads half of it.
WRAPPER_SCRIPT = """\
task_dir=$1
workdir=$2
shift 2
echo $$ > "$task_dir/wrapper.pid"
trap true TERM INT HUP
cd -- "$workdir" 2>&1 && "$@" 2>&1
rc=$?
echo "$rc" > "$task_dir/exit_status.tmp" && mv -f -- "$task_dir/exit_status.tmp" "$task_dir/exit_status"
"""
WRAPPER_NAME = "ferry-job"


def working_directory(paths: TaskPaths, spec: JobSpec) -> Path:
    if spec.working_dir is None:
        return paths.workdir
    return paths.workdir / spec.working_dir  # an absolute working_dir replaces the workdir


def _places(paths: TaskPaths, spec: JobSpec) -> JobPlaces:
    cwd = str(working_directory(paths, spec))
    placed = placed_files(paths)
    repos = placed_repos(paths, spec.repos)  # outside the code: found under FERRY_FILES_DIR
    return JobPlaces(
        repo_dir=str(paths.workdir),
        working_dir=cwd,
        mpi_hostfile=str(paths.mpi_hostfile),
        files=tuple(host_paths(paths, placed)),
        files_dir=str(files_dir(paths)) if any(e.under_files for e in placed + repos) else None,
    )


def write_script(paths: TaskPaths, spec: JobSpec) -> None:
    paths.script.write_text("\n".join(spec.commands) + "\n")


def spawn_job(
    paths: TaskPaths, spec: JobSpec, env: Mapping[str, str], cwd: Path, prefix: Sequence[str] = ()
) -> int:
    """Start the job's wrapper in a new session; return its pid, which is also the job's process group.
    `prefix` (an absolute path first) runs the wrapper: it must exec it in place, keeping the pid."""
    argv = [*prefix, "/bin/sh", "-c", WRAPPER_SCRIPT, WRAPPER_NAME, str(paths.root), str(cwd)]
    argv += [spec.shell, "-e", str(paths.script)]
    file_actions = [
        (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, str(paths.log), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644),
        (os.POSIX_SPAWN_OPEN, 2, "/dev/null", os.O_WRONLY, 0),
    ]
    # posix_spawn (vfork-like) keeps starting a job cheap however large the agent grows; the agent's
    # own descriptors are close-on-exec, so the job inherits none of them.
    return os.posix_spawn(argv[0], argv, dict(env), file_actions=file_actions, setsid=True)


def _proc_stat(pid: int) -> tuple[bytes, int] | None:
    """(state, start time in clock ticks since boot) of a process, or None when there is none."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    # After the command name, which may hold anything: state is the line's 3rd field, starttime its 22nd.
    return fields[0], int(fields[19])


def process_start_time(pid: int) -> int | None:
    stat = _proc_stat(pid)
    return None if stat is None else stat[1]


def is_same_process_alive(pid: int, start_time: int | None) -> bool:
    """Whether the process started as `pid` at `start_time` still runs; a reused pid is another process."""
    stat = _proc_stat(pid)
    return (
        stat is not None and stat[0] not in (b"Z", b"X") and start_time is not None and stat[1] == start_time
    )


def is_wrapper_of(pid: int, paths: TaskPaths) -> bool:
    """Whether `pid` runs this task's wrapper: its command line names the task's directory."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            args = cmdline.read().split(b"\0")
    except (FileNotFoundError, ProcessLookupError):
        return False
    return WRAPPER_NAME.encode() in args and str(paths.root).encode() in args


def _unrecorded_wrapper(paths: TaskPaths) -> int | None:
    """A live wrapper of this task, found through /proc (a zombie's command line is empty)."""
    for entry in os.listdir("/proc"):
        if entry.isdigit() and is_wrapper_of(int(entry), paths):
            return int(entry)
    return None


def signal_group(pgid: int, signum: int) -> None:
    # ESRCH: the group is gone (a live group's id is never given to another process).
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def kill_group(pgid: int) -> None:
    signal_group(pgid, signal.SIGKILL)


def read_exit_status(paths: TaskPaths) -> int | None:
    try:
        return int(paths.exit_status.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


class ChildState(enum.Enum):
    RUNNING = "running"
    EXITED = "exited"
    NOT_OUR_CHILD = "not_our_child"  # started by an earlier agent: watch it through /proc instead


@dataclass(frozen=True)
class ChildPoll:
    state: ChildState
    exit_status: int | None = None


def poll_child(pid: int) -> ChildPoll:
    """Reap the wrapper if it has ended (it is the agent's child unless an earlier agent started it)."""
    try:
        reaped, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return ChildPoll(ChildState.NOT_OUR_CHILD)
    if reaped == 0:
        return ChildPoll(ChildState.RUNNING)
    if os.WIFSIGNALED(status):
        return ChildPoll(ChildState.EXITED, 128 + os.WTERMSIG(status))  # the shell's convention
    return ChildPoll(ChildState.EXITED, os.waitstatus_to_exitcode(status))


class ProcessExecutor(Executor):
    """Runs jobs as host processes through the wrapper. It reaps the wrappers it started (the SIGCHLD that
    wakes the registry's watcher is theirs); one an earlier agent started is followed through /proc."""

    def __init__(self) -> None:
        self._children: set[int] = set()  # wrappers this agent started and must reap
        self._reaped: dict[int, ChildPoll] = {}  # of those, the ones `ended_children` found ended

    def ended_children(self) -> set[int]:
        """The wrappers this agent started that have ended and not yet been checked: one waitpid each,
        their statuses kept for `check`. A pass of the watcher that a SIGCHLD woke checks their jobs only,
        not every running job (agent/task_watch.py)."""
        for pid in self._children - self._reaped.keys():
            child = poll_child(pid)
            if child.state != ChildState.RUNNING:
                self._reaped[pid] = child
        return set(self._reaped)

    def prepare(self, paths: TaskPaths, record: TaskRecord, spec: JobSpec) -> Path:
        if not spec.commands:
            raise ValueError("nothing to run: the job has no commands and no image")
        write_script(paths, spec)
        cwd = working_directory(paths, spec)
        cwd.mkdir(parents=True, exist_ok=True)
        return cwd

    def start(
        self, paths: TaskPaths, record: TaskRecord, spec: JobSpec, cwd: Path, host_has_gpus: bool
    ) -> JobHandle:
        env = job_environment(
            host_base_environment(os.environ), record, spec, host_has_gpus, _places(paths, spec)
        )
        prefix: list[str] = []
        if record.network == "isolated" and record.netns is not None:
            prefix = network.exec_prefix(record.netns)  # NetworkError, an OSError, when it is gone
        pid = spawn_job(paths, spec, env, cwd, prefix)
        self._children.add(pid)
        # an earlier child's status under this pid, reaped but never checked (its job ended another way)
        self._reaped.pop(pid, None)
        return JobHandle(pid, process_start_time(pid))

    def job_context(
        self, record: TaskRecord, paths: TaskPaths, spec: JobSpec, host_has_gpus: bool
    ) -> JobContext:
        # What `start` gives the job, so that a command run beside it sees what the job sees.
        env = job_environment(
            host_base_environment(os.environ), record, spec, host_has_gpus, _places(paths, spec)
        )
        netns = record.netns if record.network == "isolated" else None
        prefix = network.exec_prefix(netns) if netns is not None else []
        return JobContext(prefix, env, working_directory(paths, spec), netns)

    def find_started(self, paths: TaskPaths) -> JobHandle | None:
        try:
            pid: int | None = int(paths.wrapper_pid.read_text().strip())
        except (FileNotFoundError, ValueError):
            pid = None
        if pid is None and read_exit_status(paths) is None:
            pid = _unrecorded_wrapper(paths)  # started, its agent killed before it wrote its pid
            if pid is None:
                return None
        if pid is not None and is_wrapper_of(pid, paths):
            return JobHandle(pid, process_start_time(pid))
        return JobHandle(None, None)  # the wrapper has ended: its exit status tells the rest

    def signal(self, record: TaskRecord, signum: int) -> None:
        if self._is_ours(record):
            assert record.pid is not None
            signal_group(record.pid, signum)

    def kill_strays(self, record: TaskRecord) -> None:
        if record.pid is not None:
            kill_group(record.pid)

    def release(self, record: TaskRecord) -> None:
        pass  # the wrapper was reaped when it ended; the task's files stay until the task is removed

    def check(self, record: TaskRecord, paths: TaskPaths) -> JobCheck:
        if record.pid is not None and record.pid in self._children:
            child = self._reaped.pop(record.pid, None) or poll_child(record.pid)
            if child.state == ChildState.RUNNING:
                return JobCheck(JobLiveness.RUNNING)
            self._children.discard(record.pid)
            if child.state == ChildState.EXITED:
                exit_status = read_exit_status(paths)
                status = child.exit_status if exit_status is None else exit_status
                return JobCheck(JobLiveness.EXITED, status, kill_strays=True)
        # A wrapper an earlier agent started: /proc tells whether it lives. Liveness is read before the
        # exit status, which the wrapper writes before it exits, so a finished job is never taken for gone.
        alive = record.pid is not None and is_same_process_alive(record.pid, record.pid_start_time)
        exit_status = read_exit_status(paths)
        if exit_status is not None:
            return JobCheck(JobLiveness.EXITED, exit_status, kill_strays=alive)
        return JobCheck(JobLiveness.RUNNING if alive else JobLiveness.GONE)

    def tells_its_end(self, record: TaskRecord) -> bool:
        return record.pid is not None and record.pid in self._children  # its SIGCHLD

    def _is_ours(self, record: TaskRecord) -> bool:
        """Whether the job's group is still the one this task started (a reused pid is not)."""
        if record.pid is None:
            return False
        return record.pid in self._children or is_same_process_alive(record.pid, record.pid_start_time)
