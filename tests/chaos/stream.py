"""The chaos driver: a bounded stream of small task runs submitted with the real `ferry` CLI to the embedded
stack of one FERRY_HOME, and SIGKILLs of the stack's processes in between (docs/chaos.md).

A killed process is brought back as a user would: by the next `ferry` command, which starts whatever part
of the stack is not running (embedded.stack.Stack.start); the worker also starts a killed agent itself as soon
as a job needs it (docs/jobs.md#a-restarted-agent).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from core.settings import DEFAULT_PROJECT
from embedded.stack import ProcessStatus, Stack
from store.engine import make_engine
from store.repository import Store
from tests.chaos.audit import Figures, RunAudit, audit_run, job_processes, leak_figures
from tests.e2e.conftest import Ferry

KINDS = ("worker", "temporal", "agent")
LIMIT = 180.0  # seconds any one wait may take: generous, the CPUs are shared; each ends once it holds
FINISH_LIMIT = 600.0  # for the last runs to end once the stream is submitted
# Each run's job sleeps one of these in turn: some end before the next kill, some run through it.
SLEEPS = (0, 1, 2, 4)
# The job of the run submitted just before a kill sleeps this long, so that a job is surely running when the
# kill lands: under load the next `ferry apply` takes longer than any of SLEEPS.
BEFORE_KILL_SLEEP = 8
# A little memory, so that the fleet and the agent hold capacity for each job (and must give it back).
RESOURCES = "resources: {cpu: 0.., memory: 0.1GB.., disk: 0GB..}\n"


@dataclass(frozen=True)
class Profile:
    """How many runs the stream submits, and which kills land in it, in order and evenly spread."""

    name: str
    runs: int
    kills: tuple[str, ...]
    outage: float = 2.0  # seconds a killed process stays down before the next command

    def kill_after(self) -> dict[int, str]:
        """The index of the run after whose submission each kill lands; never the last run, so that a
        later submission is the command that brings the stack back."""
        spread = {
            round((k + 1) * self.runs / (len(self.kills) + 1)) - 1: kind for k, kind in enumerate(self.kills)
        }
        assert len(spread) == len(self.kills) and max(spread) < self.runs - 1, f"too few runs for {self}"
        assert set(self.kills) <= set(KINDS), self.kills
        return spread


SHORT = Profile("short", runs=24, kills=("worker", "temporal", "worker", "agent", "worker"))
LONG = Profile("long", runs=300, kills=("worker", "temporal", "worker", "agent") * 6)


def profile_from_env(environ: dict[str, str] | None = None) -> Profile:
    """FERRY_CHAOS=long: the long profile; anything else, the short one (CI's)."""
    chosen = (os.environ if environ is None else environ).get("FERRY_CHAOS", "short")
    return LONG if chosen == "long" else SHORT


def until(what: str, condition: Callable[[], bool], limit: float = LIMIT) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, f"waited {limit:.0f}s for {what}"
        time.sleep(0.1)


def stack_process(home: Path, kind: str) -> ProcessStatus:
    [process] = [p for p in Stack(home).status().processes if p.name == kind]
    return process


@dataclass
class Killed:
    kind: str
    pid: int


@dataclass
class ChaosStream:
    """Submits the profile's runs one after another, with its kills between them; `names` are the runs
    submitted, `killed` and `survived` count the kills by kind."""

    ferry: Ferry
    profile: Profile
    prefix: str  # the runs' names: PREFIX-000, PREFIX-001...
    configs: Path
    names: list[str] = field(default_factory=list)
    killed: Counter[str] = field(default_factory=Counter)
    survived: Counter[str] = field(default_factory=Counter)
    jobs_at_kills: list[int] = field(default_factory=list)

    @property
    def markers(self) -> Path:
        """One file per run, to which each start of its job's commands appends a line (beside the
        configurations' directory, whose files are the runs' code)."""
        return self.configs.with_name(self.configs.name + "-ran")

    def expected_log(self, name: str) -> str:
        return f"start {name}\nend {name}\n"

    def run(self) -> None:
        self.markers.mkdir(exist_ok=True)
        plan = self.profile.kill_after()
        pending: Killed | None = None
        for index in range(self.profile.runs):
            self.submit(index, BEFORE_KILL_SLEEP if index in plan else None)
            if pending is not None:  # that submission was the command that starts the stack again
                self.await_whole(pending)
                pending = None
            if index in plan:
                pending = self.kill(plan[index])
        assert pending is None

    def submit(self, index: int, sleep: int | None = None) -> None:
        """Submit run `index`, whose job sleeps `sleep` seconds (default: SLEEPS in turn)."""
        name = f"{self.prefix}-{index:03d}"
        commands = (
            f"echo start {name}",
            f"echo ran >> {self.markers / name}",
            f"sleep {SLEEPS[index % len(SLEEPS)] if sleep is None else sleep}",
            f"echo end {name}",
        )
        conf = self.configs / f"{name}.yml"
        lines = [f"type: task\nname: {name}\ncommands:\n", *(f"  - {json.dumps(c)}\n" for c in commands)]
        conf.write_text("".join(lines) + RESOURCES)
        done = self.ferry("apply", "-y", "-d", "-f", str(conf), timeout=LIMIT)
        assert done.returncode == 0, f"ferry apply {name}: {done.stderr}"
        self.names.append(name)

    def kill(self, kind: str) -> Killed:
        """SIGKILL the stack's `kind` while jobs run; it stays down for the profile's outage."""
        running: list[int] = []

        def jobs_run() -> bool:
            running[:] = self.running_jobs()
            return bool(running)

        until("a job to run", jobs_run)
        self.jobs_at_kills.append(len(running))
        process = stack_process(self.ferry.home, kind)
        assert process.alive and process.pid is not None, f"no {kind} to kill: {process}"
        os.kill(process.pid, signal.SIGKILL)
        self.killed[kind] += 1
        until(f"the {kind} to die", lambda: not stack_process(self.ferry.home, kind).alive)
        time.sleep(self.profile.outage)
        return Killed(kind, process.pid)

    def await_whole(self, killed: Killed) -> None:
        """Until the stack runs whole again, the killed process replaced."""

        def whole() -> bool:
            replaced = stack_process(self.ferry.home, killed.kind).pid != killed.pid
            return replaced and Stack(self.ferry.home).is_running()

        until(f"the stack to run whole again after a kill of its {killed.kind}", whole)
        self.survived[killed.kind] += 1

    def running_jobs(self) -> list[int]:
        return job_processes(self.ferry.home, set(self.names))

    def audit(self, database_url: str | None = None) -> tuple[list[RunAudit], Figures]:
        """Each run's audit, and what is still held once finished jobs have given it back; the store at
        `database_url` (default: the SQLite one in the stack's home)."""
        home = self.ferry.home
        engine = make_engine(database_url or f"sqlite:///{home / 'ferry.db'}")
        try:
            store = Store(engine)
            audits = [
                audit_run(store, DEFAULT_PROJECT, name, self.markers / name, self.expected_log(name))
                for name in self.names
            ]
            return audits, leak_figures(home, store, DEFAULT_PROJECT, set(self.names))
        finally:
            engine.dispose()

    def await_finished(self) -> list[str]:
        """Until no run is active (each `ferry ps` is a command that starts what is not running), or
        FINISH_LIMIT has passed: the runs still active then."""
        deadline = time.monotonic() + FINISH_LIMIT
        while True:
            listed = self.ferry("ps", "--json", timeout=LIMIT)
            assert listed.returncode == 0, listed.stderr
            active = [run["name"] for run in json.loads(listed.stdout)]
            if not active or time.monotonic() > deadline:
                return active
            time.sleep(1.0)
