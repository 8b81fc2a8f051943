"""The docs' tables that mirror a structure of core are rebuilt from core here (docs/README.md).

A table is checked when the line `<!-- checked: NAME -->` comes before it. Each check names the columns
the code decides (the first one names the row); the other columns are free prose. When a table drifts,
the test prints a diff and the whole table as it should be, prose kept, ready to paste over the old one.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from core.configuration import CONFIGURATION_MODELS
from core.fleets import messages as fleet_messages
from core.jobs.state_machine import JOB_EVENTS_FROM
from core.runs.retry import PENDING_BACKOFF_SCHEDULE
from core.runs.state_machine import RUN_EVENTS_FROM
from core.status import JobStatus, JobTerminationReason, RunStatus, RunTerminationReason

DOCS = Path(__file__).resolve().parents[2] / "docs"
MARKER = re.compile(r"^<!-- checked: (?P<name>[a-z0-9-]+) -->$")
NEVER = "—"  # a reason with no retry event


class TableError(ValueError):
    """A checked table that cannot be read, or whose own cells name what core does not have."""


@dataclass(frozen=True)
class Table:
    doc: str
    name: str
    line: int  # 1-based, of the marker
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


Expected = Callable[[Table], list[tuple[str, ...]]]


@dataclass(frozen=True)
class Check:
    name: str
    doc: str
    columns: tuple[str, ...]  # the columns core decides, the first naming the row
    expected: Expected  # their cells, row by row, in order


# --- reading Markdown -----------------------------------------------------------------------------------


def cells(line: str) -> tuple[str, ...]:
    """A table row's cells, each with its whitespace collapsed."""
    inner = line.strip()
    inner = inner[1:] if inner.startswith("|") else inner
    inner = inner[:-1] if inner.endswith("|") else inner
    return tuple(" ".join(cell.split()) for cell in inner.split("|"))


def read_tables(text: str, doc: str) -> list[Table]:
    """Every checked table of a document: the table that follows each marker (blank lines between)."""
    lines = text.splitlines()
    tables = []
    for n, line in enumerate(lines):
        marker = MARKER.match(line.strip())
        if marker is None:
            continue
        at = n + 1
        while at < len(lines) and not lines[at].strip():
            at += 1
        block = []
        while at < len(lines) and lines[at].lstrip().startswith("|"):
            block.append(lines[at])
            at += 1
        where = f"{doc}:{n + 1}: checked table {marker['name']}"
        if len(block) < 2 or not set(block[1].replace("|", "").strip()) <= set("-: "):
            raise TableError(f"{where}: no Markdown table (header, separator, rows) after the marker")
        header = cells(block[0])
        rows = tuple(cells(row) for row in block[2:])
        for offset, row in enumerate(rows):
            if len(row) != len(header):
                raise TableError(f"{where}: row {offset + 1} has {len(row)} cells, the header {len(header)}")
        tables.append(Table(doc, marker["name"], n + 1, header, rows))
    return tables


def render(header: tuple[str, ...], rows: Iterable[tuple[str, ...]]) -> str:
    lines = [header, tuple("---" for _ in header), *rows]
    return "\n".join("| " + " | ".join(row) + " |" for row in lines)


# --- comparing ------------------------------------------------------------------------------------------


def compare(table: Table, check: Check) -> str | None:
    """None when the table's checked columns are what core says; else a readable failure, with the
    expected table (the documented prose kept by row name) to paste."""
    where = f"{table.doc}:{table.line}: checked table {table.name}"
    missing = [column for column in check.columns if column not in table.header]
    if missing:
        return f"{where} lacks the column(s) {missing}; its header is {list(table.header)}"
    try:
        expected = check.expected(table)
    except TableError as err:
        return f"{where}: {err}"
    at = [table.header.index(column) for column in check.columns]
    documented = [tuple(row[i] for i in at) for row in table.rows]
    if documented == expected:
        return None
    prose = {row[at[0]]: row for row in table.rows}
    fixed = []
    for wanted in expected:
        row = list(prose.get(wanted[0], ("",) * len(table.header)))
        for i, value in zip(at, wanted, strict=True):
            row[i] = value
        fixed.append(tuple(row))
    return (
        f"{where} does not match core.\n\n"
        f"Its checked columns {list(check.columns)}, documented (-) and as core has them (+):\n"
        f"{line_diff(check.columns, documented, expected)}\n\n"
        f"The table as it should be (prose kept by row), to paste into docs/{table.doc}:\n\n"
        f"<!-- checked: {table.name} -->\n{render(table.header, fixed)}\n"
    )


