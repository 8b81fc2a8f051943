"""Whatever a configuration file holds, loading it ends in a configuration or in one-line errors: no other
exception, no unbounded work (alias bombs, deep nesting, huge files), no raw control character printed."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.configuration import yaml_safety
from core.configuration.loading import ConfigurationError, load_configuration, load_configuration_text
from core.configuration.yaml_safety import MAX_ALIAS_NODES, MAX_DEPTH, ConfigLoader, escape_control

# One configuration each; the pipelines' files (several documents) are tests/core/test_pipelines.py's.
PIPELINE_EXAMPLES = {"pipeline.yml"}
EXAMPLES = sorted(
    p for p in (Path(__file__).parents[2] / "examples").glob("*.yml") if p.name not in PIPELINE_EXAMPLES
)
RAW_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
TASK = "type: task\ncommands: [echo hi]\n"

# "Billion laughs": 358 bytes that expand to 9**9 strings.
BOMB = "".join(
    f"{name}: &{name} [{','.join([prev] * 9)}]\n"
    for name, prev in zip("abcdefghi", ['"lol"', *(f"*{c}" for c in "abcdefgh")], strict=True)
)


def error_of(text: str) -> str:
    """The one printed line of loading `text`; fails if it loads, or prints several lines or raw controls."""
    with pytest.raises(ConfigurationError) as caught:
        load_configuration_text(text, "f.yml")
    return only_line(caught.value)


def only_line(error: ConfigurationError) -> str:
    printed = str(error)
    assert len(error.issues) == 1 and "\n" not in printed, printed
    assert not RAW_CONTROL.search(printed), printed
    return printed


class Counting:
    """Counts the nodes the loader composes and constructs, to bound its work without timing it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.composed = self.constructed = 0
        compose, construct = ConfigLoader.compose_node, ConfigLoader.construct_object

        def compose_node(loader: ConfigLoader, parent: Any, index: Any) -> Any:
            self.composed += 1
            return compose(loader, parent, index)

        def construct_object(loader: ConfigLoader, node: Any, deep: bool = False) -> Any:
            self.constructed += 1
            return construct(loader, node, deep)

        monkeypatch.setattr(ConfigLoader, "compose_node", compose_node)
        monkeypatch.setattr(ConfigLoader, "construct_object", construct_object)


# --- limits ------------------------------------------------------------------------------------------


def test_alias_bomb_is_refused_before_it_expands(monkeypatch: pytest.MonkeyPatch) -> None:
    assert len(BOMB) < 400
    counting = Counting(monkeypatch)
    assert (
        error_of(BOMB) == f"f.yml:5:8: invalid YAML: aliases expand to more than {MAX_ALIAS_NODES:,} values"
    )
    # Refused while composing: a few dozen nodes read, nothing constructed, let alone 9**9 strings.
    assert counting.composed < 100
    assert counting.constructed == 0


def test_aliases_within_the_budget_still_work() -> None:
    text = TASK + "env: &env {A: '1'}\nx-unused: [*env, *env]\n"
    assert "unknown field" in error_of(text)  # the document is read; only the field is wrong
    loaded = load_configuration_text("type: task\ncommands: [&c echo hi, *c]\n", "f.yml")
    assert loaded.configuration.commands == ["echo hi", "echo hi"]  # type: ignore[union-attr]


@pytest.mark.parametrize("text", ["a: &a [*a]\n", "a: &a {b: [1, *a]}\n"])
def test_recursive_alias_is_refused(text: str) -> None:
    assert error_of(text).endswith("invalid YAML: alias *a refers to a node that contains it")


