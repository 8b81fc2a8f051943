"""The runs the upgrade test keeps in flight across an upgrade (docs/upgrades.md#the-upgrade-test), and what
each must have done once every one has ended: its final status, how many times each of its jobs' commands
started (a marker file per job), its logs whole.

Jobs that must span the upgrade wait for a gate file, which the test creates once the stack is upgraded:
they are in flight at the upgrade whatever the machine's speed.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from store.repository import Store

REPLICA = Path(__file__).resolve().parents[1] / "lifecycle" / "replica_server.py"
SMALL = "resources: {cpu: 0.., memory: 0GB.., disk: 0GB..}\n"
RETRY = "retry: {on_events: [error], duration: 1h}\n"
YEARLY = 'schedule: {cron: "0 0 1 1 *"}\n'  # never fires by itself: its cycles are triggered


@dataclass(frozen=True)
class Planned:
    """One run of the mix: its configuration's kind and what it must have done in the end."""

    name: str
    kind: str  # quick, held, retrying, multi-node, service, scheduled
    final: str  # its run's final status
    starts: dict[str, int]  # marker file -> how many times its commands started
    submissions: int = 1


@dataclass
class Mix:
    """Writes the runs' configurations under `configs`; their jobs append to markers under `ran`, and the
    held ones wait for `gate`."""

    configs: Path
    ran: Path
    gate: Path
    planned: list[Planned] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.ran.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPLICA, self.configs / "replica_server.py")

    def _commands(self, name: str, *body: str) -> list[str]:
        return [
            f"echo start {name}",
            f"echo ran >> {self.ran}/{name}-$FERRY_NODE_RANK",
            *body,
            f"echo end {name}",
        ]

    def _write(self, name: str, kind: str, commands: list[str], extra: str = "") -> str:
        lines = [f"type: {kind}\nname: {name}\ncommands:\n", *(f"  - {json.dumps(c)}\n" for c in commands)]
        path = self.configs / f"{name}.yml"
        path.write_text("".join(lines) + SMALL + extra)
        return str(path)

    def _wait_for_gate(self) -> str:
        return f"while [ ! -e {self.gate} ]; do sleep 0.2; done"

    def quick(self, index: int) -> str:
        """Ends on its own in 0 to 3 s: most before the upgrade, some during it."""
        name = f"quick-{index:02d}"
        self.planned.append(Planned(name, "quick", "done", {f"{name}-0": 1}))
        return self._write(name, "task", self._commands(name, f"sleep {index % 4}"))

    def held(self, index: int) -> str:
        name = f"held-{index:02d}"
        self.planned.append(Planned(name, "held", "done", {f"{name}-0": 1}))
        return self._write(name, "task", self._commands(name, self._wait_for_gate()))

    def retrying(self, index: int) -> str:
        """Fails its first attempt at once: its retry waits out the backoff (15 s) across the upgrade."""
        name = f"retrying-{index:02d}"
        first = f"{self.ran}/{name}.failed"
        fail_once = f"if [ ! -e {first} ]; then touch {first}; exit 3; fi"
        self.planned.append(Planned(name, "retrying", "done", {f"{name}-0": 2}, submissions=2))
        return self._write(name, "task", self._commands(name, fail_once), RETRY)

    def multi_node(self, index: int) -> str:
        name = f"multi-{index:02d}"
        self.planned.append(
            Planned(name, "multi-node", "done", {f"{name}-0": 1, f"{name}-1": 1}, submissions=2)
        )
        return self._write(name, "task", self._commands(name, self._wait_for_gate()), "nodes: 2\n")

    def service(self, index: int) -> str:
        """Serves through the proxy before and after the upgrade; then stopped by the test."""
        name = f"web-{index}"
        serve = f"exec python3 replica_server.py {8101 + index} {name}"
        self.planned.append(Planned(name, "service", "terminated", {f"{name}-0": 1}))
        commands = [f"echo ran >> {self.ran}/{name}-$FERRY_NODE_RANK", serve]
        return self._write(name, "service", commands, f"port: {8101 + index}\n")

    def scheduled(self, index: int) -> str:
        """A cycle triggered before the upgrade and held across it, a second one after; then stopped."""
        name = f"nightly-{index}"
        self.planned.append(Planned(name, "scheduled", "terminated", {f"{name}-0": 2}, submissions=2))
        return self._write(name, "task", self._commands(name, self._wait_for_gate()), YEARLY)


@dataclass
class Outcome:
    name: str
    problems: list[str]
    duplicated: bool = False  # a job's commands started, or a job was submitted, more often than planned


def check(planned: Planned, store: Store, project: str, ran: Path) -> Outcome:
    """What differs from the plan: the final status, the submissions, each job's starts, the logs, and each
    job's events (every job submitted and finished once: a duplicate would show twice)."""
    run = store.find_run(project, planned.name)
    if run is None:
        return Outcome(planned.name, ["not in the store"])
    problems: list[str] = []
    duplicated = False
    if run.status != planned.final:
        problems.append(f"{run.status} ({run.termination_reason}), not {planned.final}")
    submissions = store.list_job_submissions(run.id)
    if len(submissions) != planned.submissions:
        problems.append(f"{len(submissions)} job submissions, not {planned.submissions}")
    for marker, expected in planned.starts.items():
        path = ran / marker
        starts = path.read_text().count("\n") if path.exists() else 0
        duplicated = duplicated or starts > expected
        if starts != expected:
            problems.append(f"{marker}: its commands started {starts} times, not {expected}")
    counted = Counter(event.name for event in store.read_events(run.id, None))
    duplicated = duplicated or counted["job-submit"] > planned.submissions
    for event in ("job-submit", "job-finish"):
        if counted[event] != planned.submissions:
            problems.append(f"{counted[event]} {event} events, not {planned.submissions}")
    if counted["clean"] != 1:
        problems.append(f"{counted['clean']} clean events")
    if planned.kind != "service":  # a service's log is its server's; the proxy's answers are checked
        logs = [store.read_log(submission.id)[0].decode(errors="replace") for submission in submissions]
        ended = sum(
            1 for log in logs if log.startswith(f"start {planned.name}\n") and f"end {planned.name}\n" in log
        )
        expected_ends = 1 if planned.kind == "retrying" else planned.submissions
        if ended != expected_ends:
            problems.append(f"{ended} whole logs, not {expected_ends}: {logs}")
    return Outcome(planned.name, problems, duplicated)
