"""An instance is seen as it is now (docs/fleets.md#what-an-instance-is): `watch_local_instance`, against
real agents, reports the local instance once its agent describes it otherwise than the fleet knows it (an
agent started again with a container engine where the first had none), and not while it is the same."""

from __future__ import annotations

import asyncio
from pathlib import Path

from temporalio.testing import ActivityEnvironment

from activities.fleet import FleetActivities
from activities.instances import LOCAL_INSTANCE, InstanceDirectory
from core.fleets.messages import LocalInstance, WatchLocal
from core.fleets.placement import InstanceStatus
from store import open_store
from tests.agent.agent_harness import start_agent, stop_agent

NO_ENGINE = ("--container-engine", "unix:///nonexistent/engine.sock")  # named, and nothing answers there


async def test_the_local_instance_is_reported_once_its_agent_describes_it_otherwise(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'ferry.db'}")
    instances = InstanceDirectory()
    fleets = FleetActivities(instances, store)
    env = ActivityEnvironment()
    first = start_agent(tmp_path / "first", extra_args=NO_ENGINE)
    second = None
    try:
        instances.add(LOCAL_INSTANCE, first.client())
        known = await env.run(fleets.local_instance, LocalInstance(fleet="local"))
        assert known.container_engine is None and known.agent_release
        assert known.hardware is not None and known.hardware.cpus >= 1

        watch = asyncio.create_task(
            env.run(fleets.watch_local_instance, WatchLocal(fleet="local", described=known.description_key()))
        )
        await asyncio.sleep(3)  # a few checks of the same agent: nothing to report
        assert not watch.done()

        # The stack started again, the engine there now: the same data directory, another agent.
        stop_agent(first)
        second = start_agent(tmp_path / "second", data_dir=first.data_dir)
        instances.add(LOCAL_INSTANCE, second.client())
        report = await asyncio.wait_for(watch, 30)
        [change] = report.changes
        assert (change.name, change.status) == (LOCAL_INSTANCE, InstanceStatus.READY)
        assert change.slot is not None and change.slot.container_engine is not None
        assert change.slot.description_key() != known.description_key()
        assert (change.slot.total, change.slot.hardware) == (known.total, known.hardware)
    finally:
        stop_agent(first)
        if second is not None:
            stop_agent(second)
        await instances.aclose()
