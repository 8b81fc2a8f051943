"""dstack's `instances`: a run's jobs go only to the instances it names (docs/fleets.md#pinned-instances),
by name, by address, or by a fleet's instance number; where none of them can ever take it, the never-fits
line says which it named. Pure: the run's placement request and the fleet's scheduler, no Temporal."""

from __future__ import annotations

from core.configuration.loading import load_configuration_text
from core.fleets.placement import InstanceSlot
from core.runs.submissions import replica_enqueue
from core.wire.agent_api import Resources
from core.wire.job_messages import PlacementRequest
from tests.core.placement_lab import lab, placed_on


def slot(name: str, address: str) -> InstanceSlot:
    return InstanceSlot(name=name, address=address, total=Resources(cpu=8, memory=32), fleet="lab")


def request(instances: str) -> PlacementRequest:
    text = f"type: task\ncommands: [x]\nnodes: 2\ninstances:\n{instances}"
    loaded = load_configuration_text(text, "x.yml")
    assert loaded.configuration.unsupported_fields() == []  # acted on, so no warning
    enqueue = replica_enqueue(
        loaded.configuration,  # type: ignore[arg-type]
        run_id="r",
        replica_num=0,
        submissions=[0, 0],
        job_workflow_ids=["w0", "w1"],
        priority=0,
    )
    return enqueue.request


LAB = (slot("lab-0", "10.0.0.10"), slot("lab-1", "10.0.0.11"), slot("lab-2", "10.0.0.12"))


def test_each_form_of_instances_pins_the_jobs_to_those_named() -> None:
    # Two nodes, spread: one on each of the two instances named, whichever form names them.
    by_name_and_address = request("  - lab-2\n  - hostname: 10.0.0.10\n")
    assert sorted(placed_on(lab(*LAB), by_name_and_address)) == ["lab-0", "lab-2"]
    by_number_and_name = request("  - fleet: lab\n    instance: 1\n  - name: lab-2\n")
    assert sorted(placed_on(lab(*LAB), by_number_and_name)) == ["lab-1", "lab-2"]
    one_only = request("  - lab-1\n")  # two nodes, spread, one instance: they can never both go
    assert placed_on(lab(*LAB), one_only) == []


def test_instances_that_can_never_take_the_run_are_named_in_the_never_fits_line() -> None:
    state = lab(*LAB)
    missing = request("  - gone-7\n  - hostname: 10.9.9.9\n")
    assert placed_on(state, missing) == []
    line = state.never_fits(missing, "lab")
    assert line is not None
    assert "not one of the run's `instances` (gone-7, 10.9.9.9)" in line
