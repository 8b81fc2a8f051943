"""`ferry offer` of a run whose fleet has `nodes`: what its backend could give for a new instance now, once
others' jobs end, or never, and why (docs/backends.md#ferry-ps-and-ferry-offer). Each partition the fleet's
`spot_policy` allows is asked with `sbatch --test-only` (nothing is submitted), for the fleet's shape.
"""

from __future__ import annotations

import time

from cli.errors import FerryError
from core.backends.slurm import STARTS_NOW, allocation_request, partitions_for, slurm_backend_name
from core.configuration import FleetConfiguration, SlurmBackendConfiguration
from core.fleets.offers import BackendOffer, Fit
from store import Store


async def backend_offers(store: Store, project: str, fleet: str, nodes: int) -> list[BackendOffer]:
    """[] for a fleet without `nodes`."""
    from activities.slurm_backend import SlurmBackendError
    from cli.backend_api import login_only, one_line
    from store.backend_repository import open_backend_key
    from store.keys import process_keys

    record = store.get_fleet(project, fleet)
    name = None if record is None else slurm_backend_name(record.backend)
    if record is None or name is None:
        return []
    backend_record = store.get_backend(project, name)
    if backend_record is None:
        raise FerryError(f"fleet {fleet}'s backend {name} is no longer configured (ferry backend list)")
    configuration = FleetConfiguration.model_validate_json(record.configuration)
    backend_configuration = SlurmBackendConfiguration.model_validate(backend_record.configuration_data())
    backend = login_only(backend_configuration, open_backend_key(process_keys(), backend_record))
    offers = []
    try:
        for partition in partitions_for(backend_configuration, configuration.spot_policy):
            request = allocation_request(
                backend_configuration, partition, configuration.resources, name="ferry-offer", nodes=nodes
            )
            wait, words = await backend.start_estimate(request)
            offers.append(_offer(name, partition.name, partition.preemptible, wait, words))
    except SlurmBackendError as err:
        raise one_line(name, err) from None
    finally:
        await backend.aclose()
    return offers


def _offer(backend: str, partition: str, preemptible: bool, wait: float | None, words: str) -> BackendOffer:
    if wait is None:
        return BackendOffer(
            backend=backend, partition=partition, preemptible=preemptible, fit=Fit.NEVER, reasons=[words]
        )
    if wait <= STARTS_NOW:
        return BackendOffer(backend=backend, partition=partition, preemptible=preemptible, fit=Fit.NOW)
    at = time.strftime("%Y-%m-%d %H:%M", time.localtime(time.time() + wait))
    return BackendOffer(
        backend=backend,
        partition=partition,
        preemptible=preemptible,
        fit=Fit.WHEN_FREE,
        reasons=[f"Slurm would start it at about {at}, once others' jobs end"],
    )
