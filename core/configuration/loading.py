"""Loading configuration files: YAML with line numbers, and errors that name the file, the line, the field
path and the reason, one per line."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from core.configuration import (
    CONFIGURATION_MODELS,
    CONFIGURATION_TYPES,
    AnyConfiguration,
    ConfigFieldError,
    models_in,
    parse_configuration,
)
from core.configuration.runnable import refusals
from core.configuration.yaml_safety import (
    MAX_BYTES,
    MAX_BYTES_TEXT,
    ConfigLoader,
    escape_control,
    line_and_column,
)

Loc = tuple[str | int, ...]
# Where each mapping key and sequence item of a document starts: path -> 1-based line.
LineMap = dict[tuple[str, ...], int]


@dataclass(frozen=True)
class ConfigIssue:
    """One thing wrong with a configuration file; str() is one line: `file:line: field.path: reason`."""

    file: str
    line: int | None
    field_path: str
    message: str
    column: int | None = None

    def __str__(self) -> str:
        where = self.file
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        line = (
            f"{where}: {self.field_path}: {self.message}" if self.field_path else f"{where}: {self.message}"
        )
        # Names and values quoted from the file may hold control characters: one visible line each.
        return escape_control(line)


class ConfigurationError(Exception):
    """A configuration file that cannot be used; `issues` says every reason found."""

    def __init__(self, issues: list[ConfigIssue]) -> None:
        super().__init__("\n".join(str(issue) for issue in issues))
        self.issues = issues


@dataclass(frozen=True)
class LoadedConfiguration:
    file: str  # as the user named it
    configuration: AnyConfiguration
    lines: LineMap = field(default_factory=dict, compare=False, repr=False)  # for refusals' lines

    @property
    def path(self) -> Path:
        return Path(self.file)

    def warning(self) -> str | None:
        """The one warning line about fields Ferry accepts but does not act on yet; None if there are none."""
        fields = self.configuration.unsupported_fields()
        if not fields:
            return None
        return f"{self.file}: warning: Ferry does not act on yet: {', '.join(fields)}"

    def refusals(self) -> list[ConfigIssue]:
        """Why Ferry cannot run this valid configuration (core.configuration.runnable), one issue per
        reason at the line of its field; [] when it can."""
        return runnable_issues(self.configuration, self.file, self.lines)

    def ensure_runnable(self) -> None:
        """ConfigurationError, before anything is submitted, if Ferry cannot run this configuration."""
        issues = self.refusals()
        if issues:
            raise ConfigurationError(issues)


def runnable_issues(
    configuration: AnyConfiguration, source: str, lines: LineMap | None = None
) -> list[ConfigIssue]:
    """The refusals of `configuration` as ConfigIssues of `source` (a file, or what names the
    configuration when there is none)."""
    lines = lines or {}
    return [
        ConfigIssue(source, _line_of(refusal.path, lines), ".".join(refusal.path), refusal.reason)
        for refusal in refusals(configuration)
    ]


def ensure_runnable(configuration: AnyConfiguration, source: str = "<configuration>") -> None:
    """ConfigurationError if Ferry cannot run `configuration`; for callers without a file (FerryAPI)."""
    issues = runnable_issues(configuration, source)
    if issues:
        raise ConfigurationError(issues)


def load_configuration(path: str | Path) -> LoadedConfiguration:
    """Read, parse and validate one configuration file; ConfigurationError for anything wrong with it."""
    return load_configuration_text(read_configuration_text(path), str(path))


def read_configuration_text(path: str | Path) -> str:
    """A configuration file's text; ConfigurationError if it cannot be read or is too large."""
    file = str(path)
    try:
        with Path(path).open("rb") as stream:
            # Bounded: a huge file, or /dev/zero, is refused without reading it all.
            raw = stream.read(MAX_BYTES + 1)
        if len(raw) > MAX_BYTES:
            raise _too_large(file)
        return raw.decode("utf-8")
    except FileNotFoundError:
        raise _single(file, "no such file") from None
    except IsADirectoryError:
        raise _single(file, "is a directory, not a configuration file") from None
    except UnicodeDecodeError as exc:
        before = raw[: exc.start].decode("utf-8")
        line = line_and_column(before, len(before))[0]
        raise _single(file, f"is not UTF-8 text ({exc.reason} at byte {exc.start}, line {line})") from None
    except OSError as exc:
        raise _single(file, f"cannot be read: {exc.strerror or exc}") from None
    except ValueError as exc:  # a path with a NUL byte in it
        raise _single(file, f"cannot be read: {exc}") from None


def load_configuration_text(text: str, filename: str = "<configuration>") -> LoadedConfiguration:
    """Like load_configuration, for a configuration given as text; `filename` names it in errors."""
    if len(text) > MAX_BYTES // 4 and len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        raise _too_large(filename)
    data, lines = parse_yaml(text, filename)
    return validate_document(data, lines, filename)


