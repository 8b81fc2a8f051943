"""Helpers for the activity and child workflow handles the workflows hold."""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import workflow


def abandon(handle: workflow.ActivityHandle[Any]) -> None:
    """Cancel an activity whose outcome no longer matters, without waiting for it."""
    handle.cancel()
    settle(handle)


def settle(handle: asyncio.Task[Any]) -> None:
    """An activity or child workflow whose outcome no one awaits (a job's news reaches its run by
    signal): its failure, if any, is retrieved so that it is not reported as never retrieved."""
    handle.add_done_callback(lambda done: None if done.cancelled() else done.exception())
