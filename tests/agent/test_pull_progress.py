"""An image pull's progress line from the Engine API's pull stream (agent/containers/pulls.py)."""

from __future__ import annotations

from agent.containers.pulls import PullProgress


def test_layers_and_bytes_are_counted_as_the_stream_tells_them() -> None:
    progress = PullProgress("python:3.11-slim")
    assert progress.line() == "pulling python:3.11-slim"
    progress.feed({"status": "Pulling from library/python", "id": "3.11-slim"})  # the image's own line
    for layer in ("a1", "b2", "c3"):
        progress.feed({"status": "Pulling fs layer", "progressDetail": {}, "id": layer})
    assert progress.line() == "pulling python:3.11-slim: 0/3 layers"
    progress.feed({"status": "Already exists", "progressDetail": {}, "id": "a1"})
    progress.feed(
        {"status": "Downloading", "progressDetail": {"current": 1_500_000, "total": 3_000_000}, "id": "b2"}
    )
    assert progress.line() == "pulling python:3.11-slim: 1/3 layers, 1.5/3.0 MB"
    progress.feed(
        {"status": "Downloading", "progressDetail": {"current": 9_000_000, "total": 20_000_000}, "id": "c3"}
    )
    progress.feed({"status": "Download complete", "progressDetail": {}, "id": "b2"})
    assert progress.line() == "pulling python:3.11-slim: 2/3 layers, 12.0/23.0 MB"


def test_lines_without_a_layer_change_nothing() -> None:
    progress = PullProgress("busybox")
    progress.feed({"status": "Digest: sha256:0123"})
    progress.feed({"status": "Status: Downloaded newer image for busybox:latest"})
    progress.feed({"stream": "text"})
    assert progress.line() == "pulling busybox"
