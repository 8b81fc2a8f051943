"""A job's access to Ferry's API, for a run with `dstack: true` (also spelled `ferry: true`;
docs/teams.md#a-jobs-token): at its start, the job gets FERRY_API_URL, FERRY_PROJECT and FERRY_TOKEN, a
token made here and kept in the store as its hash. It opens the API as the run's user, in the run's project
only, as a project `user` (submit and read runs), while the run is active (store.team_repository). The token
goes to the agent as a secret does (kept in memory, masked in logs), never through a workflow's history."""

from __future__ import annotations

import secrets

from core.configuration import BaseRunConfiguration
from core.services.replicas import token_hash
from core.settings import Settings
from store import RunRecord, Store

NO_API_URL = (
    "dstack: true needs the address jobs reach Ferry's API at: set FERRY_JOB_API_URL for the workers and "
    "the API (docs/teams.md#a-jobs-token)"
)


def wants_api(configuration: BaseRunConfiguration | None) -> bool:
    """`dstack: true`, or `ferry: true`: the job calls Ferry's API."""
    return configuration is not None and configuration.calls_api()


def job_api_access(store: Store, run: RunRecord) -> tuple[dict[str, str], dict[str, str]] | None:
    """The job's env and its secret env (the token) when its run wants the API; None when it does not.
    ValueError (NO_API_URL) where this deployment gives jobs no address for it."""
    try:
        configuration = run.run_configuration()
    except ValueError:  # a stored configuration of another release: it asked for nothing new
        return None
    if not wants_api(configuration):
        return None
    url = Settings.from_env().job_api_url
    if url is None:
        raise ValueError(NO_API_URL)
    token = secrets.token_urlsafe(32)
    store.put_run_token(token_hash(token), run.id, run.project, run.user)
    return {"FERRY_API_URL": url, "FERRY_PROJECT": run.project}, {"FERRY_TOKEN": token}
