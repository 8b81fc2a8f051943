"""A run that waits for another asks it for news (docs/dependencies.md): no polling, one ask.

The store says first whether the run waited for has already ended (then its end is the answer, replayed
from its eventlog to know whether it ever ran). Otherwise its workflow is sent a watch and tells the
waiting run its status from then on. The store is read again after the watch: a run that ended between
the two reads (its workflow closed, or a newer run of the same name took the workflow id) is answered from
the store, so no watch is lost.
"""

from __future__ import annotations

import asyncio

from temporalio import activity
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from core.runs.state_machine import replay_run
from core.runs.watching import run_news
from core.status import RunStatus
from core.wire import activity_names as names
from core.wire.messages import WatchReply, WatchRunRequest
from core.wire.run_messages import RunNews, WatchRequest
from store import Store

WATCH_SIGNAL = "watch"  # RunWorkflow.watch


class RunWatchActivities:
    def __init__(self, client: Client, store: Store) -> None:
        self._client = client
        self._store = store

    @activity.defn(name=names.WATCH_RUN)
    async def watch_run(self, request: WatchRunRequest) -> WatchReply:
        news = await asyncio.to_thread(self.ended_news, request.run_id)
        if news is not None:
            return WatchReply(news=news)
        watch = WatchRequest(run_id=request.run_id, watcher_workflow_id=request.watcher_workflow_id)
        try:
            await self._client.get_workflow_handle(request.workflow_id).signal(WATCH_SIGNAL, watch)
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
        return WatchReply(news=await asyncio.to_thread(self.ended_news, request.run_id))

    def ended_news(self, run_id: str) -> RunNews | None:
        """The news of a run that has ended, from the store; None while it is active."""
        record = self._store.get_run(run_id)
        if record is None:
            raise LookupError(f"run {run_id} is not in the store")  # retried: submission stores it first
        if not RunStatus(record.status).is_finished():
            return None
        events = [r.to_event() for r in self._store.read_events(run_id, None)]
        return run_news(run_id, replay_run(events))
