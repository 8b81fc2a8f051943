"""The upgrade test (docs/upgrades.md#the-upgrade-test): the previous release's embedded stack, run from its
own code (tests/histories/<version>/source.tar.gz, testbed/releases.py) with 100 runs of several kinds in
flight, is upgraded to this code with `ferry server upgrade`; then every run reaches the final status it
would have reached without the upgrade, no job's commands start twice, logs and events are whole, nothing
is stuck and no capacity is leaked. The figures are printed (`pytest -s`)."""

from __future__ import annotations

import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

import httpx

from core.settings import DEFAULT_PROJECT
from core.version import ferry_version
from store.engine import make_engine
from store.repository import Store
from testbed.releases import previous_release, unpack_release
from tests.chaos.audit import ZERO_GOALS, home_processes, leak_figures
from tests.chaos.stream import stack_process, until
from tests.e2e.conftest import Ferry, ferry_env, stack_of
from tests.upgrade.mix import Mix, check

QUICK, HELD, RETRYING, MULTI_NODE, SERVICES, SCHEDULED = 50, 38, 4, 4, 2, 2
SUBMITTERS = 4  # the old CLI's applies at once
LIMIT = 300.0


def environ_of(pid: int | None) -> dict[str, str]:
    assert pid is not None
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode(errors="replace").split("=", 1) for item in raw if b"=" in item)


def active(ferry: Ferry) -> list[dict[str, object]]:
    listed = ferry("ps", "--json", timeout=LIMIT)
    assert listed.returncode == 0, listed.stderr
    runs: list[dict[str, object]] = json.loads(listed.stdout)
    return runs


def answer(url: str, token: str) -> str:
    with httpx.Client(trust_env=False, timeout=30) as client:
        return client.get(url, headers={"Authorization": f"Bearer {token}"}).text.strip()


