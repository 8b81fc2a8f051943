"""A service's replica groups (docs/services.md#replica-groups), dstack's `replicas:` list: parsed and
checked, planned per group, submitted with each group's commands and resources, scaled group by group,
and rolled group by group on re-apply."""

from __future__ import annotations

from typing import Any

import pytest

from core.configuration import ServiceConfiguration
from core.configuration.loading import ConfigurationError, load_configuration_text
from core.configuration.runnable import refusals
from core.runs.deploying import Deploy, not_in_place
from core.runs.effects import StartJob, TerminateJob
from core.runs.lifecycle import Inbox, advance, plan_of, submit_run
from core.runs.machine import RunMachine, Step
from core.runs.state_machine import replay_run
from core.runs.status_words import status_message
from core.runs.submissions import job_input
from core.status import JobStatus, JobTerminationReason, RunStatus
from core.wire.agent_api import python_image
from core.wire.services import LoadChange
from tests.core.test_run_lifecycle import T0, finished, keys_of, news, run_input, running, said

R = JobTerminationReason
SCALING = {"target": 10, "scale_up_delay": 30, "scale_down_delay": 60}
GROUPS: list[dict[str, Any]] = [
    {"name": "big", "count": "0..2", "scaling": SCALING, "commands": ["serve big"], "resources": {"cpu": 2}},
    {"replicas": 1, "commands": ["serve small"]},
]


def grouped(groups: list[dict[str, Any]] = GROUPS, **fields: Any) -> Any:
    return run_input("service", replicas=groups, commands=[], **fields)


def load(machine: RunMachine, group: str, desired: int, at: float) -> Step:
    return advance(machine, Inbox(loads=[LoadChange(desired=desired, rps=1.0, group=group)]), at)


def parse_error(text: str) -> str:
    with pytest.raises(ConfigurationError) as error:
        load_configuration_text(text, "svc.yml")
    return str(error.value)


def test_groups_parse_with_names_by_position_and_either_spelling_of_the_count() -> None:
    conf = grouped().configuration
    assert isinstance(conf, ServiceConfiguration)
    assert [(g.name, str(g.replicas), g.commands) for g in conf.groups] == [
        ("big", "0..2", ["serve big"]),
        ("1", "1", ["serve small"]),
    ]
    assert conf.groups[0].resources.cpu != conf.groups[1].resources.cpu  # the second has the service's
    assert conf.summary().scale == "replica groups big 0..2, 1 1"
    assert refusals(conf) == []


@pytest.mark.parametrize(
    ("replicas", "expected"),
    [
        (
            "  - {count: 1, commands: [a]}\n  - {name: '0', count: 2, commands: [b]}\n",
            "svc.yml:5: replicas.1.name: two groups are named '0' (groups 0 and 1)",
        ),
        ("  - {count: 1..2, commands: [a]}\n", "svc.yml:4: replicas.0.count: a range of replicas needs"),
        ("  - {count: 1, replicas: 2, commands: [a]}\n", "give the group's count once"),
        (
            "  - {count: 2, commands: [a], router: {type: sglang}}\n",
            "svc.yml:4: replicas.0.count: a router group",
        ),
        (
            "  - {count: 1, commands: [a], router: {type: dynamo}}\n"
            "  - {count: 2, commands: [b]}\nretry: true\n",
            "svc.yml:6: retry: cannot be used with a Dynamo router group",
        ),
        ("  - {count: 1}\n", "svc.yml:4: replicas.0.commands: required: each group lists its commands"),
        ("  []\n", "svc.yml:3: replicas: an empty list"),
    ],
)
def test_bad_groups_get_one_line_naming_the_field(replicas: str, expected: str) -> None:
    message = parse_error(f"type: service\nport: 8000\nreplicas:\n{replicas}")
    assert expected in message and "\n" not in message.strip()