def validate_document(data: Any, lines: LineMap, filename: str) -> LoadedConfiguration:
    """One parsed YAML document as a configuration; ConfigurationError naming the lines of what is wrong."""
    if data is None:
        raise _single(
            filename, f"is empty: expected a mapping with `type` ({', '.join(CONFIGURATION_TYPES)})"
        )
    if not isinstance(data, dict):
        kind = "a list" if isinstance(data, list) else f"a {type(data).__name__} value"
        raise _single(
            filename, f"expected a mapping of fields at the top level, got {kind}", line=lines.get(())
        )
    try:
        configuration = parse_configuration(data)
    except ValidationError as exc:
        raise ConfigurationError(issues_from_validation_error(exc, filename, lines)) from None
    except RecursionError:  # the loader bounds nesting; should a validator still recurse too deep
        raise _single(filename, "nested too deeply") from None
    return LoadedConfiguration(filename, configuration, lines)


def parse_yaml(text: str, filename: str) -> tuple[Any, LineMap]:
    """The YAML document in `text` and the line of each of its keys and items; several documents are an
    error here (a pipeline's file is read by core.configuration.pipeline)."""
    documents = parse_yaml_documents(text, filename)
    if len(documents) > 1:
        second = documents[1][1].get(())
        raise _single(
            filename,
            f"holds {len(documents)} YAML documents: one configuration per file "
            "(`ferry apply` runs several task documents as a pipeline)",
            line=second,
        )
    return documents[0] if documents else (None, {})


def parse_yaml_documents(text: str, filename: str) -> list[tuple[Any, LineMap]]:
    """Every YAML document in `text` (separated by `---`), each with the line of each of its keys and items.

    Syntax errors, duplicate keys, unsupported tags, and documents too deep or with aliases that expand too
    far (yaml_safety) are ConfigurationErrors.
    """
    loader: ConfigLoader | None = None
    documents: list[tuple[Any, LineMap]] = []
    try:
        loader = ConfigLoader(text)  # the reader checks every character here
        while loader.check_node():
            node = loader.get_node()
            assert node is not None  # check_node said there is one
            lines: LineMap = {(): node.start_mark.line + 1}
            issues = list(_record_lines(node, (), lines, filename))
            if issues:
                raise ConfigurationError(issues)
            documents.append((loader.construct_document(node), lines))
        return documents
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        reason = exc.problem or exc.context or "invalid YAML"
        if exc.context and exc.problem:
            reason = f"{exc.problem} ({exc.context})"
        raise _single(
            filename,
            f"invalid YAML: {reason}",
            line=mark.line + 1 if mark else None,
            column=mark.column + 1 if mark else None,
        ) from None
    except yaml.reader.ReaderError as exc:
        line, column = line_and_column(text, exc.position)
        code = exc.character if isinstance(exc.character, int) else 0
        raise _single(
            filename,
            f"invalid YAML: character {escape_control(chr(code))} (U+{code:04X}) is not allowed",
            line=line,
            column=column,
        ) from None
    except yaml.YAMLError as exc:
        raise _single(filename, f"invalid YAML: {' '.join(str(exc).split())}") from None
    except RecursionError:  # the loader bounds nesting (yaml_safety.MAX_DEPTH); this is a safety net
        raise _single(filename, "invalid YAML: nested too deeply") from None
    finally:
        if loader is not None:
            loader.dispose()


def _record_lines(node: yaml.Node, path: tuple[str, ...], lines: LineMap, file: str) -> Iterable[ConfigIssue]:
    if isinstance(node, yaml.MappingNode):
        first_seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else None
            if key is None or key == "<<":  # merge keys and complex keys: reported at the parent's line
                continue
            line = key_node.start_mark.line + 1
            if key in first_seen:
                yield ConfigIssue(
                    file, line, ".".join((*path, key)), f"duplicate key (first at line {first_seen[key]})"
                )
                continue
            first_seen[key] = line
            lines[(*path, key)] = line
            yield from _record_lines(value_node, (*path, key), lines, file)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            lines[(*path, str(index))] = item.start_mark.line + 1
            yield from _record_lines(item, (*path, str(index)), lines, file)


# Path segments pydantic adds that are no field: our shape tags (`<list>`), union members (`str`,
# `list[str]`, `function-after[...]`) and the `[key]` of a mapping key that failed.
_TYPE_SEGMENT = re.compile(r"^(<\w+>|\[key\]|str|int|float|bool|none|[a-z-]+\[.*\])$")


