"""`notifications:` of a run configuration (docs/runs.md#notifications): webhooks called on run events; and
which webhook addresses a deployment refuses (docs/deployment.md#webhooks)."""

from __future__ import annotations

import ipaddress
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


# Webhooks to loopback, link-local, private and other non-public addresses are refused unless the
# deployment allows them (docs/deployment.md#webhooks): the embedded stack does by default, a deployment's
# `ferry worker` does not.
ALLOW_PRIVATE_VARIABLE = "FERRY_WEBHOOKS_ALLOW_PRIVATE"
_ALLOWS = f" ({ALLOW_PRIVATE_VARIABLE}=1 allows private webhooks, docs/deployment.md#webhooks)"


def private_webhooks_allowed(setting: bool | None, embedded: bool) -> bool:
    """FERRY_WEBHOOKS_ALLOW_PRIVATE as set, else whether this is the embedded stack (one user's machine)."""
    return embedded if setting is None else setting


def refused_address(address: str) -> str | None:
    """What kind of address `address` (an IP, as a resolver gives it) is when a webhook may not be posted
    there: "loopback", "private" and so on; None for a public one."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])  # an IPv6 scope (`fe80::1%eth0`) aside
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # ::ffff:127.0.0.1 is 127.0.0.1
    kinds = (
        ("unspecified", ip.is_unspecified),
        ("loopback", ip.is_loopback),
        ("link-local", ip.is_link_local),
        ("multicast", ip.is_multicast),
        ("private", ip.is_private),
        ("reserved", ip.is_reserved),
        ("non-public", not ip.is_global),  # e.g. 100.64.0.0/10, carrier-grade NAT
    )
    return next((kind for kind, refused in kinds if refused), None)


def refused_webhook(url: str) -> str | None:
    """The one line that refuses `url` before it is submitted, when its host is an IP address that is not
    public or `localhost` (a host name is resolved and checked only when a notification is posted); None
    when it may go on."""
    host = (urlsplit(url).hostname or "").rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        kind: str | None = "loopback"
    else:
        try:
            kind = refused_address(host)
        except ValueError:
            return None  # a host name
    if kind is None:
        return None
    return f"{url}: {host} is a {kind} address: refused{_ALLOWS}"


def resolved_refusal(url: str, addresses: list[str]) -> str | None:
    """The one line that refuses posting to `url` whose host resolved to `addresses`, when any of them is
    not public (all are checked: a name may resolve to several); None when all are."""
    host = urlsplit(url).hostname
    for address in addresses:
        kind = refused_address(address)
        if kind is not None:
            resolved = "is" if address == host else f"resolves to {address},"
            return f"{url}: {host} {resolved} a {kind} address: refused{_ALLOWS}"
    return None
