"""The runs' custom search attributes (docs/README.md): filter runs by them in the Temporal Web UI."""

from __future__ import annotations

from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

from core.configuration.pipeline import PIPELINE_TYPE
from core.runs.workflow_messages import RunInput
from core.status import RunStatus
from core.wire.run_messages import PipelineInput

SA_RUN_NAME = SearchAttributeKey.for_keyword("FerryRunName")
SA_STATUS = SearchAttributeKey.for_keyword("FerryStatus")
SA_PROJECT = SearchAttributeKey.for_keyword("FerryProject")
SA_USER = SearchAttributeKey.for_keyword("FerryUser")
SA_TYPE = SearchAttributeKey.for_keyword("FerryType")
SEARCH_ATTRIBUTES = (SA_RUN_NAME, SA_STATUS, SA_PROJECT, SA_USER, SA_TYPE)


def run_search_attributes(inp: RunInput, status: RunStatus) -> TypedSearchAttributes:
    """A run's search attributes as `ferry apply` starts it (the workflow keeps FerryStatus current)."""
    return TypedSearchAttributes(
        [
            SearchAttributePair(SA_RUN_NAME, inp.run_name),
            SearchAttributePair(SA_STATUS, status.value),
            SearchAttributePair(SA_PROJECT, inp.project),
            SearchAttributePair(SA_USER, inp.user),
            SearchAttributePair(SA_TYPE, inp.configuration.type),
        ]
    )


def pipeline_search_attributes(inp: PipelineInput) -> TypedSearchAttributes:
    """A pipeline's, as `ferry apply` starts it; its tasks' runs have their own (FerryType task)."""
    return TypedSearchAttributes(
        [
            SearchAttributePair(SA_RUN_NAME, inp.run_name),
            SearchAttributePair(SA_STATUS, RunStatus.SUBMITTED.value),
            SearchAttributePair(SA_PROJECT, inp.project),
            SearchAttributePair(SA_USER, inp.user),
            SearchAttributePair(SA_TYPE, PIPELINE_TYPE),
        ]
    )
