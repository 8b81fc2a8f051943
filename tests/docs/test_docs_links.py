"""The docs' links resolve, the code's `docs/...` references name pages and headings that exist, and every
repository path the docs name is there (docs/README.md)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
CODE_DIRS = ("core", "workflows", "activities", "agent", "store", "cli", "worker", "testbed", "tests")

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE_REFERENCE = re.compile(r"docs/([A-Za-z0-9_-]+\.md)(#[a-z0-9_-]+)?")
BACKTICKED = re.compile(r"`([^`]+)`")
REPO_PATH = re.compile(r"(?:[a-z_]+/)+(?:[a-z_0-9]+\.(?:py|md|yml))?")


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    for line in prose_lines(page.read_text()):
        heading = re.match(r"^#{1,6}\s+(.*)$", line)
        if heading is None:
            continue
        base = slug(heading[1])
        anchor, n = base, 0
        while anchor in found:  # GitHub numbers repeated headings: name, name-1, name-2...
            n += 1
            anchor = f"{base}-{n}"
        found.add(anchor)
    return found


def pages() -> list[Path]:
    return sorted(DOCS.glob("*.md"))


def resolve(page: Path, target: str) -> str | None:
    """Why a link from `page` does not resolve; None when it does."""
    if re.match(r"^[a-z]+:", target):
        return None  # an outside address: not checked here
    path, _, anchor = target.partition("#")
    goal = (page.parent / path).resolve() if path else page
    if not goal.is_relative_to(ROOT):
        return f"{target}: outside the repository"
    if not goal.exists():
        return f"{target}: no such file"
    if anchor and goal.suffix == ".md" and anchor not in anchors(goal):
        return f"{target}: no heading #{anchor} in {goal.relative_to(ROOT)} (has {sorted(anchors(goal))})"
    return None


def test_there_are_docs() -> None:
    names = {page.name for page in pages()}
    assert {"README.md", "runs.md", "jobs.md", "eventlog.md", "fleets.md", "checklists.md"} <= names


@pytest.mark.parametrize("page", pages(), ids=lambda page: page.name)
def test_links_resolve(page: Path) -> None:
    broken = [
        f"{page.name}: {why}"
        for line in prose_lines(page.read_text())
        for target in LINK.findall(line)
        if (why := resolve(page, target)) is not None
    ]
    assert not broken, "\n".join(broken)


def test_the_codes_references_to_the_docs_resolve() -> None:
    broken = []
    for folder in CODE_DIRS:
        for source in sorted((ROOT / folder).rglob("*.py")):
            for n, line in enumerate(source.read_text().splitlines(), start=1):
                for name, anchor in CODE_REFERENCE.findall(line):
                    why = resolve(DOCS / "README.md", name + anchor)
                    if why is not None:
                        broken.append(f"{source.relative_to(ROOT)}:{n}: docs/{why}")
    assert not broken, "\n".join(broken)


def test_every_path_the_docs_name_exists() -> None:
    """`core/runs/lifecycle.py` anywhere; `run.py` in a table row that starts with its folder `workflows/`."""
    missing = []
    for page in pages():
        for line in prose_lines(page.read_text()):
            names = BACKTICKED.findall(line)
            folder = None
            first_cell = (
                line.strip().strip("|").split("|")[0].strip() if line.lstrip().startswith("|") else ""
            )
            if first_cell.startswith("`") and first_cell.endswith("/`"):
                folder = first_cell.strip("`")
            for name in names:
                if REPO_PATH.fullmatch(name):
                    path = ROOT / name
                elif folder is not None and re.fullmatch(r"[a-z_0-9]+\.py", name):
                    path = ROOT / folder / name
                else:
                    continue
                if not path.exists():
                    missing.append(f"{page.name}: {path.relative_to(ROOT)}")
    assert not missing, "paths the docs name but the repository lacks:\n" + "\n".join(missing)


def test_the_docs_name_nothing_outside_the_repository() -> None:
    outside = re.compile(r"\.\./|DESIGN\.md|/work/|shared/|seeds/")
    found = [
        f"{page.name}: {line.strip()}"
        for page in pages()
        for line in page.read_text().splitlines()
        if outside.search(line)
    ]
    assert not found, "\n".join(found)


def test_slugs_are_githubs() -> None:
    assert slug("STEP 2: active") == "step-2-active"
    assert slug("The run's eventlog") == "the-runs-eventlog"
    assert slug("The status, in priority order") == "the-status-in-priority-order"
    assert slug("`JOB_EVENTS_FROM` and friends") == "job_events_from-and-friends"


def test_a_broken_link_or_anchor_is_reported() -> None:
    readme = DOCS / "README.md"
    assert resolve(readme, "runs.md#step-2-active") is None
    assert resolve(readme, "https://example.com/x") is None
    assert "no heading #step-9" in (resolve(readme, "runs.md#step-9") or "")
    assert "no such file" in (resolve(readme, "nowhere.md") or "")
    assert "outside the repository" in (resolve(readme, "../../x.md") or "")
