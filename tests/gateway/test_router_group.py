"""A service with a router group (docs/services.md#a-router-group): the proxy sends its requests, on
/proxy/services/ and /proxy/models/, on the fast path and the aiohttp app alike, to the router group's
ready replicas only; the other groups' replicas (the router's workers) get none from it."""

from __future__ import annotations

import dataclasses

import aiohttp
import pytest

from store.models import ServiceReplicaRecord
from tests.gateway.conftest import FAST, Harness, add_service

GROUPS = [
    {"name": "router", "count": 1, "commands": ["smg launch"], "router": {"type": "sglang"}},
    {"name": "decode", "count": 2, "commands": ["serve"]},
]


def register(
    harness: Harness, run_id: str, replica_id: str, url: str, group: str, state: str = "ready"
) -> None:
    harness.store.register_replica(
        ServiceReplicaRecord(
            id=replica_id,
            run_id=run_id,
            replica_num=0,
            submission_num=0,
            url=url,
            state=state,
            group_name=group,
        )
    )


@pytest.mark.parametrize("fast_path", [True, False])
async def test_only_the_router_group_gets_requests(
    harness: Harness, http: aiohttp.ClientSession, fast_path: bool
) -> None:
    run_id = add_service(harness.store, auth=False, model="m", replicas=GROUPS, commands=[])
    router, worker, other = [await harness.replica(name) for name in ("router", "worker", "other")]
    register(harness, run_id, "r-0", router.url, "router")
    register(harness, run_id, "r-1", worker.url, "decode")
    register(harness, run_id, "r-2", other.url, "decode")
    _, proxy = await harness.gateway(dataclasses.replace(FAST, fast_path=fast_path))
    for _ in range(6):
        async with http.get(f"{proxy}/proxy/services/main/app/generate") as response:
            assert (await response.json())["replica"] == "router"
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        async with http.post(f"{proxy}/proxy/models/main/v1/chat/completions", json=body) as response:
            assert response.status == 200, await response.text()
            assert (await response.json())["replica"] == "router"
    assert (len(router.requests), len(worker.requests), len(other.requests)) == (12, 0, 0)


async def test_a_routed_service_without_a_ready_router_answers_from_no_worker(
    harness: Harness, http: aiohttp.ClientSession
) -> None:
    run_id = add_service(harness.store, auth=False, replicas=GROUPS, commands=[])
    router, worker = await harness.replica("router"), await harness.replica("worker")
    register(harness, run_id, "r-0", router.url, "router", state="probing")
    register(harness, run_id, "r-1", worker.url, "decode")
    _, proxy = await harness.gateway(dataclasses.replace(FAST, hold_timeout=0.2))
    async with http.get(f"{proxy}/proxy/services/main/app/") as response:
        assert response.status == 503
    assert worker.requests == []
