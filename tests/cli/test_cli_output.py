"""What `ferry ps`, `ferry fleet list` and `ferry apply` show (docs/cli.md#tables): tables that fit 80 and
200 columns and COLUMNS, plain one-line rows when piped, errors under their row, columns left out and
`-v`; jobs named as people name them; the plan's fleet. On stores of their own: no server."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from cli import exit_codes, render
from cli.follow import _status_view
from cli.run_plan import runs_on
from cli.tables import Column, FittedTable, Row
from core.configuration import TaskConfiguration, parse_configuration
from store import Store
from tests.cli.cli_records import (
    LOST,
    NO_ROOM,
    NOW,
    ferry,
    job_record,
    put_fleet,
    run_record,
    shown,
    two_runs,
)

# --- ferry ps ------------------------------------------------------------------------------------------


def test_ps_at_80_columns_leaves_out_columns_and_cuts_no_cell() -> None:
    lines = shown(render.runs_table(two_runs(), now=NOW), 80)
    assert all(len(line) <= 80 for line in lines), lines
    assert lines[0].split() == ["NAME", "JOB", "STATUS", "MESSAGE", "INSTANCE", "SUBMITTED"]
    assert [line.split() for line in lines[1:6]] == [
        ["train-two-nodes", "running", "2m", "ago"],
        ["node", "0", "running", "running", "local", "1m", "ago"],
        ["node", "1", "running", "running", "local", "1m", "ago"],
        ["big", "failed", "job", "failed", "2m", "ago"],
        ["job", "failed", "no", "capacity", "1m", "ago"],
    ]
    assert "…" not in "".join(lines)
    # The error under its row, on as many lines as it needs, indented; every word of it there.
    error = lines[6:]
    assert error[0].startswith("  error: no instance of fleet local") and error[1].startswith("    ")
    assert " ".join(" ".join(error).split()) == "error: " + NO_ROOM.split(": ", 1)[1]


def test_ps_at_200_columns_shows_the_resources_and_the_error_on_one_line() -> None:
    lines = shown(render.runs_table(two_runs(), now=NOW), 200)
    assert lines[0].split() == ["NAME", "JOB", "STATUS", "MESSAGE", "RESOURCES", "INSTANCE", "SUBMITTED"]
    assert "cpu=1.. mem=" in lines[1]
    assert lines[-1] == "  error: " + NO_ROOM.split(": ", 1)[1]
    assert len(lines) == 7


def test_ps_wide_shows_every_column_and_wraps_rather_than_cuts() -> None:
    wide = render.runs_table(two_runs(), wide=True, now=NOW)
    assert shown(wide, 200)[0].split() == [
        "NAME", "JOB", "SUB", "STATUS", "MESSAGE", "RESOURCES", "INSTANCE", "SUBMITTED",
    ]  # fmt: skip
    narrow = "\n".join(shown(wide, 80))
    for word in ("cpu=1..", "disk=10GB..", "no capacity", "local", "2m"):
        assert word in narrow


def test_a_service_url_and_an_ide_link_go_under_their_row() -> None:
    from cli.services import ServiceView

    web = run_record("web", "running", run_type="service")
    replicas = [job_record(web, 0, "running", replica=r, instance_name="local") for r in (0, 1)]
    url = "http://127.0.0.1:8300/proxy/services/p/web/"
    view = ServiceView(url=url, replicas={replicas[0].id: "ready 1/1"})
    lines = shown(render.runs_table([(web, replicas)], {web.id: view}, now=NOW), 80)
    assert lines[2] == f"  url: {url}"
    assert lines[3].split()[:4] == ["replica", "0", "running", "ready"]
    assert lines[4].split()[:2] == ["replica", "1"]


def test_piped_ps_is_plain_stable_one_line_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Piped with no COLUMNS: no width limit, no styling; with COLUMNS: that width, piped or not."""
    monkeypatch.delenv("COLUMNS", raising=False)
    piped = render.console()
    assert not piped.is_terminal and piped.width == render.UNLIMITED_WIDTH
    out = io.StringIO()
    piped.file = out
    table = render.runs_table(two_runs(), now=NOW)
    piped.print(table)
    piped.print(table)
    text = out.getvalue()
    first, second = text[: len(text) // 2], text[len(text) // 2 :]
    assert first == second and "\x1b" not in text
    lines = first.splitlines()
    assert len(lines) == 7 and all(line == line.rstrip() for line in lines)
    assert lines[-1] == "  error: " + NO_ROOM.split(": ", 1)[1]  # one line, however long
    monkeypatch.setenv("COLUMNS", "80")
    assert render.console().width == 80


# --- ferry apply's progress, and its plan --------------------------------------------------------------


def test_the_progress_names_jobs_as_people_do() -> None:
    (ranks, running), (big, [failed]) = two_runs()
    assert [line.split()[:2] for line in shown(_status_view(ranks, running), 80)[1:]] == [
        ["node", "0"],
        ["node", "1"],
    ]
    assert shown(_status_view(big, [failed]), 80)[1].split()[0] == "big"  # its only job: the run's name
    web = run_record("web", "running", run_type="service")
    assert render.job_label(0, 0, *render.label_shape(web, [job_record(web, 0, "running")])) == "replica 0"
    assert render.job_label(2, 1, True, True) == "replica 2 node 1"


def task(**fields: object) -> TaskConfiguration:
    conf = parse_configuration({"type": "task", "commands": ["x"], **fields})
    assert isinstance(conf, TaskConfiguration)
    return conf


def test_the_plan_names_the_fleet_the_run_goes_to(store: Store) -> None:
    assert runs_on(store, "p", task()) == "this machine (fleet local)"
    assert runs_on(store, "p", task(fleets=["lab"])).startswith("nowhere: no fleet named lab in project 'p'")
    put_fleet(store, "lab")
    assert runs_on(store, "p", task(fleets=["lab"])) == "fleet lab"
    assert runs_on(store, "p", task(fleets=["gpu", "lab"])) == "fleet lab (the first of gpu, lab that exists)"
    assert runs_on(store, "p", task()) == "fleet lab (the project's newest fleet)"
    assert runs_on(store, "p", task(fleets=["local"])) == "this machine (fleet local)"


def test_applying_a_task_of_an_ssh_fleet_shows_that_fleet_in_its_plan(home: Path, store: Store) -> None:
    put_fleet(store, "my-ssh-fleet")
    config = home / "t.yml"
    config.write_text("type: task\nname: on-lab\ncommands: [x]\nfleets: [my-ssh-fleet]\n")
    shown_plan = ferry(home, "apply", "-f", str(config))  # no terminal to confirm on: the plan, then 2
    assert shown_plan.exit_code == exit_codes.USAGE
    [line] = [line for line in shown_plan.stderr.splitlines() if line.startswith("Runs on")]
    assert line.split(None, 2)[2].rstrip() == "fleet my-ssh-fleet, by the workers of 127.0.0.1:1"


# --- ferry fleet list ----------------------------------------------------------------------------------


@pytest.mark.usefixtures("fleets")
def test_fleet_list_at_80_columns_shows_what_is_used_and_free(home: Path) -> None:
    listed = ferry(home, "fleet", "list", COLUMNS="80")
    assert listed.exit_code == 0, listed.output
    lines = listed.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    assert [line.split() for line in lines] == [
        ["FLEET", "INSTANCE", "STATUS", "USED", "FREE", "BLOCKS", "JOBS"],
        ["lab", "active"],
        ["lab-0", "ready", "4cpu", "32GB", "2gpu", "4cpu", "30.7GB", "2gpu", "2/4", "1"],
        ["lab-1", "unreachable", "-", "-", "-", "0"],
        *[line.split() for line in lines[4:6]],  # its reason, under it (checked below)
        ["local", "active"],
        ["local", "ready", "2cpu", "1GB", "0cpu", "14.5GB", "shared", "1"],
    ]
    assert " ".join(" ".join(lines[4:6]).split()) == f"unreachable: {LOST}"


@pytest.mark.usefixtures("fleets")
def test_fleet_list_piped_is_one_line_per_row_and_wide_shows_all(home: Path) -> None:
    piped = ferry(home, "fleet", "list").stdout.splitlines()
    assert len(piped) == 7 and piped[4] == f"  unreachable: {LOST}"
    assert piped[0].split() == ["FLEET", "INSTANCE", "STATUS", "ADDRESS", "USED", "FREE", "BLOCKS", "JOBS"]
    assert ferry(home, "fleet", "list").stdout == "\n".join(piped) + "\n"  # the same again
    wide = ferry(home, "fleet", "list", "-v").stdout.splitlines()
    assert wide[0].split()[3:6] == ["BACKEND", "ADDRESS", "RESOURCES"]
    assert wide[2].split()[:5] == ["lab-0", "ready", "10.0.0.11", "8cpu", "62.7GB"]


def test_a_fitted_table_drops_optional_columns_in_order_and_wraps_the_flexible_one() -> None:
    columns = [Column("A"), Column("B", optional=2), Column("C", flexible=True), Column("D", optional=1)]
    table = FittedTable(columns, [Row(("a" * 10, "b" * 10, "one two three four five", "d" * 10))])
    assert table.lines(None)[0].split() == ["A", "B", "C", "D"]
    assert table.lines(59) == table.lines(None)  # just fits
    assert table.lines(50)[0].split() == ["A", "B", "C"]  # D (optional 1) goes first
    assert table.lines(40)[0].split() == ["A", "C"]  # then B
    assert table.lines(30) == ["A           C", "aaaaaaaaaa  one two three four", "            five"]
    # C no narrower than its floor (12, or its widest if less): the lines are longer than asked then.
    assert table.lines(10) == table.lines(24) == [
        "A           C", "aaaaaaaaaa  one two", "            three four", "            five",
    ]  # fmt: skip
    wide = FittedTable(columns, table.rows, wide=True)
    assert wide.lines(30)[0].split() == ["A", "B", "C", "D"]  # -v: every column, the flexible one wrapped
    with pytest.raises(ValueError, match="a row of 1 cells in a table of 4 columns"):
        FittedTable(columns, [Row(("x",))])
