"""Helpers for the activity handles the workflows hold."""

from __future__ import annotations

from typing import Any

from temporalio import workflow


def abandon(handle: workflow.ActivityHandle[Any]) -> None:
    """Cancel an activity whose outcome no longer matters, without waiting for it; its failure, if any,
    is retrieved so that it is not reported as never retrieved."""
    handle.cancel()
    handle.add_done_callback(lambda done: None if done.cancelled() else done.exception())
