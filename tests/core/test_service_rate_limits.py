"""A service's `rate_limits`, validated as dstack documents them (docs/services.md#rate-limits), and a
model's `format: tgi`, refused before submission (core.configuration.runnable)."""

from __future__ import annotations

import textwrap

import pytest

from core.configuration import ServiceConfiguration
from core.configuration.loading import ConfigurationError, LoadedConfiguration, load_configuration_text
from core.configuration.service import HeaderKey, IPAddressKey, RateLimit

SERVICE = "type: service\nport: 8000\ncommands: [serve]\n"


def loaded(extra: str) -> LoadedConfiguration:
    return load_configuration_text(SERVICE + textwrap.dedent(extra).lstrip("\n"), "web.yml")


def errors(extra: str) -> list[str]:
    with pytest.raises(ConfigurationError) as raised:
        loaded(extra)
    return str(raised.value).splitlines()


def test_dstacks_documented_limits_are_taken_and_acted_on() -> None:
    configuration = loaded(
        """
        rate_limits:
        # For /api/auth/* - 1 request per second, no bursts
        - prefix: /api/auth/
          rps: 1
        # For other URLs - 4 requests per second + bursts of up to 9 requests
        - rps: 4
          burst: 9
        - prefix: /v1/
          rps: 0.5
          key:
            type: header
            header: Authorization
        """
    )
    service = configuration.configuration
    assert isinstance(service, ServiceConfiguration)
    assert service.rate_limits == [
        RateLimit(prefix="/api/auth/", rps=1.0),
        RateLimit(prefix="/", key=IPAddressKey(), rps=4.0, burst=9),
        RateLimit(prefix="/v1/", key=HeaderKey(header="Authorization"), rps=0.5),
    ]
    assert service.unsupported_fields() == []  # no longer in the warning line
    assert configuration.refusals() == []
    # The proxy reads them back from the run's configuration JSON.
    assert service.model_dump(mode="json")["rate_limits"][2] == {
        "prefix": "/v1/",
        "key": {"type": "header", "header": "Authorization"},
        "rps": 0.5,
        "burst": 0,
    }


@pytest.mark.parametrize(
    ("extra", "error"),
    [
        (
            "rate_limits:\n- rps: 0\n",
            "web.yml:5: rate_limits.0.rps: should be at least 1/60 (a request a minute), got 0",
        ),
        ("rate_limits:\n- {}\n", "web.yml:5: rate_limits.0.rps: required field is missing"),
        (
            "rate_limits:\n- rps: 1\n  burst: -1\n",
            "web.yml:6: rate_limits.0.burst: should be greater than or equal to 0, got -1",
        ),
        (
            "rate_limits:\n- rps: 1\n  prefix: api/\n",
            "web.yml:6: rate_limits.0.prefix: invalid prefix 'api/': a path starting with / (no spaces, "
            "backslashes or braces, 4094 characters at most)",
        ),
        (
            "rate_limits:\n- rps: 1\n  prefix: '/a {b}'\n",
            "web.yml:6: rate_limits.0.prefix: invalid prefix '/a {b}': a path starting with / (no spaces, "
            "backslashes or braces, 4094 characters at most)",
        ),
        (
            "rate_limits:\n- rps: 1\n  key: {type: header}\n",
            "web.yml:6: rate_limits.0.key.header: required field is missing",
        ),
        (
            "rate_limits:\n- rps: 1\n  key: {type: header, header: 'X User'}\n",
            "web.yml:6: rate_limits.0.key.header: invalid header name 'X User': use letters, digits, dashes "
            "and underscores",
        ),
        (
            "rate_limits:\n- rps: 1\n  key: {type: cookie}\n",
            "web.yml:6: rate_limits.0.key: expected {type: ip_address} or {type: header, header: NAME}",
        ),
        (
            "rate_limits:\n- rps: 1\n  key: {type: ip_address, header: X}\n",
            "web.yml:6: rate_limits.0.key.header: unknown field",
        ),
        (
            "rate_limits:\n- rps: 1\n- {prefix: /, rps: 2}\n",
            "web.yml:6: rate_limits.1.prefix: / has a limit already: give each prefix one limit",
        ),
        ("rate_limits: {rps: 1}\n", "web.yml:4: rate_limits: should be a valid list"),
    ],
)
def test_a_wrong_limit_is_named_with_its_line_and_field(extra: str, error: str) -> None:
    assert errors(extra) == [error]


def test_a_tgi_model_is_refused_in_one_line_before_submission() -> None:
    configuration = loaded("model:\n  name: llama\n  format: tgi\n  chat_template: '{{ x }}'\n")
    issues = configuration.refusals()
    assert [str(issue) for issue in issues] == [
        "web.yml:6: model.format: tgi: Ferry's proxy serves models OpenAI-style only; serve an "
        "OpenAI-compatible API (TGI has one at /v1) and set format: openai"
    ]
    with pytest.raises(ConfigurationError):
        configuration.ensure_runnable()


@pytest.mark.parametrize("model", ["model: llama\n", "model: {name: llama, format: openai, prefix: /v1}\n"])
def test_an_openai_model_runs(model: str) -> None:
    assert loaded(model).refusals() == []


def test_tgi_fields_belong_to_tgi_models() -> None:
    assert errors("model: {name: llama, eos_token: '</s>'}\n") == [
        "web.yml:4: model.eos_token: a field of `format: tgi` models only"
    ]
