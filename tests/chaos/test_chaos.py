"""SIGKILLs of the embedded stack's worker (several times), its Temporal dev server and its agent under a
bounded stream of runs: each run reaches its final status exactly once, done, its job started once and its
log whole, and nothing is left behind (docs/chaos.md). Once with the store on SQLite, once on a PostgreSQL
server, as the compose deployment has it. The figures are printed (`pytest -s`) and held to their goals."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

from tests.chaos.audit import (
    ZERO_GOALS,
    Figures,
    home_processes,
    job_processes,
    runs_figures,
)
from tests.chaos.stream import KINDS, ChaosStream, Profile, profile_from_env
from tests.e2e.conftest import Ferry, ferry_env, stack_of
from tests.store.postgres_server import PostgresServer

POSTGRES_SHORT_RUNS = 16  # the short profile's kills over fewer runs: the suite's time is counted


def chaos(base: Path, profile: Profile, store_name: str, env: dict[str, str]) -> Figures:
    """The profile's stream on a fresh stack in base/home, its figures printed and returned."""
    home, configs = base / "home", base / "configs"
    home.mkdir()
    configs.mkdir()
    ferry = Ferry(home, {**ferry_env(home), **env})
    stream = ChaosStream(ferry, profile, f"chaos-{store_name}", configs)
    started = time.monotonic()
    with stack_of(ferry):
        stream.run()
        submitted = time.monotonic()
        still_active = stream.await_finished()
        finished = time.monotonic()
        audits, leaks = stream.audit(env.get("FERRY_DATABASE_URL"))
    left = len(home_processes(home)) + len(job_processes(home, set(stream.names)))
    figures: Figures = {
        **runs_figures(audits),
        "runs still active at the end": len(still_active),
        **{f"{kind} kills": stream.killed[kind] for kind in KINDS},
        **{f"{kind} kills survived": stream.survived[kind] for kind in KINDS},
        "fewest jobs running at a kill": min(stream.jobs_at_kills, default=0),
        **leaks,
        "processes left after stop": left,
        "submission time (s)": round(submitted - started, 1),
        "time to finish after the last submission (s)": round(finished - submitted, 1),
        "duration (s)": round(time.monotonic() - started, 1),
    }
    print(f"\nchaos: profile {profile.name}, store {store_name}")
    for name, value in figures.items():
        print(f"{name}: {value:g}")
    for audit in audits:
        if audit.problems:
            print(f"{audit.name}: {'; '.join(audit.problems)}")
    return figures


def check_goals(figures: Figures, profile: Profile, runs: int) -> None:
    assert figures["runs submitted"] == runs
    assert figures["runs done"] == runs, figures
    for name in ZERO_GOALS:
        assert figures[name] == 0, f"{name}: {figures[name]:g}"
    for kind in KINDS:
        assert figures[f"{kind} kills"] == profile.kills.count(kind)
        assert figures[f"{kind} kills survived"] == figures[f"{kind} kills"]


def test_chaos_with_the_store_on_sqlite(tmp_path: Path, profile: Profile) -> None:
    check_goals(chaos(tmp_path, profile, "sqlite", {}), profile, profile.runs)


def test_chaos_with_the_store_on_postgresql(
    tmp_path: Path, profile: Profile, postgres: PostgresServer
) -> None:
    if profile.name == "short":
        profile = dataclasses.replace(profile, runs=POSTGRES_SHORT_RUNS)
    url = postgres.create_database("ferry_chaos")
    check_goals(chaos(tmp_path, profile, "postgresql", {"FERRY_DATABASE_URL": url}), profile, profile.runs)


@pytest.mark.parametrize("chosen", ["short", "long", ""])
def test_the_profiles_spread_their_kills_over_the_stream(chosen: str) -> None:
    profile = profile_from_env({"FERRY_CHAOS": chosen} if chosen else {})
    assert profile.name == (chosen or "short")
    spread = profile.kill_after()
    assert sorted(spread.values()) == sorted(profile.kills)
    assert min(spread) > 0 and max(spread) < profile.runs - 1
