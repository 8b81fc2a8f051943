"""Following a run from the store: its jobs' logs as they grow, and its status until it finishes."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, BinaryIO

from rich.console import Console, Group
from rich.live import Live
from rich.spinner import Spinner
from rich.table import Table

from cli import render
from cli.arrays import array_size, element_label
from cli.pipeline_tasks import run_jobs
from core.status import JobStatus, RunStatus

if TYPE_CHECKING:
    from store import JobSubmissionRecord, RunRecord
    from store.run_reads import RunReads

POLL_INTERVAL = 0.1


def expected_shape(run: RunRecord) -> tuple[int, int]:
    """(replicas, nodes per replica) the run's configuration asks for; (1, 1) if it cannot tell."""
    try:
        from core.run_types import configurator_for

        conf = run.run_configuration()
        if conf is None:
            return 1, 1
        configurator = configurator_for(conf)  # type: ignore[arg-type]
        return configurator.replica_count(), configurator.nodes_per_replica()
    except (ValueError, TypeError):
        return 1, 1


class LogStream:
    """Writes the logs of a run's jobs to `out` as the store receives them: every submission of each
    selected (replica, job) in turn; lines get a `[job N] ` prefix when the run has several jobs."""

    def __init__(
        self,
        store: RunReads,
        run: RunRecord,
        out: BinaryIO,
        *,
        replica: int | None = None,
        job: int | None = None,
        since: float | None = None,
        submissions: set[tuple[int, int, int]] | None = None,
    ) -> None:
        self.store = store
        self.submissions = submissions  # only these (replica, job, submission); None: every one
        self.out = out
        self.replica = replica
        self.job = job
        self.since = since
        self._several_replicas = False
        self._array = array_size(run) > 0  # its lines are `[element N] ...`
        replicas, nodes = expected_shape(run)
        self._prefixed = (1 if replica is not None else replicas) * (1 if job is not None else nodes) > 1
        self._offsets: dict[str, int] = {}
        self._partial: dict[str, bytes] = {}  # an unfinished last line, per submission
        self._prefix: dict[str, bytes] = {}
        self.bytes_written = 0

    def selected(self, job: JobSubmissionRecord) -> bool:
        key = (job.replica_num, job.job_num, job.submission_num)
        return (
            (self.replica is None or job.replica_num == self.replica)
            and (self.job is None or job.job_num == self.job)
            and (self.submissions is None or key in self.submissions)
        )

    def poll(self, jobs: list[JobSubmissionRecord]) -> int:
        """Write what is new; how many bytes that was."""
        mine = [j for j in jobs if self.selected(j)]
        keys = {(j.replica_num, j.job_num) for j in mine}
        self._prefixed = self._prefixed or len(keys) > 1
        self._several_replicas = self._several_replicas or len({r for r, _ in keys}) > 1
        written = 0
        for job in sorted(mine, key=lambda j: (j.replica_num, j.job_num, j.submission_num)):
            if job.id not in self._offsets:
                start = 0 if self.since is None else self.store.log_offset_since(job.id, self.since)
                self._offsets[job.id] = job.log_size if start is None else start
            offset = self._offsets[job.id]
            if job.log_size <= offset and not JobStatus(job.status).is_finished():
                continue
            data, self._offsets[job.id] = self.store.read_log(job.id, offset)
            written += self._write(job, data)
        if written:
            self.out.flush()
        self.bytes_written += written
        return written

    def close(self) -> None:
        """End every unfinished line (the run is over)."""
        for job_id, rest in self._partial.items():
            self.out.write(self._prefix.get(job_id, b"") + rest + b"\n")
        self._partial.clear()
        self.out.flush()

    def _write(self, job: JobSubmissionRecord, data: bytes) -> int:
        if not data:
            return 0
        if not self._prefixed:
            self.out.write(data)
            return len(data)
        label = f"job {job.job_num}"  # a log line's prefix: `[job 1]`, `[replica 0 job 1]`, `[element 3]`
        label = f"replica {job.replica_num} {label}" if self._several_replicas else label
        label = element_label(job) if self._array else label
        prefix = self._prefix.setdefault(job.id, f"[{label}] ".encode())
        *lines, rest = (self._partial.pop(job.id, b"") + data).split(b"\n")
        for line in lines:
            self.out.write(prefix + line + b"\n")
        if rest:
            self._partial[job.id] = rest
        return len(data)