def test_a_stack_upgraded_with_100_runs_in_flight(tmp_path: Path) -> None:
    release = previous_release()
    code = unpack_release(release, tmp_path / "release")
    home, configs = tmp_path / "home", tmp_path / "configs"
    home.mkdir()
    configs.mkdir()
    env = ferry_env(home)
    # The release's packages first on the path, and its directory the CLI's (sys.path[0] for `-m`).
    old = Ferry(home, {**env, "PYTHONPATH": str(code)}, command=[sys.executable, "-m", "cli"], cwd=code)
    new = Ferry(home, env)
    mix = Mix(configs, tmp_path / "ran", tmp_path / "gate")
    figures: dict[str, float] = {}
    with stack_of(new):
        started = old("server", "start", timeout=LIMIT)
        assert started.returncode == 0, started.stderr
        old_pids = {kind: stack_process(home, kind).pid for kind in ("worker", "agent", "proxy")}
        for kind, pid in old_pids.items():  # the previous release's code runs them
            assert environ_of(pid).get("PYTHONPATH") == str(code), kind

        # The retrying runs last: their first attempt fails at once, and the backoff before the second
        # (15 s) spans the upgrade.
        paths = (
            [mix.held(i) for i in range(HELD)]
            + [mix.multi_node(i) for i in range(MULTI_NODE)]
            + [mix.service(i) for i in range(SERVICES)]
            + [mix.scheduled(i) for i in range(SCHEDULED)]
            + [mix.quick(i) for i in range(QUICK)]
            + [mix.retrying(i) for i in range(RETRYING)]
        )
        began = time.monotonic()
        with ThreadPoolExecutor(SUBMITTERS) as pool:
            applied = list(pool.map(lambda path: old("apply", "-y", "-d", "-f", path, timeout=LIMIT), paths))
        for path, done in zip(paths, applied, strict=True):
            assert done.returncode == 0, f"{path}: {done.stderr}"
        figures["submission time (s)"] = round(time.monotonic() - began, 1)
        for index in range(SCHEDULED):
            assert old("schedule", "trigger", f"nightly-{index}").returncode == 0

        # Before the upgrade: the services answer through the old proxy, the held jobs all run.
        token = old("token").stdout.strip()
        urls = {}
        for index in range(SERVICES):
            name = f"web-{index}"

            def serving(name: str = name) -> bool:
                [run] = [run for run in active(old) if run["name"] == name]
                urls[name] = str(run.get("url"))
                return (
                    answer(urls[name], token) == f"replica 0 {name}" if run["status"] == "running" else False
                )

            until(f"{name} to serve through the proxy", serving, LIMIT)
        held = [
            marker
            for p in mix.planned
            if p.kind in ("held", "multi-node", "scheduled")
            for marker in p.starts
        ]
        until("every held job to run", lambda: all((mix.ran / marker).exists() for marker in held), LIMIT)
        in_flight = [run["name"] for run in active(old)]
        figures["runs submitted"] = len(mix.planned)
        figures["runs in flight at the upgrade"] = len(in_flight)

        upgraded = new("server", "upgrade", timeout=LIMIT)
        assert upgraded.returncode == 0, upgraded.stderr
        print(upgraded.stderr)
        for kind, pid in old_pids.items():
            process = stack_process(home, kind)
            assert process.alive and process.pid != pid, f"{kind}: {process}"
            assert "PYTHONPATH" not in environ_of(process.pid), kind
        mix.gate.touch()

        # After it: the services answer through the new proxy, then are stopped; a second cycle runs.
        for name, url in urls.items():
            until(f"{name} to serve through the new proxy", partial(_serves, url, token, name), LIMIT)
        schedules = [f"nightly-{index}" for index in range(SCHEDULED)]
        for name in schedules:
            until(f"{name}'s first cycle to end", partial(_cycles_ended, home, name, 1), LIMIT)
            assert new("schedule", "trigger", name).returncode == 0
            until(f"{name}'s second cycle to end", partial(_cycles_ended, home, name, 2), LIMIT)
        for name in [*urls, *schedules]:
            stopped = new("stop", "-y", name, timeout=LIMIT)
            assert stopped.returncode == 0, stopped.stderr
        until("every run to end", lambda: not active(new), LIMIT)
        figures["time from the first submission to the last run's end (s)"] = round(
            time.monotonic() - began, 1
        )

        engine = make_engine(f"sqlite:///{home / 'ferry.db'}")
        try:
            store = Store(engine)
            outcomes = [check(planned, store, DEFAULT_PROJECT, mix.ran) for planned in mix.planned]
            leaks = leak_figures(home, store, DEFAULT_PROJECT, {p.name for p in mix.planned})
        finally:
            engine.dispose()
        status = json.loads(new("server", "status", "--json").stdout)
        worker_log = (home / "stack" / "worker.log").read_text(errors="replace")
        wrong = [outcome for outcome in outcomes if outcome.problems]
        figures.update(
            {
                "runs finished as planned": len(outcomes) - len(wrong),
                "runs not as planned": len(wrong),
                "runs duplicated": sum(1 for outcome in wrong if outcome.duplicated),
                "stuck runs": status["stuck_runs"],
                "nondeterminism errors": worker_log.count("Nondeterminism"),
                **leaks,
            }
        )
    figures["processes left after stop"] = len(home_processes(home))
    print(f"\nupgrade: release {release} -> {ferry_version()} (this code)")
    for name, value in figures.items():
        print(f"{name}: {value:g}")
    for outcome in wrong:
        print(f"{outcome.name}: {'; '.join(outcome.problems)}")
    assert not wrong and figures["stuck runs"] == 0 and figures["nondeterminism errors"] == 0
    assert all(figures[name] == 0 for name in ZERO_GOALS if name in figures), figures
    assert figures["runs in flight at the upgrade"] >= HELD + MULTI_NODE + SERVICES + SCHEDULED


def _serves(url: str, token: str, name: str) -> bool:
    try:
        return answer(url, token) == f"replica 0 {name}"
    except httpx.HTTPError:  # the proxy restarting
        return False


def _cycles_ended(home: Path, name: str, cycles: int) -> bool:
    """Whether `cycles` of the scheduled run's cycles have ended, done."""
    engine = make_engine(f"sqlite:///{home / 'ferry.db'}")
    try:
        store = Store(engine)
        run = store.find_run(DEFAULT_PROJECT, name)
        assert run is not None
        done = sum(1 for submission in store.list_job_submissions(run.id) if submission.status == "done")
        return done == cycles
    finally:
        engine.dispose()
