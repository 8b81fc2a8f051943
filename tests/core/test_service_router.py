"""A service's router group (docs/services.md#a-router-group): what the configuration takes and refuses,
what each replica's job knows of it, which replicas the proxies route to, and the pure decisions of keeping
a router's workers in step (core.services.routers)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from core.configuration import ServiceConfiguration
from core.configuration.loading import ConfigurationError, load_configuration_text
from core.configuration.runnable import refusals
from core.runs.lifecycle import submit_run
from core.runs.submissions import job_input
from core.services.routers import (
    TROUBLE_EVERY,
    RouterNote,
    listed_workers,
    next_note,
    normalize_url,
    plan_sync,
    routed_replicas,
    worker_of,
)
from gateway.routing_table import SettingsCache, build_table, parse_settings
from store.models import RunRecord, ServiceReplicaRecord
from tests.core.test_run_lifecycle import T0, run_input

ROUTER = {"name": "router", "count": 1, "commands": ["smg launch"], "router": {"type": "sglang"}}
PREFILL = {"name": "prefill", "count": "1..4", "scaling": {"target": 3}, "commands": ["serve prefill"]}
DECODE = {"count": 2, "commands": ["serve decode"]}


def service_text(groups: list[dict[str, Any]]) -> str:
    return json.dumps({"type": "service", "port": 8000, "model": "m", "replicas": groups})


def load(groups: list[dict[str, Any]]) -> ServiceConfiguration:
    conf = load_configuration_text(service_text(groups), "svc.yml").configuration
    assert isinstance(conf, ServiceConfiguration)
    return conf


def refusal(groups: list[dict[str, Any]]) -> str:
    with pytest.raises(ConfigurationError) as error:
        load_configuration_text(service_text(groups), "svc.yml")
    return str(error.value)


def test_a_router_group_is_taken_and_named() -> None:
    conf = load([ROUTER, PREFILL, DECODE])
    assert conf.router_group == "router"
    assert [g.router is not None for g in conf.groups] == [True, False, False]
    assert refusals(conf) == []
    assert load([PREFILL, DECODE]).router_group is None
    assert load([{**ROUTER, "name": None, "router": {}}, DECODE]).router_group == "0"  # sglang by default


@pytest.mark.parametrize(
    ("groups", "words"),
    [
        ([ROUTER, {**ROUTER, "name": "again"}], "replicas.1.router: only one group may be the router"),
        ([{**ROUTER, "count": 2}, DECODE], "replicas.0.count: a router group has exactly 1 replica"),
        (
            [{**ROUTER, "count": "1..2", "scaling": {"target": 1}}, DECODE],
            "replicas.0.count: a router group has exactly 1 replica",
        ),
        ([{**ROUTER, "router": {"type": "nginx"}}, DECODE], "replicas.0.router.type"),
        ([{**ROUTER, "router": {"type": "sglang", "policy": "x"}}, DECODE], "policy"),
    ],
)
def test_what_dstack_refuses_of_a_router_is_refused_in_one_line(
    groups: list[dict[str, Any]], words: str
) -> None:
    said = refusal(groups)
    assert words in said, said


def test_each_replica_knows_its_group_and_the_router_group() -> None:
    inp = run_input("service", replicas=[ROUTER, PREFILL, DECODE], commands=[], model="m")
    state = submit_run(inp, T0).machine.state
    jobs = [job_input(inp, state, "run-wf", replica, 0) for replica in range(len(state.jobs))]
    assert [(j.service.group, j.service.router_group) for j in jobs if j.service] == [
        ("router", "router"),
        ("prefill", "router"),
        ("2", "router"),
        ("2", "router"),
    ]
    single = run_input("service", commands=["serve"])
    single_job = job_input(single, submit_run(single, T0).machine.state, "run-wf", 0, 0)
    assert single_job.service is not None and single_job.service.group is None
    assert single_job.service.router_group is None


def _replica(replica_id: str, group: str | None, state: str = "ready") -> ServiceReplicaRecord:
    return ServiceReplicaRecord(
        id=replica_id,
        run_id="r1",
        replica_num=0,
        submission_num=0,
        url=f"http://h/{replica_id}",
        state=state,
        group_name=group,
    )


def test_the_proxy_routes_a_routed_service_to_the_router_groups_ready_replicas_only() -> None:
    conf = load([ROUTER, PREFILL, DECODE])
    run = RunRecord(
        id="r1",
        project="main",
        run_name="svc",
        user="u",
        type="service",
        status="running",
        configuration=conf.model_dump_json(),
        workflow_id="w",
    )
    rows = [
        _replica("a", "router"),
        _replica("b", "prefill"),
        _replica("c", "2"),
        _replica("d", "router", "probing"),
    ]
    table = build_table([run], rows, SettingsCache())
    service = table.services["main", "svc"]
    assert service.settings.router_group == "router"
    assert [r.id for r in service.ready] == ["a"]
    assert len(service.replicas) == 4
    # Without a router group every group's ready replicas get requests, as before.
    plain = run.model_copy(update={"configuration": load([PREFILL, DECODE]).model_dump_json()})
    table = build_table([plain], rows, SettingsCache())
    assert [r.id for r in table.services["main", "svc"].ready] == ["a", "b", "c"]


def test_the_router_group_is_read_tolerantly() -> None:
    assert parse_settings('{"replicas": 2}').router_group is None
    assert parse_settings('{"replicas": [{"name": "x"}, {"name": "y", "router": {}}]}').router_group == "y"
    assert parse_settings('{"replicas": [{"name": 3, "router": {}}]}').router_group is None
    assert routed_replicas(None, "any") and routed_replicas("r", "r") and not routed_replicas("r", None)


def test_a_worker_is_of_the_kind_its_server_says() -> None:
    prefill = worker_of(
        "http://w:1",
        {"status": "ready", "disaggregation_mode": "prefill", "disaggregation_bootstrap_port": 8998},
    )
    assert prefill is not None
    assert prefill.payload() == {"url": "http://w:1", "worker_type": "prefill", "bootstrap_port": 8998}
    decode = worker_of("http://w:2", {"disaggregation_mode": "decode"})
    assert decode is not None and decode.payload() == {"url": "http://w:2", "worker_type": "decode"}
    assert worker_of("http://w:3", {"disaggregation_mode": "null"}) == worker_of("http://w:3", None)
    regular = worker_of("http://w:3", None)
    assert regular is not None and regular.worker_type == "regular"
    assert worker_of("http://w:4", {"status": "starting"}) is None  # asked again at the next step


def test_the_plan_adds_what_the_router_lacks_and_removes_what_is_gone() -> None:
    current = listed_workers(
        {
            "workers": [
                {"id": "1", "url": "http://a:1/"},
                {"id": "2", "url": "http://b:1"},
                {"url": "http://c:1"},  # no id: cannot be removed
                "junk",
                {"id": "4"},
            ]
        }
    )
    plan = plan_sync(current, ["http://a:1", "http://d:1", "http://e:1"], pending=["http://e:1/"])
    assert plan.add == ("http://d:1",)
    assert plan.remove == (("2", "http://b:1"),)
    assert plan.unknown == ("http://c:1",)
    assert not plan.empty
    # In step: nothing to do; a replaced router (listing none) gets every worker again.
    assert plan_sync(listed_workers({"workers": [{"id": "1", "url": "http://a:1"}]}), ["http://a:1/"]).empty
    assert plan_sync(listed_workers({}), ["http://b:1", "http://a:1"]).add == ("http://a:1", "http://b:1")
    assert listed_workers([]) == [] and normalize_url(" http://a:1/x/ ") == "http://a:1/x"


def test_a_change_is_logged_and_a_trouble_once_then_at_most_every_minute() -> None:
    added = next_note(None, "router: added http://a:1", False, 100.0)
    assert added == RouterNote("router: added http://a:1", 100.0, False)
    assert next_note(added, None, False, 101.0) is None  # nothing happened
    assert next_note(added, "router: added http://a:1", False, 101.0) is None  # the same line
    refused = next_note(added, "router: refused worker http://b:1: 400 id 1", True, 102.0)
    assert refused is not None and refused.trouble
    assert next_note(refused, "router: refused worker http://b:1: 400 id 2", True, 103.0) is None
    later = next_note(refused, "router: refused worker http://b:1: 400 id 3", True, 102.0 + TROUBLE_EVERY)
    assert later is not None and later.at == 102.0 + TROUBLE_EVERY
    assert next_note(refused, "router: removed http://a:1", False, 103.0) is not None  # a change: at once
