"""dstack's configuration fields per type, as dotted paths, into tests/core/dstack_schema.json.

    python scripts/dstack_schema.py GIT_DIR [--commit REV]

Reads dstack's models (src/dstack/_internal/core/models/, with `git show`: a bare mirror is enough) without
importing them: each class's annotated fields, its bases' first, and the models an annotation names, followed
through imports and module-level aliases. A field whose type is a model adds that model's fields under its
name (`resources.gpu.vendor`); a list or union of models adds each one's. `Range` (`min`, `max`) and `Env` are
spellings of a value, not fields, and are not followed.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUTPUT = REPO / "tests" / "core" / "dstack_schema.json"
MODELS = "src/dstack/_internal/core/models/"
PACKAGE = "dstack._internal.core.models"
ROOTS = {
    "task": "configurations.TaskConfiguration",
    "service": "configurations.ServiceConfiguration",
    "dev-environment": "configurations.DevEnvironmentConfiguration",
    "fleet": "fleets.FleetConfiguration",
    "volume": "volumes.VolumeConfiguration",
}
MODEL_BASES = {"BaseModel", "CoreModel", "FrozenCoreModel", "GenericModel", "RootModel"}
VALUE_MODELS = {"Range", "Env"}  # a value's spellings: min..max; a list or a mapping


@dataclass
class Module:
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    aliases: dict[str, ast.expr] = field(default_factory=dict)
    imports: dict[str, tuple[str, str]] = field(default_factory=dict)  # name: (module, name there)


def git(git_dir: str, *args: str) -> str:
    return subprocess.run(
        ["git", f"--git-dir={git_dir}", *args], check=True, capture_output=True, text=True
    ).stdout


def read_modules(git_dir: str, commit: str) -> dict[str, Module]:
    modules: dict[str, Module] = {}
    for path in git(git_dir, "ls-tree", "-r", "--name-only", commit, MODELS).splitlines():
        if not path.endswith(".py"):
            continue
        name = path.removeprefix(MODELS).removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        module = modules[name] = Module()
        for node in ast.parse(git(git_dir, "show", f"{commit}:{path}")).body:
            if isinstance(node, ast.ClassDef):
                module.classes[node.name] = node
            elif isinstance(node, ast.Assign) and len(node.targets) == 1:
                if isinstance(node.targets[0], ast.Name):
                    module.aliases[node.targets[0].id] = node.value
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PACKAGE + "."):
                source = (node.module or "").removeprefix(PACKAGE + ".")
                for alias in node.names:
                    module.imports[alias.asname or alias.name] = (source, alias.name)
    return modules


class Schema:
    def __init__(self, modules: dict[str, Module]) -> None:
        self.modules = modules

    def resolve(self, module: str, name: str) -> tuple[str, ast.ClassDef | ast.expr] | None:
        """(module, class or alias value) that `name` means in `module`; None when it is no model's."""
        for _ in range(10):
            found = self.modules.get(module)
            if found is None:
                return None
            if name in found.classes:
                return module, found.classes[name]
            if name in found.aliases:
                return module, found.aliases[name]
            if name not in found.imports:
                return None
            module, name = found.imports[name]
        return None

    def is_model(self, module: str, node: ast.ClassDef) -> bool:
        for base in node.bases:
            name = _base_name(base)
            if name in MODEL_BASES:
                return True
            resolved = self.resolve(module, name)
            if resolved is not None and isinstance(resolved[1], ast.ClassDef) and self.is_model(*resolved):  # type: ignore[arg-type]
                return True
        return False

    def fields(self, module: str, node: ast.ClassDef) -> dict[str, tuple[str, ast.expr]]:
        """name: (module, annotation), bases' first (the last base first, as Python's MRO ends)."""
        found: dict[str, tuple[str, ast.expr]] = {}
        for base in reversed(node.bases):
            resolved = self.resolve(module, _base_name(base))
            if resolved is not None and isinstance(resolved[1], ast.ClassDef):
                found.update(self.fields(*resolved))  # type: ignore[arg-type]
        for statement in node.body:
            if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
                name = statement.target.id
                if not name.startswith("_") and "ClassVar" not in ast.unparse(statement.annotation):
                    found[name] = (module, statement.annotation)
        root = _root_type(node)  # RootModel[X]: the fields of X
        if root is not None:
            found.update({name: (module, annotation) for name, annotation in [("", root)]})
        return found

    def paths(self, module: str, node: ast.ClassDef, prefix: str, depth: int = 0) -> set[str]:
        found: set[str] = set()
        for name, (where, annotation) in self.fields(module, node).items():
            path = f"{prefix}{name}" if name else prefix.rstrip(".")
            if path:
                found.add(path)
            for model_module, model in self.models_in(where, annotation):
                if depth < 8 and model.name not in VALUE_MODELS:
                    found |= self.paths(model_module, model, f"{path}." if path else "", depth + 1)
        return found

    def models_in(self, module: str, annotation: ast.expr, seen: frozenset[str] = frozenset()) -> list:
        """The model classes an annotation names (through Annotated's first argument, unions, lists,
        aliases and quoted names)."""
        found: list[tuple[str, ast.ClassDef]] = []
        for name in _names(annotation):
            if name in seen:
                continue
            resolved = self.resolve(module, name)
            if resolved is None:
                continue
            where, node = resolved
            if isinstance(node, ast.ClassDef):
                if self.is_model(where, node):
                    found.append((where, node))
            else:
                found += self.models_in(where, node, seen | {name})
        return found


