"""A job's secrets filled in at the last moment (docs/secrets.md): by the steps that send the job to its agent
(activities/jobs.py: PREPARE_TASK its registry credentials, START_JOB its `env` and its repos' credentials),
from the store, opened with Ferry's key. Nothing before them holds a value: the workflows and their history
carry the references.

What leaves here holds no value either: a failure's message is masked (core.secrets.mask) before Temporal
and the worker's log see it, and every log record of this process is (core.secrets.LOG_MASKING). A secret
that is not set fails the job at once, naming it, as dstack's server does.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Callable, Iterator

from temporalio.exceptions import ApplicationError

from activities.job_tokens import job_api_access
from core.masking import LOG_MASKING, mask
from core.repo_credentials import ssh_key_secret, token_secret
from core.secrets import credentials_secrets, fill_credentials, fill_spec, spec_secrets
from core.status import JobTerminationReason
from core.wire.agent_api import ContainerSpec, JobSpec
from store import RunRecord, SecretRecord, Store
from store.keys import Keys, SealError, process_keys
from store.secret_repository import open_secret

_RUN_OF_JOB = re.compile(r"^(?P<run>.+)-r\d+-j\d+-s\d+$")  # core.wire.workflow_ids.job_submission_id


class SecretFiller:
    def __init__(self, store: Store, keys: Callable[[], Keys] = process_keys) -> None:
        self._store = store
        self._keys = keys
        self._values: set[str] = set()  # every value this process has opened: what `masking` hides

    async def spec(self, job_submission_id: str, spec: JobSpec, api_access: bool | None = None) -> JobSpec:
        """The spec with its secrets' values, its repos' credentials, and its access to Ferry's API if
        `api_access` (None: if its run's stored configuration asks for it, for a start told before the
        workflows said so; False spares an array's every element a read of its run)."""
        names = spec_secrets(spec)
        if names:
            spec = fill_spec(spec, await self._open(job_submission_id, names))
        if spec.repos:
            spec = await self._repo_credentials(job_submission_id, spec)
        if api_access is False:
            return spec
        return await asyncio.to_thread(self._api_access, job_submission_id, spec)

    def _api_access(self, job_submission_id: str, spec: JobSpec) -> JobSpec:
        """FERRY_API_URL, FERRY_PROJECT and a token of its own for a job whose run has `dstack: true`
        (activities/job_tokens.py); the token masked like a secret."""
        run = self._run(job_submission_id)
        try:
            access = job_api_access(self._store, run)
        except ValueError as err:
            raise ApplicationError(
                str(err), type=JobTerminationReason.TERMINATED_BY_SERVER.name, non_retryable=True
            ) from None
        if access is None:
            return spec
        env, secret_env = access
        self._values.update(secret_env.values())
        LOG_MASKING.add(secret_env.values())
        return spec.model_copy(update={"env": {**spec.env, **env}, "secrets": {**spec.secrets, **secret_env}})

    async def _repo_credentials(self, job_submission_id: str, spec: JobSpec) -> JobSpec:
        """Each cloned repo's token or SSH key, when the project holds one for its URL (`ferry secret
        repo`, docs/runs.md#private-repos); none for a public repo."""
        wanted = sorted({name for r in spec.repos for name in (token_secret(r.url), ssh_key_secret(r.url))})
        project = await asyncio.to_thread(self._project, job_submission_id)
        records = await asyncio.to_thread(self._store.list_secrets, project, wanted)
        if not records:
            return spec
        values = self._opened(records, "the credentials of the job's repos")
        # A key's lines each masked too: a log may quote one line of it.
        lines = [line for value in values.values() for line in value.splitlines()]
        self._values.update(lines)
        LOG_MASKING.add(lines)
        repos = [
            repo.model_copy(
                update={
                    "token": values.get(token_secret(repo.url)),
                    "ssh_key": values.get(ssh_key_secret(repo.url)),
                }
            )
            for repo in spec.repos
        ]
        return spec.model_copy(update={"repos": repos})

    async def container(
        self, job_submission_id: str, container: ContainerSpec | None
    ) -> ContainerSpec | None:
        names = credentials_secrets(container.registry_auth if container is not None else None)
        if not names:
            return container
        assert container is not None and container.registry_auth is not None  # it names secrets
        credentials = fill_credentials(container.registry_auth, await self._open(job_submission_id, names))
        return container.model_copy(update={"registry_auth": credentials})

    @contextlib.contextmanager
    def masking(self) -> Iterator[None]:
        """An error raised inside says what it says with every value masked, and without its cause (whose
        message may hold one), before Temporal or a log gets it."""
        try:
            yield
        except Exception as err:
            message = str(err)
            masked = mask(message, self._values)
            if masked == message:
                raise
            if isinstance(err, ApplicationError):
                raise ApplicationError(masked, type=err.type, non_retryable=err.non_retryable) from None
            raise ApplicationError(masked, type=type(err).__name__) from None

    async def _open(self, job_submission_id: str, names: list[str]) -> dict[str, str]:
        return await self.open_in(await asyncio.to_thread(self._project, job_submission_id), names)

    async def open_in(self, project: str, names: list[str]) -> dict[str, str]:
        """The values of `names` in `project`; a non-retryable ApplicationError if one is not set."""
        records = await asyncio.to_thread(self._store.list_secrets, project, names)
        missing = sorted(set(names) - {record.name for record in records})
        if missing:
            raise ApplicationError(
                f"secret{'s' if len(missing) > 1 else ''} {', '.join(missing)} not set in project "
                f"{project} (ferry secret set NAME)",
                type=JobTerminationReason.TERMINATED_BY_SERVER.name,
                non_retryable=True,
            )
        return self._opened(records, "the job's secrets")

    def _opened(self, records: list[SecretRecord], what: str) -> dict[str, str]:
        """The records' values by name, each masked from now on in what this process logs or raises; a
        non-retryable ApplicationError naming `what` when Ferry's key cannot open them."""
        try:
            keys = self._keys()
            values = {record.name: open_secret(keys, record) for record in records}
        except SealError as err:
            raise ApplicationError(
                f"cannot open {what}: {err}",
                type=JobTerminationReason.TERMINATED_BY_SERVER.name,
                non_retryable=True,
            ) from None
        self._values.update(values.values())
        LOG_MASKING.add(values.values())
        return values

    def _project(self, job_submission_id: str) -> str:
        return self._run(job_submission_id).project

    def _run(self, job_submission_id: str) -> RunRecord:
        matched = _RUN_OF_JOB.match(job_submission_id)
        run = self._store.get_run(matched["run"]) if matched else None
        if run is None:  # written before the run's workflow starts: a retry finds it
            raise ApplicationError(f"the run of job {job_submission_id} is not in the store")
        return run
