"""Requests held for a service with no ready replica, and replicas drained without cutting a request."""

from __future__ import annotations

import asyncio
import dataclasses

import aiohttp

from tests.gateway.conftest import FAST, Harness, add_replica, add_service, eventually


async def test_a_held_request_gets_503_after_the_hold_timeout(
    harness: Harness, http: aiohttp.ClientSession
) -> None:
    run_id = add_service(harness.store, auth=False)
    replica = await harness.replica("one")
    add_replica(harness.store, run_id, "r-0", replica.url, state="probing")
    _, proxy = await harness.gateway(dataclasses.replace(FAST, hold_timeout=0.3))
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with http.get(f"{proxy}/proxy/services/main/app/") as response:
        assert response.status == 503
        text = await response.text()
    assert loop.time() - started >= 0.3  # held for the hold timeout, not refused at once
    assert text.startswith("no replica of main/app became ready within 0.3 s")
    assert replica.requests == []


async def test_a_held_request_is_counted_at_once_and_answered_once_a_replica_is_ready(
    harness: Harness, http: aiohttp.ClientSession
) -> None:
    run_id = add_service(harness.store, auth=False)  # scaled to zero: no replica at all
    _, proxy = await harness.gateway(dataclasses.replace(FAST, flush_interval=60))
    held = asyncio.create_task(http.get(f"{proxy}/proxy/services/main/app/waited"))
    # Flushed at once, not at the next flush_interval: the autoscaler sees the demand.
    await eventually(lambda: harness.store.request_count(run_id, 0) == 1)
    replica = await harness.replica("late")
    add_replica(harness.store, run_id, "r-0", replica.url, state="probing")
    await asyncio.sleep(0.1)
    assert not held.done()
    harness.store.set_replica_state("r-0", "ready")
    response = await asyncio.wait_for(held, 2)
    async with response:
        assert response.status == 200
        assert (await response.json())["path"] == "/waited"


async def test_held_requests_are_answered_when_the_proxy_stops(harness: Harness) -> None:
    add_service(harness.store, auth=False)
    gateway, proxy = await harness.gateway()
    runner = harness.runners.pop()
    async with aiohttp.ClientSession() as http:
        held = asyncio.create_task(http.get(f"{proxy}/proxy/services/main/app/"))
        await eventually(lambda: gateway.directory.holding)  # held, not merely sent
        await runner.cleanup()
        response = await asyncio.wait_for(held, 2)
        assert response.status == 503
        assert "shutting down" in await response.text()


async def test_a_draining_replica_is_marked_drained_once_its_requests_are_done(
    harness: Harness, http: aiohttp.ClientSession
) -> None:
    run_id = add_service(harness.store, auth=False)
    old, new = await harness.replica("old"), await harness.replica("new")
    add_replica(harness.store, run_id, "r-0", old.url)
    gateway, proxy = await harness.gateway()
    slow = asyncio.create_task(http.get(f"{proxy}/proxy/services/main/app/slow"))
    await eventually(lambda: len(old.requests) == 1)

    add_replica(harness.store, run_id, "r-1", new.url)
    harness.store.set_replica_state("r-0", "draining")
    await eventually(lambda: "r-0" in gateway.directory.table.draining)
    for _ in range(3):
        async with http.get(f"{proxy}/proxy/services/main/app/") as response:
            assert (await response.json())["replica"] == "new"
    await asyncio.sleep(0.1)  # several refreshes: still not drained, a request is in flight
    assert harness.store.drained_by("r-0") == set()
    assert len(old.requests) == 1

    old.release_slow.set()
    response = await asyncio.wait_for(slow, 2)
    async with response:
        assert (response.status, await response.text()) == (200, "slow answer from old")
    await eventually(lambda: harness.store.drained_by("r-0") == {gateway.id}, timeout=2)
    assert harness.store.drained_by("r-1") == set()


async def test_an_idle_draining_replica_is_marked_at_once(harness: Harness) -> None:
    run_id = add_service(harness.store, auth=False)
    replica = await harness.replica("one")
    add_replica(harness.store, run_id, "r-0", replica.url, state="draining")
    gateway, _ = await harness.gateway()
    await eventually(lambda: harness.store.drained_by("r-0") == {gateway.id}, timeout=2)


async def test_stopping_lets_requests_in_flight_finish(harness: Harness) -> None:
    run_id = add_service(harness.store, auth=False)
    replica = await harness.replica("one")
    add_replica(harness.store, run_id, "r-0", replica.url)
    gateway, proxy = await harness.gateway()
    runner = harness.runners.pop()
    async with aiohttp.ClientSession() as http:
        slow = asyncio.create_task(http.get(f"{proxy}/proxy/services/main/app/slow"))
        await eventually(lambda: len(replica.requests) == 1)
        stopping = asyncio.create_task(runner.cleanup())
        await asyncio.sleep(0.1)
        assert not stopping.done()
        replica.release_slow.set()
        response = await asyncio.wait_for(slow, 2)
        assert (response.status, await response.text()) == (200, "slow answer from one")
        await asyncio.wait_for(stopping, 2)
    assert harness.store.live_gateways(0) == []
    assert gateway.id not in {g.id for g in harness.store.live_gateways(0)}
