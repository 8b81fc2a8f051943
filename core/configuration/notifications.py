"""`notifications:` of a run configuration (docs/runs.md#notifications): webhooks called on run events."""

from __future__ import annotations

import re
from enum import StrEnum
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from core.configuration.interpolation import Context
from core.configuration.model import ConfigModel


class NotificationKind(StrEnum):
    """What a notification is about (the body's `event`, the X-Ferry-Event header)."""

    STATUS = "status"  # the run entered a new, not finished status
    RETRY = "retry"  # the run retries: its failed replicas are resubmitted
    FINISHED = "finished"  # the run's final status, with its termination reason and message


# A notification's secret is one reference to a secret, and nothing else: its value is the HMAC key.
_SECRET_REFERENCE = re.compile(r"^\$\{\{\s*secrets\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}$")
NOTIFICATION_SECRET: Context = (
    lambda name: name.startswith("secrets."),
    "a notification's secret is ${{ secrets.NAME }}",
)


class NotificationSpec(ConfigModel):
    url: str
    events: list[NotificationKind] | None = Field(default=None, min_length=1)  # None: every kind
    secret: str | None = None

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{url!r} is not an http:// or https:// URL")
        return url

    @field_validator("secret")
    @classmethod
    def _one_secret(cls, secret: str | None) -> str | None:
        if secret is not None and not _SECRET_REFERENCE.match(secret):
            raise ValueError("must be one ${{ secrets.NAME }} reference (ferry secret set NAME)")
        return secret

    def secret_name(self) -> str | None:
        """The secret whose value signs the bodies; None: unsigned."""
        matched = None if self.secret is None else _SECRET_REFERENCE.match(self.secret)
        return None if matched is None else matched.group(1)

    def wants(self, kind: NotificationKind) -> bool:
        return self.events is None or kind in self.events
