"""The logs section (bench.run): a job prints a ready line, paced lines, then a flood of blocks, which
`ferry logs -f` follows; throughput into the store and through the follower, lag, bytes lost, hashes."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import secrets
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa

from store import LogChunkRecord, Store

if TYPE_CHECKING:
    from bench.ferry_side import FerrySide

REPO_ROOT = Path(__file__).resolve().parents[1]

# The job that prints the logs section's output: a ready line, paced lines, then a flood of blocks.
# Each paced line and each block starts with `<kind> <seq> <time it was printed>`.
LOG_GENERATOR = r"""
import hashlib, json, os, sys, time
go, meta, flood, paced = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
digest, total = hashlib.sha256(), 0
def out(data):
    global total
    digest.update(data)
    total += len(data)
    view = memoryview(data)
    while view:
        view = view[os.write(1, view):]
out(b"R ready\n")
deadline = time.time() + 120
while not os.path.exists(go) and time.time() < deadline:
    time.sleep(0.005)
for i in range(paced):
    out(b"P %08d %.6f\n" % (i, time.time()))
    time.sleep(0.05)
BLOCK = 100_000
line = b"x" * 99 + b"\n"
t0, i, sent = time.time(), 0, 0
while sent < flood:
    head = b"B %08d %.6f\n" % (i, time.time())
    rest = BLOCK - len(head)
    first = b"x" * (rest % 100 - 1) + b"\n" if rest % 100 else b""
    out(head + first + line * (rest // 100))
    sent += BLOCK
    i += 1
t1 = time.time()
with open(meta + ".tmp", "w") as f:
    json.dump({"flood_start": t0, "flood_end": t1, "flood_bytes": sent, "total_bytes": total,
               "sha256": digest.hexdigest()}, f)
os.rename(meta + ".tmp", meta)
"""
_HEADER = re.compile(rb"(?m)^(?:R ready|([PB]) (\d{8}) (\d+\.\d+))\n")


async def measure(ferry: FerrySide, flood_bytes: int, paced_lines: int = 60) -> None:
    """A job prints `flood_bytes`; `ferry logs -f` follows it. Throughput, lag and bytes lost."""
    r = ferry.report
    project, name = "logs", f"logs-{secrets.token_hex(2)}"
    go, meta = ferry.marks / f"go.{name}", ferry.marks / f"meta.{name}"
    (ferry.repo / "gen_logs.py").write_text(LOG_GENERATOR)
    command = f"python3 gen_logs.py {go} {meta} {flood_bytes} {paced_lines}"
    record = await ferry.submit(project, name, [command])
    follower = Follower(
        [sys.executable, "-m", "cli", "logs", "-f", name], {**ferry.env, "FERRY_PROJECT": project}, go
    )
    try:
        await asyncio.wait_for(ferry.result(record), timeout=600)
        await asyncio.to_thread(follower.wait, 120)
    finally:
        follower.kill()
    final = await asyncio.to_thread(ferry.store.get_run, record.id)
    r.put("logs_run_status", final.status if final else "missing")
    written = json.loads(meta.read_text())
    [job] = await asyncio.to_thread(ferry.store.list_job_submissions, record.id)
    stored, stored_hash, last_stored = await asyncio.to_thread(_stored_log, ferry.store, job.id)
    flood = written["flood_bytes"] / 1e6
    r.put("logs_bytes_printed", written["total_bytes"])
    r.put("logs_job_print_rate_mb_per_s", flood / (written["flood_end"] - written["flood_start"]), 1)
    r.put("logs_store_throughput_mb_per_s", flood / (last_stored - written["flood_start"]), 1)
    r.put("logs_follow_throughput_mb_per_s", flood / (follower.last_at - written["flood_start"]), 1)
    r.put("logs_bytes_lost_store", written["total_bytes"] - stored)
    r.put("logs_bytes_lost_follow", written["total_bytes"] - follower.received)
    r.put("logs_store_content_matches", "yes" if stored_hash == written["sha256"] else "NO")
    r.put("logs_follow_content_matches", "yes" if follower.digest.hexdigest() == written["sha256"] else "NO")
    r.put("logs_follow_blocks_missing", follower.missing_blocks(written["flood_bytes"] // 100_000))
    r.distribution("logs_follow_lag_paced", "ms", follower.lags["P"], 1000)
    r.distribution("logs_follow_lag_flood", "ms", follower.lags["B"], 1000)


def _stored_log(store: Store, job_id: str) -> tuple[int, str, float]:
    """The stored log's size, its sha256, and when its last chunk was stored."""
    digest, offset = hashlib.sha256(), 0
    while True:
        data, offset = store.read_log(job_id, offset, 16 * 2**20)
        if not data:
            break
        digest.update(data)
    chunks = LogChunkRecord.__table__.c  # type: ignore[attr-defined]
    with store.engine.connect() as connection:
        last = connection.execute(
            sa.select(sa.func.max(chunks.timestamp)).where(chunks.job_submission_id == job_id)
        ).scalar()
    return offset, digest.hexdigest(), float(last or 0.0)


class Follower:
    """`ferry logs -f` in a subprocess; its stdout read in a thread: bytes, hash, lag of each header."""

    def __init__(self, command: list[str], env: dict[str, str], go: Path) -> None:
        self.go = go
        self.received = 0
        self.digest = hashlib.sha256()
        self.lags: dict[str, list[float]] = {"P": [], "B": []}
        self.seqs: list[int] = []
        self.last_at = 0.0
        self.proc = subprocess.Popen(
            command, env=env, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        carry = b""
        while True:
            data = os.read(fd, 4 * 2**20)
            if not data:
                break
            now = time.time()
            self.received += len(data)
            self.digest.update(data)
            self.last_at = now
            # Headers are whole lines; a line cut by the read is looked at with the next read.
            cut = data.rfind(b"\n") + 1
            if not cut:
                carry += data
                continue
            text, carry = carry + data[:cut], data[cut:]
            for match in _HEADER.finditer(text):
                kind = match.group(1)
                if kind is None:
                    self.go.touch()  # the job waits for this before it prints what is timed
                    continue
                self.lags[kind.decode()].append(now - float(match.group(3)))
                if kind == b"B":
                    self.seqs.append(int(match.group(2)))

    def wait(self, timeout: float) -> None:
        self.proc.wait(timeout)
        self._thread.join(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def missing_blocks(self, expected: int) -> int:
        return expected - len(set(self.seqs))
