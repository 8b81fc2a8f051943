"""A fleet's `env` is given to every job placed on it, under the run's own (docs/fleets.md#env): the fleet's
book puts it in each placement, and the job's task gets it beneath the run's `env`. Pure: no Temporal."""

from __future__ import annotations

import pytest

from core.configuration import FleetConfiguration, parse_configuration
from core.fleets.book import FleetBook, deployed, fleet_env
from core.jobs.transitions import prepare_task
from core.runs.lifecycle import submit_run
from core.runs.submissions import job_input
from core.wire.agent_api import ClusterInfo
from core.wire.job_messages import Placement
from tests.core.test_fleets import gang, host, step
from tests.core.test_run_lifecycle import run_input


def fleet(env: object) -> FleetConfiguration:
    data = {"type": "fleet", "name": "lab", "env": env, "ssh_config": {"user": "u", "hosts": ["a"]}}
    configuration = parse_configuration(data)
    assert isinstance(configuration, FleetConfiguration)
    return configuration


def test_bare_names_take_the_appliers_environment_and_one_not_set_is_said() -> None:
    configuration = fleet(["HTTP_PROXY=http://proxy:80", "TOKEN"])
    assert configuration.unsupported_fields() == []  # acted on: no longer in the warning line
    assert configuration.resolved_env({"TOKEN": "t"}) == {"HTTP_PROXY": "http://proxy:80", "TOKEN": "t"}
    with pytest.raises(ValueError, match="env: TOKEN not set in the environment"):
        configuration.resolved_env({})
    assert fleet_env(configuration) == {"HTTP_PROXY": "http://proxy:80"}  # unresolved: left out
    assert fleet_env(None) == {}  # the local fleet has none


def test_each_placement_carries_the_fleets_env() -> None:
    configuration = fleet({"HTTP_PROXY": "http://proxy:80"})
    made = FleetBook(name="h", local=False, env=fleet_env(configuration))
    book, _ = deployed(made, [host(0), host(1)], {})
    _, notices = step(book, gang("a", nodes=2))
    envs = [notice.placement.env for notice in notices if notice.placement is not None]
    assert envs == [{"HTTP_PROXY": "http://proxy:80"}] * 2


def test_the_task_gets_the_fleets_env_under_the_runs() -> None:
    inp = run_input("task", env={"NO_PROXY": "localhost", "MODE": "run"})
    job = job_input(inp, submit_run(inp, 1000.0).machine.state, "ferry/main/train", 0, 0)
    placement = Placement(
        instance_name="h-0", cluster=ClusterInfo(), env={"HTTP_PROXY": "http://proxy:80", "MODE": "fleet"}
    )
    env = prepare_task(job, "job-1", placement, None).env
    assert {key: env[key] for key in ("HTTP_PROXY", "NO_PROXY", "MODE")} == {
        "HTTP_PROXY": "http://proxy:80",
        "NO_PROXY": "localhost",
        "MODE": "run",  # the run's own wins
    }
    assert prepare_task(job, "job-1", placement.model_copy(update={"env": {}}), None).env == job.spec.env
