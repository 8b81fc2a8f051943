"""An image pull's progress as one line, from the events of the Docker Engine API's pull stream.

The stream says, per layer (`id`), `Pulling fs layer`, `Downloading` (with `progressDetail` current and
total bytes where the engine knows them), `Download complete`, `Pull complete` or `Already exists`; its
other lines are the image's own (`Pulling from library/python`, with the tag as `id`). The line counts the
layers and adds the bytes when some are known: `pulling python:3.11-slim: 2/5 layers, 12.3/27.0 MB`
(docs/containers.md#pulls).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

_DONE = frozenset({"Download complete", "Pull complete", "Already exists", "Verifying Checksum"})
_LAYER = _DONE | {"Pulling fs layer", "Waiting", "Downloading", "Extracting"}
_MB = 1e6


@dataclass
class _Layer:
    done: bool = False
    current: int = 0
    total: int = 0


@dataclass
class PullProgress:
    image: str
    _layers: dict[str, _Layer] = field(default_factory=dict)

    def feed(self, event: dict[str, Any]) -> None:
        layer_id, status = event.get("id"), event.get("status")
        if not isinstance(layer_id, str) or status not in _LAYER:
            return  # the image's own lines
        layer = self._layers.setdefault(layer_id, _Layer())
        detail = event.get("progressDetail") or {}
        if isinstance(detail.get("total"), int) and detail["total"] > 0:
            layer.total = detail["total"]
            layer.current = min(int(detail.get("current") or 0), layer.total)
        if status in _DONE:
            layer.done = True
            layer.current = layer.total

    def line(self) -> str:
        """`pulling IMAGE`, then the layers done and the bytes known, when there are any."""
        text = f"pulling {self.image}"
        if not self._layers:
            return text
        done = sum(layer.done for layer in self._layers.values())
        text += f": {done}/{len(self._layers)} layers"
        total = sum(layer.total for layer in self._layers.values())
        if total:
            current = sum(layer.current for layer in self._layers.values())
            text += f", {current / _MB:.1f}/{total / _MB:.1f} MB"
        return text
