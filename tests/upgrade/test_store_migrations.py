"""The store's migrations under runs in flight (docs/upgrades.md#upgrading-a-compose-deployment): the first
worker of a new release migrates the store while the previous release's workers still use it, so every
migration newer than the previous release may only add what those workers ignore: tables, indexes, and
columns that are nullable or have a server default. Dropping, renaming or altering waits for a later
release (expand, then contract).

The migrations' `upgrade()` functions are read, not run: each call on alembic's `op` (or a batch of it)
is checked against what may run beside the previous release's code.
"""

from __future__ import annotations

import ast
import tarfile
from pathlib import Path

from testbed.releases import HISTORIES, SOURCE, previous_release

VERSIONS = Path(__file__).resolve().parents[2] / "store" / "migrations" / "versions"
# `f` names an index or constraint as the naming convention says; `execute` and the rest are not additive.
ADDITIVE = {"create_table", "create_index", "add_column", "batch_alter_table", "f"}


def release_migrations(version: str) -> set[str]:
    with tarfile.open(HISTORIES / version / SOURCE) as tar:
        names = [Path(name) for name in tar.getnames()]
    return {name.name for name in names if name.parent == Path("store/migrations/versions")}


def not_additive(source: str) -> list[str]:
    """What a migration's `upgrade()` does that the previous release's workers could trip on."""
    tree = ast.parse(source)
    [upgrade] = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "upgrade"]
    found: list[tuple[int, str]] = []
    for node in ast.walk(upgrade):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        target, name = node.func.value, node.func.attr
        on_op = isinstance(target, ast.Name) and target.id in ("op", "batch")
        if not on_op:
            continue
        if name not in ADDITIVE:
            found.append((node.lineno, name))
        elif name == "add_column" and not _column_may_be_left_out(node):
            found.append((node.lineno, "add_column of a NOT NULL column without a server default"))
    return [f"line {line}: {what}" for line, what in sorted(found)]


def _column_may_be_left_out(call: ast.Call) -> bool:
    """An INSERT of the previous release, which does not name the column, still succeeds."""
    columns = [arg for arg in call.args if isinstance(arg, ast.Call)]
    for column in columns:
        keywords = {keyword.arg: keyword.value for keyword in column.keywords}
        nullable = keywords.get("nullable")
        not_null = isinstance(nullable, ast.Constant) and nullable.value is False
        if not_null and "server_default" not in keywords:
            return False
    return True


def test_migrations_newer_than_the_previous_release_only_add() -> None:
    release = previous_release()
    shipped = release_migrations(release)
    assert "0001_initial.py" in shipped, shipped  # the release's code holds its migrations
    newer = sorted(path for path in VERSIONS.glob("[0-9]*.py") if path.name not in shipped)
    problems = {path.name: not_additive(path.read_text()) for path in newer}
    assert not any(problems.values()), f"migrations since {release} that are not additive: {problems}"


def test_the_check_finds_what_is_not_additive() -> None:
    """Each migration of the repository passes; the kinds of change that would break the previous
    release's workers are each found."""
    for path in VERSIONS.glob("[0-9]*.py"):
        assert not_additive(path.read_text()) == [], path.name
    breaking = """
def upgrade() -> None:
    op.drop_table("runs")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("status")
        batch.alter_column("name", new_column_name="title")
        batch.add_column(sa.Column("owner", sa.Text(), nullable=False))
        batch.add_column(sa.Column("note", sa.Text(), nullable=True))
        batch.add_column(sa.Column("uses", sa.Text(), nullable=False, server_default="{}"))
    op.rename_table("fleets", "pools")
"""
    assert not_additive(breaking) == [
        "line 3: drop_table",
        "line 5: drop_column",
        "line 6: alter_column",
        "line 7: add_column of a NOT NULL column without a server default",
        "line 10: rename_table",
    ]
