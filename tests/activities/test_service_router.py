"""The router sync (activities.service_router) against the stand-in router and workers of
tests/e2e/sglang_router_server.py, run as real processes, with the replicas in a real store: each ready
replica of the other groups is added with its kind, one that is no longer ready removed, a step with nothing
to do does nothing, a replaced router gets every worker again, and what a router refuses is the step's
trouble."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from activities.service_router import RouterSync
from embedded.processes import free_port
from store.engine import make_engine, migrate
from store.models import ServiceReplicaRecord
from store.repository import Store

SERVER = Path(__file__).resolve().parents[1] / "e2e" / "sglang_router_server.py"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    engine = make_engine(f"sqlite:///{tmp_path / 'ferry.db'}")
    migrate(engine)
    yield Store(engine)
    engine.dispose()


@pytest.fixture
def serve() -> Iterator[Callable[..., str]]:
    started: list[subprocess.Popen[bytes]] = []

    def start(*args: str) -> str:
        port = free_port()
        process = subprocess.Popen([sys.executable, str(SERVER), args[0], str(port), *args[1:]])
        started.append(process)
        deadline = time.monotonic() + 60  # a Python process's start, on a loaded machine
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return f"http://127.0.0.1:{port}"
            except OSError:
                assert process.poll() is None, f"{args[0]} exited with {process.returncode}"
                assert time.monotonic() < deadline, f"{args[0]} did not listen on {port} in 60 s"
                time.sleep(0.05)

    yield start
    for process in started:
        process.terminate()
        process.wait()


def _replica(store: Store, replica_id: str, url: str, group: str, state: str = "ready") -> None:
    store.register_replica(
        ServiceReplicaRecord(
            id=replica_id,
            run_id="run",
            replica_num=0,
            submission_num=0,
            url=url,
            state=state,
            group_name=group,
        )
    )


async def test_the_router_gets_the_ready_workers_and_loses_the_others(
    store: Store, serve: Callable[..., str]
) -> None:
    start = serve
    router_url = start("router")
    prefill, decode = start("worker", "prefill"), start("worker", "decode")
    _replica(store, "r", router_url, "router")
    _replica(store, "p", prefill, "prefill")
    _replica(store, "d", decode, "decode")
    _replica(store, "late", start("worker", "decode"), "decode", state="probing")
    async with httpx.AsyncClient() as http:
        sync = RouterSync(store, "run", "router", router_url)
        step = await sync.step(http)
        assert sorted(step.added) == sorted([prefill, decode]) and step.trouble is None
        listed = (await http.get(router_url + "/workers")).json()["workers"]
        kinds = {(w["url"], w["worker_type"], w.get("bootstrap_port")) for w in listed}
        assert kinds == {(prefill, "prefill", 8998), (decode, "decode", None)}
        assert (await sync.step(http)).summary() is None  # in step: nothing asked of the router
        store.set_replica_state("d", "draining")
        step = await sync.step(http)
        assert step.removed == [decode] and step.summary() == f"router: removed {decode}"
        # A new router replica (nothing registered): every worker again.
        replaced = start("router")
        assert (await RouterSync(store, "run", "router", replaced).step(http)).added == [prefill]
        refusing = start("router", "refuse")
        trouble = (await RouterSync(store, "run", "router", refusing).step(http)).summary()
        assert trouble is not None and trouble.startswith(f"router: refused worker {prefill}: 400")
        gone = RouterSync(store, "run", "router", "http://127.0.0.1:9")
        assert (await gone.step(http)).summary().startswith("router: not reachable")  # type: ignore[union-attr]
