"""The runner role, per task: the job spec, the code, the run, and the job's states and logs by offset."""

from __future__ import annotations

import asyncio
import base64
import signal
from collections.abc import AsyncIterator
from pathlib import Path

from agent.code import CodeArchiveError, extract_archive, receive_archive
from agent.code_cache import CodeCache
from agent.executors import Executor
from agent.executors.environment import write_mpi_hostfile
from agent.files import move_out_of_code
from agent.logs import OffsetOutOfRange, log_size, read_log
from agent.records import TaskPaths, TaskRecord, load_job_spec, save_job_spec
from agent.repos import RepoCloneError, clone_repos
from agent.tasks import BadTaskRequest, TaskConflict, TaskRegistry
from agent.volumes import VolumeError, link_volumes, unlink_paths
from core.status import JobTerminationReason
from core.wire.agent_api import JobSpec, PullResponse, TaskInfo, TaskStatus

# A pull that may wait (`wait` > 0) holds the request until the job has news: a new state comes at once
# (the registry tells), new log bytes within these intervals (the log file's size is looked at, more
# rarely the longer the job stays quiet, up to once a second: with 1,000 quiet jobs waited on, looking
# twice a second cost the agent 30% of a core (`python -m bench.run`, section scale).
MAX_PULL_WAIT = 30.0
_WAIT_LOOK_MIN = 0.02
_WAIT_LOOK_MAX = 1.0
# `run` answers within this (the agent's clients wait 30 s for an answer); a job still preparing then,
# pulling its image, is asked after again.
RUN_ANSWER_WITHIN = 20.0
_STARTING: set[asyncio.Task[None]] = set()


def submit_job(registry: TaskRegistry, task_id: str, spec: JobSpec) -> TaskInfo:
    record = registry.get(task_id)
    paths = registry.paths(task_id)
    if record.status != TaskStatus.PENDING:
        if record.job_submitted and load_job_spec(paths) == spec:
            return record.to_info()  # a retried submission of the same spec
        raise TaskConflict(f"task {task_id!r} is {record.status}: its job spec can no longer change")
    save_job_spec(paths, spec)
    # Its record says so at its next write (its start): a file fewer to write per task, and an agent
    # restarted before then finds the spec itself (TaskRegistry.load).
    record.job_submitted = True
    return record.to_info()


async def upload_code(
    registry: TaskRegistry, task_id: str, chunks: AsyncIterator[bytes], sha256: str
) -> TaskInfo:
    record = registry.get(task_id)
    if record.code_hash is not None and record.code_hash == sha256.lower():
        return record.to_info()  # the same archive again: nothing to do
    if record.status != TaskStatus.PENDING:
        raise TaskConflict(f"task {task_id!r} is {record.status}: its code can no longer change")
    if task_id in registry.busy:
        raise TaskConflict(f"task {task_id!r} is already receiving code or starting")
    registry.busy.add(task_id)
    try:
        record.code_hash = await receive_archive(chunks, registry.paths(task_id).code_archive, sha256)
    except CodeArchiveError as exc:
        raise BadTaskRequest(str(exc)) from exc
    finally:
        registry.busy.discard(task_id)
    # Written with the record at the start: an agent restarted before then has the archive and no hash,
    # and the worker's retried start uploads it again (activities/jobs.py skips only what is recorded).
    return record.to_info()


def take_kept_code(registry: TaskRegistry, code: CodeCache, task_id: str, sha256: str) -> TaskInfo:
    """The task's code from the agent's kept archives (docs/jobs.md#batches), as an upload of it would be."""
    record = registry.get(task_id)
    if record.code_hash == sha256:
        return record.to_info()
    if record.status != TaskStatus.PENDING:
        raise TaskConflict(f"task {task_id!r} is {record.status}: its code can no longer change")
    if task_id in registry.busy:
        raise TaskConflict(f"task {task_id!r} is already receiving code or starting")
    if not code.link_into(sha256, registry.paths(task_id).code_archive):
        raise BadTaskRequest(f"code {sha256} is not kept on this agent")
    record.code_hash = sha256  # written with the record at its start, as an upload's (upload_code)
    return record.to_info()


def _prepare(
    executor: Executor, paths: TaskPaths, record: TaskRecord, spec: JobSpec
) -> tuple[Path, list[str]]:
    """Blocking: extract the code, link the volumes, write the script (a container's executor also pulls
    its image and creates it); return the working dir and the links made."""
    paths.workdir.mkdir(exist_ok=True)
    if paths.code_archive.exists():
        extract_archive(paths.code_archive, paths.workdir)
        paths.code_archive.unlink()
        move_out_of_code(paths)  # `files` at an absolute or home path: the task's own (agent/files.py)
    clone_repos(paths, spec.repos)  # after the code and `files`: if_exists sees them (docs/runs.md#repos)
    write_mpi_hostfile(paths.mpi_hostfile, spec.cluster_info)  # before a container's binds are made
    # A container gets its volumes as bind mounts; host processes see them through links.
    links = link_volumes(record.volumes, paths.workdir) if record.container is None else []
    try:
        cwd = executor.prepare(paths, record, spec)
    except (OSError, ValueError):
        unlink_paths(links)
        raise
    return cwd, links


