"""`python -m bench.cli_exits` on a small count: no `ferry apply -d` aborts at exit, and every apply that
exited 0 made its run and no failed one did (the full figure is 2,000 applies: bench/cli_exits.py)."""

from __future__ import annotations

import subprocess
import sys

from tests.e2e.conftest import ROOT


def figures(output: str) -> dict[str, str]:
    pairs = (line.split(": ", 1) for line in output.splitlines() if ": " in line and not line.startswith("#"))
    return {name: value for name, value in pairs}


def test_no_apply_aborts_and_each_success_made_its_run() -> None:
    count = 30
    done = subprocess.run(
        [sys.executable, "-m", "bench.cli_exits", "--count", str(count), "--lanes", "3"],
        cwd=ROOT,  # the bench drops the user's FERRY_* settings and makes a FERRY_HOME of its own
        capture_output=True,
        text=True,
        timeout=600,
    )
    found = figures(done.stdout)
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert found["cli_exits_applies"] == str(count)
    assert found["cli_exits_aborts"] == "0"
    assert found["cli_exits_ok_without_run"] == "0"
    assert found["cli_exits_failed_with_run"] == "0"
    # A trivial apply with -d fails only if something is wrong: every one made a run, and each run ended done.
    assert found["cli_exits_other_failures"] == "0", done.stdout
    assert found["cli_exits_runs_found"] == str(count)
    assert found["cli_exits_runs_done"] == str(count)
