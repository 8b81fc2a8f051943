"""A router replica's workers (docs/services.md#a-router-group): while a service's router replica is ready,
its probe activity (activities.services) keeps the router's worker list equal to the service's ready
replicas of its other groups, through the SGLang router's HTTP API:

- `GET /workers` lists what the router has (`{"workers": [{"id", "url", ...}]}`);
- `POST /workers` (`{"url", "worker_type", "bootstrap_port"}`) adds a worker, of the kind its own
  `GET /server_info` says (core.services.routers.worker_of);
- `DELETE /workers/{id}` removes one whose replica drains, stops or is gone.

Each step reads everything again, so it is idempotent: a router replica that is replaced (a new one, with
none) gets every worker again; an activity retried elsewhere starts over. What the router refuses, or a
router that cannot be reached, is the step's `trouble`, which the job logs as an event (`ferry ps`).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import httpx

from core.services.replicas import ReplicaState
from core.services.routers import listed_workers, plan_sync, worker_of
from store import Store

SYNC_EVERY = 0.5  # seconds between two steps while the router is ready
ROUTER_TIMEOUT = 5.0
SERVER_INFO_TIMEOUT = 2.0
PENDING_FOR = 30.0  # a worker added this long ago and not yet listed is added again


@dataclass
class StepResult:
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    trouble: str | None = None  # what the router refused, or why it could not be asked

    def summary(self) -> str | None:
        """A line for the job's events, None when nothing happened."""
        if self.trouble is not None:
            return f"router: {self.trouble}"
        parts = [f"added {url}" for url in self.added] + [f"removed {url}" for url in self.removed]
        return "router: " + "; ".join(parts) if parts else None


class RouterSync:
    """The router of one run, reached at `router_url` (the router replica's own, or its tunnel's)."""

    def __init__(self, store: Store, run_id: str, router_group: str, router_url: str) -> None:
        self._store = store
        self._run_id = run_id
        self._router_group = router_group
        self._router_url = router_url.rstrip("/")
        self._pending: dict[str, float] = {}  # url -> when it was added

    def _targets(self) -> list[str]:
        """The urls of the run's ready replicas of every group but the router's."""
        return [
            record.url
            for record in self._store.list_service_replicas([self._run_id])
            if record.group_name != self._router_group and record.state == ReplicaState.READY
        ]

    async def step(self, http: httpx.AsyncClient) -> StepResult:
        result = StepResult()
        try:
            answer = await http.get(f"{self._router_url}/workers", timeout=ROUTER_TIMEOUT)
        except httpx.HTTPError as err:
            result.trouble = f"not reachable: {_short(err)}"
            return result
        if answer.status_code != 200:
            result.trouble = f"GET /workers answered {answer.status_code}"
            return result
        try:
            current = listed_workers(answer.json())
        except ValueError:
            result.trouble = "GET /workers answered no JSON"
            return result
        now = time.monotonic()
        self._pending = {url: at for url, at in self._pending.items() if now - at < PENDING_FOR}
        targets = await asyncio.to_thread(self._targets)
        plan = plan_sync(current, targets, self._pending)
        troubles = []
        for url in plan.add:
            worker = worker_of(url, await _server_info(http, url))
            if worker is None:  # its server is not ready yet: the next step asks again
                continue
            refused = await _ask(http, "POST", f"{self._router_url}/workers", worker.payload())
            if refused is None:
                self._pending[url] = time.monotonic()
                result.added.append(url)
            else:
                troubles.append(f"refused worker {url}: {refused}")
        for worker_id, url in plan.remove:
            refused = await _ask(http, "DELETE", f"{self._router_url}/workers/{worker_id}", None)
            if refused is None:
                self._pending.pop(url, None)
                result.removed.append(url)
            else:
                troubles.append(f"refused removing {url}: {refused}")
        troubles += [f"lists {url} without an id: not removed" for url in plan.unknown]
        if troubles:
            result.trouble = "; ".join(troubles)
        return result


async def _server_info(http: httpx.AsyncClient, url: str) -> object:
    """A worker's `/server_info` (None when it has none, or it is not JSON)."""
    try:
        answer = await http.get(f"{url.rstrip('/')}/server_info", timeout=SERVER_INFO_TIMEOUT)
        return answer.json() if answer.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None


async def _ask(http: httpx.AsyncClient, method: str, url: str, body: dict[str, object] | None) -> str | None:
    """None when the router took the command (a 2xx answer), else why not."""
    try:
        answer = await http.request(method, url, json=body, timeout=ROUTER_TIMEOUT)
    except httpx.HTTPError as err:
        return _short(err)
    if 200 <= answer.status_code < 300:
        return None
    return f"{answer.status_code} {answer.text.strip()[:120]}".strip()


def _short(err: BaseException) -> str:
    text = str(err) or type(err).__name__
    return text.splitlines()[0][:120]
