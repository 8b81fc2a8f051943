"""A fleet's status, as FleetRecords store it and `ferry fleet list` shows it."""

from __future__ import annotations

from enum import StrEnum


class FleetStatus(StrEnum):
    ACTIVE = "active"
    DELETING = "deleting"  # no new jobs; its instances go once their jobs have ended
    DELETED = "deleted"  # kept in the store, out of `ferry fleet list`
