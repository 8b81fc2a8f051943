"""Workflow revisions (docs/upgrades.md#revisions): what the workflows of a run take from its submission
on, without asking `workflow.patched`. A run's input carries the revision of the release that submitted
it, and passes it to its jobs; 0 is a run submitted before revisions, which asks, as it did.

A patch asked about costs every new history two events (its marker and a `TemporalChangeVersion` search
attribute update, a write to Temporal's visibility store); a patch the input already answers costs none.
"""

from __future__ import annotations

# Its jobs' last words come with their results (docs/jobs.md#the-last-word), and the patches before it
# hold without being asked: `retry-window` (the run), `short-job-history` and `local-hot-path` (the job).
LAST_WORDS = 1

# The run's last store write is a local activity, its last act (docs/runs.md#the-store).
LOCAL_LAST_WRITE = 2

CURRENT = LOCAL_LAST_WRITE  # what a submission of this release says
