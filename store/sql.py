"""Portable writes the store repeats safely: an upsert and an insert-if-absent, by the dialect's ON CONFLICT
where it has one (SQLite, PostgreSQL), else the portable form that is right for one writer at a time."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection, Table, update
from sqlalchemy.dialects import postgresql, sqlite


def row_of(table: Table, record: Any) -> dict[str, Any]:
    return {column.name: getattr(record, column.name) for column in table.columns}


def dialect_insert(connection: Connection, table: Table) -> Any:
    """The dialect's INSERT that knows ON CONFLICT, or None where the dialect has none we use."""
    name = connection.dialect.name
    if name == "sqlite":
        return sqlite.insert(table)
    if name == "postgresql":
        return postgresql.insert(table)
    return None


def upsert(connection: Connection, table: Table, row: dict[str, Any], keep: tuple[str, ...]) -> None:
    """Inserts the row, or updates the stored row with its primary key (but for the `keep` columns)."""
    keys = [column.name for column in table.primary_key.columns]
    changes = {name: value for name, value in row.items() if name not in keys and name not in keep}
    statement = dialect_insert(connection, table)
    if statement is not None:
        connection.execute(statement.values(**row).on_conflict_do_update(index_elements=keys, set_=changes))
        return
    # Other databases: correct for one writer at a time, as portable SQL allows.
    where = [table.c[name] == row[name] for name in keys]
    if connection.execute(update(table).where(*where).values(**changes)).rowcount == 0:
        connection.execute(sa.insert(table).values(**row))


def upsert_many(
    connection: Connection, table: Table, rows: list[dict[str, Any]], keep: tuple[str, ...]
) -> None:
    """`upsert` of each row, as one statement executed for them all where the dialect has ON CONFLICT
    (an array's elements change by the hundred in one transaction). No two rows may share a key."""
    if not rows:
        return
    statement = dialect_insert(connection, table)
    if statement is None:
        for row in rows:
            upsert(connection, table, row, keep)
        return
    keys = [column.name for column in table.primary_key.columns]
    changed = [name for name in rows[0] if name not in keys and name not in keep]
    set_ = {name: statement.excluded[name] for name in changed}
    connection.execute(statement.on_conflict_do_update(index_elements=keys, set_=set_), rows)


def insert_ignore(
    connection: Connection, table: Table, rows: list[dict[str, Any]], key: tuple[str, ...]
) -> None:
    """Inserts the rows whose `key` (a unique constraint's columns) is not stored yet."""
    statement = dialect_insert(connection, table)
    if statement is not None:
        connection.execute(statement.on_conflict_do_nothing(index_elements=list(key)), rows)
        return
    # Other databases: correct for one writer at a time, as portable SQL allows.
    stored = {
        tuple(found)
        for found in connection.execute(
            sa.select(*(table.c[name] for name in key)).where(
                sa.tuple_(*(table.c[name] for name in key)).in_([tuple(row[n] for n in key) for row in rows])
            )
        )
    }
    fresh = [row for row in rows if tuple(row[name] for name in key) not in stored]
    if fresh:
        connection.execute(sa.insert(table), fresh)
