"""A run's webhooks called (docs/runs.md#notifications): one POST per delivery, signed with the secret the
webhook names, its value opened here from the store (activities/secrets.py) and never in a workflow's
history. A 2xx answer delivers it; anything else raises, and Temporal retries the activity with backoff
(workflows/retry_policies.py NOTIFY) under the same X-Ferry-Delivery id.

The webhook's host is resolved here, every address it resolves to checked, and the POST made to one of
those very addresses (the Host header and TLS name its host), so that a name that resolves elsewhere a
moment later (DNS rebinding) gains nothing. Unless the deployment allows them, loopback, link-local,
private and other non-public addresses are refused at once, without retries (docs/deployment.md#webhooks).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable

import httpx
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.secrets import SecretFiller
from core.configuration.notifications import resolved_refusal
from core.notifications import Delivery, headers
from core.wire import activity_names as names
from store import Store

REQUEST_TIMEOUT = 10.0  # seconds: a receiver slower than this is retried like a down one

Resolver = Callable[[str, int], Awaitable[list[str]]]


async def resolve(host: str, port: int) -> list[str]:
    """The addresses `host` resolves to, in the resolver's order, each once."""
    found = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in found))


class NotificationActivities:
    def __init__(self, store: Store, allow_private: bool = False, resolver: Resolver = resolve) -> None:
        self._secrets = SecretFiller(store)
        self._allow_private = allow_private
        self._resolve = resolver

    @activity.defn(name=names.DELIVER_NOTIFICATION)
    async def deliver_notification(self, delivery: Delivery) -> int:
        """POST `delivery`; its receiver's status code when 2xx, else an error to retry (or, for an address
        this deployment refuses, not to)."""
        url = httpx.URL(delivery.url)
        host = url.raw_host.decode("ascii")  # an IDN host as IDNA, an IPv6 one without brackets
        try:
            addresses = await self._resolve(host, url.port or (443 if url.scheme == "https" else 80))
        except OSError as err:
            raise ApplicationError(f"{delivery.url}: cannot resolve {host}: {err}") from None
        refusal = None if self._allow_private else resolved_refusal(delivery.url, addresses)
        if refusal is not None:
            raise ApplicationError(refusal, non_retryable=True)
        key = None
        with self._secrets.masking():
            if delivery.secret is not None:
                project = delivery.notification.project
                key = (await self._secrets.open_in(project, [delivery.secret]))[delivery.secret]
            answer = await _post(url, addresses, delivery.notification.body(), headers(delivery, key))
        if not answer.is_success:
            raise ApplicationError(f"{delivery.url} answered {answer.status_code}")
        return answer.status_code


async def _post(url: httpx.URL, addresses: list[str], body: bytes, sent: dict[str, str]) -> httpx.Response:
    """POST to the checked addresses in turn until one connects; Host and TLS (SNI and the certificate's
    check) name the URL's host."""
    pinned = {**sent, "Host": url.netloc.decode("ascii")}
    extensions = {"sni_hostname": url.raw_host.decode("ascii")} if url.scheme == "https" else {}
    async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT, trust_env=False) as client:
        for index, address in enumerate(addresses):
            try:
                return await client.post(
                    url.copy_with(host=address), content=body, headers=pinned, extensions=extensions
                )
            except httpx.ConnectError as err:
                if index == len(addresses) - 1:
                    raise ApplicationError(f"{url}: ConnectError: {err}") from None
            except httpx.HTTPError as err:
                raise ApplicationError(f"{url}: {type(err).__name__}: {err}") from None
    raise ApplicationError(f"{url}: {url.host} resolves to no address")
