"""A service's router group (docs/services.md#a-router-group): the pure decisions behind keeping an SGLang
router's worker list equal to the service's ready replicas of its other groups.

The worker (activities.services) reads the router's `GET /workers`, asks each ready replica of the other
groups its `GET /server_info`, and applies `plan_sync`'s additions (`POST /workers`) and removals
(`DELETE /workers/{id}`). A replica is a worker of the kind its server says: `disaggregation_mode` prefill
(with its `disaggregation_bootstrap_port`) or decode; any other answer, or none that is JSON, makes it a
regular worker. A server that answers with a `status` other than "ready" is not registered yet.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

REGULAR = "regular"
PREFILL = "prefill"
DECODE = "decode"


@dataclass(frozen=True, slots=True)
class RouterWorker:
    """A replica as the router should know it."""

    url: str
    worker_type: str = REGULAR
    bootstrap_port: int | None = None

    def payload(self) -> dict[str, Any]:
        """The body of the router's `POST /workers`."""
        body: dict[str, Any] = {"url": self.url, "worker_type": self.worker_type}
        if self.bootstrap_port is not None:
            body["bootstrap_port"] = self.bootstrap_port
        return body


@dataclass(frozen=True, slots=True)
class SyncPlan:
    add: tuple[str, ...]  # urls of the workers to add
    remove: tuple[tuple[str, str], ...]  # (the router's id of a worker, its url) to remove
    unknown: tuple[str, ...] = ()  # urls the router lists without an id: they cannot be removed

    @property
    def empty(self) -> bool:
        return not self.add and not self.remove


def normalize_url(url: str) -> str:
    """A worker's url as compared: no surrounding spaces, no trailing slash."""
    parts = urlsplit(url.strip())
    return urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), parts.query, parts.fragment))


def worker_of(url: str, server_info: Any) -> RouterWorker | None:
    """The worker a replica at `url` is, from its `/server_info` answer (None when it gave no JSON object);
    None too when the server says it is not ready yet."""
    if not isinstance(server_info, dict):
        return RouterWorker(url=url)
    status = server_info.get("status")
    if status is not None and status != "ready":
        return None
    mode = server_info.get("disaggregation_mode")
    if mode == PREFILL:
        port = server_info.get("disaggregation_bootstrap_port")
        bootstrap = port if isinstance(port, int) else None
        return RouterWorker(url=url, worker_type=PREFILL, bootstrap_port=bootstrap)
    if mode == DECODE:
        return RouterWorker(url=url, worker_type=DECODE)
    return RouterWorker(url=url)


def listed_workers(answer: Any) -> list[dict[str, Any]]:
    """The workers of the router's `GET /workers` answer (`{"workers": [...]}`), malformed items left out."""
    workers = answer.get("workers") if isinstance(answer, dict) else None
    if not isinstance(workers, list):
        return []
    return [w for w in workers if isinstance(w, dict) and isinstance(w.get("url"), str) and w["url"]]


def plan_sync(current: list[dict[str, Any]], target: list[str], pending: Iterable[str] = ()) -> SyncPlan:
    """What makes the router's workers (`current`, as it lists them) the `target` urls: those it lacks are
    added (but not those `pending`: added lately, which a router lists once it has checked them), those no
    longer targets removed by the id the router gave them. A worker already listed is left as it is."""
    listed: dict[str, str | None] = {}
    for worker in current:
        worker_id = worker.get("id")
        listed[normalize_url(worker["url"])] = worker_id if isinstance(worker_id, str) and worker_id else None
    wanted = {normalize_url(url): url for url in target}
    waiting = {normalize_url(url) for url in pending}
    add = tuple(wanted[url] for url in sorted(wanted.keys() - listed.keys() - waiting))
    gone = sorted(listed.keys() - wanted.keys())
    remove = tuple((worker_id, url) for url in gone if (worker_id := listed[url]) is not None)
    unknown = tuple(url for url in gone if listed[url] is None)
    return SyncPlan(add=add, remove=remove, unknown=unknown)


def routed_replicas(router_group: str | None, group: str | None) -> bool:
    """Whether the proxies send requests to a replica of `group`: every replica when the service has no
    router group, else the router group's only."""
    return router_group is None or group == router_group


TROUBLE_EVERY = 60.0  # seconds: a router's trouble that keeps changing is logged at most this often


@dataclass(frozen=True, slots=True)
class RouterNote:
    """The last router line a router replica's job logged."""

    line: str
    at: float
    trouble: bool


def next_note(last: RouterNote | None, line: str | None, trouble: bool, now: float) -> RouterNote | None:
    """The note to log after a sync step whose summary is `line` (None: nothing happened), or None to log
    nothing: a change is always logged; a trouble once, and another trouble no sooner than TROUBLE_EVERY
    after the last (a router's answer may differ each time); the same trouble again once a step went well."""
    if line is None:
        return None
    if last is not None and line == last.line:
        return None
    if trouble and last is not None and last.trouble and now - last.at < TROUBLE_EVERY:
        return None
    return RouterNote(line=line, at=now, trouble=trouble)


def router_address(replicas: Iterable[tuple[str | None, str, str]], router_group: str) -> str | None:
    """Of a run's registered replicas, as (group, state, url): the host of its router replica's url, where
    the other replicas reach it (a Dynamo router, docs/services.md#a-dynamo-router); None until the router
    replica runs. A draining router (being replaced) is not the one to join."""
    for group, state, url in replicas:
        if group == router_group and state != "draining":
            return urlsplit(url).hostname
    return None
