"""A service with a Dynamo router group (docs/services.md#a-dynamo-router): what the configuration takes
and refuses, which replicas wait for the router and how they are told its address, and that the worker
keeps no SGLang worker list for it. The real thing runs in tests/e2e/test_dynamo_router.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from core.configuration.loading import ConfigurationError, load_configuration_text
from core.jobs.transitions import ROUTER_ADDRESS_ENV, start_job, starts_in_one_step, waits_for_router
from core.runs.lifecycle import submit_run
from core.runs.submissions import job_input
from core.services.routers import router_address
from core.wire.agent_api import ClusterInfo
from core.wire.job_messages import JobInput, Placement
from tests.core.test_run_lifecycle import T0, run_input

ROUTER = {"name": "frontend", "count": 1, "commands": ["run frontend"], "router": {"type": "dynamo"}}
PREFILL = {"name": "prefill", "count": "1..4", "scaling": {"target": 3}, "commands": ["serve prefill"]}
DECODE = {"name": "decode", "count": 2, "commands": ["serve decode"]}


def jobs(groups: list[dict[str, Any]]) -> list[JobInput]:
    inp = run_input("service", replicas=groups, commands=[], model="m")
    state = submit_run(inp, T0).machine.state
    return [job_input(inp, state, "run-wf", replica, 0) for replica in range(len(state.jobs))]


def test_only_the_workers_wait_for_the_router_and_none_start_in_one_step() -> None:
    router, prefill, *decode = jobs([ROUTER, PREFILL, DECODE])
    assert [waits_for_router(j) for j in (router, prefill, *decode)] == [False, True, True, True]
    assert starts_in_one_step(router) and not starts_in_one_step(prefill)
    assert router.service is not None and not router.service.syncs_router()  # no SGLang worker list
    sglang_router, sglang_worker, *_ = jobs([{**ROUTER, "router": {"type": "sglang"}}, PREFILL, DECODE])
    assert sglang_router.service is not None and sglang_router.service.syncs_router()
    assert not waits_for_router(sglang_worker)  # SGLang's workers are registered with it instead


def test_a_worker_is_started_with_the_routers_address_under_both_names() -> None:
    _, prefill, *_ = jobs([ROUTER, PREFILL, DECODE])
    placement = Placement(instance_name="local", cluster=ClusterInfo())
    started = start_job(prefill, "job-1", placement, "10.214.0.6")
    assert {name: started.spec.env[name] for name in ROUTER_ADDRESS_ENV} == {
        "DSTACK_ROUTER_INTERNAL_IP": "10.214.0.6",
        "FERRY_ROUTER_INTERNAL_IP": "10.214.0.6",
    }
    assert not set(ROUTER_ADDRESS_ENV) & set(start_job(prefill, "job-1", placement).spec.env)


def test_the_routers_address_is_its_running_replicas_own() -> None:
    replicas = [
        ("decode", "ready", "http://10.214.0.2:8000"),
        ("frontend", "draining", "http://10.214.0.10:8000"),  # the router being replaced: not the one
        ("frontend", "probing", "http://10.214.0.6:8000"),
    ]
    assert router_address(replicas, "frontend") == "10.214.0.6"
    assert router_address(replicas[:2], "frontend") is None  # not running yet: the workers wait


def _service(groups: list[dict[str, Any]], **extra: Any) -> str:
    return json.dumps({"type": "service", "port": 8000, "model": "m", "replicas": groups, **extra})


def test_dstacks_rules_for_a_dynamo_router_hold() -> None:
    conf = load_configuration_text(_service([ROUTER, PREFILL, DECODE]), "svc.yml").configuration
    assert conf.router_type == "dynamo" and conf.router_group == "frontend"  # type: ignore[union-attr]
    refused: list[tuple[list[dict[str, Any]], dict[str, Any], str]] = [
        ([ROUTER, PREFILL], {"retry": True}, "retry: cannot be used with a Dynamo router group"),
        ([{**ROUTER, "count": 2}, PREFILL], {}, "replicas.0.count: a router group has exactly 1 replica"),
    ]
    for groups, extra, words in refused:
        with pytest.raises(ConfigurationError) as error:
            load_configuration_text(_service(groups, **extra), "svc.yml")
        assert words in str(error.value)
