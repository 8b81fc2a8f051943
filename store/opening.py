"""The process's stores: one Store per database URL, opened (and migrated) on first use.

Apart from store.engine because it builds a Store (store.repository), which itself stands on the engine.
"""

from __future__ import annotations

import os
import threading

from core.settings import Settings
from store.engine import make_engine, migrate
from store.repository import Store

_stores: dict[str, Store] = {}
_stores_lock = threading.Lock()


def open_store(url: str | None = None) -> Store:
    """The process's store for `url` (default: Settings.from_env().database_url), migrated on first use."""
    url = url or Settings.from_env().database_url
    with _stores_lock:
        store = _stores.get(url)
        if store is None:
            engine = make_engine(url)
            migrate(engine)
            store = _stores[url] = Store(engine)
        return store


def _after_fork_in_child() -> None:
    # A forked child must not share its parent's pooled connections (SQLAlchemy's advice), nor a
    # lock some other parent thread may have held at the fork.
    global _stores_lock
    _stores_lock = threading.Lock()
    for store in _stores.values():
        store.engine.dispose(close=False)


os.register_at_fork(after_in_child=_after_fork_in_child)
