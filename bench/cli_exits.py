"""No CLI command aborts at exit: `python -m bench.cli_exits --count N [--lanes L]`.

The `ferry` command once aborted in about one exit in a hundred (`Fatal Python error:
PyGILState_Release`, exit 134) after it had done its work: the Temporal SDK's runtime raced the
interpreter's teardown (cli/main.py, `FerryTyper`). This starts the embedded stack in a fresh FERRY_HOME
(`ferry server start`), runs `ferry apply -d -y -f TASK -n NAME` N times, a trivial task (`commands:
[true]`, resources of 0), in L lanes of one apply after another (so at most L are in flight and the runs
end as fast as they come), waits for every run to end, and checks each apply against the runs `ferry ps
-a --json` lists: an apply that exited 0 must have made its run, one that failed must have made none.

Prints `name: value` lines (bench/README.md): applies, aborts (exit 134, a signal, or `Fatal Python
error` on stderr), other failures, runs found, applies that exited 0 without a run and failed ones with a
run (both must be 0), runs done, the apply's wall time (p50, p90, max) and applies per second. Exits 1
when an apply aborted or the runs do not match the applies. `--keep` keeps the FERRY_HOME.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from bench.common import Clock, Report

REPO_ROOT = Path(__file__).resolve().parent.parent
_SCRIPT = Path(sys.executable).parent / "ferry"
FERRY = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "cli"]
TASK = 'type: task\nname: exits\ncommands: ["true"]\n'
TASK += "resources: {cpu: 0.., memory: 0GB.., disk: 0GB..}\n"
APPLY_TIMEOUT = 120.0  # seconds: far beyond an apply's (about a second), so a hung one is seen, not waited on
SIGABRT_STATUS = 134  # 128 + SIGABRT: the shell's status of an aborted process


@dataclass(frozen=True)
class Apply:
    name: str
    returncode: int
    stderr: str
    seconds: float

    @property
    def aborted(self) -> bool:
        return self.returncode == SIGABRT_STATUS or self.returncode < 0 or "Fatal Python error" in self.stderr


@dataclass(frozen=True)
class Outcome:
    applies: list[Apply]
    runs: dict[str, str]  # name -> status, of every run `ferry ps -a` lists
    wall_s: float

    @property
    def aborts(self) -> list[Apply]:
        return [apply for apply in self.applies if apply.aborted]

    @property
    def other_failures(self) -> list[Apply]:
        return [apply for apply in self.applies if apply.returncode != 0 and not apply.aborted]

    @property
    def missing_runs(self) -> list[str]:
        return [apply.name for apply in self.applies if apply.returncode == 0 and apply.name not in self.runs]

    @property
    def runs_of_failed_applies(self) -> list[str]:
        return [apply.name for apply in self.applies if apply.returncode != 0 and apply.name in self.runs]

    @property
    def consistent(self) -> bool:
        return not self.aborts and not self.missing_runs and not self.runs_of_failed_applies


class Ferry:
    """`ferry ARGS...` in one FERRY_HOME, with none of the user's FERRY_* settings, without a terminal."""

    def __init__(self, home: Path) -> None:
        self.env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("FERRY_", "DSTACK_", "TEMPORAL_"))  # TEMPORAL_ADDRESS: not the stack
        }
        self.env["FERRY_HOME"] = str(home)

    def __call__(self, *args: str, timeout: float = APPLY_TIMEOUT) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*FERRY, *args],
            cwd=REPO_ROOT,
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def runs(self, all_runs: bool, limit: int) -> dict[str, str]:
        listed = self("ps", "--json", "--limit", str(limit), *(["-a"] if all_runs else []))
        if listed.returncode != 0:
            raise RuntimeError(f"ferry ps failed ({listed.returncode}): {listed.stderr.strip()}")
        return {run["name"]: str(run["status"]) for run in json.loads(listed.stdout)}


def apply_once(ferry: Ferry, task: Path, name: str) -> Apply:
    clock = Clock()
    try:
        done = ferry("apply", "-d", "-y", "-f", str(task), "-n", name)
        returncode, stderr = done.returncode, done.stderr
    except subprocess.TimeoutExpired as exc:
        returncode, stderr = -1, f"timed out after {APPLY_TIMEOUT} s: {exc.stderr!r}"
    return Apply(name, returncode, stderr, clock.elapsed())


