"""dstack's documented configurations as a test corpus: tests/core/dstack_corpus/ (test_dstack_corpus.py).

    python scripts/dstack_corpus.py extract GIT_DIR [--commit REV]  # the files and index.json, from git
    python scripts/dstack_corpus.py record                          # what Ferry says of each, into the index
    python scripts/dstack_corpus.py counts                           # accepted clean / warned / refused

`extract` reads dstack's repository (a bare mirror is enough: it uses `git show`): every YAML file under
`examples/` and every fenced ```yaml block of a Markdown page under `mkdocs/docs/` and `examples/`, and keeps
those whose `type` is one Ferry has (task, service, dev-environment, fleet, volume), one file each, exactly as
written (a block is only dedented). The index notes each file's source path, block and line, and the commit;
configurations of the other types (gateway...) are counted there, not kept. `record` writes Ferry's verdict on
each file into the index (what `ferry validate` would say): the test asserts it, so a change shows up.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "tests" / "core" / "dstack_corpus"
INDEX = CORPUS / "index.json"
FERRY_TYPES = ("task", "service", "dev-environment", "fleet", "volume")
SOURCE_DIRS = ("examples/", "mkdocs/docs/")

# ```yaml, ```yml, with attributes (`hl_lines="3"`) or not; the fence may be indented (inside a tab).
_FENCE_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})\s*(?P<lang>ya?ml)\b[^\n]*$")


def git(git_dir: str, *args: str) -> str:
    return subprocess.run(
        ["git", f"--git-dir={git_dir}", *args], check=True, capture_output=True, text=True
    ).stdout


def yaml_blocks(text: str) -> list[tuple[int, str]]:
    """(1-based line of the block's first line, dedented text) of each fenced YAML block."""
    lines = text.split("\n")
    blocks: list[tuple[int, str]] = []
    index = 0
    while index < len(lines):
        opened = _FENCE_OPEN.match(lines[index])
        if opened is None:
            index += 1
            continue
        indent, fence = opened.group("indent"), opened.group("fence")
        first_line = index + 2  # 1-based, the line after the fence
        body: list[str] = []
        index += 1
        while index < len(lines) and lines[index].strip() != fence:
            line = lines[index]
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            index += 1
        blocks.append((first_line, "\n".join(body).rstrip() + "\n"))
        index += 1
    return blocks


def configuration_type(text: str) -> str | None:
    """The `type` of a block's (first) document; None when it is no YAML mapping with a type."""
    try:
        documents = [document for document in yaml.safe_load_all(text) if document is not None]
    except yaml.YAMLError:
        return None
    types = {document.get("type") for document in documents if isinstance(document, dict)}
    types.discard(None)
    return str(sorted(types, key=str)[0]) if len(types) == 1 else None


def _slug(source: str, block: int | None) -> str:
    stem = re.sub(r"\.(md|ya?ml)$", "", source)
    stem = re.sub(r"[^A-Za-z0-9]+", "-", stem.replace("mkdocs/docs/", "docs/")).strip("-").lower()
    return f"{stem}-{block}.yml" if block is not None else f"{stem}.yml"


def extract(git_dir: str, commit: str) -> None:
    commit = git(git_dir, "rev-parse", commit).strip()
    paths = [
        path
        for path in git(git_dir, "ls-tree", "-r", "--name-only", commit).splitlines()
        if path.startswith(SOURCE_DIRS)
    ]
    entries: list[dict[str, Any]] = []
    other_types: Counter[str] = Counter()
    for path in sorted(paths):
        found: list[tuple[int | None, int, str]]
        if path.endswith(".md"):
            found = [
                (number, line, text)
                for number, (line, text) in enumerate(yaml_blocks(_show(git_dir, commit, path)), 1)
            ]
        elif path.endswith((".yml", ".yaml")):
            found = [(None, 1, _show(git_dir, commit, path))]
        else:
            continue
        for block, line, text in found:
            kind = configuration_type(text)
            if kind is None:
                continue
            if kind not in FERRY_TYPES:
                other_types[kind] += 1
                continue
            entries.append(
                {
                    "file": _slug(path, block),
                    "source": path,
                    "block": block,
                    "line": line,
                    "type": kind,
                    "text": text,
                }
            )
    for old in CORPUS.glob("*.yml"):
        old.unlink()
    CORPUS.mkdir(parents=True, exist_ok=True)
    for entry in entries:
        (CORPUS / entry["file"]).write_text(entry.pop("text"))
    previous = _read_index().get("files", {}) if INDEX.exists() else {}
    index = {
        "repository": "https://github.com/dstackai/dstack",
        "commit": commit,
        "other_types": dict(sorted(other_types.items())),
        "files": {
            entry["file"]: {
                **{key: value for key, value in entry.items() if key != "file"},
                **_verdict_of(previous.get(entry["file"])),
            }
            for entry in entries
        },
    }
    _write_index(index)
    print(f"{len(entries)} configurations of {', '.join(FERRY_TYPES)}; other types: {dict(other_types)}")


def _show(git_dir: str, commit: str, path: str) -> str:
    return git(git_dir, "show", f"{commit}:{path}")


def _verdict_of(entry: dict[str, Any] | None) -> dict[str, Any]:
    if not entry:
        return {}
    return {key: entry[key] for key in ("warned", "refused") if key in entry}


def verdict(path: Path) -> dict[str, Any]:
    """What `ferry validate` says of one file (cli.validate): refused with its reasons, or the fields it
    warns about ([] when clean)."""
    sys.path.insert(0, str(REPO))
    from core.configuration.loading import ConfigurationError
    from core.configuration.pipeline import LoadedPipeline, load_run_file

    try:
        found = load_run_file(path)
        found.ensure_runnable()
    except ConfigurationError as error:
        return {"refused": [_issue_text(issue) for issue in error.issues]}
    documents = found.documents if isinstance(found, LoadedPipeline) else [found]
    return {
        "warned": [field for document in documents for field in document.configuration.unsupported_fields()]
    }


def _issue_text(issue: Any) -> str:
    return f"{issue.field_path}: {issue.message}" if issue.field_path else issue.message


def record() -> None:
    index = _read_index()
    for name, entry in index["files"].items():
        entry.pop("warned", None)
        entry.pop("refused", None)
        entry.update(verdict(CORPUS / name))
    _write_index(index)
    counts()


def counts() -> None:
    files = _read_index()["files"]
    clean = sum(1 for entry in files.values() if entry.get("warned") == [])
    warned = sum(1 for entry in files.values() if entry.get("warned"))
    refused = sum(1 for entry in files.values() if "refused" in entry)
    print(f"{len(files)} files: {clean} accepted clean, {warned} accepted with a warning, {refused} refused")
    fields = Counter(field for entry in files.values() for field in set(entry.get("warned", [])))
    for field, count in fields.most_common():
        print(f"  warned {field}: {count}")
    reasons = Counter(reason for entry in files.values() for reason in entry.get("refused", []))
    for reason, count in reasons.most_common():
        print(f"  refused {count}x: {reason}")


def _read_index() -> dict[str, Any]:
    return json.loads(INDEX.read_text())


def _write_index(index: dict[str, Any]) -> None:
    INDEX.write_text(json.dumps(index, indent=1, sort_keys=False) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    extracting = commands.add_parser("extract")
    extracting.add_argument("git_dir")
    extracting.add_argument("--commit", default="HEAD")
    commands.add_parser("record")
    commands.add_parser("counts")
    args = parser.parse_args()
    if args.command == "extract":
        extract(args.git_dir, args.commit)
    elif args.command == "record":
        record()
    else:
        counts()


if __name__ == "__main__":
    main()