def _base_name(base: ast.expr) -> str:
    if isinstance(base, ast.Subscript):
        base = base.value
    return base.id if isinstance(base, ast.Name) else getattr(base, "attr", "")


def _root_type(node: ast.ClassDef) -> ast.expr | None:
    for base in node.bases:
        if isinstance(base, ast.Subscript) and _base_name(base) == "RootModel":
            return base.slice
    return None


def _names(annotation: ast.expr) -> list[str]:
    """The names a type expression refers to, skipping Field(...), Literal[...] and the like."""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            return _names(ast.parse(annotation.value, mode="eval").body)
        except SyntaxError:
            return []
    if isinstance(annotation, ast.Name):
        return [annotation.id]
    if isinstance(annotation, ast.Attribute):
        return [annotation.attr]
    if isinstance(annotation, ast.Subscript):
        outer = _base_name(annotation.value)
        if outer == "Literal":
            return []
        args = annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else [annotation.slice]
        if outer == "Annotated":
            args = args[:1]
        return [outer, *(name for arg in args for name in _names(arg))]
    if isinstance(annotation, ast.BinOp):  # X | Y
        return _names(annotation.left) + _names(annotation.right)
    if isinstance(annotation, ast.Tuple | ast.List):
        return [name for element in annotation.elts for name in _names(element)]
    return []


def schema(git_dir: str, commit: str) -> dict[str, object]:
    commit = git(git_dir, "rev-parse", commit).strip()
    reader = Schema(read_modules(git_dir, commit))
    types: dict[str, list[str]] = {}
    for kind, root in ROOTS.items():
        module, name = root.rsplit(".", 1)
        node = reader.modules[module].classes[name]
        types[kind] = sorted(reader.paths(module, node, ""))
    return {
        "repository": "https://github.com/dstackai/dstack",
        "commit": commit,
        "command": "python scripts/dstack_schema.py GIT_DIR --commit COMMIT",
        "types": types,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("git_dir")
    parser.add_argument("--commit", default="HEAD")
    args = parser.parse_args()
    found = schema(args.git_dir, args.commit)
    OUTPUT.write_text(json.dumps(found, indent=1) + "\n")
    print({kind: len(paths) for kind, paths in found["types"].items()})  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
