"""A pipeline's file (docs/pipelines.md): several YAML documents, `---` between them, each a task run one
after another; an optional first document holds only the pipeline's `name`.

`load_run_file` reads any run file: one document is a configuration (core.configuration.loading), several
are a pipeline. Every error names the file, the line, the field path and the reason; a document that is
not a task, and the fields a task of a pipeline cannot have, are refused before anything is submitted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from core.configuration import TaskConfiguration
from core.configuration.fields import Name
from core.configuration.loading import (
    ConfigIssue,
    ConfigurationError,
    LineMap,
    LoadedConfiguration,
    parse_yaml_documents,
    read_configuration_text,
    validate_document,
)

# Fields of a run that a task of a pipeline cannot have: the pipeline is the run.
PIPELINE_TYPE = "pipeline"  # a pipeline's run type, in its record and its `submit` event

NOT_IN_A_PIPELINE = {
    "schedule": "a pipeline's task runs when the one before it is done, not on a schedule",
    "depends_on": "a pipeline's task waits for the one before it; other runs cannot be waited for here",
}


class PipelineConfiguration(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: Name | None = None
    tasks: list[TaskConfiguration]


@dataclass(frozen=True)
class LoadedPipeline:
    file: str
    pipeline: PipelineConfiguration
    documents: list[LoadedConfiguration] = field(compare=False, repr=False)  # one per task

    def warning(self) -> str | None:
        """The one warning line: the fields Ferry does not act on, by task."""
        parts = []
        for index, task in enumerate(self.pipeline.tasks, start=1):
            fields = task.unsupported_fields()
            if fields:
                parts.append(f"task {index}: {', '.join(fields)}")
        return f"{self.file}: warning: Ferry does not act on yet: {'; '.join(parts)}" if parts else None

    def ensure_runnable(self) -> None:
        issues = [issue for document in self.documents for issue in document.refusals()]
        if issues:
            raise ConfigurationError(issues)


def load_run_file(path: str | Path) -> LoadedConfiguration | LoadedPipeline:
    """A configuration file, or a pipeline's when it holds several documents."""
    file = str(path)
    documents = parse_yaml_documents(read_configuration_text(path), file)
    if len(documents) <= 1:
        data, lines = documents[0] if documents else (None, {})
        return validate_document(data, lines, file)
    return pipeline_of(documents, file)


def pipeline_of(documents: list[tuple[Any, LineMap]], file: str) -> LoadedPipeline:
    name = None
    data, lines = documents[0]
    if isinstance(data, dict) and "type" not in data:
        name = _header_name(data, lines, file)
        documents = documents[1:]
    loaded = []
    issues: list[ConfigIssue] = []
    for data, lines in documents:
        try:
            document = validate_document(data, lines, file)
        except ConfigurationError as err:
            issues += err.issues
            continue
        configuration = document.configuration
        if not isinstance(configuration, TaskConfiguration):
            issues.append(
                ConfigIssue(
                    file,
                    lines.get(("type",)),
                    "type",
                    f"a pipeline runs tasks only, not a {configuration.type}",
                )
            )
            continue
        for field_name, reason in NOT_IN_A_PIPELINE.items():
            if field_name in configuration.model_fields_set:
                issues.append(ConfigIssue(file, lines.get((field_name,)), field_name, reason))
        loaded.append(document)
    if issues:
        raise ConfigurationError(issues)
    tasks = [document.configuration for document in loaded]
    return LoadedPipeline(file, PipelineConfiguration(name=name, tasks=tasks), loaded)


def _header_name(data: dict[str, Any], lines: LineMap, file: str) -> str | None:
    """The first document without `type`: the pipeline's own fields, only `name` so far."""
    issues = [
        ConfigIssue(file, lines.get((key,)), key, "the pipeline's first document takes only `name`")
        for key in data
        if key != "name"
    ]
    if issues:
        raise ConfigurationError(issues)
    try:
        return TypeAdapter(Name | None).validate_python(data.get("name"))
    except ValidationError as err:
        message = str(err.errors()[0]["msg"]).removeprefix("Value error, ")
        raise ConfigurationError([ConfigIssue(file, lines.get(("name",)), "name", message)]) from None
