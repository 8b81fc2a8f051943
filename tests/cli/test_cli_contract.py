"""What scripts rely on (docs/cli.md): `--json` against the documented schemas, `--version`, shell
completion, and the exit codes, documented and as the commands exit. On stores of their own: no server."""

from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path

import pytest

from cli import exit_codes, render
from cli.fleet import fleets_json
from cli.main import app
from store import Store
from tests.cli.cli_records import (
    ROOT,
    check_schema,
    documented_schema,
    ferry,
    job_record,
    run_record,
    runner,
    schema_errors,
    two_runs,
)


def test_the_checker_finds_what_breaks_a_schema() -> None:
    schema = documented_schema("validate")
    assert schema_errors([{"file": "x"}], schema, schema)[0] == "$[0]: type is missing"
    good = {"file": "f", "type": "task", "name": "n", "resources": "r", "scale": "s", "retry": "r"}
    broken = schema_errors([{**good, "schedule": None}], schema, schema)
    assert broken == ["$[0].schedule: None is not string"]
    assert schema_errors([{**good, "schedule": "-", "extra": 1}], schema, schema) == [
        "$[0]: extra is not documented"
    ]


def test_ps_json_matches_the_documented_schema() -> None:
    from cli.dev_environments import DevView
    from cli.services import ServiceView
    from cli.stuck import StuckWorkflow

    runs = two_runs()
    web = run_record("web", "running", run_type="service")
    replica = job_record(web, 0, "running", instance_name="local")
    dev = run_record("dev", "running", run_type="dev-environment")
    dev_job = job_record(dev, 0, "running", instance_name="local")
    services = {web.id: ServiceView(url=None, replicas={replica.id: "ready 1/1"})}
    devs = {dev.id: DevView(job_id=dev_job.id, link="vscode://x", asked=True, attached=True)}
    stuck = {dev.id: StuckWorkflow(dev.workflow_id, 1.0e9, "Nondeterminism error: ...")}
    pulls = {runs[0][1][0].id: "pulling x: 1/2"}
    data = render.runs_json([*runs, (web, [replica]), (dev, [dev_job])], services, devs, pulls, stuck)
    check_schema(json.loads(json.dumps(data)), "ps")
    assert {"url", "ide_link", "stuck"} <= {key for run in data for key in run}


@pytest.mark.usefixtures("fleets")
def test_fleet_list_json_matches_the_documented_schema(home: Path, store: Store) -> None:
    listed = ferry(home, "fleet", "list", "--json")
    data = json.loads(listed.stdout)
    check_schema(data, "fleet-list")
    lab0 = data[0]["instances"][0]
    assert (lab0["total"], lab0["used"], lab0["free"]) == (
        {"cpu": 8.0, "memory": 62.7, "gpu": 4},
        {"cpu": 4.0, "memory": 32.0, "gpu": 2},
        {"cpu": 4.0, "memory": 30.7, "gpu": 2},
    )
    assert data == fleets_json([(f, store.list_instances("p", f.name)) for f in store.list_fleets("p")])


# --- ferry validate, --version, exit codes -------------------------------------------------------------


def test_validate_json_matches_the_documented_schema_and_a_bad_file_exits_2(home: Path) -> None:
    result = ferry(home, "validate", "--json", "examples/hello.yml", "examples/pipeline.yml")
    assert result.exit_code == exit_codes.OK
    data = json.loads(result.stdout)
    check_schema(data, "validate")
    assert [item["name"] for item in data] == ["hello", "fetch", "train", "report"]
    bad = home.parent / "bad.yml"
    bad.write_text("type: task\ncomands: [x]\n")
    refused = ferry(home, "validate", str(bad))
    assert (refused.exit_code, refused.stdout) == (exit_codes.USAGE, "")


def test_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert (result.exit_code, result.stdout) == (0, f"ferry {version('ferry')}\n")


def test_shell_completion_is_offered() -> None:
    assert "--install-completion" in runner.invoke(app, ["--help"]).stdout


@pytest.mark.parametrize(
    ("args", "code", "line"),
    [
        (["logs", "nope"], exit_codes.NOT_FOUND, "ferry logs: no run named 'nope' in project 'p'"),
        (["events", "nope"], exit_codes.NOT_FOUND, "ferry events: no run named 'nope'"),
        (["wait", "nope"], exit_codes.NOT_FOUND, "ferry wait: no run named 'nope'"),
        (["fleet", "delete", "-y", "nope"], exit_codes.UNREACHABLE, "ferry fleet delete: cannot reach"),
        (["volume", "delete", "-y", "nope"], exit_codes.NOT_FOUND, "ferry volume delete: no volume named"),
        (["secret", "delete", "-y", "NOPE"], exit_codes.NOT_FOUND, "ferry secret delete: no secret named"),
        (["apply", "-y", "-f", "missing.yml"], exit_codes.USAGE, "ferry apply: missing.yml: no such file"),
        (["wait", "x", "--timeout", "soon"], exit_codes.USAGE, "ferry wait: --timeout: expected a duration"),
        (["ps", "--bogus"], exit_codes.USAGE, "ferry ps: no such option: --bogus"),
    ],
)
def test_exit_codes(home: Path, args: list[str], code: int, line: str) -> None:
    result = ferry(home, *args)
    assert result.exit_code == code, result.output
    assert result.stderr.startswith(line), result.stderr


def test_wait_exits_1_when_it_times_out_and_2_when_the_run_failed_instead(home: Path, store: Store) -> None:
    store.put_run(run_record("sleeper", "running"))
    store.put_run(run_record("broken", "failed", termination_reason="job_failed"))
    timed_out = ferry(home, "wait", "sleeper", "--timeout", "1s")
    assert (timed_out.exit_code, timed_out.stderr) == (
        exit_codes.FAILED, "ferry wait: timed out after 1s: run sleeper is running\n",
    )  # fmt: skip
    never = ferry(home, "wait", "broken", "--status", "done")
    assert never.exit_code == exit_codes.USAGE
    assert ferry(home, "wait", "broken").exit_code == exit_codes.OK  # it finished: that was asked


def test_the_exit_codes_table_in_the_docs_is_the_code_s() -> None:
    text = (ROOT / "docs" / "cli.md").read_text()
    table = text.split("<!-- exit codes:", 1)[1].split("\n\n", 1)[0].splitlines()[3:]
    rows = [[cell.strip().strip("`") for cell in line.strip("|").split("|")] for line in table]
    assert rows == [[str(code), name, meaning] for name, code, meaning in exit_codes.TABLE]


def test_each_commands_one_line_starts_with_the_command_as_typed() -> None:
    """`ferry set-priority: ...`, not `ferry set priority: ...` (cli/errors.py one_line_errors)."""
    import typer

    def leaves(command: object, path: list[str]) -> list[tuple[str, object]]:
        subcommands = getattr(command, "commands", None)
        if not subcommands:
            return [(" ".join(["ferry", *path]), getattr(command, "callback", None))]
        return [leaf for name, sub in subcommands.items() for leaf in leaves(sub, [*path, name])]

    said = {
        typed: getattr(callback, "ferry_command", None)
        for typed, callback in leaves(typer.main.get_command(app), [])
    }
    wrapped = {typed: line for typed, line in said.items() if line is not None}
    assert len(wrapped) > 40, said
    assert {typed: line for typed, line in wrapped.items() if line != typed} == {}
