"""Secret values masked in what Ferry prints or logs (docs/secrets.md): `LOG_MASKING` is the one process-wide
effect here, every log record of a process that has held a secret is masked. Standard library only: the
agent masks too (agent/secret_memory.py)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Any

MASK = "***"
# Shorter values are left in what is printed: masking every "ab" would garble it, and hide nothing worth it.
MIN_MASKED = 4


def mask(text: str, values: Iterable[str]) -> str:
    """`text` with each value (of MIN_MASKED characters or more) replaced by MASK, the longest first."""
    for value in sorted({v for v in values if len(v) >= MIN_MASKED}, key=len, reverse=True):
        text = text.replace(value, MASK)
    return text


class LogMasking:
    """Masks the values it is given in every log record of this process, its traceback included."""

    def __init__(self) -> None:
        self._values: frozenset[str] = frozenset()
        self._lock = threading.Lock()
        self._installed = False

    def add(self, values: Iterable[str]) -> None:
        fresh = {value for value in values if len(value) >= MIN_MASKED} - self._values
        if not fresh:
            return
        with self._lock:
            self._values = self._values | fresh
            if not self._installed:
                self._installed = True
                previous = logging.getLogRecordFactory()

                def masked_record(*args: Any, **kwargs: Any) -> logging.LogRecord:
                    record = previous(*args, **kwargs)
                    self._scrub(record)
                    return record

                logging.setLogRecordFactory(masked_record)

    def _scrub(self, record: logging.LogRecord) -> None:
        values = self._values
        try:
            message = record.getMessage()
        except Exception:  # a record whose arguments do not fit: its handler says so, as it would have
            return
        masked = mask(message, values)
        if masked != message:
            record.msg, record.args = masked, None
        if record.exc_info and not record.exc_text:
            text = logging.Formatter().formatException(record.exc_info)
            if mask(text, values) != text:
                record.exc_text = mask(text, values)  # what handlers print in place of the traceback
        if record.stack_info:
            record.stack_info = mask(record.stack_info, values)


LOG_MASKING = LogMasking()
