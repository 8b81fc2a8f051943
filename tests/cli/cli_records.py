"""What the CLI's output tests build: runs and jobs, fleets and instances, `ferry` on a store of its own,
and a checker of JSON against the schemas docs/cli.md documents (the part of JSON Schema they use)."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

from rich.console import Console
from typer.testing import CliRunner, Result

from cli.main import app
from store import FleetRecord, InstanceRecord, JobSubmissionRecord, RunRecord, Store
from store.fleet_repository import fleet_id, instance_id

ROOT = Path(__file__).resolve().parents[2]
NOW = 1_000_000.0
NO_ROOM = (
    "FAILED_TO_START_DUE_TO_NO_CAPACITY: no instance of fleet local can run it: local has too little "
    "(cpu 64 > 2, memory 512GB > 15.5GB)"
)
LOST = "cannot connect to 10.0.0.12:22: [Errno 113] No route to host (tried again every few seconds)"
runner = CliRunner()


def documented_schema(name: str) -> dict[str, Any]:
    text = (ROOT / "docs" / "cli.md").read_text()
    found = re.search(rf"<!-- schema: {name} -->\n```json\n(.*?)\n```", text, re.S)
    assert found is not None, f"docs/cli.md has no schema {name}"
    schema: dict[str, Any] = json.loads(found[1])
    return schema


_TYPES: dict[str, type | tuple[type, ...]] = {
    "object": dict,
    "array": list,
    "string": str,
    "integer": int,
    "number": (int, float),
    "boolean": bool,
    "null": type(None),
}


def schema_errors(value: Any, schema: dict[str, Any], root: dict[str, Any], at: str = "$") -> list[str]:
    """Where `value` breaks `schema` (type, required, properties, items, $ref); a key the schema's
    properties do not name is an error too: every field printed is documented."""
    if "$ref" in schema:
        schema = root["$defs"][schema["$ref"].removeprefix("#/$defs/")]
    types = schema.get("type")
    if types is not None:
        names = types if isinstance(types, list) else [types]
        is_bool = isinstance(value, bool)
        if not any(isinstance(value, _TYPES[t]) and (t == "boolean" or not is_bool) for t in names):
            return [f"{at}: {value!r} is not {types}"]
    errors = []
    if isinstance(value, dict) and "properties" in schema:
        errors += [f"{at}: {key} is missing" for key in schema.get("required", []) if key not in value]
        for key, item in value.items():
            if key not in schema["properties"]:
                errors.append(f"{at}: {key} is not documented")
            else:
                errors += schema_errors(item, schema["properties"][key], root, f"{at}.{key}")
    if isinstance(value, list) and "items" in schema:
        for n, item in enumerate(value):
            errors += schema_errors(item, schema["items"], root, f"{at}[{n}]")
    return errors


def check_schema(value: Any, name: str) -> None:
    schema = documented_schema(name)
    assert schema_errors(value, schema, schema) == []


def run_record(name: str, status: str, run_type: str = "task", nodes: int = 1, **fields: Any) -> RunRecord:
    configuration: dict[str, Any] = {
        "type": run_type,
        "commands": ["x"],
        "resources": {"cpu": "1..", "disk": "10GB.."},
    }
    if nodes > 1:
        configuration["nodes"] = nodes
    return RunRecord(
        id=f"{name}-1", project="p", run_name=name, user="u", type=run_type, status=status,
        workflow_id=f"ferry/p/{name}", submitted_at=NOW - 120, configuration=json.dumps(configuration),
        **fields,
    )  # fmt: skip


def job_record(run: RunRecord, job: int, status: str, replica: int = 0, **fields: Any) -> JobSubmissionRecord:
    return JobSubmissionRecord(
        id=f"{run.id}-r{replica}-j{job}-s0", run_id=run.id, replica_num=replica, job_num=job, status=status,
        submitted_at=NOW - 100, **fields,
    )  # fmt: skip


def two_runs() -> list[tuple[RunRecord, list[JobSubmissionRecord]]]:
    """A two-node run running, and a one-job run that found no capacity."""
    ranks = run_record("train-two-nodes", "running", nodes=2)
    big = run_record("big", "failed", termination_reason="job_failed")
    failed = job_record(
        big, 0, "failed", termination_reason="failed_to_start_due_to_no_capacity", termination_message=NO_ROOM
    )
    running = [job_record(ranks, n, "running", instance_name="local") for n in (0, 1)]
    return [(ranks, running), (big, [failed])]


def shown(renderable: object, width: int) -> list[str]:
    out = io.StringIO()
    Console(file=out, width=width).print(renderable)
    return out.getvalue().splitlines()


def ferry(home: Path, *args: str, **env: str) -> Result:
    base = {
        "FERRY_HOME": str(home),
        "FERRY_DATABASE_URL": f"sqlite:///{home / 'ferry.db'}",
        "FERRY_PROJECT": "p",
        "FERRY_TEMPORAL_ADDRESS": "127.0.0.1:1",  # nothing here may start the embedded stack
        "COLUMNS": "",
    }
    return runner.invoke(app, list(args), env={**base, **env})


def put_fleet(store: Store, name: str, backend: str = "ssh") -> None:
    store.put_fleet(
        FleetRecord(
            id=fleet_id("p", name), project="p", name=name, backend=backend, status="active",
            workflow_id=f"ferry/p/fleet/{name}", created_at=1.0, updated_at=1.0,
        )
    )  # fmt: skip


def instance(name: str, fleet: str, **fields: Any) -> InstanceRecord:
    values: dict[str, Any] = {
        "address": "10.0.0.11", "status": "ready", "resources": '{"cpu": 8.0, "memory": 62.7, "gpu": 4}',
        "blocks": 4, "busy_blocks": 2, "jobs": 1, "in_use": '{"cpu": 4.0, "memory": 32.0, "gpu": 2}',
    }  # fmt: skip
    values.update(fields)
    return InstanceRecord(id=instance_id("p", name), project="p", fleet=fleet, name=name, **values)
