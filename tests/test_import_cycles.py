"""No import cycles among the product's modules: each dependency goes one way.

The graph is read from the source with `ast`, not from an interpreter: an import counts when it runs as its
module is imported (module level, in a class body or a `with`/`try`/`if` block, the workflows'
`imports_passed_through` included); one under `if TYPE_CHECKING:` or inside a function does not.
`from pkg import name` is an edge to the submodule `pkg.name` when there is one, else to the package
`pkg` (its `__init__`); `import a.b` is an edge to `a.b`. Importing `a.b.c` runs the `__init__` of `a` and
`a.b` first, so each is an edge too, unless the importer is inside it (then it is already being imported).

A second check counts every import, deferred ones too: a function-local or TYPE_CHECKING import is how
cli.api <-> cli.fleet_api and store.engine <-> store.repository once hid their cycles.

Within `core`, its parts (each `core.<name>`, a subpackage or a module) are layered too, deferred imports
counted: no cycle among them, and `core.wire` (what crosses process boundaries) builds on no part of core
but the words it is written in (docs/README.md#the-code).
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

Graph = Mapping[str, set[str]]


def product_packages(root: Path = ROOT) -> list[str]:
    """The top-level packages the wheel ships: pyproject's [tool.setuptools.packages.find] include."""
    project = tomllib.loads((root / "pyproject.toml").read_text())
    patterns = project["tool"]["setuptools"]["packages"]["find"]["include"]
    return sorted({pattern.rstrip("*").rstrip(".") for pattern in patterns})


