"""A project's runs as the CLI reaches them: through Ferry's API with the user's token (docs/teams.md#runs).

`RunReader` answers the store reads (store.run_reads.RunReads) that `ps`, `logs`, `events`, `stop` and
`apply`'s following make, with the store's own records, so that what they show is what they showed when
they read the store itself;
`RemoteRuns` starts, checks, stops and re-applies runs. Neither holds Temporal's address or the payload
codec's key: the API does (api/temporal.py)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

import httpx

from api.messages import DeletedRun, DeployedRun, LiveAsk, LiveNews, RunPlan, StoredCode, SubmittedRun
from cli import exit_codes
from cli.api_client import CODE_NEEDED, TIMEOUT, login, refusal
from cli.code_archive import packed_code, with_environment
from cli.errors import CommandError
from cli.run_names import generated_name
from core.configuration import RunConfiguration
from core.wire.run_messages import DeployRequest, StopReply, StopRequest
from store import EventRecord, JobSubmissionRecord, RunRecord
from store.repository import code_hash
from store.run_reads import RunReads

NEXT_OFFSET = "X-Ferry-Next-Offset"  # api/run_reads.py


class RunsClient(Protocol):
    """What the run commands do with a project's runs: through the API (`RemoteRuns`), or an operator's
    CLI itself (cli.direct_runs.DirectRuns)."""

    project: str

    @property
    def store(self) -> RunReads: ...
    async def submit(
        self, configuration: RunConfiguration, *, repo_dir: Path, run_name: str | None = None
    ) -> SubmittedRun: ...
    def plan(self, configuration: RunConfiguration) -> RunPlan: ...
    async def check(self, name: str, configuration: RunConfiguration) -> None: ...
    async def stop(self, run_name: str, *, abort: bool = False) -> StopReply: ...
    async def delete(self, ref: str) -> DeletedRun: ...
    async def deploy(self, run_name: str, configuration: RunConfiguration) -> DeployedRun: ...
    def live(self, ask: LiveAsk) -> LiveNews: ...
    async def wait(self, run_name: str) -> RunRecord: ...


class ApiSession:
    """One connection to the API as the logged-in user (cli/api_client.py `login`), shared by the threads
    a command reads from."""

    def __init__(self, url: str | None = None, token: str | None = None) -> None:
        if url is None or token is None:
            url, token = login()
        self.url = url
        self._client = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=TIMEOUT, trust_env=False
        )

    def request(self, method: str, path: str, allow: str | None = None, **kwargs: Any) -> httpx.Response:
        """The answer to one call; a refusal raises CommandError with its line and exit code, but one that
        carries the header `allow` names (it is answered)."""
        try:
            answer = self._client.request(method, path, **kwargs)
        except httpx.TransportError as err:
            from cli.errors import CommandError

            raise CommandError(
                f"cannot reach Ferry's API at {self.url}: {err}", exit_codes.UNREACHABLE
            ) from None
        if answer.status_code >= 300 and not (allow and answer.headers.get(allow)):
            raise refusal(answer)
        return answer

    def found(self, path: str, **params: Any) -> Any:
        """The JSON at `path`; None where the API answers 404."""
        try:
            answer = self._client.get(path, params=params)
        except httpx.TransportError as err:
            from cli.errors import CommandError

            raise CommandError(
                f"cannot reach Ferry's API at {self.url}: {err}", exit_codes.UNREACHABLE
            ) from None
        if answer.status_code == 404:
            return None
        if answer.status_code >= 300:
            raise refusal(answer)
        return answer.json()

    def submit_with_code(self, base: str, path: str, body: Any, archive: bytes, name: str) -> Any:
        """A submission's answer (JSON), its code sent first where the API lacks it (a changed one): a
        `409` with CODE_NEEDED asks for it, then the submission goes again (api/temporal.py)."""
        for attempt in range(2):
            answer = self.request("POST", f"{base}{path}", json=body, allow=CODE_NEEDED)
            if not answer.headers.get(CODE_NEEDED):
                return answer.json()
            if attempt == 0:
                octets = {"Content-Type": "application/octet-stream"}
                sent = self.request("POST", f"{base}/code", content=archive, headers=octets)
                StoredCode.model_validate(sent.json())
        raise CommandError(f"run {name}: Ferry's API lost its code as it was sent: apply again")

    def close(self) -> None:
        self._client.close()


class RunReader:
    """The store's reads of one project's runs, answered by the API (api/run_reads.py)."""

    def __init__(self, session: ApiSession, project: str) -> None:
        self.session = session
        self.project = project
        self._base = f"/api/projects/{quote(project, safe='')}"

    def _runs(self, path: str, **params: Any) -> Any:
        return self.session.request("GET", f"{self._base}{path}", params=params).json()

    def find_run(self, project: str, run_name: str) -> RunRecord | None:
        found = self.session.found(f"/api/projects/{quote(project, safe='')}/runs/{quote(run_name, safe='')}")
        return None if found is None else RunRecord.model_validate(found)

    def get_run(self, run_id: str) -> RunRecord | None:
        found = self.session.found(f"{self._base}/runs/{quote(run_id, safe='')}", by_id=True)
        return None if found is None else RunRecord.model_validate(found)

    def list_runs(
        self, project: str | None = None, active_only: bool = False, limit: int = 100
    ) -> list[RunRecord]:
        rows = self.session.request(
            "GET",
            f"/api/projects/{quote(project or self.project, safe='')}/runs",
            params={"active_only": active_only, "limit": limit},
        ).json()
        return [RunRecord.model_validate(row) for row in rows]

    def runs_with_jobs(
        self, project: str, *, active_only: bool, limit: int
    ) -> list[tuple[RunRecord, list[JobSubmissionRecord]]]:
        """`ferry ps`'s rows in one request (store.run_reads.runs_with_jobs, answered by the API)."""
        path = f"/api/projects/{quote(project, safe='')}/table"
        rows = self.session.request("GET", path, params={"active_only": active_only, "limit": limit}).json()
        return [
            (RunRecord.model_validate(r["run"]), [JobSubmissionRecord.model_validate(j) for j in r["jobs"]])
            for r in rows
        ]

    def list_pipeline_tasks(self, pipeline_id: str) -> list[RunRecord]:
        return [RunRecord.model_validate(r) for r in self._runs(f"/runs/{quote(pipeline_id, safe='')}/tasks")]

    def list_job_submissions(self, run_id: str) -> list[JobSubmissionRecord]:
        rows = self._runs(f"/runs/{quote(run_id, safe='')}/jobs")
        return [JobSubmissionRecord.model_validate(row) for row in rows]

    def read_events(
        self, run_id: str, job_submission_id: str | None, after_seq: int = -1
    ) -> list[EventRecord]:
        params: dict[str, Any] = {"after": after_seq}
        if job_submission_id:
            params["job"] = job_submission_id
        return [
            EventRecord.model_validate(r)
            for r in self._runs(f"/runs/{quote(run_id, safe='')}/events", **params)
        ]

    def read_all_events(self, run_id: str) -> list[EventRecord]:
        rows = self._runs(f"/runs/{quote(run_id, safe='')}/events", every=True)
        return [EventRecord.model_validate(r) for r in rows]

    def read_log(self, job_submission_id: str, offset: int = 0) -> tuple[bytes, int]:
        answer = self.session.request(
            "GET", f"{self._base}/jobs/{job_submission_id}/log", params={"offset": offset}
        )
        return answer.content, int(answer.headers[NEXT_OFFSET])

    def log_offset_since(self, job_submission_id: str, since: float) -> int | None:
        answer = self.session.request(
            "GET", f"{self._base}/jobs/{job_submission_id}/log", params={"since": since}
        )
        return int(answer.headers[NEXT_OFFSET]) - len(answer.content)


