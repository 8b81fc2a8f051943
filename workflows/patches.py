"""`workflow.patched`, unless the workflow's input already answers (core.wire.revisions,
docs/upgrades.md#revisions): a patch the input answers costs the history no marker and no search
attribute update."""

from __future__ import annotations

from temporalio import workflow


def taken(patch_id: str, by_revision: bool) -> bool:
    """Whether the workflow takes the patch's new branch: always when its revision has the patch (no
    marker), else as `workflow.patched(patch_id)` says."""
    return by_revision or workflow.patched(patch_id)