async def run(registry: TaskRegistry, task_id: str) -> TaskInfo:
    """Start the job once: a second call, or one while it starts, answers the task as it is.

    The answer comes once the job runs or has failed to, or after RUN_ANSWER_WITHIN seconds with the task
    still PREPARING (an image pull may take minutes): the caller then asks again until it is not."""
    record = registry.get(task_id)
    if record.status != TaskStatus.PENDING:
        return record.to_info()
    if not record.job_submitted:
        raise TaskConflict(f"task {task_id!r} has no job spec: submit it before running")
    if task_id in registry.busy:
        raise TaskConflict(f"task {task_id!r} is receiving its code: run it once the upload is done")
    record.status = TaskStatus.PREPARING
    registry.save(record)
    return await start_prepared(registry, record)


async def start_prepared(registry: TaskRegistry, record: TaskRecord) -> TaskInfo:
    """A task written PREPARING, started; answered as `run` answers."""
    registry.busy.add(record.id)
    starting = asyncio.create_task(_prepare_and_start(registry, record))
    _STARTING.add(starting)  # the loop keeps only a weak reference to a task
    starting.add_done_callback(_STARTING.discard)
    done, _ = await asyncio.wait([starting], timeout=RUN_ANSWER_WITHIN)  # started, or it is time to answer
    for started in done:
        started.result()  # its failure, if it failed
    return record.to_info()


async def _prepare_and_start(registry: TaskRegistry, record: TaskRecord) -> None:
    paths = registry.paths(record.id)
    spec = load_job_spec(paths)
    executor = registry.executors.for_task(record)
    try:
        cwd, record.linked_paths = await asyncio.to_thread(_prepare, executor, paths, record, spec)
    except (CodeArchiveError, RepoCloneError) as exc:
        registry.finalize(record, JobTerminationReason.EXECUTOR_ERROR, str(exc), exit_status=None)
        return
    except VolumeError as exc:
        registry.finalize(record, JobTerminationReason.VOLUME_ERROR, str(exc), exit_status=None)
        return
    except Exception as exc:  # whatever fails, the job fails with it rather than stay PREPARING for ever
        message = f"could not prepare the job: {exc}"
        registry.finalize(record, JobTerminationReason.EXECUTOR_ERROR, message, exit_status=None)
        return
    finally:
        registry.busy.discard(record.id)
    if record.stop is not None:  # terminated while it was being prepared
        reason = record.stop.reason
        registry.finalize(record, reason, record.stop.message or reason.message(), exit_status=None)
        return
    try:
        if executor.starts_blocking:
            handle = await asyncio.to_thread(executor.start, paths, record, spec, cwd, bool(registry.gpus))
        else:
            handle = executor.start(paths, record, spec, cwd, host_has_gpus=bool(registry.gpus))
    except Exception as exc:  # likewise: a job that cannot start has failed
        message = f"could not start the job: {exc}"
        registry.finalize(record, JobTerminationReason.EXECUTOR_ERROR, message, exit_status=None)
        return
    registry.mark_running(record, handle, spec.max_duration, spec.inactivity_duration)
    if record.stop is not None:
        # Stopped while a blocking start ran: signalled now, and killed when its grace is over.
        executor.signal(record, signal.SIGKILL if record.stop.killed else signal.SIGTERM)


def pull(registry: TaskRegistry, task_id: str, offset: int, limit: int, states_offset: int) -> bytes:
    """The JSON of a PullResponse. Its logs are spliced in as base64 bytes: building the string and
    escaping it again would copy megabytes twice more, which is most of what a pull costs."""
    record = registry.get(task_id)
    if states_offset > len(record.job_states):
        raise BadTaskRequest(
            f"states_offset {states_offset} is beyond the job's {len(record.job_states)} states"
        )
    # Whether the job had finished is read before the log: if it had, the log read after it is complete.
    finished = record.status == TaskStatus.TERMINATED
    states = record.job_states[states_offset:]
    try:
        data, size = read_log(registry.paths(task_id).log, offset, limit)
    except OffsetOutOfRange as exc:
        raise BadTaskRequest(str(exc)) from exc
    next_offset = offset + len(data)
    reply = PullResponse(
        job_states=states,
        next_states_offset=states_offset + len(states),
        logs="",
        offset=offset,
        next_offset=next_offset,
        has_more=size > next_offset,
        finished=finished,
    )
    head = reply.model_dump_json(exclude={"logs"}).encode()
    # Base64 needs no JSON escaping, so the bytes go in as they are.
    return b"".join((head[:-1], b',"logs":"', base64.b64encode(data), b'"}'))


async def pull_waiting(
    registry: TaskRegistry, task_id: str, offset: int, limit: int, states_offset: int, wait: float
) -> bytes:
    """`pull`, but held up to `wait` seconds while the job has nothing new: no log byte past `offset`,
    no state past `states_offset`, not finished. One waiting request costs the agent a look at a file's
    size now and then, where the same watch by polling cost a request, a response and a log read."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + min(wait, MAX_PULL_WAIT)
    log = registry.paths(task_id).log
    interval = _WAIT_LOOK_MIN
    while True:
        record = registry.get(task_id)
        left = deadline - loop.time()
        quiet = (
            record.status != TaskStatus.TERMINATED
            and len(record.job_states) == states_offset
            and log_size(log) == offset  # past the end is an error: `pull` says which at once
        )
        if not quiet or left <= 0:
            return pull(registry, task_id, offset, limit, states_offset)
        await registry.wait_for_news(task_id, min(interval, left))
        interval = min(interval * 1.5, _WAIT_LOOK_MAX)