def test_top_level_scaling_or_commands_beside_groups_is_refused() -> None:
    groups = "replicas:\n  - {count: 1..2, scaling: {target: 1}, commands: [a]}\n"
    assert "commands: set it in each replica group" in parse_error(
        f"type: service\nport: 8000\ncommands: [x]\n{groups}"
    )
    assert "scaling: set it in each replica group" in parse_error(
        f"type: service\nport: 8000\nscaling: {{target: 1}}\n{groups}"
    )


def test_group_fields_not_acted_on_are_named() -> None:
    conf = grouped([{"count": 1, "commands": ["a"], "nvcc": True, "docker": False}]).configuration
    assert conf.unsupported_fields() == ["replicas.nvcc"]
    assert grouped().configuration.unsupported_fields() == []


def test_each_group_runs_in_its_own_image_python_or_the_services() -> None:
    """dstack's replica groups each with an `image` or a `python` (a router on one, workers on another):
    a group's own replaces the service's; `privileged` likewise (docs/services.md#replica-groups)."""
    groups = [
        {"name": "router", "count": 1, "python": "3.12", "commands": ["route"]},
        {"name": "worker", "count": 1, "image": "ghcr.io/w:1", "privileged": True},  # its entrypoint runs
        {"name": "plain", "count": 1, "commands": ["serve"]},
    ]
    inp = grouped(groups, image="base:2", registry_auth={"username": "u", "password": "p"})
    assert refusals(inp.configuration) == []
    assert inp.configuration.unsupported_fields() == []
    state = submit_run(inp, T0).machine.state
    router, worker, plain = (job_input(inp, state, "run-wf", replica, 0) for replica in (0, 1, 2))
    assert router.container is not None and worker.container is not None and plain.container is not None
    assert (router.container.image, router.container.python) == (python_image("3.12"), "3.12")
    assert (worker.container.image, worker.container.privileged) == ("ghcr.io/w:1", True)
    assert (plain.container.image, plain.container.privileged) == ("base:2", False)
    assert worker.container.registry_auth is not None  # the service's, for every group's image
    assert worker.spec.commands == [] and router.spec.commands == ["route"]


def test_a_groups_docker_true_is_refused_as_a_runs() -> None:
    conf = grouped([{"count": 1, "commands": ["a"]}, {"count": 1, "commands": ["b"], "docker": True}])
    [refused] = refusals(conf.configuration)
    assert refused.path == ("replicas", "1", "docker")
    assert refused.reason.startswith("Ferry does not give a job a container engine")


def test_a_group_with_its_own_image_but_a_python_too_is_refused() -> None:
    group = "  - {count: 1, commands: [a], image: x, python: '3.12'}\n"
    message = parse_error(f"type: service\nport: 8000\nreplicas:\n{group}")
    assert "svc.yml:4: replicas.0.python: cannot be used with `image`" in message


def test_each_group_is_planned_and_submitted_with_its_commands_and_resources() -> None:
    inp = grouped()
    plan = plan_of(inp)
    assert [(g.name, g.replicas, g.scaling is not None) for g in plan.groups] == [
        ("big", 1, True),
        ("1", 1, False),
    ]
    assert plan.replicas == 2 and plan.scaling is None
    first = submit_run(inp, T0)
    submits = [context for name, context in said(first.events) if name == "job-submit"]
    assert [(c["replica"], c["group"]) for c in submits] == [(0, "big"), (1, "1")]
    state = first.machine.state
    big, small = (job_input(inp, state, "run-wf", replica, 0) for replica in (0, 1))
    assert big.spec.commands == ["serve big"] and small.spec.commands == ["serve small"]
    assert big.resources.cpu == 2 and small.resources.cpu == 0
    assert replay_run(first.events) == state


