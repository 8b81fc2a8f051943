"""A service's `rate_limits` in the real proxy (docs/services.md#rate-limits): a burst over the limit gets
429 and reaches no replica, on the fast path and on the aiohttp app's alike; per header value; per prefix;
before a request is held for a replica; a model's requests too; and across `--workers 2`.

Every limit refills at dstack's least rate, one request a minute (a worker's share: one in two), so that
no token comes back while a test runs: what passes is the burst alone, whatever the machine's speed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from yarl import URL

from tests.gateway.conftest import FAST, Harness, Replica, add_replica, add_service, eventually
from tests.gateway.test_workers import (  # noqa: F401 (fixtures: `proxy` starts two workers)
    Proxy,
    _get_each_on_its_own_connection,
    proxy,
    proxy_command,
)

PER_MINUTE = 1 / 60
PATHS = {"fast path": True, "aiohttp app": False}


@pytest.fixture(params=list(PATHS), ids=list(PATHS))
def fast_path(request: pytest.FixtureRequest) -> bool:
    return PATHS[request.param]


async def limited_service(
    harness: Harness, fast_path: bool, rate_limits: list[dict[str, Any]], **config: Any
) -> tuple[Replica, str]:
    """A public service with these limits and one ready replica, and the proxy's URL."""
    run_id = add_service(harness.store, auth=False, rate_limits=rate_limits, **config)
    replica = await harness.replica("one")
    add_replica(harness.store, run_id, "r-0", replica.url)
    _, proxy_url = await harness.gateway(dataclasses.replace(FAST, fast_path=fast_path))
    return replica, proxy_url


async def statuses(
    http: aiohttp.ClientSession, url: str | URL, count: int, headers: dict[str, str] | None = None
) -> list[int]:
    """`count` GETs one after the other (so their order is the order they reach the limiter)."""
    found = []
    for _ in range(count):
        async with http.get(url, headers=headers) as response:
            await response.read()
            found.append(response.status)
    return found


async def test_a_burst_over_the_limit_gets_429_and_reaches_no_replica(
    harness: Harness, http: aiohttp.ClientSession, fast_path: bool
) -> None:
    replica, proxy_url = await limited_service(harness, fast_path, [{"rps": PER_MINUTE, "burst": 2}])
    url = f"{proxy_url}/proxy/services/main/app/hello"
    passed = []
    for _ in range(3):
        async with http.get(url) as response:
            assert response.status == 200
            # On the fast path the requests that pass are its own (the app closes its connections).
            passed.append(response.headers.get("Connection"))
    assert passed == ([None] * 3 if fast_path else ["close"] * 3)
    async with http.get(url) as response:
        assert response.status == 429
        assert await response.text() == (
            "too many requests to main/app under /: the service allows 0.0166667 a second (and 2 more at "
            "once) per client address; try again later\n"
        )
    assert await statuses(http, url, 5) == [429] * 5
    assert len(replica.requests) == 3


async def test_requests_over_the_limit_are_not_counted_for_autoscaling(
    harness: Harness, http: aiohttp.ClientSession, fast_path: bool
) -> None:
    run_id = add_service(harness.store, auth=False, rate_limits=[{"rps": PER_MINUTE, "burst": 1}])
    replica = await harness.replica("one")
    add_replica(harness.store, run_id, "r-0", replica.url)
    _, proxy_url = await harness.gateway(dataclasses.replace(FAST, fast_path=fast_path))
    url = f"{proxy_url}/proxy/services/main/app/x"
    assert await statuses(http, url, 12) == [200, 200] + [429] * 10
    await eventually(lambda: harness.store.request_count(run_id, 0) >= 2)
    await asyncio.sleep(5 * FAST.flush_interval)  # several flushes: any count of the 429s would be written
    assert harness.store.request_count(run_id, 0) == 2


async def test_a_header_key_limits_each_value_of_the_header(
    harness: Harness, http: aiohttp.ClientSession, fast_path: bool
) -> None:
    limit = {"rps": PER_MINUTE, "burst": 1, "key": {"type": "header", "header": "X-User"}}
    replica, proxy_url = await limited_service(harness, fast_path, [limit])
    url = f"{proxy_url}/proxy/services/main/app/x"
    assert await statuses(http, url, 4, {"X-User": "alice"}) == [200, 200, 429, 429]
    assert await statuses(http, url, 4, {"x-user": "bob"}) == [200, 200, 429, 429]
    assert await statuses(http, url, 3, {"X-User": "alice"}) == [429] * 3
    assert await statuses(http, url, 4) == [200] * 4  # without the header: not limited, as in nginx
    assert len(replica.requests) == 8