class RemoteRuns:
    """Runs started, checked, stopped and re-applied through the API (api/run_changes.py); `store`, the
    project's runs as it reads them."""

    def __init__(self, session: ApiSession, project: str, authorized_keys: list[str] | None = None) -> None:
        self.session = session
        self.project = project
        self.store = RunReader(session, project)
        self.authorized_keys = authorized_keys or []
        self._base = f"/api/projects/{quote(project, safe='')}"

    def _post(self, path: str, body: Any) -> Any:
        answer = self.session.request("POST", f"{self._base}{path}", json=body)
        return None if answer.status_code == 204 else answer.json()

    async def submit(
        self, configuration: RunConfiguration, *, repo_dir: Path, run_name: str | None = None
    ) -> SubmittedRun:
        """Its code sent, then the run, as the logged-in user's: its record and what to tell the user."""
        name = run_name or configuration.name or generated_name()
        configuration = with_environment(configuration)
        archive, code_name = await asyncio.to_thread(packed_code, repo_dir, configuration)
        body = submission_body(configuration, name, code_hash(archive), code_name, self.authorized_keys)
        answer = await asyncio.to_thread(
            self.session.submit_with_code, self._base, "/runs", body, archive, name
        )
        return SubmittedRun.model_validate(answer)

    def plan(self, configuration: RunConfiguration) -> RunPlan:
        body = {"configuration": json.loads(configuration.model_dump_json())}
        return RunPlan.model_validate(self._post("/plans", body))

    async def check(self, name: str, configuration: RunConfiguration) -> None:
        """What a submission of this name would be refused for first, said (CommandError) before an active
        run of the name is stopped."""
        body = {"configuration": json.loads(configuration.model_dump_json())}
        await asyncio.to_thread(self._post, f"/runs/{quote(name, safe='')}/checks", body)

    async def delete(self, ref: str) -> DeletedRun:
        answer = await asyncio.to_thread(
            self.session.request, "DELETE", f"{self._base}/runs/{quote(ref, safe='')}"
        )
        return DeletedRun.model_validate(answer.json())

    async def stop(self, run_name: str, *, abort: bool = False) -> StopReply:
        body = json.loads(StopRequest(abort=abort).model_dump_json())
        return StopReply.model_validate(
            await asyncio.to_thread(self._post, f"/runs/{quote(run_name, safe='')}/stop", body)
        )

    async def deploy(self, run_name: str, configuration: RunConfiguration) -> DeployedRun:
        body = json.loads(DeployRequest(configuration=configuration).model_dump_json())
        answer = await asyncio.to_thread(self._post, f"/runs/{quote(run_name, safe='')}/deploy", body)
        return DeployedRun.model_validate(answer)

    def live(self, ask: LiveAsk) -> LiveNews:
        """What `ferry ps` shows beside the records (api/run_live.py)."""
        return LiveNews.model_validate(self._post("/runs/live", json.loads(ask.model_dump_json())))

    async def wait(self, run_name: str) -> RunRecord:
        return await wait_for_end(self.store, self.project, run_name)


def submission_body(
    configuration: RunConfiguration, name: str, code_hash: str, code_name: str, keys: list[str]
) -> dict[str, Any]:
    """`POST /api/projects/{p}/runs`'s body (api.messages.RunSubmission), as JSON."""
    return {
        "configuration": json.loads(configuration.model_dump_json()),
        "run_name": name,
        "code_hash": code_hash,
        "code_name": code_name,
        "authorized_keys": keys,
    }


async def wait_for_end(store: RunReads, project: str, run_name: str, poll: float = 0.2) -> RunRecord:
    """Until the run has finished; its final record."""
    from core.status import RunStatus

    record = await asyncio.to_thread(store.find_run, project, run_name)
    while record is not None and not RunStatus(record.status).is_finished():
        await asyncio.sleep(poll)
        record = await asyncio.to_thread(store.get_run, record.id) or record
    if record is None:
        from cli.errors import RunNotFound

        raise RunNotFound(f"no run named {run_name!r} in project {project!r}")
    return record


__all__ = ["ApiSession", "RemoteRuns", "RunReader", "RunsClient"]
