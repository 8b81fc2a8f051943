"""Tokens for services with `auth`, public services, and the request counts the autoscaler reads."""

from __future__ import annotations

import asyncio
import hashlib
import time

import aiohttp

from core.teams.roles import ProjectRole
from tests.gateway.conftest import Harness, add_replica, add_service, bearer, eventually


async def test_a_service_with_auth_needs_a_ferry_token(harness: Harness, http: aiohttp.ClientSession) -> None:
    run_id = add_service(harness.store)  # auth: true by default
    replica = await harness.replica("one")
    add_replica(harness.store, run_id, "r-0", replica.url)
    _, proxy = await harness.gateway()
    url = f"{proxy}/proxy/services/main/app/"
    for headers in ({}, bearer("wrong"), {"Authorization": "Basic YTpi"}, {"Authorization": "Bearer"}):
        async with http.get(url, headers=headers) as response:
            assert response.status == 401
            assert response.headers["WWW-Authenticate"] == "Bearer"
            text = await response.text()
            assert "main/app needs a Ferry token" in text and "`ferry token` shows yours" in text
    assert replica.requests == []
    async with http.get(url, headers=bearer()) as response:
        assert response.status == 200
        assert "Authorization" not in (await response.json())["headers"]  # the token stays with the proxy
    async with http.get(
        url, headers={"Authorization": "bearer " + bearer()["Authorization"][7:]}
    ) as response:
        assert response.status == 200  # the scheme is case-insensitive
    await asyncio.sleep(0.3)  # two flushes
    # Only the accepted requests count.
    assert harness.store.request_count(run_id, 0) == 2


async def test_a_service_without_auth_is_public(harness: Harness, http: aiohttp.ClientSession) -> None:
    run_id = add_service(harness.store, auth=False)
    replica = await harness.replica("one")
    add_replica(harness.store, run_id, "r-0", replica.url)
    _, proxy = await harness.gateway()
    async with http.get(f"{proxy}/proxy/services/main/app/") as response:
        assert response.status == 200
    async with http.get(f"{proxy}/proxy/services/main/app/", headers=bearer("its-own")) as response:
        assert (await response.json())["headers"]["Authorization"] == "Bearer its-own"  # the service's own


async def test_a_new_token_is_known_within_the_negative_cache_time(
    harness: Harness, http: aiohttp.ClientSession
) -> None:
    run_id = add_service(harness.store)
    replica = await harness.replica("one")
    add_replica(harness.store, run_id, "r-0", replica.url)
    gateway, proxy = await harness.gateway()
    url = f"{proxy}/proxy/services/main/app/"
    async with http.get(url, headers=bearer("bob-token")) as response:
        assert response.status == 401
    harness.store.put_user("bob", hashlib.sha256(b"bob-token").hexdigest())
    harness.store.set_member("main", "bob", ProjectRole.USER)
    async with http.get(url, headers=bearer("bob-token")) as response:
        assert response.status == 401  # the miss is cached a while (unknown_token_ttl)

    async def known() -> bool:
        async with http.get(url, headers=bearer("bob-token")) as response:
            return response.status == 200

    await eventually(known, timeout=gateway.options.unknown_token_ttl + 2)


async def test_a_service_admits_its_projects_members_only(
    harness: Harness, http: aiohttp.ClientSession
) -> None:
    """docs/teams.md#services: a token of project b's member is refused by project a's service (403, on the
    fast path and the app's alike), a's member's is let through; the admin (alice, the store's first user)
    reaches both."""
    store = harness.store
    for user in ("ann", "ben"):
        store.put_user(user, hashlib.sha256(f"{user}-token".encode()).hexdigest())
    store.set_member("a", "ann", ProjectRole.USER)
    store.set_member("b", "ben", ProjectRole.USER)
    run_id = add_service(store, project="a")
    replica = await harness.replica("one")
    add_replica(store, run_id, "r-0", replica.url)
    _, proxy = await harness.gateway()
    url = f"{proxy}/proxy/services/a/app/"
    for _ in range(2):  # the first asks the store, the second is answered from the cache
        async with http.get(url, headers=bearer("ben-token")) as response:
            assert response.status == 403
            assert (
                "a/app admits its project's members only: ben is not a member of a" in await response.text()
            )
    assert replica.requests == []
    for token in ("ann-token", None):
        for _ in range(2):
            async with http.get(url, headers=bearer(token) if token else bearer()) as response:
                assert response.status == 200, await response.text()


async def test_request_counts_land_in_the_store_per_second(
    harness: Harness, http: aiohttp.ClientSession
) -> None:
    run_id = add_service(harness.store, auth=False)
    other = add_service(harness.store, "other", auth=False)
    replica = await harness.replica("one")
    add_replica(harness.store, run_id, "r-0", replica.url)
    add_replica(harness.store, other, "o-0", replica.url)
    gateway, proxy = await harness.gateway()
    started = int(time.time())
    for _ in range(5):
        async with http.get(f"{proxy}/proxy/services/main/app/") as response:
            assert response.status == 200
    async with http.get(f"{proxy}/proxy/services/main/other/") as response:
        assert response.status == 200
    await eventually(lambda: harness.store.request_count(run_id, started) == 5)
    assert harness.store.request_count(other, started) == 1
    assert harness.store.request_count(run_id, int(time.time()) + 1) == 0
    # This proxy is listed among the live ones, with its public URL.
    (live,) = harness.store.live_gateways(time.time() - 5)
    assert (live.id, live.url) == (gateway.id, "http://proxy.test:8300")