async def test_the_longest_prefix_picks_the_limit(
    harness: Harness, http: aiohttp.ClientSession, fast_path: bool
) -> None:
    limits: list[dict[str, Any]] = [
        {"prefix": "/api/auth/", "rps": PER_MINUTE},
        {"rps": PER_MINUTE, "burst": 4},
    ]
    replica, proxy_url = await limited_service(harness, fast_path, limits)
    base = f"{proxy_url}/proxy/services/main/app"
    assert await statuses(http, f"{base}/api/auth/login", 2) == [200, 429]
    # The same path in other spellings is the same limit (the replica would read it as the same path).
    assert await statuses(http, URL(f"{base}/api/%61uth/login", encoded=True), 1) == [429]
    assert await statuses(http, URL(f"{base}//api//auth/login", encoded=True), 1) == [429]
    assert await statuses(http, f"{base}/home", 6) == [200] * 5 + [429]
    assert [seen["path"] for seen in replica.requests] == ["/api/auth/login"] + ["/home"] * 5


async def test_a_limit_applies_to_the_path_within_the_service_without_strip_prefix(
    harness: Harness, http: aiohttp.ClientSession, fast_path: bool
) -> None:
    limits = [{"prefix": "/api/", "rps": PER_MINUTE}]
    replica, proxy_url = await limited_service(harness, fast_path, limits, strip_prefix=False)
    base = f"{proxy_url}/proxy/services/main/app"
    assert await statuses(http, f"{base}/api/x", 2) == [200, 429]
    assert await statuses(http, f"{base}/other", 3) == [200] * 3
    assert replica.requests[0]["path"] == "/proxy/services/main/app/api/x"


async def test_a_request_over_the_limit_is_not_held_for_a_replica(
    harness: Harness, http: aiohttp.ClientSession, fast_path: bool
) -> None:
    run_id = add_service(harness.store, auth=False, rate_limits=[{"rps": PER_MINUTE}])
    _, proxy_url = await harness.gateway(dataclasses.replace(FAST, fast_path=fast_path))
    url = f"{proxy_url}/proxy/services/main/app/x"
    held = asyncio.create_task(statuses(http, url, 1))  # takes the token, then waits for a replica
    await eventually(lambda: harness.store.request_count(run_id, 0) >= 1)
    assert await statuses(http, url, 2) == [429, 429]  # answered at once, while the first still waits
    assert not held.done()
    replica = await harness.replica("late")
    add_replica(harness.store, run_id, "r-0", replica.url)
    assert await held == [200]
    assert len(replica.requests) == 1


async def test_a_models_requests_are_limited_by_the_replicas_path(
    harness: Harness, http: aiohttp.ClientSession
) -> None:
    limits = [{"prefix": "/v1/chat/", "rps": PER_MINUTE, "burst": 1}]
    replica, proxy_url = await limited_service(harness, True, limits, model="llama")
    url = f"{proxy_url}/proxy/models/main/v1/chat/completions"
    body = {"model": "llama", "messages": [{"role": "user", "content": "hi"}]}
    found = []
    for _ in range(3):
        async with http.post(url, json=body) as response:
            found.append((response.status, (await response.json()).get("error", {}).get("message", "")))
    assert [status for status, _ in found] == [200, 200, 429]
    assert found[2][1].startswith("too many requests to main/app under /v1/chat/")
    async with http.post(url, json=body) as response:
        assert response.status == 429
        assert (await response.json())["error"]["type"] == "rate_limit_error"  # OpenAI's, for its clients
    assert len(replica.requests) == 2


# --- two proxy processes ------------------------------------------------------------------------------


@pytest.fixture
async def service(harness: Harness) -> AsyncIterator[tuple[str, Replica]]:
    """The service the workers' proxy fixture starts with: 4 requests at once in all (burst 3)."""
    run_id = add_service(harness.store, auth=False, rate_limits=[{"rps": PER_MINUTE, "burst": 3}])
    replica = await harness.replica("one")
    add_replica(harness.store, run_id, "r-0", replica.url)
    yield run_id, replica


async def test_two_workers_each_enforce_half_and_together_the_whole(
    service: tuple[str, Replica],
    proxy: Proxy,  # noqa: F811 (test_workers' fixture, started with this module's `service`)
) -> None:
    """Each worker lets 2 through (ceil((3 + 1) / 2)); the kernel spreads the connections over both, so
    40 on connections of their own reach both (gateway.workers' test): 4 pass in all, the others 429."""
    _, replica = service
    url = f"{proxy.url}/proxy/services/main/app/x"
    found = await _get_each_on_its_own_connection(url, 40)
    assert sorted(found) == [200] * 4 + [429] * 36, json.dumps(found)
    assert len(replica.requests) == 4