def issues_from_validation_error(
    error: ValidationError, filename: str, lines: LineMap | None = None
) -> list[ConfigIssue]:
    """One ConfigIssue per pydantic error, with a readable field path and message and, given the document's
    line map, the line of the deepest part of the path the document has."""
    lines = lines or {}
    issues: list[ConfigIssue] = []
    for detail in error.errors():
        loc = detail["loc"]
        kind = str(loc[0]) if loc and str(loc[0]) in CONFIGURATION_TYPES else None
        path = _clean_loc(loc, lines)
        ctx = detail.get("ctx") or {}
        cause = ctx.get("error")
        if isinstance(cause, ConfigFieldError):
            path = (*path, *(str(part) for part in cause.path))
        message = _message(detail, path, kind)
        if detail["type"] in {"union_tag_invalid", "union_tag_not_found"} and not path:
            path = ("type",)
        issues.append(ConfigIssue(filename, _line_of(path, lines), ".".join(path), message))
    unique = list(dict.fromkeys(issues))
    return sorted(unique, key=lambda issue: (issue.line or 0, issue.field_path))


def _clean_loc(loc: Loc, lines: LineMap) -> tuple[str, ...]:
    parts: list[str] = []
    for index, segment in enumerate(loc):
        text = str(segment)
        # The first segment of a discriminated union's error is the `type` tag.
        if index == 0 and text in CONFIGURATION_TYPES:
            continue
        if _TYPE_SEGMENT.match(text) and (*parts, text) not in lines:
            continue
        parts.append(text)
    return tuple(parts)


def _line_of(path: tuple[str, ...], lines: LineMap) -> int | None:
    for end in range(len(path), -1, -1):
        line = lines.get(path[:end])
        if line is not None:
            return line
    return None


def _message(detail: Any, path: tuple[str, ...], config_type: str | None) -> str:
    kind = detail["type"]
    if kind == "extra_forbidden":
        return _unknown_field_message(path, config_type)
    if kind == "missing":
        return "required field is missing"
    if kind == "union_tag_invalid":
        tag = detail.get("ctx", {}).get("tag", "")
        return f"unknown type {tag!r}: expected one of {', '.join(CONFIGURATION_TYPES)}"
    if kind == "union_tag_not_found":
        return f"required field is missing: expected one of {', '.join(CONFIGURATION_TYPES)}"
    cause = (detail.get("ctx") or {}).get("error")
    if kind in {"value_error", "assertion_error"} and cause is not None:
        return str(cause)
    if kind in {"model_type", "model_attributes_type", "dict_type"}:
        # pydantic's wording names our classes (`instance of ResourcesSpec`): say what the file should hold.
        return f"should be a mapping of fields, got {_shape(detail.get('input'))}"
    message = str(detail["msg"])
    if message.startswith("Input should"):
        message = "should" + message[len("Input should") :]
        value = detail.get("input")
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            message += f", got {_quote(value)}"
        elif isinstance(value, bool):
            message += f", got {str(value).lower()}"
    return message


def _quote(value: str | int | float) -> str:
    """repr of a value from the file, cut short: a 1 MiB string is no part of a one-line message."""
    if isinstance(value, int) and abs(value) >= 10**60:
        return "a very large integer"
    shown = repr(value)
    return shown if len(shown) <= 80 else f"{shown[:76]}..."


def _shape(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, list):
        return "a list"
    return f"{type(value).__name__} {_quote(value)}" if isinstance(value, str | int | float) else "a value"


def _unknown_field_message(path: tuple[str, ...], config_type: str | None) -> str:
    """Whose field it is, or the close name among the fields of the model it was written in (never
    another model's: a suggestion must be a field that would be accepted there)."""
    name = path[-1] if path else ""
    model = _model_at(path[:-1], config_type)
    if model is None:
        return "unknown field"
    if len(path) == 1:
        owners = [kind for kind, other in CONFIGURATION_MODELS.items() if name in other.model_fields]
        if owners:
            takes = "takes" if len(owners) == 1 else "take"
            return f"not a field of a {config_type}: only {' and '.join(owners)} {takes} it"
        parents = [field for field, info in model.model_fields.items() if _holds(info.annotation, name)]
        if parents:
            return f"not a field of a {config_type}: it goes under `{parents[0]}`"
    close = difflib.get_close_matches(name, sorted(model.model_fields), n=1, cutoff=0.75)
    return f"unknown field (did you mean {close[0]!r}?)" if close else "unknown field"


def _model_at(path: tuple[str, ...], config_type: str | None) -> type[BaseModel] | None:
    """The model whose fields are written at `path` of a configuration of `config_type`; None if unknown."""
    model: type[BaseModel] | None = CONFIGURATION_MODELS.get(config_type or "")
    for part in path:
        if model is None:
            return None
        if part.isdigit():
            continue  # an item of a list: the same model as the list's field
        info = model.model_fields.get(part)
        nested = models_in(info.annotation) if info is not None else []
        model = nested[0] if nested else None
    return model


def _holds(annotation: Any, name: str) -> bool:
    return any(name in nested.model_fields for nested in models_in(annotation))


def _too_large(file: str) -> ConfigurationError:
    return _single(file, f"is larger than {MAX_BYTES_TEXT}, the most a configuration file may be")


def _single(
    file: str, message: str, line: int | None = None, column: int | None = None
) -> ConfigurationError:
    return ConfigurationError([ConfigIssue(file, line, "", message, column)])
