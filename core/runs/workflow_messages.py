"""The messages of RunWorkflow that hold the run's own state: its input (`RunInput`, with `RunCarry`, what a
continued-as-new run takes over from its previous execution) and its description (`RunDescription`, what
`describe` answers).

Its messages that hold none of it are core.wire's (core.wire.run_messages), which core.runs builds on and
which builds on nothing of core.runs. One pydantic model in, one out (docs/README.md).
"""

from __future__ import annotations

from pydantic import Field

from core.configuration import RunConfiguration
from core.eventlog import Event
from core.runs.machine import RunMachine
from core.runs.state_machine import RunState
from core.wire.base import Message
from core.wire.run_messages import DependencyTarget
from core.wire.workflow_ids import LOCAL_FLEET


class RunCarry(Message):
    """What a continued-as-new RunWorkflow takes over from its previous execution."""

    machine: RunMachine
    next_seq: int  # the run eventlog's next sequence number (earlier events are in the store)
    watchers: list[str] = Field(default_factory=list)  # the runs waiting for this one (workflow ids)
    elements_batched: bool = False  # an array's elements share one workflow (workflows/run_elements.py)


class RunInput(Message):
    run_id: str  # unique per submission; run names are reused once a run has finished
    project: str
    run_name: str
    user: str
    configuration: RunConfiguration
    code_hash: str | None = None
    repo_id: str = ""  # the code's name, for the job's FERRY_REPO_ID (activities.code.repo_id)
    submitted_at: float
    fleet: str = LOCAL_FLEET  # where its jobs are placed, decided once at submission
    carry: RunCarry | None = None
    dependencies: list[DependencyTarget] = Field(default_factory=list)  # resolved at submission
    volume_instances: dict[str, str] = Field(default_factory=dict)  # named volume -> its instance, likewise
    # The user's SSH public keys: they open the agents' SSH servers into its jobs (docs/attach.md).
    authorized_keys: list[str] = Field(default_factory=list)
    # The workflow revision of the release that submitted it (core.wire.revisions): 0, before revisions.
    revision: int = 0
    # For tests: continue as new after every step, to show that nothing of the run is lost across it.
    continue_as_new_each_step: bool = False


class RunDescription(Message):
    run_id: str
    state: RunState
    events: list[Event]  # this execution's; after a continue-as-new, earlier ones are in the store
    first_seq: int


RunCarry.model_rebuild()
