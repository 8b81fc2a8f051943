"""The secrets scan (issue 18, docs/secrets.md): a run with a secret on the embedded stack; afterwards the
secret is found in none of the forms it could be written in, anywhere under FERRY_HOME (Temporal's
database, the store, the worker's, proxy's and agent's logs, the agent's task files) nor in what the
Temporal Web UI's API answers. The job really got it: it prints its hash. A plain `env` value is in the
store (as written) but not in Temporal's database nor the UI's answers: the payloads are sealed."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx

from tests.e2e.conftest import FERRY, ROOT, SMALL, Ferry, last_line

CORE = f"hf_{secrets.token_hex(16)}"  # what any form that keeps the value's letters still shows
SECRET = f'{CORE}"\\/é☃'  # quote and backslash, escaped by JSON; é and ☃, escaped when JSON is ASCII
PLAIN = f"plain-{secrets.token_hex(8)}"
HASH = 'printf %s "$HF_TOKEN" | sha256sum | cut -d" " -f1'


def forms(value: str) -> set[bytes]:
    """The bytes `value` could be found as: itself, JSON-escaped (ASCII or not), hex, and base64 (standard
    and URL-safe) at each of the three alignments it could have inside a longer encoded text."""
    found = set()
    for text in (value, json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]):
        raw = text.encode()
        found |= {raw, raw.hex().encode()}
        for shift in range(3):
            for encode in (base64.b64encode, base64.urlsafe_b64encode):
                encoded = encode(b"\0" * shift + raw)
                found.add(encoded[(4 if shift else 0) : -4])  # the characters only its own bytes make
    return found


def holding(data: bytes, values: list[str]) -> list[str]:
    return [value for value in values if any(form in data for form in forms(value))]


def set_secret(ferry: Ferry, name: str, value: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*FERRY, "secret", "set", name], cwd=ROOT, env=ferry.env, input=value.encode(), capture_output=True
    )


def ui_answers(ui_url: str) -> Iterator[bytes]:
    """Every answer of the Web UI's API about the namespace's workflows: the list, each one's description and
    its whole history."""
    api = f"{ui_url}/api/v1/namespaces/default"
    with httpx.Client(trust_env=False, timeout=30) as http:
        listed = http.get(f"{api}/workflows")
        yield listed.content
        for execution in listed.json()["executions"]:
            workflow, run = (
                quote(execution["execution"]["workflowId"], safe=""),
                execution["execution"]["runId"],
            )
            yield http.get(f"{api}/workflows/{workflow}", params={"execution.runId": run}).content
            token = ""
            while True:
                page = http.get(
                    f"{api}/workflows/{workflow}/history",
                    params={"execution.runId": run, "nextPageToken": token},
                )
                assert page.status_code == 200, page.text
                yield page.content
                token = page.json().get("nextPageToken", "")
                if not token:
                    break


def files_holding(home: Path, values: list[str]) -> list[str]:
    return [str(path) for path in home.rglob("*") if path.is_file() and holding(path.read_bytes(), values)]


def test_a_run_with_a_secret_leaves_it_nowhere(ferry: Ferry, tmp_path: Path) -> None:
    assert json.dumps(SECRET)[1:-1] != SECRET != json.dumps(SECRET, ensure_ascii=False)[1:-1]  # 3 forms
    added = set_secret(ferry, "HF_TOKEN", SECRET)
    assert (added.returncode, added.stderr) == (0, b"secret HF_TOKEN set\n")
    conf, flag = tmp_path / "scan.yml", tmp_path / "go"
    commands = [HASH, f"while [ ! -f {flag} ]; do sleep 0.05; done"]
    conf.write_text(
        "type: task\nname: scan\nenv:\n  - HF_TOKEN=${{ secrets.HF_TOKEN }}\n"
        f"  - PLAIN={PLAIN}\ncommands:\n" + "".join(f"  - {json.dumps(c)}\n" for c in commands) + SMALL
    )
    applied = ferry("apply", "-y", "-d", "-f", str(conf))
    assert applied.returncode == 0, applied.stderr
    digest = hashlib.sha256(SECRET.encode()).hexdigest() + "\n"
    for _ in range(600):  # the job got the value: its hash is in its log (a bound, not a timing assertion)
        if ferry("logs", "scan").stdout == digest:
            break
        time.sleep(0.1)
    assert ferry("logs", "scan").stdout == digest
    # While it runs, its task's files are on the agent's disk: its spec names the secret, without it.
    assert any(path.name == "job.json" for path in (ferry.home / "agent").rglob("*"))
    assert files_holding(ferry.home, [SECRET, CORE]) == []
    flag.touch()
    assert ferry("wait", "scan").returncode == 0

    shown = [
        ferry(*args) for args in (["secret", "list", "--json"], ["ps", "-a", "--json"], ["events", "scan"])
    ]
    assert [secret["name"] for secret in json.loads(shown[0].stdout)] == ["HF_TOKEN"]
    for result in shown:
        assert holding((result.stdout + result.stderr).encode(), [SECRET, CORE]) == []

    names = {path.relative_to(ferry.home).as_posix() for path in ferry.home.rglob("*") if path.is_file()}
    assert {"ferry.db", "stack/temporal.db", "stack/worker.log", "agent/agent.log"} <= names
    assert files_holding(ferry.home, [SECRET, CORE]) == []
    kept = {Path(found).name for found in files_holding(ferry.home, [PLAIN])}
    assert kept and all(name.startswith("ferry.db") for name in kept)  # the store's, not Temporal's
    ui_url = json.loads(ferry("server", "status", "--json").stdout)["ui_url"]
    answers = list(ui_answers(ui_url))
    assert len(answers) > 3 and any(b"YmluYXJ5L2VuY3J5cHRlZA==" in a for a in answers)  # binary/encrypted
    for answer in answers:
        assert holding(answer, [SECRET, CORE, PLAIN]) == []


def test_a_run_naming_a_secret_not_set_is_refused_naming_it(ferry: Ferry, tmp_path: Path) -> None:
    assert ferry("secret", "delete", "-y", "HF_TOKEN").returncode == 0
    conf = tmp_path / "missing.yml"
    conf.write_text(
        "type: task\nname: missing\nenv:\n  - A=${{ secrets.HF_TOKEN }}\n  - B=${{ secrets.WANDB_KEY }}\n"
        f"commands:\n  - echo never\n{SMALL}"
    )
    refused = ferry("apply", "-y", "-f", str(conf))
    assert refused.returncode == 2
    assert last_line(refused.stderr) == (
        "ferry apply: run missing: secrets HF_TOKEN, WANDB_KEY are not set in project 'main': "
        "ferry secret set NAME for each"
    )
    assert ferry("ps", "-a", "--json").stdout.count('"missing"') == 0  # nothing was submitted
