"""Array tasks (docs/runs.md#arrays) through the real `ferry` command on the embedded stack: each element
runs once with its index under Ferry's, Slurm's and SkyPilot's names, never more than `max_parallel` at
once; one failing element fails the run without stopping the others; `ferry ps` sums the elements up in
one row and lists them with -v; `ferry logs --job N` is element N's; `ferry attach --replica N` reaches
element N; a stop stops the array and starts no more elements."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

from tests.e2e.conftest import Ferry, task
from tests.e2e.test_attach import _read_until, _ssh, start_attach


def spans(marks: Path) -> dict[int, tuple[float, float, str]]:
    """Each element's (start, end, the names it saw) from the marker files its commands wrote."""
    found = {}
    for path in marks.iterdir():
        start, end, seen = path.read_text().split()
        found[int(path.name)] = (float(start), float(end), seen)
    return found


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    edges = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    most = now = 0
    for _, change in edges:
        now += change
        most = max(most, now)
    return most


def test_an_array_runs_each_element_once_within_max_parallel(ferry: Ferry, tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    record = (
        f"s=$(date +%s.%N); sleep 0.4; echo element $FERRY_ARRAY_INDEX; "
        f'echo "$s $(date +%s.%N) $SLURM_ARRAY_TASK_ID/$SKYPILOT_JOB_RANK/$FERRY_ARRAY_SIZE" '
        f"> {marks}/$FERRY_ARRAY_INDEX; test $FERRY_ARRAY_INDEX != 4"
    )
    path = task(tmp_path, "arr", record, extra="array: {count: 7, max_parallel: 2}\n")
    applied = ferry("apply", "-y", "-f", path, timeout=120)
    assert applied.returncode != 0  # element 4 failed, so the run did
    assert "run arr: failed (job failed)" in applied.stderr, applied.stderr
    found = spans(marks)
    assert sorted(found) == list(range(7))  # every element ran, element 4 included: none was stopped
    assert all(seen == f"{index}/{index}/7" for index, (_, _, seen) in found.items()), found
    assert most_at_once([(start, end) for start, end, _ in found.values()]) <= 2

    listed = ferry("ps", "-a").stdout
    assert "array 7" in listed and "6 done, 1 failed" in listed, listed
    wide = ferry("ps", "-a", "-v").stdout
    assert "element 4" in wide and "exited (1)" in wide, wide
    [run] = [r for r in json.loads(ferry("ps", "-a", "--json").stdout) if r["name"] == "arr"]
    assert len(run["jobs"]) == 7
    assert ferry("logs", "arr", "--job", "3").stdout == "element 3\n"
    assert "[element 5] element 5\n" in ferry("logs", "arr").stdout


def test_a_stopped_array_starts_no_more_elements(ferry: Ferry, tmp_path: Path) -> None:
    path = task(tmp_path, "long", "sleep 60", extra="array: {count: 20, max_parallel: 2}\n")
    assert ferry("apply", "-y", "-d", "-f", path).returncode == 0
    deadline = time.monotonic() + 60
    while "2 running" not in ferry("ps").stdout:
        assert time.monotonic() < deadline, ferry("ps").stdout
        time.sleep(0.3)
    stopped = ferry("stop", "-y", "long", timeout=120)
    assert stopped.returncode == 0, stopped.stderr
    [run] = [r for r in json.loads(ferry("ps", "-a", "--json").stdout) if r["name"] == "long"]
    assert run["status"] == "terminated"
    # All 20 were submitted at once (their ElementsWorkflow keeps `max_parallel`); the two that ran had an
    # instance, the 18 others were stopped while they waited and never started.
    assert len([job for job in run["jobs"] if job["instance"]]) == 2, run["jobs"]
    assert "2 terminated, 18 not started" in ferry("ps", "-a").stdout


def test_attach_reaches_the_element_asked_for(ferry: Ferry, tmp_path: Path) -> None:
    path = task(tmp_path, "held", "sleep 120", extra="array: 2\n")
    assert ferry("apply", "-y", "-d", "-f", path).returncode == 0
    attach = start_attach(ferry, "held", "--replica", "1")
    try:
        _read_until(attach, "attached to run held")
        ran = _ssh(ferry.home / "ssh" / "config", "held", "echo $FERRY_ARRAY_INDEX")
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.strip() == "1"
    finally:
        attach.send_signal(signal.SIGINT)
        attach.communicate(timeout=30)
        ferry("stop", "-y", "-x", "held")
