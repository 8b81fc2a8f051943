"""The YAML loader of configuration files, with limits: a file a user writes, by mistake or on purpose,
must not exhaust the machine (alias bombs, deep nesting) nor end in anything but a one-line error."""

from __future__ import annotations

import re
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.events import AliasEvent, MappingStartEvent, ScalarEvent, SequenceStartEvent

MAX_BYTES = 1024 * 1024  # no configuration comes near; a bound on all the work below
MAX_BYTES_TEXT = "1 MiB"
MAX_DEPTH = 64  # far below the Python stack the composer, the constructor and pydantic recurse on
MAX_ALIAS_NODES = 10_000  # nodes all aliases together may add to a document ("billion laughs")
MAX_INT = 10**300  # a larger integer is no setting, and cannot even become a float
_TOO_LARGE = "integer too large (more than 300 digits)"

_CORE = "tag:yaml.org,2002:"
# Explicit tags a configuration may use: those of plain YAML values. `!!timestamp`, `!!binary`, `!!set`,
# `!!python/...` and local `!tags` are refused: no field takes them, and some crash PyYAML on bad input.
_ALLOWED_TAGS = {None, "!"} | {_CORE + name for name in ("str", "int", "float", "bool", "null", "seq", "map")}

# What must not reach a terminal raw from a file: C0/C1 controls, line and paragraph separators, lone
# surrogates (they cannot even be encoded) and the bidirectional overrides that reorder what is shown.
_UNPRINTABLE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)


def escape_control(text: str) -> str:
    """`text` with every control character written as an escape (`\\x07`, `\\u2028`): one visible line."""
    return _UNPRINTABLE.sub(_escape_one, text)


def _escape_one(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def show_tag(tag: str) -> str:
    return "!!" + tag[len(_CORE) :] if tag.startswith(_CORE) else tag


def line_and_column(text: str, position: int) -> tuple[int, int]:
    """1-based line and column of `position` in `text`, counting line breaks as YAML does."""
    before = text[:position].replace("\r\n", "\n")
    lines = re.split("[\n\r\x85\u2028\u2029]", before)
    return len(lines), len(lines[-1]) + 1


class ConfigLoader(yaml.SafeLoader):
    """SafeLoader without YAML 1.1's base-60 numbers (so that `80:30` stays the port mapping it means
    instead of becoming 4830; YAML 1.2 dropped them too) nor implicit timestamps (a date stays the string
    it looks like), that refuses unsupported tags, documents nested deeper than MAX_DEPTH and aliases
    that expand past MAX_ALIAS_NODES, while composing: before anything recursive runs on the document."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._expanded = 0  # nodes added by aliases so far
        # Per composed node (by id: nodes are unhashable-by-value and live as long as the loader): the
        # nodes it stands for with its aliases expanded, and its height; absent while it is being composed.
        self._size: dict[int, int] = {}
        self._height: dict[int, int] = {}

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, AliasEvent):
            target = self.anchors.get(event.anchor)
            if target is not None:
                self._count_alias(event, target)
            return super().compose_node(parent, index)
        self._check_tag(event)
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise ComposerError(None, None, f"nested more than {MAX_DEPTH} levels deep", event.start_mark)
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if isinstance(node, yaml.MappingNode):
            children = [child for pair in node.value for child in pair]
        else:
            children = node.value if isinstance(node, yaml.SequenceNode) else []
        self._size[id(node)] = 1 + sum(self._size[id(child)] for child in children)
        self._height[id(node)] = 1 + max((self._height[id(child)] for child in children), default=0)
        return node

    def _count_alias(self, event: Any, target: yaml.Node) -> None:
        name = f"*{event.anchor}"
        if id(target) not in self._size:
            raise ComposerError(
                None, None, f"alias {name} refers to a node that contains it", event.start_mark
            )
        self._expanded += self._size[id(target)]
        if self._expanded > MAX_ALIAS_NODES:
            raise ComposerError(
                None, None, f"aliases expand to more than {MAX_ALIAS_NODES:,} values", event.start_mark
            )
        if self._depth + self._height[id(target)] > MAX_DEPTH:
            raise ComposerError(
                None, None, f"alias {name} nests more than {MAX_DEPTH} levels deep", event.start_mark
            )

    def _check_tag(self, event: Any) -> None:
        if isinstance(event, ScalarEvent | SequenceStartEvent | MappingStartEvent):
            tag, mark = event.tag, self.peek_event().start_mark
            if tag not in _ALLOWED_TAGS:
                raise ConstructorError(
                    None,
                    None,
                    f"tag {show_tag(str(tag))} is not supported: a configuration holds only strings, numbers,"
                    " booleans, null, lists and mappings",
                    mark,
                )

    def construct_object(self, node: Any, deep: bool = False) -> Any:
        if node.tag == _CORE + "int" and isinstance(node.value, str) and len(node.value) > 1000:
            raise ConstructorError(None, None, _TOO_LARGE, node.start_mark)  # before int() reads it
        try:
            data = super().construct_object(node, deep)
        except yaml.YAMLError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError, ArithmeticError):
            # A value its explicit tag does not fit (`!!int abc`, `!!bool maybe`): PyYAML does not check.
            value = node.value if isinstance(node.value, str) else ""
            raise ConstructorError(
                None, None, f"{_short(value)} is not a valid {show_tag(node.tag)}", node.start_mark
            ) from None
        if isinstance(data, int) and not isinstance(data, bool) and abs(data) >= MAX_INT:
            raise ConstructorError(None, None, _TOO_LARGE, node.start_mark)
        return data


def _short(value: str, limit: int = 60) -> str:
    shown = repr(value)
    return shown if len(shown) <= limit else shown[: limit - 4] + "...'"


_INT, _FLOAT = _CORE + "int", _CORE + "float"
_DROPPED = {_INT, _FLOAT, _CORE + "timestamp", _CORE + "value"}
ConfigLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in _DROPPED]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
ConfigLoader.add_implicit_resolver(
    _INT,
    re.compile(r"^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)$"),
    list("-+0123456789"),
)
ConfigLoader.add_implicit_resolver(
    _FLOAT,
    re.compile(
        r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+0123456789."),
)
