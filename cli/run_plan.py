"""Where a run submitted now would go, as `ferry apply`'s plan says (docs/fleets.md): the API answers it
(api/project_runs.py `plan`), from the same choice the submission makes."""

from __future__ import annotations

from cli.errors import FerryError
from cli.fleet_api import pick_fleet
from cli.volume_api import run_volumes
from core.configuration import RunConfiguration
from core.wire.workflow_ids import LOCAL_FLEET
from store import Store


def runs_on(store: Store, project: str, configuration: RunConfiguration) -> str:
    """The plan's `Runs on`: the fleet a run submitted now goes to (choose_fleet, or its volumes' fleet,
    docs/volumes.md), and why that one; or why it would be refused."""
    try:
        on, _ = run_volumes(store, project, configuration)
        if on is not None:
            return f"fleet {on} (where its volumes are)"
        fleet = pick_fleet(store.list_fleets(project), project, configuration.fleets)
    except FerryError as err:
        return f"nowhere: {err}"
    wanted = configuration.fleets or []
    why = (
        f" (the first of {', '.join(wanted)} that exists)" if len(wanted) > 1
        else "" if wanted else " (the project's newest fleet)" if fleet != LOCAL_FLEET else ""
    )  # fmt: skip
    return f"fleet {fleet}{why}" if fleet != LOCAL_FLEET else "this machine (fleet local)"
