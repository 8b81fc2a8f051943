"""Services through the real `ferry` command on the embedded stack (its proxy included): `ferry apply`
prints the URL, `ferry token` answers the service's auth, `ferry ps` shows the URL and each replica's probe
state, and re-applying a changed service rolls it out in place (docs/services.md)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import httpx

from tests.e2e.conftest import SMALL, Ferry

REPLICA = Path(__file__).resolve().parents[1] / "lifecycle" / "replica_server.py"


def write_service(directory: Path, version: str) -> str:
    shutil.copy(REPLICA, directory / "replica_server.py")
    path = directory / "web.yml"
    path.write_text(
        f"type: service\nname: web\nport: 8100\n"
        f"commands: ['exec python3 replica_server.py 8100 {version}']\n{SMALL}"
    )
    return str(path)


def wait_ready(ferry: Ferry, limit: float = 60) -> dict[str, object]:
    deadline = time.monotonic() + limit
    while True:
        [run] = [r for r in json.loads(ferry("ps", "--json").stdout) if r["name"] == "web"]
        serving = [str(job.get("serving")) for job in run["jobs"] if job["status"] == "running"]
        if len(serving) == 1 and serving[0].startswith("ready"):  # "ready 1/1": the port probe passed
            return run
        assert time.monotonic() < deadline, run
        time.sleep(0.2)


def test_apply_token_ps_and_a_rolling_update(ferry: Ferry, tmp_path: Path) -> None:
    applied = ferry("apply", "-y", "-d", "-f", write_service(tmp_path, "v1"))
    assert applied.returncode == 0, applied.stderr
    [line] = [line for line in applied.stderr.splitlines() if line.startswith("service at ")]
    url = line.split()[2]
    assert url.startswith("http://127.0.0.1:") and url.endswith("/proxy/services/main/web/")
    assert "Authorization: Bearer $(ferry token)" in line
    run = wait_ready(ferry)
    assert run["url"] == url
    table = ferry("ps").stdout
    assert url in table and "ready" in table, table

    token = ferry("token").stdout.strip()
    assert len(token) > 30 and ferry("token").stdout.strip() == token  # kept, not made anew
    with httpx.Client(trust_env=False, timeout=10) as client:
        assert client.get(url).status_code == 401
        assert client.get(url, headers={"Authorization": f"Bearer {token}"}).text.strip() == "replica 0 v1"

        unchanged = ferry("apply", "-y", "-d", "-f", write_service(tmp_path, "v1"))
        assert "run web: no changes" in unchanged.stderr
        rolled = ferry("apply", "-y", "-d", "-f", write_service(tmp_path, "v2"))
        assert rolled.returncode == 0, rolled.stderr
        assert "run web: changed commands" in rolled.stderr
        assert "deployment 1 rolling out" in rolled.stderr
        deadline = time.monotonic() + 60
        while client.get(url, headers={"Authorization": f"Bearer {token}"}).text.strip() != "replica 1 v2":
            assert time.monotonic() < deadline, "the new deployment never answered"
            time.sleep(0.2)
    assert ferry("stop", "-y", "web").returncode == 0
