"""`retry` in a configuration: which events a run retries on, and for how long (docs/runs.md)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from core.configuration.durations import Duration
from core.status import RetryEvent

DEFAULT_RETRY_DURATION = 3600  # dstack: retrying stops after 1h unless `duration` says otherwise


class RetryPolicy(BaseModel):
    """What `retry: true` or `retry: {on_events, duration}` means once normalised."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    on_events: list[RetryEvent] = Field(default_factory=lambda: list(RetryEvent))
    duration: Duration = DEFAULT_RETRY_DURATION
