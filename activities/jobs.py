"""The effects of a job's life: the task on its agent, the job's start, watch and stop, its removal.

Placement is the fleet's scheduler's (workflows/fleet.py); these reach the instance it chose by name.

Every activity here is idempotent: a retry, or an attempt that overlaps a timed-out one, finds the work
already done (the agent's task ids are the job submission ids, and logs resume from the stored size).
"""

from __future__ import annotations

import asyncio
import base64
import collections
import time

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.agent_client import HTTP_NOT_FOUND, AgentClient, AgentError, AgentUnreachable
from activities.batch_starts import start_together
from activities.handover import hands_over
from activities.heartbeats import Progress, heartbeating
from activities.instances import InstanceDirectory
from activities.secrets import SecretFiller
from core.jobs.transitions import published_ports
from core.status import JobTerminationReason
from core.wire import activity_names as names
from core.wire.agent_api import (
    JobStateEvent,
    PullResponse,
    TaskInfo,
    TaskStatus,
    TaskSubmitRequest,
    VolumeMount,
)
from core.wire.agent_batches import TaskStart
from core.wire.messages import (
    JobOutcome,
    PrepareAndStart,
    PrepareTask,
    SSHEndpoint,
    SSHEndpointRequest,
    StartJobRequest,
    StopTask,
    TaskRef,
    WatchJob,
)
from core.wire.volumes import host_path
from store import Store

# The watch long-polls: the agent answers as soon as there is news, or after this many seconds (at most
# half the silence that makes an instance unreachable). A quiet job then costs a request per wait.
_PULL_WAIT = 5.0
_POLL_MIN = 0.02
_RETRY_UNREACHABLE = 0.5
_PREPARING_POLL = 0.25
_PULL_LIMIT = 4 * 1024 * 1024
HTTP_CONFLICT = 409
# An agent that answers a step of a job's start with an error is asked this many times in all (Temporal's
# attempts), then the job fails with the agent's message (docs/jobs.md#agent-errors): a refusal seldom
# changes, and a job must never wait on one for ever.
AGENT_ERROR_ATTEMPTS = 3
# Code archives kept in the worker's memory, the last used: at most this many, each at most this big.
_ARCHIVES_KEPT = 8
_ARCHIVE_KEPT_BYTES = 4 * 1024 * 1024


def _reason_error(reason: JobTerminationReason, message: str, *, retry: bool = False) -> ApplicationError:
    """An activity failure the job workflow turns into a termination with `reason`."""
    return ApplicationError(message, type=reason.name, non_retryable=not retry)


def _refused(err: AgentError, instance: str, what: str) -> ApplicationError:
    """The agent's error on a step, as EXECUTOR_ERROR with its message: retried until the last attempt."""
    message = " ".join(err.message.split()) or f"status {err.status_code}"
    last = activity.info().attempt >= AGENT_ERROR_ATTEMPTS
    note = f"the agent on {instance} refused {what}: {message}"
    return _reason_error(JobTerminationReason.EXECUTOR_ERROR, note, retry=not last)


class _StoredLog:
    """A job's log as stored: chunks written in order, one at a time, each while the next is pulled."""

    def __init__(self, store: Store, job_id: str, offset: int) -> None:
        self._store = store
        self._job_id = job_id
        self.offset = offset  # bytes stored
        self._writing: asyncio.Task[int] | None = None

    async def write(self, at: int, data: bytes) -> None:
        await self.flush()
        self._writing = asyncio.create_task(
            asyncio.to_thread(self._store.append_log, self._job_id, at, data, time.time())
        )

    async def flush(self) -> None:
        """Wait for the write in flight (its error, such as a gap, fails the watch: its retry resumes)."""
        if self._writing is not None:
            writing, self._writing = self._writing, None
            self.offset = await writing


