"""A step's heartbeats (activities/heartbeats.py): none for a step done within a second, since each
heartbeat the SDK sends is a write of the workflow's state in Temporal; one a second for a longer step,
with its progress line when it has one."""

from __future__ import annotations

import asyncio

import pytest
from temporalio import activity
from temporalio.testing import ActivityEnvironment

from activities import heartbeats
from activities.heartbeats import Progress, heartbeating


async def test_a_quick_step_sends_no_heartbeat_and_a_long_one_beats_with_its_progress(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(heartbeats, "_HEARTBEAT_EVERY", 0.05)
    beats: list[tuple] = []
    env = ActivityEnvironment()
    env.on_heartbeat = lambda *details: beats.append(details)

    @activity.defn
    async def quick() -> None:
        async with heartbeating():
            await asyncio.sleep(0.01)

    @activity.defn
    async def pulling() -> None:
        progress = Progress()
        async with heartbeating(progress):
            await asyncio.sleep(0.08)
            progress.line = "pulling 10 MB"
            await asyncio.sleep(0.1)

    await env.run(quick)
    assert beats == []
    await env.run(pulling)
    assert beats[0] == ()
    assert beats[-1] == ("pulling 10 MB",)
