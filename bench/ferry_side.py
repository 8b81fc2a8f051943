"""Ferry's workloads, on the real embedded stack (embedded.stack) in a fresh FERRY_HOME.

Every figure comes from the client's clock and the store, the way a user of `ferry` would see it:
submissions go through FerryAPI, RUNNING is the job's `start` event, DONE is the moment the client hears
that the run's workflow has completed (its resources were released before: the run's `clean` event
follows the job's `release`), and a job also writes the time its process started, as Slurm's jobs do in
../shared/peers/slurm/bench.sh.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import sqlalchemy as sa

from bench import temporal_counters
from bench.common import (
    Clock,
    Report,
    cpu_seconds,
    processes_mentioning,
    written_bytes,
)
from bench.recovery_hosts import ssh_settings
from cli.api import FerryAPI
from cli.api_client import CODE_NEEDED
from cli.code_archive import packed_code, with_environment
from cli.remote_runs import submission_body
from core.configuration import RunConfiguration, TaskConfiguration, parse_configuration
from core.status import RunStatus
from core.wire.workflow_ids import job_workflow_id
from embedded.extra_workers import ExtraWorkers
from embedded.stack import Stack, StackStatus
from store import JobSubmissionRecord, RunRecord, Store, open_store
from store.keys import load_keys
from store.repository import code_hash
from worker.temporal import connect

REPO_ROOT = Path(__file__).resolve().parents[1]
# Requests that let any number of jobs share the local instance: every lower bound is 0.
SHARED = {"cpu": "0..", "memory": "0GB..", "disk": "0GB.."}
FINISHED_RUN = sorted(s.value for s in RunStatus.finished_statuses())


@dataclass
class BurstResult:
    submit_s: float
    all_done_s: float
    completed: int
    failed: int
    per_run_s: list[float] = field(default_factory=list)
    cpu_s: dict[str, float] = field(default_factory=dict)  # CPU time each process used meanwhile
    temporal_written_mb: float | None = None  # what Temporal's process wrote to storage meanwhile
    temporal_counts: dict[str, float] | None = None  # Temporal's counters' growth (temporal_counters)


def _stack_env(home: Path) -> dict[str, str]:
    """This environment without any FERRY_* setting (the user's server, store or project), in `home`; the
    proxy's own switches (FERRY_GATEWAY_*, e.g. FERRY_GATEWAY_FAST_PATH=0 for an A/B) are kept."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("FERRY_", "DSTACK_")) or k.startswith("FERRY_GATEWAY_")
    }
    env["FERRY_HOME"] = str(home)
    env.update(ssh_settings())  # how the worker deploys to the recovery section's test hosts
    return env