def product_modules(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    """Every module of these packages by dotted name (a package by its own name, for its __init__)."""
    modules = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def executed_imports(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements that run when the module is imported."""
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue  # runs when called, not when the module is imported
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from executed_imports(node.orelse)  # the body is the type checker's only
        else:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.stmt):
                    yield from executed_imports([child])
                elif isinstance(child, ast.ExceptHandler | ast.match_case):
                    yield from executed_imports(child.body)


def _base(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module a `from ... import` names, relative ones resolved against `module`."""
    if node.level == 0:
        return node.module or ""
    parts = module.split(".") if is_package else module.split(".")[:-1]
    parts = parts[: len(parts) - (node.level - 1)]
    return ".".join([*parts, node.module] if node.module else parts)


def every_import(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, those in functions and under TYPE_CHECKING included."""
    for statement in body:
        for node in ast.walk(statement):
            if isinstance(node, ast.Import | ast.ImportFrom):
                yield node


def module_edges(module: str, path: Path, modules: Iterable[str], *, deferred: bool = False) -> set[str]:
    """The modules among `modules` that `module` (its source at `path`) imports as it is imported
    (`deferred`: or ever)."""
    known = set(modules)
    is_package = path.name == "__init__.py"
    edges: set[str] = set()
    imports = every_import if deferred else executed_imports
    for node in imports(ast.parse(path.read_text(), str(path)).body):
        if isinstance(node, ast.Import):
            edges.update(alias.name for alias in node.names if alias.name in known)
            continue
        base = _base(module, is_package, node)
        for alias in node.names:
            submodule = f"{base}.{alias.name}"
            if submodule in known:
                edges.add(submodule)
            elif base in known:
                edges.add(base)
    return edges | _parent_packages(module, edges, known)


def _parent_packages(module: str, targets: set[str], known: set[str]) -> set[str]:
    """The packages whose `__init__` runs before each target, but for those `module` is inside."""
    own = {".".join(module.split(".")[:n]) for n in range(1, module.count(".") + 2)}
    parents = set()
    for target in targets:
        parts = target.split(".")
        parents |= {".".join(parts[:n]) for n in range(1, len(parts))}
    return (parents & known) - own


def import_graph(root: Path, packages: Iterable[str], *, deferred: bool = False) -> dict[str, set[str]]:
    modules = product_modules(root, packages)
    return {
        module: module_edges(module, path, modules, deferred=deferred) for module, path in modules.items()
    }


def find_cycles(graph: Graph) -> list[list[str]]:
    """One cycle (`[a, b, ..., a]`) in each strongly connected part of the graph that has one."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    parts: list[set[str]] = []

    def connect(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            part = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                part.add(member)
                if member == node:
                    break
            parts.append(part)

    for node in sorted(graph):
        if node not in index:
            connect(node)
    cycles = [_cycle_in(graph, part) for part in parts if len(part) > 1 or _loops(graph, part)]
    return sorted(cycles)


def _loops(graph: Graph, part: set[str]) -> bool:
    (node,) = part
    return node in graph.get(node, ())


def _cycle_in(graph: Graph, part: set[str]) -> list[str]:
    """The shortest cycle through the part's first node (by name), within the part."""
    start = min(part)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(graph.get(node, ())):
                if target == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if target in part and target not in came_from:
                    came_from[target] = node
                    following.append(target)
        frontier = following
    raise AssertionError(f"no cycle through {start} in {sorted(part)}")


# --- the product -----------------------------------------------------------------------------------------


def test_the_product_has_no_import_cycle() -> None:
    graph = import_graph(ROOT, product_packages())
    # The scan sees the product: a graph without these would pass for the wrong reason.
    assert {"core", "workflows", "activities", "agent", "store", "worker", "cli"} <= set(graph)
    assert "store.engine" in graph["store.repository"] and "cli.fleet_api" in graph["cli.run_submission"]
    cycles = find_cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(cycle) for cycle in cycles)


def test_no_cycle_hides_behind_a_deferred_import() -> None:
    cycles = find_cycles(import_graph(ROOT, product_packages(), deferred=True))
    assert not cycles, "import cycles through deferred imports:\n" + "\n".join(
        " -> ".join(cycle) for cycle in cycles
    )


# --- the parts of core --------------------------------------------------------------------------------

# What core.wire's messages are written in: statuses, events, and configurations as files write them. Each
# of these imports no other part of core but these.
WIRE_WORDS = {"core.status", "core.eventlog", "core.configuration"}


def part_of(module: str) -> str:
    """`core.<name>`, the part of core a module is in (`core.wire.messages` -> `core.wire`)."""
    return ".".join(module.split(".")[:2])


def parts_graph(graph: Graph) -> dict[str, set[str]]:
    """Which part imports which, from a graph of modules; core's own (empty) `__init__` is no part."""
    parts: dict[str, set[str]] = {}
    for module, targets in graph.items():
        if module == "core":
            continue
        edges = parts.setdefault(part_of(module), set())
        edges |= {part_of(target) for target in targets if target != "core"} - {part_of(module)}
    return parts


def test_core_wire_builds_on_no_other_part_of_core() -> None:
    graph = import_graph(ROOT, ["core"], deferred=True)
    parts = parts_graph(graph)
    assert "core.wire" in parts["core.runs"]  # the scan sees core's parts and their imports
    # Parts that import nothing of core (core.compat, core.durations: the standard library's) serve all.
    leaves = {part for part, targets in parts.items() if not targets - {"core"}}
    assert {"core.compat", "core.durations"} <= leaves
    wire_words = {word: parts[word] - WIRE_WORDS - leaves for word in WIRE_WORDS}
    assert wire_words == dict.fromkeys(WIRE_WORDS, set())
    allowed = {"core", "core.wire", *WIRE_WORDS, *leaves}
    beyond = sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        if part_of(module) == "core.wire"
        for target in targets
        if part_of(target) not in allowed
    )
    assert not beyond, "core.wire imports other parts of core:\n" + "\n".join(beyond)


def test_no_import_cycle_among_the_parts_of_core() -> None:
    cycles = find_cycles(parts_graph(import_graph(ROOT, ["core"], deferred=True)))
    assert not cycles, "import cycles among core's parts:\n" + "\n".join(
        " -> ".join(cycle) for cycle in cycles
    )


def test_parts_graph_folds_modules_into_their_parts() -> None:
    graph = {
        "core": set(),
        "core.wire": {"core"},
        "core.wire.a": {"core", "core.wire", "core.wire.b", "core.status"},
        "core.wire.b": set(),
        "core.runs.x": {"core.wire.a", "core.runs.y"},
        "core.runs.y": set(),
        "core.status": set(),
    }
    assert parts_graph(graph) == {
        "core.wire": {"core.status"},
        "core.runs": {"core.wire"},
        "core.status": set(),
    }
    assert find_cycles(parts_graph({**graph, "core.wire.b": {"core.runs.y"}})) == [
        ["core.runs", "core.wire", "core.runs"]
    ]


# --- the graph and its cycles, on small made-up ones -----------------------------------------------------


def test_a_package_init_on_the_way_counts(tmp_path: Path) -> None:
    """`from b.y import ...` runs b/__init__.py first: a cycle through it is one (b imports a back)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "__init__.py").write_text("")
    (tmp_path / "a" / "x.py").write_text("from b.y import thing\n")
    (tmp_path / "b" / "__init__.py").write_text("from b import z\n")
    (tmp_path / "b" / "y.py").write_text("thing = 1\n")
    (tmp_path / "b" / "z.py").write_text("from a.x import thing\n")
    graph = import_graph(tmp_path, ["a", "b"])
    assert graph["a.x"] == {"b", "b.y"}
    assert graph["b.z"] == {"a", "a.x"}
    assert graph["b"] == {"b.z"}  # its own submodule: no edge back to itself
    assert find_cycles(graph) == [["a.x", "b", "b.z", "a.x"]]


def test_find_cycles_names_each_cycle() -> None:
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"a"}, "b": set()}) == [["a", "a"]]
    two = {"a": {"b"}, "b": {"a", "x"}, "x": {"y"}, "y": {"z"}, "z": {"x"}}
    assert find_cycles(two) == [["a", "b", "a"], ["x", "y", "z", "x"]]
    # The shortest way back, though a longer one is found first.
    assert find_cycles({"a": {"b", "c"}, "b": {"c"}, "c": {"a"}}) == [["a", "c", "a"]]


def _package(root: Path, files: dict[str, str]) -> dict[str, set[str]]:
    for name, source in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    return import_graph(root, ["pkg"])


def test_only_imports_that_run_at_import_time_are_edges(tmp_path: Path) -> None:
    graph = _package(
        tmp_path,
        {
            "pkg/__init__.py": "NAME = 1\n",
            "pkg/a.py": (
                "from typing import TYPE_CHECKING\n"
                "import os\n"
                "import pkg.b\n"
                "from pkg import c, NAME\n"
                "from . import d\n"
                "with passed_through():\n"
                "    from pkg.e import thing\n"
                "try:\n"
                "    import pkg.f\n"
                "except ImportError:\n"
                "    pass\n"
                "if TYPE_CHECKING:\n"
                "    import pkg.g\n"
                "else:\n"
                "    import pkg.h\n"
                "def later():\n"
                "    import pkg.i\n"
                "class Later:\n"
                "    import pkg.j\n"
                "    async def later(self):\n"
                "        import pkg.k\n"
            ),
            **{f"pkg/{name}.py": "" for name in "bcdefghijk"},
        },
    )
    assert graph["pkg.a"] == {"pkg", "pkg.b", "pkg.c", "pkg.d", "pkg.e", "pkg.f", "pkg.h", "pkg.j"}
    assert find_cycles(graph) == []
    every = import_graph(tmp_path, ["pkg"], deferred=True)
    assert every["pkg.a"] == {"pkg", *(f"pkg.{name}" for name in "bcdefghijk")}


def test_a_cycle_through_a_package_init_is_found(tmp_path: Path) -> None:
    graph = _package(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.models import Model\n",
            "pkg/models.py": "class Model: ...\n",
            "pkg/repository.py": "from pkg import Model\n",
            "pkg/sub/__init__.py": "",
            "pkg/sub/engine.py": "from ..repository import Model\n",
        },
    )
    assert graph["pkg.sub.engine"] == {"pkg.repository"}
    assert find_cycles(graph) == []
    (tmp_path / "pkg/models.py").write_text("import pkg.sub.engine\n")
    assert find_cycles(import_graph(tmp_path, ["pkg"])) == [
        ["pkg", "pkg.models", "pkg.sub.engine", "pkg.repository", "pkg"]
    ]
