"""Several writers on one SQLite database: threads of one worker, and worker processes.

Each writer replays what overlapping activity attempts do: it sends its own eventlog, and the same
shared eventlog and the same log as the other writers, chunk by chunk, from the start. Nothing may
fail ("database is locked" included), be lost, or be stored twice.
"""

import multiprocessing
import threading
from pathlib import Path

from store.opening import open_store
from store.repository import Store

EVENTS = 150
CHUNKS = 150
SHARED_JOB = "run/r0/j0/s0"


def _chunk(i: int) -> bytes:
    return f"step {i}: loss={1 / (i + 1):.6f}\n".encode()


def _expected_log() -> bytes:
    return b"".join(_chunk(i) for i in range(CHUNKS))


def _write(store: Store, writer: int) -> None:
    """Interleaves the writer's own eventlog with the shared eventlog and the shared log."""
    own_job = f"run/r{writer + 1}/j0/s0"
    offset = 0
    for i in range(max(EVENTS, CHUNKS)):
        if i < EVENTS:
            store.append_events("run", own_job, i, [(float(i), "memo", {"writer": writer, "i": i})])
            # The shared eventlog is sent in overlapping batches, as a retried flush would.
            store.append_events(
                "run", None, max(0, i - 1), [(float(j), "memo", {"i": j}) for j in (i - 1, i) if j >= 0]
            )
        if i < CHUNKS:
            data = _chunk(i)
            store.append_log(SHARED_JOB, offset, data, float(i))
            offset += len(data)


def _check(store: Store, writers: int) -> None:
    for writer in range(writers):
        own = store.read_events("run", f"run/r{writer + 1}/j0/s0")
        assert [(e.seq, e.context_data()) for e in own] == [
            (i, {"writer": writer, "i": i}) for i in range(EVENTS)
        ]
    shared = store.read_events("run", None)
    assert [(e.seq, e.context_data()) for e in shared] == [(i, {"i": i}) for i in range(EVENTS)]
    assert len(store.read_all_events("run")) == EVENTS * (writers + 1)
    assert store.read_log(SHARED_JOB) == (_expected_log(), len(_expected_log()))


def test_threads_of_one_process(db_url: str) -> None:
    store = open_store(db_url)
    errors: list[BaseException] = []

    def write(writer: int) -> None:
        try:
            _write(store, writer)
        except BaseException as error:  # reported by the main thread
            errors.append(error)

    threads = [threading.Thread(target=write, args=(writer,)) for writer in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    _check(store, 4)
    store.engine.dispose()


def _process(url: str, writer: int) -> None:
    # A fresh interpreter: it migrates the database itself, perhaps at the same time as the others.
    _write(open_store(url), writer)


def test_worker_processes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ferry.db'}"
    with multiprocessing.get_context("spawn").Pool(3) as pool:
        pool.starmap(_process, [(url, writer) for writer in range(3)])  # re-raises a writer's error
    store = open_store(url)
    _check(store, 3)
    store.engine.dispose()