def line_diff(header: tuple[str, ...], old: list[tuple[str, ...]], new: list[tuple[str, ...]]) -> str:
    before = render(header, old).splitlines()[2:]
    after = render(header, new).splitlines()[2:]
    diff = difflib.unified_diff(before, after, lineterm="", n=1)
    return "\n".join(line for line in diff if not line.startswith(("---", "+++")))


# --- what core says -------------------------------------------------------------------------------------


def code(text: str) -> str:
    return f"`{text}`"


def legal_in(statuses: frozenset[Any], kind: type[JobStatus] | type[RunStatus]) -> str:
    """Where an event is legal, as the docs write it."""
    active = frozenset(s for s in kind if s.is_active())
    if not statuses:
        return "first event only"
    if statuses == active:
        return "any active"
    if statuses == active - {kind["TERMINATING"]}:
        return "any active but `TERMINATING`"
    return ", ".join(code(s.name) for s in kind if s in statuses)


def job_events(table: Table) -> list[tuple[str, ...]]:
    return [(code(name), legal_in(statuses, JobStatus)) for name, statuses in JOB_EVENTS_FROM.items()]


def run_events(table: Table) -> list[tuple[str, ...]]:
    return [(code(name), legal_in(statuses, RunStatus)) for name, statuses in RUN_EVENTS_FROM.items()]


def job_termination_reasons(table: Table) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for reason in JobTerminationReason:
        event = reason.to_retry_event()
        rows.append(
            (code(reason.name), code(reason.to_status().name), NEVER if event is None else code(event))
        )
    return rows


def run_termination_reasons(table: Table) -> list[tuple[str, ...]]:
    return [
        (code(r.name), code(r.to_status().name), code(r.to_job_termination_reason().name))
        for r in RunTerminationReason
    ]


def pending_backoff(table: Table) -> list[tuple[str, ...]]:
    last = len(PENDING_BACKOFF_SCHEDULE) - 1
    return [
        (code(str(n)) + (" and later" if n == last else ""), f"{seconds} s")
        for n, seconds in enumerate(PENDING_BACKOFF_SCHEDULE)
    ]


_SIGNAL_CONSTANT = re.compile(r"^(FLEET|JOB)_[A-Z_]+$")


def fleet_signals(table: Table) -> list[tuple[str, ...]]:
    """Every signal-name constant of core.fleets.messages, in the order the module defines them."""
    return [
        (code(value), code(name))
        for name, value in vars(fleet_messages).items()
        if _SIGNAL_CONSTANT.match(name) and isinstance(value, str)
    ]


