"""A job's secrets filled in by the steps that send it to its agent (activities/secrets.py), from a real
store: a secret not set fails the job at once, naming it; an error never carries a value out."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError

from activities.secrets import SecretFiller
from core.wire.agent_api import ContainerSpec, JobSpec, RegistryCredentials
from store import RunRecord, Store, open_store
from store.keys import keys_of
from store.secret_repository import seal_secret

KEYS = keys_of([bytes(range(32))])
JOB = "train-1a2b3c4d-r0-j1-s2"  # core.wire.workflow_ids.job_submission_id of run train-1a2b3c4d


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = open_store(f"sqlite:///{tmp_path / 'ferry.db'}")
    opened.put_run(
        RunRecord(id="train-1a2b3c4d", project="p", run_name="train", user="u", type="task", status="running",
                  workflow_id="ferry/p/train")
    )  # fmt: skip
    opened.put_secret(seal_secret(KEYS, "p", "HF_TOKEN", "hf_value-123"))
    opened.put_secret(seal_secret(KEYS, "other", "NGC", "not this project's"))
    yield opened
    opened.engine.dispose()


async def test_the_env_and_the_registry_credentials_are_filled_in(store: Store) -> None:
    filler = SecretFiller(store, lambda: KEYS)
    spec = JobSpec(run_name="train", env={"HF_TOKEN": "${{ secrets.HF_TOKEN }}", "PLAIN": "v"})
    filled = await filler.spec(JOB, spec)
    assert (filled.env, filled.secrets) == ({"PLAIN": "v"}, {"HF_TOKEN": "hf_value-123"})
    plain = JobSpec(run_name="train", env={"PLAIN": "v"})
    assert await filler.spec(JOB, plain) is plain  # nothing named: the store is not even read
    credentials = RegistryCredentials(username="$oauthtoken", password="${{ secrets.HF_TOKEN }}")
    container = await filler.container(JOB, ContainerSpec(image="i", registry_auth=credentials))
    assert container is not None and container.registry_auth == RegistryCredentials(
        username="$oauthtoken", password="hf_value-123"
    )


async def test_a_secret_not_set_in_the_run_s_project_fails_the_job_naming_it(store: Store) -> None:
    spec = JobSpec(run_name="train", env={"A": "${{ secrets.NGC }}", "B": "${{ secrets.WANDB }}"})
    with pytest.raises(ApplicationError) as refused:
        await SecretFiller(store, lambda: KEYS).spec(JOB, spec)
    assert (refused.value.type, refused.value.non_retryable) == ("TERMINATED_BY_SERVER", True)
    assert refused.value.message == "secrets NGC, WANDB not set in project p (ferry secret set NAME)"


async def test_a_key_that_does_not_open_the_secret_fails_the_job_saying_so(store: Store) -> None:
    spec = JobSpec(run_name="train", env={"A": "${{ secrets.HF_TOKEN }}"})
    with pytest.raises(ApplicationError, match="cannot open the job's secrets: sealed with key") as refused:
        await SecretFiller(store, lambda: keys_of([bytes(32)])).spec(JOB, spec)
    assert refused.value.non_retryable


async def test_an_error_leaves_with_every_value_masked_and_no_cause(store: Store) -> None:
    filler = SecretFiller(store, lambda: KEYS)
    await filler.spec(JOB, JobSpec(run_name="train", env={"A": "${{ secrets.HF_TOKEN }}"}))
    with pytest.raises(ApplicationError) as masked, filler.masking():
        try:
            raise ValueError("bad env: A=hf_value-123")
        except ValueError as err:
            raise RuntimeError(f"the agent refused: {err}") from err
    assert masked.value.message == "the agent refused: bad env: A=***"
    assert masked.value.type == "RuntimeError" and masked.value.__cause__ is None
    kept = ApplicationError("waiting for capacity", type="WaitingForCapacity")
    with pytest.raises(ApplicationError) as same, filler.masking():
        raise kept
    assert same.value is kept


async def test_a_start_told_the_run_calls_no_api_does_not_read_the_run(store: Store) -> None:
    """JobInput.api_access False (an array's every element): no read of the run, which a start told
    nothing (None, a workflow from before) needs and misses here."""
    filler = SecretFiller(store, lambda: KEYS)
    spec = JobSpec(run_name="train", env={"PLAIN": "v"})
    unknown_run = "gone-1a2b3c4d-r0-j0-s0"
    assert await filler.spec(unknown_run, spec, api_access=False) is spec
    with pytest.raises(ApplicationError, match="is not in the store"):
        await filler.spec(unknown_run, spec)
