"""A run's webhooks called (docs/runs.md#notifications): one POST per delivery, signed with the secret the
webhook names, its value opened here from the store (activities/secrets.py) and never in a workflow's
history. A 2xx answer delivers it; anything else raises, and Temporal retries the activity with backoff
(workflows/retry_policies.py NOTIFY) under the same X-Ferry-Delivery id.
"""

from __future__ import annotations

import httpx
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.secrets import SecretFiller
from core.notifications import Delivery, headers
from core.wire import activity_names as names
from store import Store

REQUEST_TIMEOUT = 10.0  # seconds: a receiver slower than this is retried like a down one


class NotificationActivities:
    def __init__(self, store: Store) -> None:
        self._secrets = SecretFiller(store)

    @activity.defn(name=names.DELIVER_NOTIFICATION)
    async def deliver_notification(self, delivery: Delivery) -> int:
        """POST `delivery`; its receiver's status code when 2xx, else an error to retry."""
        key = None
        with self._secrets.masking():
            if delivery.secret is not None:
                project = delivery.notification.project
                key = (await self._secrets.open_in(project, [delivery.secret]))[delivery.secret]
            try:
                async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT, trust_env=False) as client:
                    answer = await client.post(
                        delivery.url, content=delivery.notification.body(), headers=headers(delivery, key)
                    )
            except httpx.HTTPError as err:
                raise ApplicationError(f"{delivery.url}: {type(err).__name__}: {err}") from None
        if not answer.is_success:
            raise ApplicationError(f"{delivery.url} answered {answer.status_code}")
        return answer.status_code
