"""What the API checks of a submission before it touches the store or Temporal (api/project_runs.py)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from api.messages import RunSubmission
from api.project_runs import ProjectRuns
from cli.errors import FerryError
from core.configuration import parse_configuration


def submission(url: str) -> RunSubmission:
    configuration = parse_configuration(
        {"type": "task", "commands": ["true"], "notifications": [{"url": url}]}
    )
    return RunSubmission(
        configuration=cast(Any, configuration), run_name="hook", code_hash="sha256:0", code_name="x"
    )


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("http://127.0.0.1:9/hook", "loopback"),
        ("http://10.1.2.3/", "private"),
        ("http://localhost/", "loopback"),
    ],
)
def test_a_webhook_to_a_private_address_is_refused_before_anything_is_touched(url: str, kind: str) -> None:
    runs = ProjectRuns(cast(Any, None), None, "p", private_webhooks=False)  # no store, no Temporal
    with pytest.raises(FerryError) as refused:
        asyncio.run(runs.submit(submission(url), user="alice"))
    assert str(refused.value).startswith(f"run hook: notifications: {url}: ")
    assert f"is a {kind} address: refused" in str(refused.value)


def test_where_the_deployment_allows_them_they_go_on() -> None:
    runs = ProjectRuns(cast(Any, None), None, "p", private_webhooks=True)
    with pytest.raises(RuntimeError, match="no Temporal client"):  # past the check, to the run's start
        asyncio.run(runs.submit(submission("http://127.0.0.1:9/hook"), user="alice"))


def test_a_public_host_is_left_to_the_worker_to_resolve_and_check() -> None:
    runs = ProjectRuns(cast(Any, None), None, "p", private_webhooks=False)
    with pytest.raises(RuntimeError, match="no Temporal client"):
        asyncio.run(runs.submit(submission("https://hooks.example.com/x"), user="alice"))
