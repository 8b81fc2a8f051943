"""The proxy's pure parts: reading a run's configuration, picking a replica, reading a bearer token."""

from __future__ import annotations

import json

from gateway.balancer import Balancer
from gateway.routing_table import ModelRoute, Replica, Service, ServiceSettings, parse_settings
from gateway.tokens import bearer_token


def test_settings_are_read_tolerantly() -> None:
    assert parse_settings("{}") == ServiceSettings(auth=True, strip_prefix=True, model=None)
    assert parse_settings("not json") == ServiceSettings()
    assert parse_settings("[1, 2]") == ServiceSettings()
    assert (
        parse_settings(json.dumps({"auth": "no", "strip_prefix": None})) == ServiceSettings()
    )  # auth stays on
    data = {"auth": False, "strip_prefix": False, "model": "llama"}
    assert parse_settings(json.dumps(data)) == ServiceSettings(False, False, ModelRoute("llama", "/v1"))
    model = {"type": "chat", "name": "m", "format": "openai", "prefix": "/api/v1/"}
    assert parse_settings(json.dumps({"model": model})).model == ModelRoute("m", "/api/v1")
    assert parse_settings(json.dumps({"model": {**model, "prefix": "/"}})).model == ModelRoute("m", "")
    assert parse_settings(json.dumps({"model": {"prefix": "/v1"}})).model is None
    assert parse_settings(json.dumps({"model": 3})).model is None


def _service(*ids: str) -> Service:
    replicas = tuple(Replica(id=i, run_id="run", url=f"http://{i}:80", state="ready") for i in ids)
    return Service("run", "main", "app", ServiceSettings(), 0, replicas, replicas)


def test_the_replica_with_the_fewest_requests_in_flight_is_picked() -> None:
    balancer = Balancer()
    service = _service("a", "b", "c")
    balancer.acquire("a")
    balancer.acquire("a")
    balancer.acquire("b")
    assert {balancer.pick(service).id for _ in range(6)} == {"c"}  # type: ignore[union-attr]
    balancer.acquire("c")
    balancer.acquire("c")
    assert balancer.pick(service).id == "b"  # type: ignore[union-attr]
    assert balancer.pick(service, exclude=("b",)).id in ("a", "c")  # type: ignore[union-attr]
    assert balancer.pick(_service("a"), exclude=("a",)) is None
    assert balancer.pick(_service()) is None


def test_idle_replicas_take_turns_and_release_reports_idleness() -> None:
    balancer = Balancer()
    idle: list[str] = []
    balancer.on_idle = idle.append
    service = _service("a", "b", "c")
    picked = [balancer.pick(service).id for _ in range(6)]  # type: ignore[union-attr]
    assert sorted(picked) == ["a", "a", "b", "b", "c", "c"]
    balancer.acquire("a")
    balancer.acquire("a")
    balancer.release("a")
    assert (balancer.in_flight("a"), idle) == (1, [])
    balancer.release("a")
    assert (balancer.in_flight("a"), idle) == (0, ["a"])


def test_bearer_tokens() -> None:
    assert bearer_token("Bearer abc") == "abc"
    assert bearer_token("bearer  abc ") == "abc"
    assert bearer_token("Basic abc") is None
    assert bearer_token("Bearer") is None
    assert bearer_token(None) is None
    assert bearer_token("Bearer " + "x" * 600) is None
