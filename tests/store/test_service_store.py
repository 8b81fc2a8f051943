"""The store's services records (store/service_repository.py): replicas, proxies, drains, counts, users."""

from __future__ import annotations

from pathlib import Path

import pytest

from store import ServiceReplicaRecord, Store, open_store


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return open_store(f"sqlite:///{tmp_path}/ferry.db")


def replica(state: str = "probing") -> ServiceReplicaRecord:
    return ServiceReplicaRecord(
        id="r0", run_id="run", replica_num=0, submission_num=0, url="http://a:1", state=state
    )


def test_a_probe_never_puts_a_draining_replica_back(store: Store) -> None:
    store.register_replica(replica())
    assert store.set_replica_state("r0", "ready", '[{"url": "port"}]')
    assert store.set_replica_state("r0", "draining")
    assert not store.set_replica_state("r0", "ready")
    stored = store.get_replica("r0")
    assert stored is not None and stored.state == "draining" and stored.probes == '[{"url": "port"}]'
    assert not store.set_replica_state("gone", "ready")


def test_re_registering_keeps_when_it_was_first_registered(store: Store) -> None:
    store.register_replica(replica())
    first = store.get_replica("r0")
    store.register_replica(replica("ready").model_copy(update={"registered_at": 1.0}))
    again = store.get_replica("r0")
    assert first is not None and again is not None
    assert again.registered_at == first.registered_at and again.state == "ready"


def test_request_counts_add_up_across_proxies_and_seconds(store: Store) -> None:
    store.add_requests("g1", {("run", 100): 3, ("run", 101): 1})
    store.add_requests("g1", {("run", 100): 2})
    store.add_requests("g2", {("run", 101): 4, ("other", 101): 9})
    assert store.request_count("run", 100) == 10 and store.request_count("run", 101) == 5
    store.prune_requests(101)
    assert store.request_count("run", 0) == 5


def test_drains_are_per_proxy_and_go_with_the_replica(store: Store) -> None:
    store.register_replica(replica())
    store.mark_drained("r0", "g1")
    store.mark_drained("r0", "g1")  # a repeat is harmless
    store.mark_drained("r0", "g2")
    assert store.drained_by("r0") == {"g1", "g2"}
    store.remove_gateway("g2")
    assert store.drained_by("r0") == {"g1"}
    store.remove_replica("r0")
    assert store.drained_by("r0") == set() and store.get_replica("r0") is None


def test_users_by_token_hash(store: Store) -> None:
    store.put_user("ana", "h1")
    assert store.user_for_token_hash("h1") == "ana"
    store.put_user("ana", "h2")  # a new token: the old one no longer answers
    assert store.user_for_token_hash("h1") is None and store.user_for_token_hash("h2") == "ana"