class Interrupts:
    """Ctrl-C while following: counted by the loop instead of raised (SIGINT handler on the loop)."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

    def __enter__(self) -> Interrupts:
        self._loop = asyncio.get_running_loop()
        self._loop.add_signal_handler(signal.SIGINT, self.event.set)
        return self

    def __exit__(self, *exc: object) -> None:
        self.pause()

    def pause(self) -> None:
        """Back to the default Ctrl-C (a prompt must be interruptible)."""
        if self._loop is not None:
            self._loop.remove_signal_handler(signal.SIGINT)

    def resume(self) -> None:
        self.event.clear()
        if self._loop is not None:
            self._loop.add_signal_handler(signal.SIGINT, self.event.set)

    async def sleep(self, seconds: float) -> bool:
        """Sleep; True if interrupted meanwhile."""
        if not self.event.is_set():
            try:
                await asyncio.wait_for(self.event.wait(), seconds)
            except TimeoutError:
                return False
        return True


def _status_view(run: RunRecord, jobs: list[JobSubmissionRecord]) -> Group:
    message = render.run_message(run, jobs)
    head = Spinner("dots", text=f"run {run.run_name}: {run.status}{f' ({message})' if message else ''}")
    table = Table(box=None, show_header=False, pad_edge=False)
    latest = render.latest_jobs(jobs)
    shape = render.label_shape(run, latest)
    for job in latest:
        # `node 1` of a multi-node task, `replica 0` of a service; a run's only job by the run's name.
        label = render.job_label(job.replica_num, job.job_num, *shape) or run.run_name
        table.add_row(f"  {label}", render.job_record_message(job, run), job.instance_name or "")
    return Group(head, table)


async def follow_run(
    store: RunReads,
    run: RunRecord,
    *,
    status_console: Console | None,
    on_interrupt: Callable[[], object],
    logs: LogStream | None = None,
) -> RunRecord:
    """Show the run's status while it provisions, then its logs, until it finishes; its final record.

    `status_console` None: logs only. On Ctrl-C, `on_interrupt` is called (with Ctrl-C back to normal):
    True (or an awaitable of it) goes on following, False stops following at once.
    """
    out = logs or LogStream(store, run, sys.stdout.buffer)
    live: Live | None = None
    if status_console is not None and status_console.is_terminal:
        live = Live(console=status_console, transient=True, refresh_per_second=10)
        live.start()
    said = ""
    try:
        with Interrupts() as interrupts:
            while True:
                current = await asyncio.to_thread(store.get_run, run.id)
                run = current or run
                jobs = await asyncio.to_thread(run_jobs, store, run)
                finished = RunStatus(run.status).is_finished()
                streaming = out.bytes_written > 0 or run.status == RunStatus.RUNNING or finished
                if live is not None and streaming:
                    live.stop()
                    live = None
                if live is not None:
                    live.update(_status_view(run, jobs))
                elif not streaming or out.bytes_written == 0:
                    message = render.run_message(run, jobs)
                    line = f"run {run.run_name}: {run.status}{f' ({message})' if message else ''}"
                    if line != said and not finished and status_console is not None:
                        status_console.print(line, highlight=False, markup=False)
                        said = line
                await asyncio.to_thread(out.poll, jobs)
                if finished:
                    out.close()
                    return run
                if await interrupts.sleep(POLL_INTERVAL):
                    if live is not None:
                        live.stop()
                        live = None
                    interrupts.pause()
                    go_on = on_interrupt()
                    if asyncio.iscoroutine(go_on):
                        go_on = await go_on
                    if not go_on:
                        out.close()
                        return run
                    interrupts.resume()
    finally:
        if live is not None:
            live.stop()