@pytest.mark.parametrize(
    "text",
    [
        "[" * 100_000,
        "{a: " * 1000,
        "".join(" " * depth + f"k{depth}:\n" for depth in range(500)),
        "- " * 1000 + "x\n",
    ],
)
def test_deep_nesting_is_refused(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    counting = Counting(monkeypatch)
    assert error_of(text).endswith(f"invalid YAML: nested more than {MAX_DEPTH} levels deep")
    assert counting.composed <= 2 * MAX_DEPTH + 2  # a key and a value per level, at most


def test_nesting_through_aliases_counts_too() -> None:
    deep = "[" * 40 + "x" + "]" * 40
    assert error_of(f"a: &a {deep}\nb: {'[' * 30}*a{']' * 30}\n").endswith(
        f"alias *a nests more than {MAX_DEPTH} levels deep"
    )


def test_nesting_within_the_limit_is_fine() -> None:
    text = TASK + "x: " + "[" * (MAX_DEPTH - 2) + "]" * (MAX_DEPTH - 2) + "\n"
    assert error_of(text) == "f.yml:3: x: unknown field"


def test_large_file_is_refused_without_parsing_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "big.yml"
    path.write_text(TASK + "#" * (2 * 1024 * 1024))
    counting = Counting(monkeypatch)
    with pytest.raises(ConfigurationError) as caught:
        load_configuration(path)
    assert only_line(caught.value) == f"{path}: is larger than 1 MiB, the most a configuration file may be"
    with pytest.raises(ConfigurationError) as caught:
        load_configuration_text("é" * (600 * 1024), "f.yml")  # 1.2 MB in UTF-8
    assert "larger than 1 MiB" in only_line(caught.value)
    assert counting.composed == 0


# --- one line, escaped ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("type: task\nname: a\x07b\n", r"f.yml:2:8: invalid YAML: character \x07 (U+0007) is not allowed"),
        ("type: task\x00\n", r"f.yml:1:11: invalid YAML: character \x00 (U+0000) is not allowed"),
        ("a: 1\r\nb: \x1b[31m\n", r"f.yml:2:4: invalid YAML: character \x1b (U+001B) is not allowed"),
        (TASK + "name: \ud800\n", r"f.yml:3:7: invalid YAML: character \ud800 (U+D800) is not allowed"),
    ],
)
def test_unacceptable_characters_are_one_escaped_line(text: str, expected: str) -> None:
    assert error_of(text) == expected


def test_control_characters_quoted_from_the_file_are_escaped() -> None:
    line = error_of("type: task\ncommands: [x]\nname: 'a\u2028b\u202ec'\n")
    assert line.startswith(r"f.yml:3: name: invalid name 'a\u2028b\u202ec'")
    assert escape_control("tab\there\u2029\x85") == r"tab\x09here\u2029\x85"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("!!timestamp 2024-99", "tag !!timestamp is not supported"),
        ("!!timestamp 2024-01-01", "tag !!timestamp is not supported"),
        ("!!python/name:os.system x", "tag !!python/name:os.system is not supported"),
        ("!!python/object/apply:os.system [ls]", "tag !!python/object/apply:os.system is not supported"),
        ("!!binary aGVsbG8=", "tag !!binary is not supported"),
        ("!!set {a}", "tag !!set is not supported"),
        ("!local x", "tag !local is not supported"),
        ("!!int abc", "'abc' is not a valid !!int"),
        ("!!float abc", "'abc' is not a valid !!float"),
        ("!!bool maybe", "'maybe' is not a valid !!bool"),
        ("9" * 5000, "integer too large (more than 300 digits)"),
        ("9" * 400, "integer too large (more than 300 digits)"),
        ("0x" + "f" * 900, "integer too large (more than 300 digits)"),
    ],
)
def test_tags_and_values_yaml_cannot_give_are_one_line(value: str, expected: str) -> None:
    assert error_of(f"{TASK}nodes: {value}\n").startswith(f"f.yml:3:8: invalid YAML: {expected}")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (".nan", "nodes: should be a finite number"),
        (".inf", "nodes: should be a finite number"),
        ("-.inf", "nodes: should be a finite number"),
        ("1.0e+999", "nodes: should be a finite number"),
        ("'" + "x" * 5000 + "'", "nodes: should be a valid integer"),
    ],
)
def test_numbers_pydantic_refuses_are_one_short_line(value: str, expected: str) -> None:
    line = error_of(f"{TASK}nodes: {value}\n")
    assert line.startswith(f"f.yml:3: {expected}")
    assert len(line) < 200