def apply_in_lanes(ferry: Ferry, task: Path, count: int, lanes: int, report: Report) -> list[Apply]:
    """`count` applies, `lanes` at a time: each lane applies its share one after another. A `#` line
    every tenth of them says how far it is."""
    applies: list[Apply] = []
    lock = threading.Lock()
    every = max(1, count // 10)
    clock = Clock()

    def lane(first: int) -> None:
        for index in range(first, count, lanes):
            result = apply_once(ferry, task, f"exits-{index}")
            with lock:
                applies.append(result)
                if len(applies) % every == 0:
                    aborts = sum(1 for apply in applies if apply.aborted)
                    report.note(
                        f"{len(applies)}/{count} applies in {clock.elapsed():.0f} s, {aborts} aborted"
                    )

    threads = [threading.Thread(target=lane, args=(first,)) for first in range(min(lanes, count))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return applies


def wait_all_ended(ferry: Ferry, limit: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while ferry.runs(all_runs=False, limit=limit):
        if time.monotonic() > deadline:
            raise TimeoutError(f"runs still active {timeout} s after the last apply")
        time.sleep(0.5)


def measure(work: Path, count: int, lanes: int, report: Report) -> Outcome:
    """Starts the stack in `work`/ferry-home, applies, waits, lists; stops the stack whatever happens."""
    ferry = Ferry(work / "ferry-home")
    # The task's directory is its code, uploaded by each apply: it holds the task alone.
    task = work / "task" / "exits.yml"
    task.parent.mkdir(parents=True)
    task.write_text(TASK)
    try:
        start_stack(ferry, report)
        clock = Clock()
        applies = apply_in_lanes(ferry, task, count, lanes, report)
        wall_s = clock.elapsed()
        limit = 2 * count + 10  # every run of this home, whatever else made them
        wait_all_ended(ferry, limit, timeout=60 + count)
        return Outcome(applies, ferry.runs(all_runs=True, limit=limit), wall_s)
    finally:
        ferry("server", "stop", timeout=120)  # a stack that failed to start too: what it started


def start_stack(ferry: Ferry, report: Report) -> None:
    clock = Clock()
    started = ferry("server", "start", timeout=300)
    if started.returncode != 0:
        # Another stack starting on this machine at the same moment may take a port this one had found
        # free (the proxy's 8300 first): a second start takes another.
        report.note(f"ferry server start failed, once more: {started.stderr.strip()[-300:]}")
        ferry("server", "stop", timeout=120)
        started = ferry("server", "start", timeout=300)
    if started.returncode != 0:
        raise RuntimeError(f"ferry server start failed ({started.returncode}): {started.stderr.strip()}")
    report.put("cli_exits_stack_start_s", clock.elapsed())


def print_outcome(outcome: Outcome, lanes: int, report: Report) -> None:
    applies = outcome.applies
    report.put("cli_exits_applies", len(applies))
    report.put("cli_exits_lanes", lanes)
    report.put("cli_exits_ok", sum(1 for apply in applies if apply.returncode == 0))
    report.put("cli_exits_aborts", len(outcome.aborts))
    report.put("cli_exits_other_failures", len(outcome.other_failures))
    report.put("cli_exits_runs_found", sum(1 for apply in applies if apply.name in outcome.runs))
    report.put("cli_exits_ok_without_run", len(outcome.missing_runs))
    report.put("cli_exits_failed_with_run", len(outcome.runs_of_failed_applies))
    statuses = Counter(outcome.runs.get(apply.name, "none") for apply in applies)
    report.put("cli_exits_runs_done", statuses.get("done", 0))
    report.put("cli_exits_runs_by_status", " ".join(f"{k}={v}" for k, v in sorted(statuses.items())))
    report.distribution("cli_exits_apply", "ms", [apply.seconds for apply in applies], scale=1000)
    report.put("cli_exits_wall_s", outcome.wall_s)
    report.put("cli_exits_applies_per_s", len(applies) / outcome.wall_s, 2)
    report.put("cli_exits_s_per_apply", outcome.wall_s / max(1, len(applies)))
    codes = Counter(apply.returncode for apply in applies if apply.returncode != 0)
    if codes:
        report.note("exit codes of the failed applies: " + ", ".join(f"{k}: {v}" for k, v in codes.items()))
    for apply in (outcome.aborts + outcome.other_failures)[:3]:
        tail = apply.stderr.strip().splitlines()[-5:]
        report.note(f"{apply.name} exited {apply.returncode}: " + " | ".join(tail))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.cli_exits", description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=200, help="applies in all (default 200)")
    parser.add_argument("--lanes", type=int, default=4, help="applies at once (default 4)")
    parser.add_argument("--keep", action="store_true", help="keep the FERRY_HOME (its path is printed)")
    args = parser.parse_args()
    if args.count < 1 or args.lanes < 1:
        parser.error("--count and --lanes must be at least 1")
    work = Path(tempfile.mkdtemp(prefix="ferry-cli-exits-"))
    report = Report()
    report.put("cli_exits_home", str(work / "ferry-home"))
    try:
        outcome = measure(work, args.count, args.lanes, report)
        print_outcome(outcome, args.lanes, report)
    finally:
        if not args.keep:
            with contextlib.suppress(OSError):
                shutil.rmtree(work)
    sys.exit(0 if outcome.consistent else 1)


if __name__ == "__main__":
    main()