def _names(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def not_done(table: Table) -> list[tuple[str, ...]]:
    """The documented rows, each with which of its fields its type's NOT_ACTED_ON holds."""
    columns = ("feature", "type", "fields")
    feature, kind, fields = (table.header.index(column) for column in columns)
    rows: list[tuple[str, ...]] = []
    for row in table.rows:
        types = _names(row[kind])
        if len(types) != 1 or types[0] not in CONFIGURATION_MODELS:
            raise TableError(
                f"{row[feature]}: type {row[kind]!r} is not one of {sorted(CONFIGURATION_MODELS)}"
            )
        model = CONFIGURATION_MODELS[types[0]]
        named = _names(row[fields])
        unknown = [f for f in named if f.split(".")[0] not in model.model_fields]
        if not named or unknown:
            raise TableError(f"{row[feature]}: {types[0]} has no field(s) {unknown or row[fields]!r}")
        acted = [f for f in named if f in model.NOT_ACTED_ON]
        listed = "all" if acted == named else "none" if not acted else ", ".join(code(f) for f in acted)
        rows.append((row[feature], row[kind], row[fields], listed))
    return rows


CHECKS = (
    Check("job-events", "eventlog.md", ("event", "legal in"), job_events),
    Check("run-events", "runs.md", ("event", "legal in"), run_events),
    Check(
        "job-termination-reasons",
        "jobs.md",
        ("reason", "finished status", "retry event"),
        job_termination_reasons,
    ),
    Check(
        "run-termination-reasons",
        "runs.md",
        ("reason", "finished status", "reason given to the run's jobs"),
        run_termination_reasons,
    ),
    Check("pending-backoff", "runs.md", ("attempt", "wait before resubmitting"), pending_backoff),
    Check("fleet-signals", "fleets.md", ("signal", "constant"), fleet_signals),
    Check("not-done", "runs.md", ("feature", "type", "fields", "in `NOT_ACTED_ON`"), not_done),
)


def docs_tables() -> list[Table]:
    return [table for path in sorted(DOCS.glob("*.md")) for table in read_tables(path.read_text(), path.name)]


# --- the docs as they are -------------------------------------------------------------------------------


@pytest.mark.parametrize("check", CHECKS, ids=[check.name for check in CHECKS])
def test_checked_table_matches_core(check: Check) -> None:
    tables = [table for table in docs_tables() if table.name == check.name]
    assert [table.doc for table in tables] == [check.doc], (
        f"expected one table marked <!-- checked: {check.name} --> in docs/{check.doc}, "
        f"found it in {[table.doc for table in tables]}"
    )
    failure = compare(tables[0], check)
    if failure is not None:
        pytest.fail(failure, pytrace=False)


def test_every_marker_names_a_check() -> None:
    known = {check.name for check in CHECKS}
    unknown = [f"{t.doc}:{t.line}: {t.name}" for t in docs_tables() if t.name not in known]
    assert not unknown, f"markers no check knows (add a Check to {Path(__file__).name}): {unknown}"


# --- the comparison itself fails on drift ---------------------------------------------------------------


def _real(name: str) -> tuple[Table, Check]:
    [check] = [c for c in CHECKS if c.name == name]
    [table] = [t for t in docs_tables() if t.name == name]
    return table, check


def _with_cell(table: Table, row_name: str, column: str, value: str) -> Table:
    at = table.header.index(column)
    rows = tuple(
        tuple(value if i == at else cell for i, cell in enumerate(row)) if row[0] == row_name else row
        for row in table.rows
    )
    assert rows != table.rows, f"no row {row_name} in {table.name}"
    return replace(table, rows=rows)


def test_a_changed_legal_in_fails_with_the_table_to_paste() -> None:
    table, check = _real("job-events")
    drifted = _with_cell(table, "`alloc`", "legal in", "`SUBMITTED`, `PROVISIONING`")
    failure = compare(drifted, check)
    assert failure is not None
    assert "-| `alloc` | `SUBMITTED`, `PROVISIONING` |" in failure
    assert "+| `alloc` | `SUBMITTED` |" in failure
    pasted = failure.split("to paste into docs/eventlog.md:\n\n", 1)[1]
    assert pasted.startswith("<!-- checked: job-events -->\n| event | legal in | guards | status after |")
    # The fixed table keeps the prose and mends the drifted cell: pasting it passes.
    assert read_tables(pasted, "eventlog.md") == [replace(table, line=1)]


def test_a_missing_or_extra_row_fails() -> None:
    table, check = _real("job-termination-reasons")
    assert compare(replace(table, rows=table.rows[1:]), check) is not None
    extra = ("`LOST_IN_SPACE`", "`FAILED`", "`error`", "not a reason")
    assert compare(replace(table, rows=(*table.rows, extra)), check) is not None


def test_reordered_rows_fail() -> None:
    table, check = _real("run-termination-reasons")
    assert compare(replace(table, rows=tuple(reversed(table.rows))), check) is not None


def test_a_changed_mapping_fails() -> None:
    table, check = _real("run-termination-reasons")
    drifted = _with_cell(table, "`JOB_FAILED`", "finished status", "`TERMINATED`")
    failure = compare(drifted, check)
    assert failure is not None and "`JOB_FAILED` | `FAILED` | `TERMINATED_BY_SERVER`" in failure


def test_a_changed_backoff_fails() -> None:
    table, check = _real("pending-backoff")
    assert compare(_with_cell(table, "`0`", "wait before resubmitting", "10 s"), check) is not None


def test_prose_columns_are_free() -> None:
    table, check = _real("job-events")
    assert compare(_with_cell(table, "`pull`", "guards", "anything at all"), check) is None


def test_a_missing_checked_column_fails() -> None:
    table, check = _real("run-events")
    at = table.header.index("legal in")
    header = tuple(h for i, h in enumerate(table.header) if i != at)
    rows = tuple(tuple(c for i, c in enumerate(row) if i != at) for row in table.rows)
    failure = compare(replace(table, header=header, rows=rows), check)
    assert failure is not None and "lacks the column(s) ['legal in']" in failure


def test_not_done_rows_name_real_fields() -> None:
    table, check = _real("not-done")
    failure = compare(_with_cell(table, table.rows[0][0], "fields", "`no_such_field`"), check)
    assert failure is not None and "no_such_field" in failure
    failure = compare(_with_cell(table, table.rows[0][0], "type", "`fleet-ish`"), check)
    assert failure is not None and "fleet-ish" in failure


def test_a_marker_without_a_table_is_an_error() -> None:
    with pytest.raises(TableError, match="no Markdown table"):
        read_tables("<!-- checked: job-events -->\n\nsome prose\n", "x.md")
    with pytest.raises(TableError, match="row 1 has 1 cells"):
        read_tables("<!-- checked: x -->\n| a | b |\n|---|---|\n| only |\n", "x.md")