def test_groups_scale_on_their_own_and_the_run_sleeps_only_when_every_group_is_at_zero() -> None:
    inp = grouped([*GROUPS[:1], {"name": "tail", "count": "0..1", "scaling": SCALING, "commands": ["t"]}])
    machine = running(submit_run(inp, T0).machine, (0, 0, 0), (1, 0, 0))
    step = load(machine, "big", 2, T0 + 40)
    assert said(step.events)[0] == ("scale", {"replicas": 2, "rps": 1.0, "group": "big"})
    assert keys_of(step.effects, StartJob) == [(2, 0, 0)]
    assert step.machine.state.jobs[-1].group == "big"
    assert step.machine.state.group_replicas == {"big": 2}
    # "tail" goes to zero: only its replica stops; the run still serves by "big".
    step = load(running(step.machine, (2, 0, 0)), "tail", 0, T0 + 100)
    assert keys_of(step.effects, TerminateJob) == [(1, 0, 0)]
    tail_end = finished((1, 0, 0), R.SCALED_DOWN, at=T0 + 101)
    tail_down = advance(step.machine, Inbox(updates=[tail_end]), T0 + 101).machine
    assert tail_down.state.status == RunStatus.RUNNING
    step = load(tail_down, "big", 0, T0 + 200)
    assert keys_of(step.effects, TerminateJob) == [(2, 0, 0), (0, 0, 0)]
    ends = [finished((r, 0, 0), R.SCALED_DOWN, at=T0 + 201) for r in (0, 2)]
    asleep = advance(step.machine, Inbox(updates=ends), T0 + 201).machine
    assert asleep.state.status == RunStatus.PENDING
    assert status_message(asleep.state) == "scaled to zero: a request wakes it"
    # A request wakes "tail" alone: its replica number comes back, in its group.
    woken = load(asleep, "tail", 1, T0 + 300)
    assert keys_of(woken.effects, StartJob) == [(0, 0, 1)]
    assert woken.machine.state.job(0, 0).group == "tail"  # type: ignore[union-attr]
    assert woken.machine.state.status == RunStatus.SUBMITTED
    assert replay_run([*submit_run(inp, T0).events]).jobs[0].group == "big"


def test_a_failed_replica_is_resubmitted_in_its_group() -> None:
    inp = grouped(retry={"on_events": ["error"]})
    machine = running(submit_run(inp, T0).machine, (0, 0, 0), (1, 0, 0))
    failed = news((1, 0, 0), JobStatus.FAILED, R.CONTAINER_EXITED_WITH_ERROR, at=T0 + 5, exit_status=1)
    step = advance(machine, Inbox(updates=[failed]), T0 + 5)
    assert keys_of(step.effects, StartJob) == [(1, 0, 1)]
    assert step.machine.state.job(1, 0).group == "1"  # type: ignore[union-attr]


def test_groups_roll_one_replica_each_and_renaming_them_needs_a_restart() -> None:
    machine = running(submit_run(grouped(), T0).machine, (0, 0, 0), (1, 0, 0))
    changed = [{**GROUPS[0], "commands": ["serve big v2"]}, {**GROUPS[1], "commands": ["serve small v2"]}]
    inp = grouped(changed)
    step = advance(machine, Inbox(deploy=Deploy(plan=plan_of(inp), changed=["replicas"])), T0 + 10)
    assert keys_of(step.effects, StartJob) == [(2, 0, 0), (3, 0, 0)]
    submits = {c["replica"]: c["group"] for name, c in said(step.events) if name == "job-submit"}
    assert submits == {2: "big", 3: "1"}
    ready = news((3, 0, 0), JobStatus.RUNNING, at=T0 + 12).model_copy(update={"serving": "ready"})
    step = advance(step.machine, Inbox(updates=[ready]), T0 + 12)
    assert keys_of(step.effects, TerminateJob) == [(1, 0, 0)]  # the old one of the same group
    old, new = grouped().configuration, grouped([{**GROUPS[0], "name": "large"}, GROUPS[1]]).configuration
    assert not_in_place(old, new) == ["replicas (its groups)"]
    assert not_in_place(old, inp.configuration) == []