class FerrySide:
    """The embedded stack of a temporary FERRY_HOME, and the workloads run on it."""

    def __init__(self, home: Path, report: Report, workers: int = 1, database_url: str | None = None) -> None:
        self.home = home
        self.report = report
        self.env = _stack_env(home)
        # The store: FERRY_HOME's SQLite file, or (`--store postgres`) a database of the bench's PostgreSQL.
        self.database_url = database_url or f"sqlite:///{home / 'ferry.db'}"
        if database_url is not None:
            self.env["FERRY_DATABASE_URL"] = database_url
        self.stack = Stack(home, self.env)
        self.workers = workers
        self.extra_workers = ExtraWorkers(self.stack)
        self.repo = home / "repo"
        self.marks = home / "marks"
        self.tasks_dir = home / "agent" / "data" / "tasks"  # the agent's; each job's wrapper names its own
        self._store: Store | None = None
        self._api: dict[str, FerryAPI] = {}
        self.last_latency_run: RunRecord | None = None
        self.latency_runs: list[tuple[RunRecord, float]] = []  # each sample's run and when it was submitted
        self._client: Any = None
        self._http: aiohttp.ClientSession | None = None

    # --- the stack --------------------------------------------------------------------------------

    def start(self) -> StackStatus:
        self.repo.mkdir(parents=True, exist_ok=True)
        self.marks.mkdir(parents=True, exist_ok=True)
        clock = Clock()
        status = self.stack.start()
        self.extra_workers.start(self.workers - 1)
        self.report.put("stack_start_s", clock.elapsed())
        self.report.put("stack_workers", self.workers)
        self.report.put("stack_store", self.database_url.split(":", 1)[0])
        return status

    async def close_http(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

    def stop(self) -> None:
        self.extra_workers.stop()
        self.stack.stop()
        # Whatever job a failed section left behind: the wrappers lead their own process groups.
        for pid in processes_mentioning(str(self.tasks_dir)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)

    @property
    def address(self) -> str:
        status = self.stack.status()
        assert status.address is not None, "the stack is not running"
        return status.address

    def pid(self, name: str) -> int | None:
        for process in self.stack.status().processes:
            if process.name == name:
                return process.pid
        return None

    async def connect(self) -> None:
        self._client = await connect(self.address, keys=load_keys(self.env))  # the stack's key, in its home
        self._store = await asyncio.to_thread(open_store, self.database_url)

    @property
    def client(self) -> Any:
        assert self._client is not None
        return self._client

    @property
    def store(self) -> Store:
        assert self._store is not None
        return self._store

    def api(self, project: str) -> FerryAPI:
        if project not in self._api:
            self._api[project] = FerryAPI(self._client, self.store, project=project)
        return self._api[project]

    async def submit(self, project: str, name: str, commands: list[str], **resources: str) -> RunRecord:
        conf = configuration(commands, {**SHARED, **resources})
        return await self.api(project).submit(conf, repo_dir=self.repo, run_name=name)

    async def submit_through_api(
        self, project: str, name: str, commands: list[str], **resources: str
    ) -> RunRecord:
        """As `ferry apply` does through Ferry's API (docs/teams.md#runs): the code packed, the submission
        sent (and the code first where the API lacks it), to the stack's API with the home's user's token."""
        conf = with_environment(configuration(commands, {**SHARED, **resources}))
        archive, code_name = await asyncio.to_thread(packed_code, self.repo, conf)
        http = await self.api_http()
        base = f"/api/projects/{project}"
        body = submission_body(conf, name, code_hash(archive), code_name, [])
        status, headers, answer = await _post(http, f"{base}/runs", json=body)
        if headers.get(CODE_NEEDED):  # the code first, as the CLI sends it (cli/remote_runs.py)
            octets = {"Content-Type": "application/octet-stream"}
            sent, _, why = await _post(http, f"{base}/code", data=archive, headers=octets)
            if sent != 201:
                raise RuntimeError(f"the API answered {sent} to the code: {why}")
            status, _, answer = await _post(http, f"{base}/runs", json=body)
        if status != 201:
            raise RuntimeError(f"the API answered {status}: {answer}")
        return RunRecord.model_validate(json.loads(answer)["run"])

    async def api_http(self) -> aiohttp.ClientSession:
        """One client of the stack's API for the whole bench, as the home's user (its first: an admin).
        aiohttp, as the services section's load: httpx's AsyncClient, with 64 requests in flight, made
        the burst's submissions 52/s where the API serves 150/s (docs/teams.md#the-apis-cost)."""
        if self._http is None:
            from cli.login_file import default_user
            from cli.services import TOKEN_FILE, user_token

            url = next(p.address for p in self.stack.status().processes if p.name == "api")
            assert url is not None, "the stack serves no API"
            token = await asyncio.to_thread(user_token, self.store, self.home / TOKEN_FILE, default_user())
            if self._http is not None:  # another request of the burst made it meanwhile
                return self._http
            self._http = aiohttp.ClientSession(
                url,
                headers={"Authorization": f"Bearer {token}"},
                timeout=aiohttp.ClientTimeout(total=120),
                connector=aiohttp.TCPConnector(limit=64),
            )
        return self._http

    async def result(self, record: RunRecord) -> None:
        await self._client.get_workflow_handle(record.workflow_id).result()

    async def history_events(self, workflow_id: str) -> int:
        """How many events a workflow's history holds (what Temporal stores and replays for it)."""
        history = await self._client.get_workflow_handle(workflow_id).fetch_history()
        return len(history.events)

    async def run_events(self, record: RunRecord) -> tuple[int, int]:
        """A finished single-job run's history events: (its run workflow's, its job workflow's)."""
        job = job_workflow_id(record.workflow_id, 0, 0, 0)
        return await self.history_events(record.workflow_id), await self.history_events(job)

    async def skeleton_events(self) -> tuple[int, int] | None:
        """The same for a run of ../shared/peers/temporal_skeleton.py (its RunWF and its child)."""
        async for execution in self._client.list_workflows("WorkflowType = 'RunWF'", limit=1):
            wf = execution.id
            return await self.history_events(wf), await self.history_events(f"{wf}/j0")
        return None

    def start_event(self, record: RunRecord) -> float | None:
        for job in self.store.list_job_submissions(record.id):
            for event in self.api(record.project).job_events(record, job.id):
                if event.name == "start":
                    return event.timestamp
        return None

    # --- latency ----------------------------------------------------------------------------------

    async def latency_sample(self, index: int, *, through_api: bool = False) -> tuple[float, float, float]:
        """One trivial run: (submit -> RUNNING, submit -> process start, submit -> DONE) in seconds;
        submitted by the direct path (cli.api.FerryAPI), or as `ferry apply` does, through the API."""
        name = f"lat-{index}-{secrets.token_hex(2)}"
        mark = self.marks / f"start.{name}"
        submit = self.submit_through_api if through_api else self.submit
        started = time.time()
        record = await submit("latency", name, [f"date +%s.%N > {mark}"])
        await self.result(record)
        done = time.time()
        final = await asyncio.to_thread(self.store.get_run, record.id)
        assert final is not None and final.status == RunStatus.DONE, final and final.status
        start = await asyncio.to_thread(self.start_event, record)
        assert start is not None
        self.last_latency_run = record
        self.latency_runs.append((record, started))
        return start - started, float(mark.read_text()) - started, done - started

    # --- throughput -------------------------------------------------------------------------------

    async def slot_memory(self, slots: int) -> str:
        """The memory request that lets at most `slots` jobs run at once on the local instance (Slurm's
        job slots, for the queued bursts)."""
        from activities.agent_client import AgentClient
        from embedded.local_agent import ensure_local_agent

        agent = await asyncio.to_thread(ensure_local_agent, self.home)
        async with AgentClient(agent.url, agent.token) as client:
            total = (await client.instance_info()).total
        share_mib = int(total.memory * 1024) // slots
        return f"{share_mib / 1024}GB.."

    async def burst(
        self, count: int, tag: str, *, through_api: bool = False, **resources: str
    ) -> BurstResult:
        """`count` trivial runs submitted at once (by the direct path, or through the API); until all have
        finished (or 10 min have passed)."""
        project = f"burst-{tag}"
        submitted: dict[str, float] = {}
        submit = self.submit_through_api if through_api else self.submit

        async def one(index: int) -> None:
            at = time.time()
            record = await submit(project, f"b{index}", ["true"], **resources)
            submitted[record.id] = at

        cpu = self.cpu_times()
        written = self.temporal_written()
        counters = await asyncio.to_thread(temporal_counters.read, self.metrics_url())
        t0 = time.time()
        await asyncio.gather(*(one(i) for i in range(count)))
        t1 = time.time()
        finished: dict[str, tuple[str, float]] = {}
        deadline = time.monotonic() + 600
        while len(finished) < count and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
            for run_id, status, at in await asyncio.to_thread(self._finished_runs, project):
                finished[run_id] = (status, at)
        per_run = [at - submitted[run_id] for run_id, (_, at) in finished.items() if run_id in submitted]
        last = max((at for _, at in finished.values()), default=time.time())
        return BurstResult(
            submit_s=t1 - t0,
            all_done_s=last - t0,
            completed=sum(1 for status, _ in finished.values() if status == RunStatus.DONE),
            failed=sum(1 for status, _ in finished.values() if status != RunStatus.DONE),
            per_run_s=per_run,
            cpu_s={name: self.cpu_times()[name] - used for name, used in cpu.items()},
            temporal_written_mb=_minus(self.temporal_written(), written),
            temporal_counts=await asyncio.to_thread(temporal_counters.since, counters, self.metrics_url()),
        )

    def metrics_url(self) -> str | None:
        """Where the stack's dev server serves its Prometheus counters."""
        return self.stack.status().metrics_url

    def temporal_written(self) -> float | None:
        """MB that Temporal's process has written to storage so far (its SQLite database and journal)."""
        written = written_bytes(self.pid("temporal"))
        return None if written is None else written / 1e6

    def pids(self, name: str) -> list[int | None]:
        """The stack's process `name`, and for "worker" the extra workers too (their figures are summed)."""
        return [self.pid(name), *(self.extra_workers.pids if name == "worker" else [])]

    def cpu_times(self) -> dict[str, float]:
        names = ("worker", "temporal", "agent")
        return {name: sum(cpu_seconds(pid) or 0.0 for pid in self.pids(name)) for name in names}

    async def array(self, count: int, parallel: int) -> BurstResult:
        """One array task of `count` elements of `true`, `parallel` at once (docs/runs.md#arrays); until its
        run has finished (or 10 min have passed). Each element's time is its submit -> its job's end."""
        project = "array"
        raw = {"type": "task", "commands": ["true"], "resources": SHARED}
        conf = parse_configuration({**raw, "array": {"count": count, "max_parallel": parallel}})
        assert isinstance(conf, TaskConfiguration)
        cpu = self.cpu_times()
        written = self.temporal_written()
        t0 = time.time()
        record = await self.api(project).submit(conf, repo_dir=self.repo, run_name="array")
        t1 = time.time()
        deadline = time.monotonic() + 600
        while not await asyncio.to_thread(self._finished_runs, project) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        finished = await asyncio.to_thread(self._finished_runs, project)
        last = finished[0][2] if finished else time.time()
        jobs = await asyncio.to_thread(self.store.list_job_submissions, record.id)
        done = [job for job in jobs if job.status == "done"]
        return BurstResult(
            submit_s=t1 - t0,
            all_done_s=last - t0,
            completed=len({job.replica_num for job in done}),
            failed=count - len({job.replica_num for job in done}),
            per_run_s=[(job.finished_at or last) - job.submitted_at for job in done],
            cpu_s={name: self.cpu_times()[name] - used for name, used in cpu.items()},
            temporal_written_mb=_minus(self.temporal_written(), written),
        )

    def _finished_runs(self, project: str) -> list[tuple[str, str, float]]:
        runs = RunRecord.__table__.c  # type: ignore[attr-defined]
        statement = sa.select(runs.id, runs.status, runs.finished_at, runs.updated_at).where(
            runs.project == project, runs.status.in_(FINISHED_RUN)
        )
        with self.store.engine.connect() as connection:
            return [(row[0], row[1], row[2] or row[3]) for row in connection.execute(statement)]

    def count_jobs(self, project: str, statuses: list[str]) -> int:
        runs = RunRecord.__table__.c  # type: ignore[attr-defined]
        jobs = JobSubmissionRecord.__table__.c  # type: ignore[attr-defined]
        statement = (
            sa.select(sa.func.count())
            .select_from(_table(JobSubmissionRecord).join(_table(RunRecord), runs.id == jobs.run_id))
            .where(runs.project == project, jobs.status.in_(statuses))
        )
        with self.store.engine.connect() as connection:
            return int(connection.execute(statement).scalar() or 0)

    def count_runs(self, project: str, finished: bool) -> int:
        runs = RunRecord.__table__.c  # type: ignore[attr-defined]
        where = runs.status.in_(FINISHED_RUN) if finished else runs.status.not_in(FINISHED_RUN)
        statement = sa.select(sa.func.count()).where(runs.project == project, where)
        with self.store.engine.connect() as connection:
            return int(connection.execute(statement).scalar() or 0)


def configuration(commands: list[str], resources: dict[str, str]) -> RunConfiguration:
    conf = parse_configuration({"type": "task", "commands": commands, "resources": resources})
    assert isinstance(conf, TaskConfiguration)
    return conf


def _table(model: type[Any]) -> sa.Table:
    table: sa.Table = model.__table__
    return table


def _minus(after: float | None, before: float | None) -> float | None:
    return None if after is None or before is None else after - before


async def _post(http: aiohttp.ClientSession, path: str, **kwargs: Any) -> tuple[int, Mapping[str, str], str]:
    """One POST to the API: its status, headers and body."""
    async with http.post(path, **kwargs) as answer:
        return answer.status, answer.headers, await answer.text()
