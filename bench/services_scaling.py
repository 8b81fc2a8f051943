"""The services section's scaling figures (bench.services_bench): `replicas: 1..2` scaled up and down under
a paced load, and two replicas re-applied with a changed env, a rolling deployment; requests failed
during each (must be 0)."""

from __future__ import annotations

import asyncio
import functools

from bench.services_parts import HIGH_RATE, LOW_RATE, PROJECT, SCALING_TARGET, LoadResult, Pacer
from bench.services_runs import ServiceRuns
from core.services.replicas import service_url
from store import RunRecord


async def scale_down(bench: ServiceRuns) -> None:
    """`replicas: 1..2` under a paced load that holds two replicas, then a low one: one replica."""
    r = bench.report
    name = "scale-down"
    scaling = {"target": SCALING_TARGET, "window": "2s", "scale_up_delay": "0s", "scale_down_delay": "2s"}
    record = await bench.submit(name, replicas="1..2", scaling=scaling)
    await bench.ready(record, 1)
    url = service_url(bench.proxy, PROJECT, name)
    await bench.until("an answer through the proxy", functools.partial(bench.answers, url), 15)
    pacer = Pacer(url, HIGH_RATE, cap=HIGH_RATE * 150, limit_s=150)
    load = asyncio.create_task(pacer.run())
    try:
        up = await _until_ready_or_load_ends(bench, record, 2, load, 60)
        r.put("services_scale_up_s", up)  # the high rate's start -> two replicas ready
        await asyncio.sleep(3)  # both serve
        pacer.rate = LOW_RATE
        down = await _until_ready_or_load_ends(bench, record, 1, load, 60)
        r.put("services_scale_down_s", down)  # the low rate's start -> the second replica gone
        await asyncio.sleep(3)
    finally:
        pacer.stop()
        result = await load
    r.put("services_scale_down_rates_per_s", f"{HIGH_RATE} then {LOW_RATE} (target {SCALING_TARGET})")
    r.put("services_scale_down_requests_sent", result.sent)
    r.put("services_scale_down_failed_requests", result.failed)
    if result.failures:
        r.note(f"scale-down: failures {dict(result.failures)}")
    await bench.stop_run(name)


async def rolling(bench: ServiceRuns) -> None:
    """Two replicas under a paced load, re-applied with a changed env: a rolling deployment."""
    r = bench.report
    name = "rolling"
    record = await bench.submit(name, replicas=2)
    await bench.ready(record, 2)
    url = service_url(bench.proxy, PROJECT, name)
    await bench.until("an answer through the proxy", functools.partial(bench.answers, url), 15)
    pacer = Pacer(url, LOW_RATE * 4, cap=LOW_RATE * 4 * 150, limit_s=150)
    load = asyncio.create_task(pacer.run())
    try:
        await asyncio.sleep(1)
        reply = await bench.api.deploy(name, bench.conf(name, replicas=2, env={"DEPLOYMENT": "1"}))
        if reply.refused is not None:
            raise RuntimeError(f"rolling deployment refused: {reply.refused}")

        async def rolled() -> bool:
            if load.done():
                raise RuntimeError("the load ended first")
            rows = await asyncio.to_thread(bench.ferry.store.list_service_replicas, [record.id])
            return len(rows) == 2 and all(row.deployment_num == 1 and row.state == "ready" for row in rows)

        r.put("services_rolling_s", await bench.until("the new deployment alone", rolled, 90))
        await asyncio.sleep(1)
    finally:
        pacer.stop()
        result = await load
    r.put("services_rolling_requests_sent", result.sent)
    r.put("services_rolling_failed_requests", result.failed)
    if result.failures:
        r.note(f"rolling: failures {dict(result.failures)}")
    await bench.stop_run(name)


async def _until_ready_or_load_ends(
    bench: ServiceRuns, record: RunRecord, count: int, load: asyncio.Task[LoadResult], limit: float
) -> float:
    async def check() -> bool:
        if load.done():
            raise RuntimeError("the load ended first")
        found = await bench.replicas(record)
        return len(found) == count and all(state == "ready" for state, _ in found)

    return await bench.until(f"{count} replica(s) of {record.run_name} ready", check, limit)
