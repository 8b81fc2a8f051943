"""What a placed job, its task prepared, waits for before its start (docs/jobs.md): the nodes of its replica
that `startup_order` has start first (core.runs.startup), and a Dynamo worker's router replica
(docs/services.md#a-dynamo-router). Each wait is logged (`memo waiting=...`, which `ferry ps` shows) and
ended by a stop. What to wait for is the job's input; these only carry it out."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from core.jobs import transitions as job
    from core.jobs.phases import JobControl
    from core.wire.job_messages import JobInput
    from core.wire.services import RouterAddressRequest
    from workflows import activity_stubs
    from workflows.job_agent import JobAgent, Stopped

# As dstack: a Dynamo worker waits this long for its router replica to run, then fails.
ROUTER_WAIT = timedelta(minutes=30)


class StartupWaits:
    """One job submission's waits; `log` logs an event, `publish` tells the run what was logged."""

    def __init__(
        self,
        agent: JobAgent,
        control: Callable[[], JobControl],
        log: Callable[..., Any],
        publish: Callable[[], None],
    ) -> None:
        self._agent = agent
        self._control = control
        self._log = log
        self._publish = publish

    async def peers(self, inp: JobInput) -> None:
        """`startup_order`: hold until the run says the jobs this one waits for have started."""
        if not inp.waits_for or self._control().peers_started:
            return
        self._log("memo", waiting=job.peers_memo(inp))
        self._publish()
        await workflow.wait_condition(
            lambda: self._control().peers_started or self._control().terminate is not None
        )
        if self._control().terminate is not None:
            raise Stopped()

    async def router(self, inp: JobInput) -> str | None:
        """A Dynamo worker: hold until the router replica runs; its address (None for any other job). A
        router that has not run within ROUTER_WAIT fails the job."""
        if inp.service is None or inp.service.router_group is None or not job.waits_for_router(inp):
            return None
        self._log("memo", waiting="router")
        self._publish()
        request = RouterAddressRequest(
            run_id=inp.run_id,
            router_group=inp.service.router_group,
            not_after=(workflow.now() + ROUTER_WAIT).timestamp(),
        )
        # The activity gives up at `not_after` itself; the margin covers its last poll.
        margin = timedelta(minutes=1)
        return await self._agent.step(activity_stubs.router_address, request, timeout=ROUTER_WAIT + margin)
