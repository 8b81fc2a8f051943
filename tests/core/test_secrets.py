"""Secrets in configurations and jobs (core.secrets, docs/secrets.md): which a configuration names, where
they are accepted, how a job's are filled in, and the masking of what Ferry prints."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from core.configuration import parse_configuration
from core.configuration.runnable import refusals
from core.masking import LogMasking, mask
from core.run_types import configurator_for
from core.secrets import (
    check_secret_name,
    check_secret_value,
    configuration_secrets,
    credentials_secrets,
    fill_credentials,
    fill_spec,
    spec_secrets,
)
from core.wire.agent_api import JobSpec, RegistryCredentials


def task(**fields: Any) -> Any:
    return parse_configuration({"type": "task", "commands": ["python train.py"], **fields})


def test_a_configuration_names_the_secrets_of_its_env_and_registry_auth() -> None:
    configuration = task(
        image="nvcr.io/nvidia/pytorch:24.01-py3",
        env=["HF_TOKEN=${{ secrets.hf_token }}", "URL=https://u:${{ secrets.pw }}@host/${{ secrets.pw }}"],
        registry_auth={"username": "$oauthtoken", "password": "${{ secrets.ngc }}"},
    )
    assert configuration_secrets(configuration) == ["hf_token", "ngc", "pw"]
    assert refusals(configuration) == []
    assert configuration_secrets(task(env=["PLAIN=value"])) == []


def test_a_secret_in_commands_is_refused_with_where_it_goes() -> None:
    [refusal] = refusals(task(commands=["huggingface-cli login --token ${{ secrets.hf_token }}"]))
    assert refusal.path == ("commands", "0")
    assert refusal.reason == (
        "${{ secrets.hf_token }} is filled in `env` and `registry_auth` only, as in dstack: "
        "set `env: [NAME=${{ secrets.hf_token }}]` and use $NAME in the command"
    )


def test_the_job_spec_keeps_the_references_until_they_are_filled_in() -> None:
    configuration = task(env=["HF_TOKEN=${{ secrets.hf_token }}", "PLAIN=value", "PRE=a-${{ secrets.x }}-b"])
    spec = configurator_for(configuration).job_spec(run_name="r", replica_num=0, job_num=0)
    assert spec.env["HF_TOKEN"] == "${{ secrets.hf_token }}" and spec.secrets == {}
    assert spec_secrets(spec) == ["hf_token", "x"]
    filled = fill_spec(spec, {"hf_token": "hf_123", "x": "XX"})
    assert filled.env == {"PLAIN": "value"}
    assert filled.secrets == {"HF_TOKEN": "hf_123", "PRE": "a-XX-b"}
    assert fill_spec(JobSpec(run_name="r", env={"A": "b"}), {}) == JobSpec(run_name="r", env={"A": "b"})


def test_registry_credentials_are_filled_in() -> None:
    credentials = RegistryCredentials(username="$oauthtoken", password="${{ secrets.ngc }}")
    assert credentials_secrets(credentials) == ["ngc"]
    assert credentials_secrets(None) == []
    assert fill_credentials(credentials, {"ngc": "nvapi-1"}) == RegistryCredentials(
        username="$oauthtoken", password="nvapi-1"
    )


@pytest.mark.parametrize("name", ["HF_TOKEN", "hf_token", "_x", "a" * 200])
def test_secret_names_a_reference_can_write(name: str) -> None:
    assert check_secret_name(name) == name


@pytest.mark.parametrize("name", ["", "1abc", "hf-token", "a.b", "a" * 201, "é"])
def test_other_secret_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="is not a secret name"):
        check_secret_name(name)


def test_secret_values() -> None:
    assert check_secret_value("x" * 5000) == "x" * 5000
    with pytest.raises(ValueError, match="at most 5000 bytes"):
        check_secret_value("é" * 2501)
    with pytest.raises(ValueError, match="NUL"):
        check_secret_value("a\0b")


def test_mask_hides_every_value_the_longest_first() -> None:
    text = "token=hf_secret_long, again hf_secret_long; part hf_secret, short ab"
    assert mask(text, ["hf_secret", "hf_secret_long", "ab"]) == "token=***, again ***; part ***, short ab"


def test_log_masking_covers_messages_arguments_and_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    masking = LogMasking()
    before = logging.getLogRecordFactory()
    try:
        masking.add(["s3cr3t-value"])
        logger = logging.getLogger("tests.secrets")
        with caplog.at_level(logging.INFO, logger="tests.secrets"):
            logger.info("sending %s to the agent", "s3cr3t-value")
            try:
                raise RuntimeError("refused: s3cr3t-value")
            except RuntimeError:
                logger.exception("it failed")
        assert "s3cr3t-value" not in caplog.text
        assert "sending *** to the agent" in caplog.text and "refused: ***" in caplog.text
    finally:
        logging.setLogRecordFactory(before)