def test_dates_and_equals_signs_stay_strings() -> None:
    # Implicit timestamps (and YAML 1.1's `=`) are not resolved: no field takes a date.
    assert "invalid name '2024-13-45'" in error_of(TASK + "name: 2024-13-45\n")
    assert "invalid name '='" in error_of(TASK + "name: =\n")


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            b"type: task\ncommands: [caf\xe9]\n",
            "is not UTF-8 text (invalid continuation byte at byte 25, line 2)",
        ),
        (b"\xff\xfe\x00t", "is not UTF-8 text (invalid start byte at byte 0, line 1)"),
    ],
)
def test_not_utf8_is_one_line(tmp_path: Path, data: bytes, expected: str) -> None:
    path = tmp_path / "x.yml"
    path.write_bytes(data)
    with pytest.raises(ConfigurationError) as caught:
        load_configuration(path)
    assert only_line(caught.value) == f"{path}: {expected}"


def test_unreadable_paths_are_one_line(tmp_path: Path) -> None:
    for path, expected in [
        (tmp_path, "is a directory, not a configuration file"),
        (tmp_path / "missing.yml", "no such file"),
        (Path("/dev/zero"), "is larger than 1 MiB, the most a configuration file may be"),
        (tmp_path / "a\x00b.yml", "cannot be read: embedded null byte"),
    ]:
        with pytest.raises(ConfigurationError) as caught:
            load_configuration(path)
        assert only_line(caught.value) == f"{escape_control(str(path))}: {expected}"


# --- properties ----------------------------------------------------------------------------------------

SYNTAX = [
    *(c.encode() for c in "[]{}:-,&*!|>?#'\"%@`\n\t\r"),
    b"&a ",
    b"*a",
    b"<<: *a\n",
    b"!!timestamp ",
    b"!!binary ",
    b"!!python/name:os.system ",
    b"!x ",
    b"---\n",
    b"\x00",
    b"\x07",
    b"\xe2\x80\xa8",
    b"\xff",
    b".nan",
    b"-.inf",
    b"1.0e+999",
    b"9" * 5000,
    b"[" * 200,
]


def never_crashes(load: Callable[[], object]) -> None:
    """`load` returns, or raises a ConfigurationError whose printed lines hold no raw control character."""
    try:
        load()
    except ConfigurationError as exc:
        assert exc.issues
        for issue in exc.issues:
            assert "\n" not in str(issue)
        for line in str(exc).split("\n"):
            assert not RAW_CONTROL.search(line), line


def load_bytes(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "fuzz.yml"
        path.write_bytes(data)
        never_crashes(lambda: load_configuration(path).ensure_runnable())
    never_crashes(lambda: load_configuration_text(data.decode("latin-1"), "fuzz.yml"))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=2048))
def test_any_bytes_load_or_fail_in_one_line(data: bytes) -> None:
    load_bytes(data)


mutation = st.tuples(
    st.sampled_from(["flip", "insert", "insert", "truncate", "delete"]),
    st.integers(min_value=0, max_value=4096),
    st.integers(min_value=0, max_value=7),
    st.sampled_from(SYNTAX),
)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(EXAMPLES), st.lists(mutation, min_size=1, max_size=6))
def test_mutated_examples_load_or_fail_in_one_line(
    example: Path, mutations: list[tuple[str, int, int, bytes]]
) -> None:
    data = bytearray(example.read_bytes())
    for kind, where, bit, syntax in mutations:
        at = where % (len(data) + 1)
        if kind == "flip" and data:
            data[at % len(data)] ^= 1 << bit
        elif kind == "insert":
            data[at:at] = syntax
        elif kind == "truncate":
            del data[at:]
        else:
            del data[at : at + bit + 1]
    load_bytes(bytes(data))


def test_the_examples_themselves_still_load() -> None:
    assert EXAMPLES
    for example in EXAMPLES:
        load_configuration(example)
    assert yaml_safety.MAX_BYTES == 1024 * 1024
