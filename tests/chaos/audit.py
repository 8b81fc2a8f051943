"""What the chaos suite checks once its stream of runs has ended (docs/chaos.md): each run reached its final
status exactly once, its job was submitted, started and run once, its log is whole; no job process, agent
task or capacity is left behind; the stack runs one process of each kind, and none once it is stopped.

Each check is a figure, `name: value`, whose goal is in GOALS.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from store.repository import Store

Figures = dict[str, float]
# Seconds for what finished jobs give back to be back: the fleet writes its view of an instance after.
SETTLE_LIMIT = 120.0
STACK_PROCESSES = 5  # temporal, worker, proxy, api, agent

# The figures that must be 0 (counts of things gone wrong).
ZERO_GOALS = (
    "runs lost",
    "runs failed",
    "runs duplicated",
    "runs with events missing",
    "runs with incomplete logs",
    "leaked job processes",
    "leaked agent tasks",
    "leaked task directories",
    "agent cpu held",
    "agent memory held (GB)",
    "fleet jobs held",
    "fleet busy blocks",
    "extra stack processes",
    "processes left after stop",
)


@dataclass
class RunAudit:
    """One run as the store and its marker file tell it."""

    name: str
    outcome: str  # done, or the finished status it reached, or lost (no final status)
    duplicates: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    log_problem: str | None = None

    @property
    def problems(self) -> list[str]:
        log = [self.log_problem] if self.log_problem else []
        return ([] if self.outcome == "done" else [self.outcome]) + self.duplicates + self.missing + log


def audit_run(store: Store, project: str, name: str, marker: Path, expected_log: str) -> RunAudit:
    run = store.find_run(project, name)
    if run is None:
        return RunAudit(name, "lost", missing=["not in the store"])
    run_events = store.read_events(run.id, None)
    cleans = [event.context_data() for event in run_events if event.name == "clean"]
    if not cleans:
        outcome = "lost"
    elif cleans[0].get("status") == "done" and run.status == "done":
        outcome = "done"
    else:
        outcome = f"{run.status} ({run.termination_reason})"
    audit = RunAudit(name, outcome)
    # The run's final status, its one job's submission and end: each exactly once in its eventlog.
    counted = Counter(event.name for event in run_events)
    _count(audit, "run", counted, ("clean", "job-submit", "job-finish"))
    submissions = store.list_job_submissions(run.id)
    if len(submissions) != 1:
        found = audit.duplicates if len(submissions) > 1 else audit.missing
        found.append(f"{len(submissions)} submissions")
    log = b""
    for submission in submissions:
        events = store.read_events(run.id, submission.id)
        counted_job = Counter(event.name for event in events)
        _count(audit, submission.id, counted_job, ("alloc", "start", "finish", "free", "clean"))
        log += store.read_log(submission.id)[0]
        if outcome != "done":  # what the job says of its end, and the events it logged
            said = f"{submission.termination_reason}: {submission.termination_message}"
            audit.missing.append(f"{submission.id} ended {said}; events {[e.name for e in events]}")
    # Each start of the job's commands appended a line: a job the agent was given twice ran twice.
    starts = marker.read_text().count("\n") if marker.exists() else 0
    if starts != 1:
        (audit.duplicates if starts > 1 else audit.missing).append(f"its commands ran {starts} times")
    if log.decode(errors="replace") != expected_log:
        audit.log_problem = f"log {log!r}"
    return audit


def _count(audit: RunAudit, where: str, counted: Counter[str], once: tuple[str, ...]) -> None:
    for name in once:
        if counted[name] > 1:
            audit.duplicates.append(f"{where}: {counted[name]} {name} events")
        elif counted[name] == 0:
            audit.missing.append(f"{where}: no {name} event")


def runs_figures(audits: list[RunAudit]) -> Figures:
    outcomes = Counter(audit.outcome for audit in audits)
    return {
        "runs submitted": len(audits),
        "runs done": outcomes["done"],
        "runs lost": outcomes["lost"],
        "runs failed": len(audits) - outcomes["done"] - outcomes["lost"],
        "runs duplicated": sum(1 for audit in audits if audit.duplicates),
        "runs with events missing": sum(1 for audit in audits if audit.missing),
        "runs with incomplete logs": sum(1 for audit in audits if audit.log_problem),
    }


# --- what is left behind ---------------------------------------------------------------------------------


def leak_figures(home: Path, store: Store, project: str, names: set[str]) -> Figures:
    """Once what finished jobs give back has had time to be back (SETTLE_LIMIT): what is still held."""

    def measure() -> Figures:
        tasks = agent_get(home, "tasks")["tasks"]
        info = agent_get(home, "instance/info")
        instances = store.list_instances(project)
        task_dirs = home / "agent" / "data" / "tasks"
        return {
            "leaked job processes": len(job_processes(home, names)),
            "leaked agent tasks": len(tasks),
            "leaked task directories": len(list(task_dirs.iterdir())) if task_dirs.exists() else 0,
            "agent cpu held": round(info["total"]["cpu"] - info["free"]["cpu"], 3),
            "agent memory held (GB)": round(info["total"]["memory"] - info["free"]["memory"], 3),
            "fleet jobs held": sum(instance.jobs for instance in instances),
            "fleet busy blocks": sum(instance.busy_blocks for instance in instances),
            "extra stack processes": len(home_processes(home)) - STACK_PROCESSES,
        }

    figures = settle(measure)
    if figures["leaked agent tasks"] or figures["leaked task directories"]:  # what they are, to find why
        print("leaked tasks:", json.dumps(agent_get(home, "tasks")["tasks"], indent=1, default=str))
        task_dirs = home / "agent" / "data" / "tasks"
        left = {d.name: sorted(f.name for f in d.iterdir()) for d in task_dirs.iterdir()}
        print("leaked directories:", left)
    return figures


def agent_get(home: Path, path: str) -> Any:
    """GET /api/<path> of the home's local agent."""
    agent = json.loads((home / "agent" / "agent.json").read_text())
    headers = {"Authorization": f"Bearer {agent['token']}"}
    return httpx.get(f"{agent['url']}/api/{path}", headers=headers, timeout=30).json()


def settle(measure: Callable[[], Figures], limit: float = SETTLE_LIMIT) -> Figures:
    """measure() once all its figures are 0, or the last one when `limit` has passed."""
    deadline = time.monotonic() + limit
    while True:
        figures = measure()
        if not any(figures.values()) or time.monotonic() > deadline:
            return figures
        time.sleep(0.5)


def job_processes(home: Path, names: set[str]) -> list[int]:
    """Live processes of the runs' jobs: in a task's directory of this home's agent, or with one of the
    runs' names in FERRY_RUN_NAME."""
    tasks = str(home / "agent" / "data" / "tasks")
    found = []
    for pid, entry in _processes():
        try:
            cwd = os.readlink(entry / "cwd")
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:  # gone, or a zombie: nothing runs
            continue
        run = next((item[15:].decode() for item in environ if item.startswith(b"FERRY_RUN_NAME=")), None)
        if cwd.startswith(tasks) or run in names:
            found.append(pid)
    return found


def home_processes(home: Path) -> list[int]:
    """Live processes whose command line names a file of this home: the stack's."""
    marker = str(home).encode()
    found = []
    for pid, entry in _processes():
        try:
            if marker in (entry / "cmdline").read_bytes():
                found.append(pid)
        except OSError:
            continue
    return found


def _processes() -> list[tuple[int, Path]]:
    me = os.getpid()
    return [
        (int(entry.name), entry)
        for entry in Path("/proc").iterdir()
        if entry.name.isdigit() and int(entry.name) != me
    ]
