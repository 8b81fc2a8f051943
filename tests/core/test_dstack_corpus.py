"""dstack's documented configurations run unchanged (issue 17): every configuration of dstack's docs and
examples (tests/core/dstack_corpus/, extracted by scripts/dstack_corpus.py at the commit its index.json names)
is accepted by `ferry validate`, unless dstack refuses it too, or Ferry cannot do what it asks and says why.

The index records what `ferry validate` says of each file (the fields named in the warning line, or the
reasons it is refused): a change to either shows up here; `python scripts/dstack_corpus.py record` writes
the new verdicts once the change is meant.
"""

from __future__ import annotations

import importlib.util
import json
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).with_name("dstack_corpus")
INDEX: dict[str, Any] = json.loads((CORPUS / "index.json").read_text())
FILES: dict[str, dict[str, Any]] = INDEX["files"]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dstack_corpus", REPO / "scripts" / "dstack_corpus.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SCRIPT = _script()

# What dstack refuses too (its configuration models, at the index's commit): snippets of its docs that are
# not whole configurations, and two with a mistake in them.
DSTACK_REFUSES = {
    "docs-concepts-backends-44.yml": "commands: required",  # a snippet: no commands, no image
    "docs-concepts-volumes-9.yml": "commands: required",
    "docs-concepts-volumes-10.yml": "commands: required",
    "docs-concepts-volumes-11.yml": "commands: required",
    "docs-concepts-secrets-1.yml": "port: required field is missing",
    "docs-concepts-secrets-2.yml": "port: required field is missing",
    # `resources:` lost its indented fields in these two
    "docs-guides-migration-slurm-4.yml": "resources: should be a mapping of fields, got nothing",
    "docs-guides-migration-slurm-5.yml": "resources: should be a mapping of fields, got nothing",
    "docs-guides-protips-7.yml": "volumes.0.optional: unknown field",  # a named volume takes no `optional`
}

# What Ferry cannot do yet, refused with the reason, and how many files of the corpus ask for it.
FERRY_CANNOT = {
    "Ferry cannot register a Kubernetes volume claim": 2,
    "Ferry cannot register a cloud disk": 1,
    "the 4 nodes cannot share volume": 1,  # a named volume is attached to one job at a time
    # dstack's Docker in the job; the two Dynamo examples ask for it on their router group
    "docker: Ferry does not give a job a container engine": 8,
}


def test_the_index_and_the_files_agree() -> None:
    assert len(INDEX["commit"]) == 40
    assert sorted(FILES) == sorted(path.name for path in CORPUS.glob("*.yml"))
    for entry in FILES.values():
        assert entry["source"].startswith(("examples/", "mkdocs/docs/"))
        assert entry["type"] in SCRIPT.FERRY_TYPES
        assert ("warned" in entry) != ("refused" in entry)


@pytest.mark.parametrize("name", sorted(FILES))
def test_ferry_says_what_the_index_records(name: str) -> None:
    recorded = {key: FILES[name][key] for key in ("warned", "refused") if key in FILES[name]}
    assert SCRIPT.verdict(CORPUS / name) == recorded


def test_only_what_dstack_refuses_or_ferry_cannot_do_is_refused() -> None:
    refused = {name: entry["refused"] for name, entry in FILES.items() if "refused" in entry}
    for name, reason in DSTACK_REFUSES.items():
        assert any(reason in said for said in refused.pop(name)), name
    cannot: Counter[str] = Counter()
    for name, reasons in refused.items():
        matched = {fragment for fragment in FERRY_CANNOT for said in reasons if fragment in said}
        assert matched, f"{name} is refused, but dstack accepts it: {reasons}"
        cannot.update(matched)
    assert dict(cannot) == FERRY_CANNOT


def test_the_warning_line_names_only_what_ferry_does_not_do() -> None:
    """The fields still warned about, with how many files ask for each (a field Ferry starts acting on
    leaves this list)."""
    warned = Counter(field for entry in FILES.values() for field in set(entry.get("warned", [])))
    assert set(warned) <= {
        "repos", "nvcc", "utilization_policy", "dstack", "nodes.target",
        "placement", "size", "backend", "region", "rate_limits", "spot_policy",
        "gateway", "https", "backends", "instances", "storage_class_name", "access_modes",
        "instance_types", "availability_zones",  # a cloud's, on a fleet with `nodes` (docs/backends.md)
        "replicas.image", "replicas.python",  # a replica group's (docs/services.md#replica-groups)
    }  # fmt: skip


def test_yaml_blocks_are_found_in_tabs_and_with_attributes() -> None:
    page = (
        "Text\n\n```yaml\ntype: task\ncommands: [a]\n```\n\n"
        '=== "Tab"\n\n    ```yaml hl_lines="2"\n    type: service\n    port: 80\n    ```\n'
        "```shell\n$ dstack apply\n```\n"
    )
    blocks = SCRIPT.yaml_blocks(page)
    assert blocks == [(4, "type: task\ncommands: [a]\n"), (11, "type: service\nport: 80\n")]
    assert [SCRIPT.configuration_type(text) for _, text in blocks] == ["task", "service"]
    assert SCRIPT.configuration_type("gpu: 24GB\n") is None
