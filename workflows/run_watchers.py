"""The runs that wait for this one (docs/dependencies.md): each is told this run's status when it asks and
at every change after, until this run's workflow ends. Kept by RunWorkflow, carried across
continue-as-new (a watcher is told the status again after one: the news is idempotent). And the ask of a
run this one waits for (`watch_run`).
"""

from __future__ import annotations

import contextlib
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import FailureError

with workflow.unsafe.imports_passed_through():
    from core.runs.effects import WatchRun
    from core.wire.messages import WatchReply, WatchRunRequest
    from core.wire.run_messages import RunNews, WatchRequest
    from workflows import activity_stubs, retry_policies

# The watcher's signal (RunWorkflow.dependency_news).
DEPENDENCY_NEWS = "dependency_news"


class Watchers:
    def __init__(self, run_id: str, watchers: list[str]) -> None:
        self._run_id = run_id
        self._told: dict[str, RunNews | None] = dict.fromkeys(watchers)  # watcher workflow -> last told

    def add(self, request: WatchRequest) -> None:
        """A watch for this run (one for an older run of the same name is that run's: it has ended, and
        the watcher's activity finds its end in the store)."""
        if request.run_id == self._run_id and request.watcher_workflow_id not in self._told:
            self._told[request.watcher_workflow_id] = None

    def ids(self) -> list[str]:
        return list(self._told)

    def untold(self, news: RunNews) -> bool:
        return any(told != news for told in self._told.values())

    async def tell(self, news: RunNews) -> None:
        """Every watcher not told `news` yet, until none is left (a watch may arrive meanwhile); a watcher
        that has ended is dropped."""
        while self.untold(news):
            for watcher in [w for w, told in self._told.items() if told != news]:
                self._told[watcher] = news
                handle = workflow.get_external_workflow_handle(watcher)
                try:
                    await handle.signal(DEPENDENCY_NEWS, news)
                except FailureError:
                    with contextlib.suppress(KeyError):
                        del self._told[watcher]


async def watch_run(effect: WatchRun) -> RunNews | None:
    """A run this one waits for: its news now if it has ended, else None and it tells this run (`watch`)."""
    request = WatchRunRequest(
        run_id=effect.run_id,
        workflow_id=effect.workflow_id,
        watcher_workflow_id=workflow.info().workflow_id,
    )
    reply: WatchReply = await workflow.execute_activity(
        activity_stubs.watch_run,
        request,
        start_to_close_timeout=timedelta(seconds=30),
        retry_policy=retry_policies.QUICK,
    )
    return reply.news
