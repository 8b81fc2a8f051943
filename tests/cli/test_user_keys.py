"""The user's SSH key pair (cli/user_keys.py): made once, private to the user, and what each job gets."""

from __future__ import annotations

import stat
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import asyncssh

from cli.user_keys import KEY_FILE, public_key_line, user_key
from core.jobs.transitions import prepare_task
from core.runs.lifecycle import submit_run
from core.runs.submissions import job_input
from core.wire.agent_api import ClusterInfo
from core.wire.job_messages import Placement
from tests.core.test_run_lifecycle import run_input


def test_made_once_private_and_matching(tmp_path: Path) -> None:
    with ThreadPoolExecutor(4) as pool:  # four `ferry` commands at once: one pair
        paths = list(pool.map(lambda _: user_key(tmp_path), range(4)))
    assert set(paths) == {tmp_path / KEY_FILE}
    private = tmp_path / KEY_FILE
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert stat.S_IMODE(private.parent.stat().st_mode) == 0o700
    line = public_key_line(tmp_path)
    exported = asyncssh.read_private_key(str(private)).export_public_key().decode().split()[:2]
    assert line.split()[:2] == exported and line.startswith("ssh-ed25519 ")
    before = private.read_bytes()
    assert user_key(tmp_path) == private and private.read_bytes() == before  # kept, not made anew


def test_each_job_gets_the_users_key() -> None:
    inp = run_input("dev-environment", ide="vscode").model_copy(
        update={"authorized_keys": ["ssh-ed25519 AAAA k"]}
    )
    step = submit_run(inp, 1000.0)
    job = job_input(inp, step.machine.state, "ferry/main/train", 0, 0)
    assert job.authorized_keys == ["ssh-ed25519 AAAA k"]
    placement = Placement(instance_name="local", cluster=ClusterInfo())
    assert prepare_task(job, "job-1", placement, None).authorized_keys == ["ssh-ed25519 AAAA k"]