class JobActivities:
    def __init__(self, instances: InstanceDirectory, store: Store) -> None:
        self._instances = instances
        self._store = store
        self._secrets = SecretFiller(store)  # filled in here, at the last moment (docs/secrets.md)
        self._archives: collections.OrderedDict[str, bytes] = collections.OrderedDict()  # by hash

    @property
    def instances(self) -> InstanceDirectory:
        return self._instances

    @activity.defn(name=names.PREPARE_TASK)
    async def prepare_task(self, request: PrepareTask) -> None:
        """Submit the task to the instance's agent (the shim role); waits while the agent is busy."""
        await self._prepare(request)

    async def _prepare(self, request: PrepareTask) -> TaskInfo:
        """The task as its agent has it once submitted (a retried submission: as an earlier one left it)."""
        client = await self._instances.resolve(request.instance_name)
        submit = await self._submission(request)
        with self._secrets.masking():
            try:
                async with heartbeating():
                    return await client.submit_task(submit)
            except AgentError as err:
                if err.status_code == HTTP_CONFLICT:
                    # Not enough free right now: the retry policy tries again, the job stays provisioning.
                    raise ApplicationError(
                        f"waiting for capacity: {err.message}", type="WaitingForCapacity"
                    ) from err
                raise _refused(err, request.instance_name, "the task") from err

    async def batch_item(self, client: AgentClient, step: PrepareAndStart) -> TaskStart:
        """One task of a start batch (docs/jobs.md#batches): its submission, its spec with its secrets, and
        its code kept by its agent. Raises what the step alone would meet, or a refusal to keep the code
        (an agent of an earlier release): the step is then taken alone."""
        start = step.start
        code_hash = None
        if start.code_hash is not None:
            archive = await self._code(start.code_hash)
            if archive is None:
                raise ValueError(f"code {start.code_hash} not in store")
            code_hash = start.code_hash.removeprefix("sha256:")
            await client.keep_code(archive, code_hash)
        spec = await self._secrets.spec(start.job_submission_id, start.spec, start.api_access)
        return TaskStart(submit=await self._submission(step.prepare), spec=spec, code_hash=code_hash)

    async def _submission(self, request: PrepareTask) -> TaskSubmitRequest:
        return TaskSubmitRequest(
            id=request.job_submission_id,
            name=request.task_name,
            resources=request.resources,
            ports=request.ports,
            env=request.env,
            network=request.network,
            authorized_keys=request.authorized_keys,
            volumes=await self._mounts(request),
            container=await self._secrets.container(request.job_submission_id, request.container),
            owner=request.owner,
        )

    async def _mounts(self, request: PrepareTask) -> list[VolumeMount]:
        """The job's volumes at their paths on its instance (docs/volumes.md)."""
        if not request.volumes:
            return []
        dirs = await self._instances.dirs(request.instance_name)
        return [VolumeMount(host_path=host_path(v, dirs), path=v.path) for v in request.volumes]

    @activity.defn(name=names.START_JOB)
    async def start_job(self, request: StartJobRequest) -> str | None:
        """Hand the runner its job spec and code, then start it; skips what an earlier attempt did. The
        ports its container published on other host ports, if any (`published_ports`)."""
        return await self._start(request, None)

    async def _start(self, request: StartJobRequest, known: TaskInfo | None) -> str | None:
        """`known`: the task as its submission in the same attempt answered (one request fewer). An
        activity takes one argument: this is start_job's body."""
        progress = Progress()
        async with heartbeating(progress):
            with self._secrets.masking():
                return await self._start_job(request, progress, known)

    async def _start_job(
        self, request: StartJobRequest, progress: Progress, known: TaskInfo | None
    ) -> str | None:
        client = await self._instances.resolve(request.instance_name)
        job_id, step = request.job_submission_id, "the job's start"
        try:
            task = known if known is not None else await client.get_task(job_id)
            if task.status == TaskStatus.TERMINATED:
                return None  # ended before its start (its agent restarted, say): the watch tells why
            if not task.job_submitted:
                step = "the job's spec"
                spec = await self._secrets.spec(job_id, request.spec, request.api_access)
                await client.submit_job(job_id, spec)
            if request.code_hash is not None and task.code_hash is None:
                archive = await self._code(request.code_hash)
                if archive is None:
                    raise _reason_error(
                        JobTerminationReason.EXECUTOR_ERROR, f"code {request.code_hash} not in store"
                    )
                step = "the job's code"
                await client.upload_code(job_id, archive, request.code_hash.removeprefix("sha256:"))
            step = "the job's start"
            if task.started_at is None:
                task = await client.run(job_id)
            # An image pull may outlast one answer of `run`: the job is started once it is not preparing.
            while task.status == TaskStatus.PREPARING:
                progress.line = task.progress
                await asyncio.sleep(_PREPARING_POLL)
                task = await client.get_task(job_id)
        except AgentError as err:
            raise _refused(err, request.instance_name, step) from err
        return published_ports(task.ports)

    async def _code(self, code_hash: str) -> bytes | None:
        """A code archive from the store, kept for the next jobs that run it (an array's elements all
        do): archives are named by their hash, so a kept one is never stale."""
        archive = self._archives.get(code_hash)
        if archive is None:
            archive = await asyncio.to_thread(self._store.get_code, code_hash)
            if archive is not None and len(archive) <= _ARCHIVE_KEPT_BYTES:
                self._archives[code_hash] = archive
                while len(self._archives) > _ARCHIVES_KEPT:
                    self._archives.popitem(last=False)
        else:
            self._archives.move_to_end(code_hash)
        return archive

    @activity.defn(name=names.PREPARE_AND_START)
    async def prepare_and_start(self, request: PrepareAndStart) -> str | None:
        """Both steps in one activity (docs/jobs.md#one-step-start); a retry skips what is done. Tried
        first as a batch of one (one request to the agent rather than four, docs/jobs.md#batches)."""
        if request.prepare.container is None:
            async with heartbeating():  # a repo's clone may keep the answer up to 20 s
                started = await start_together(self, request.prepare.instance_name, [request])
            if 0 in started:
                return started[0]
        task = await self._prepare(request.prepare)
        return await self._start(request.start, task)

    @activity.defn(name=names.WATCH_JOB)
    @hands_over
    async def watch_job(self, request: WatchJob) -> JobOutcome:
        """Pull the job's states and logs until it has ended, storing the logs as they arrive.

        Returns INSTANCE_UNREACHABLE once the agent has not answered for `unreachable_after` seconds.
        """
        client = await self._instances.resolve(request.instance_name)
        job_id = request.job_submission_id
        offset = await asyncio.to_thread(self._store.log_size, job_id)
        log = _StoredLog(self._store, job_id, offset)
        last_answer = time.monotonic()
        last_state: JobStateEvent | None = None
        states_offset = 0
        wait = min(_PULL_WAIT, request.unreachable_after / 2)
        more = True  # the first pull answers at once
        while True:
            try:
                pulled: PullResponse = await client.pull(
                    job_id,
                    offset=offset,
                    limit=_PULL_LIMIT,
                    states_offset=states_offset,
                    wait=0.0 if more else wait,
                )
            except AgentUnreachable as err:
                silent = time.monotonic() - last_answer
                if silent >= request.unreachable_after:
                    await log.flush()
                    return JobOutcome(
                        termination_reason=JobTerminationReason.INSTANCE_UNREACHABLE,
                        termination_message=f"{request.instance_name} silent for {silent:.0f}s: {err}",
                    )
                activity.heartbeat(log.offset)
                await asyncio.sleep(_RETRY_UNREACHABLE)
                continue
            except AgentError as err:
                if err.status_code == HTTP_NOT_FOUND:
                    return JobOutcome(
                        termination_reason=JobTerminationReason.EXECUTOR_ERROR,
                        termination_message=f"the task vanished from {request.instance_name}: {err.message}",
                    )
                raise
            last_answer = time.monotonic()
            if pulled.job_states:
                last_state = pulled.job_states[-1]
                states_offset = pulled.next_states_offset
            data = base64.b64decode(pulled.logs)
            if data:
                await log.write(pulled.offset, data)  # stored while the next chunk is pulled
                offset = pulled.next_offset
            activity.heartbeat(log.offset)
            if pulled.finished and not pulled.has_more:
                await log.flush()
                return await self._outcome(request, last_state)
            more = pulled.has_more

    async def _outcome(self, request: WatchJob, last_state: JobStateEvent | None) -> JobOutcome:
        if last_state is None or last_state.termination_reason is None:
            client = await self._instances.resolve(request.instance_name)
            task = await client.get_task(request.job_submission_id)
            reason = task.termination_reason or JobTerminationReason.EXECUTOR_ERROR
            return JobOutcome(
                termination_reason=reason,
                termination_message=task.termination_message,
                exit_status=task.exit_status,
            )
        return JobOutcome(
            termination_reason=last_state.termination_reason,
            termination_message=last_state.termination_message,
            exit_status=last_state.exit_status,
        )

    @activity.defn(name=names.SSH_ENDPOINT)
    async def ssh_endpoint(self, request: SSHEndpointRequest) -> SSHEndpoint:
        """The agent's SSH server on the job's instance (docs/attach.md), as its agent reports it now, with
        the SSH connections into the job (`ferry ps`: a dev environment's inactivity)."""
        client = await self._instances.resolve(request.instance_name)
        info = await client.instance_info()
        if info.ssh_port is None:
            return SSHEndpoint(refused=f"the agent on {request.instance_name} has no SSH server")
        try:
            task = await client.get_task(request.job_submission_id)
        except AgentError as err:
            if err.status_code != HTTP_NOT_FOUND:
                raise
            return SSHEndpoint(refused=f"the job is gone from {request.instance_name}")
        idle_since = None
        if task.ssh_connections == 0 and task.started_at is not None:  # as the agent's watcher counts
            idle_since = max(task.ssh_last_activity or task.started_at, task.started_at)
        return SSHEndpoint(
            instance_name=request.instance_name,
            port=info.ssh_port,
            host_key=info.ssh_host_key,
            user=request.job_submission_id,
            ssh_connections=task.ssh_connections,
            idle_since=idle_since,
        )

    @activity.defn(name=names.STOP_TASK)
    async def stop_task(self, request: StopTask) -> None:
        """SIGTERM now, SIGKILL after `timeout` (at once for 0): the agent carries out the grace period."""
        client = await self._instances.resolve(request.instance_name)
        try:
            await client.terminate(
                request.job_submission_id,
                reason=request.reason,
                message=request.message,
                timeout=request.timeout,
            )
        except AgentError as err:
            if err.status_code != HTTP_NOT_FOUND:  # never submitted: nothing to stop
                raise

    @activity.defn(name=names.RELEASE_TASK)
    async def release_task(self, ref: TaskRef) -> None:
        """Make sure the task's process has ended, then remove the task: its capacity is free again.
        An agent that cannot be reached fails the attempt (AgentUnreachable) and the job's retry policy tries
        again: one being restarted or upgraded is back within seconds, and a removal skipped then left its
        task on the agent for good (docs/jobs.md#a-shorter-history). A host lost for good is the fleet's
        to clean."""
        client = await self._instances.resolve(ref.instance_name)
        await remove_task(client, ref.job_submission_id)


async def remove_task(client: AgentClient, task_id: str) -> None:
    """Kill the task's process if it still runs, wait until it has ended, remove the task (if still there)."""
    try:
        try:
            await client.remove(task_id)  # an ended task, the usual case: one request
            return
        except AgentError as err:
            if err.status_code != HTTP_CONFLICT:  # 409: it still runs, and is killed first
                raise
        task = await client.get_task(task_id)
        if task.status != TaskStatus.TERMINATED:
            await client.terminate(task_id, reason=JobTerminationReason.TERMINATED_BY_SERVER, timeout=0)
        while task.status != TaskStatus.TERMINATED:  # SIGKILL takes a moment to be reaped
            if not activity.info().is_local:  # a local activity has no heartbeat
                activity.heartbeat()
            await asyncio.sleep(_POLL_MIN)
            task = await client.get_task(task_id)
        await client.remove(task_id)
    except AgentError as err:
        if err.status_code != HTTP_NOT_FOUND:
            raise
