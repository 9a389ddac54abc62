"""A module re-exports nothing it does not own (issue 39.1): a name is imported from the module that
defines it. The one exception is the package's public face, ``pytest_convperf/__init__.py``
(its lazy ``_EXPORTS``).

Two ways a re-export shows: the module marks it (``import X as X``, ``from m import X as X`` or an
imported name in ``__all__``), or an importer reaches a name through a module that only imports it
(``from pytest_convperf.a import X`` where ``a`` has ``from pytest_convperf.b import X``)."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "pytest_convperf"
IMPORTERS = ("pytest_convperf", "kernels", "perf_tests", "tests", "scripts", "tools", ".ci")


def imported_names(tree: ast.Module) -> set[str]:
    """The names a module binds by an import outside its functions (``TYPE_CHECKING`` included)."""
    names: set[str] = set()
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        todo.extend(ast.iter_child_nodes(node))
    return names


def defined_names(tree: ast.Module) -> set[str]:
    """Names a module defines itself: functions, classes, assignments, at any top-level nesting."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                names.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
    return names


def marked_reexports(package: Path) -> list[str]:
    """``import X as X`` forms and imported names in ``__all__``, outside the package's ``__init__``."""
    found = []
    for path in sorted(package.rglob("*.py")):
        if path == package / "__init__.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        where = path.relative_to(package.parent)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):  # ``import a.b as b`` only names a module
                for a in node.names:
                    if a.asname == a.name:
                        found.append(f"{where}:{node.lineno}: import {a.name} as {a.asname}")
        imported = imported_names(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
            ):
                for elt in getattr(node.value, "elts", []):
                    if isinstance(elt, ast.Constant) and elt.value in imported:
                        found.append(f"{where}:{node.lineno}: __all__ lists the imported {elt.value!r}")
    return found


def _module_file(root: Path, module: str) -> Path | None:
    base = root.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def reached_through(root: Path, importers: tuple[str, ...], package: str = "pytest_convperf") -> list[str]:
    """``from <package>.m import X`` where ``m`` imports X instead of defining it (the face exempt)."""
    trees: dict[Path, ast.Module] = {}

    def tree_of(path: Path) -> ast.Module:
        if path not in trees:
            trees[path] = ast.parse(path.read_text(encoding="utf-8"))
        return trees[path]

    found = []
    for folder in importers:
        for path in sorted((root / folder).rglob("*.py")) if (root / folder).is_dir() else []:
            for node in ast.walk(tree_of(path)):
                if not (isinstance(node, ast.ImportFrom) and node.module and node.level == 0):
                    continue
                if node.module == package or not node.module.startswith(package + "."):
                    continue
                owner = _module_file(root, node.module)
                if owner is None:
                    continue
                defined = defined_names(tree_of(owner))
                for a in node.names:
                    if a.name in defined or _module_file(root, f"{node.module}.{a.name}"):
                        continue
                    if a.name in imported_names(tree_of(owner)):
                        where = f"{path.relative_to(root)}:{node.lineno}"
                        found.append(f"{where}: {a.name} from {node.module}, which only imports it")
    return found


def _from_package(tree: ast.Module, package: str) -> set[str]:
    """Names bound by ``from <package>... import`` (a stdlib module patched through its user is fine)."""
    return {
        a.asname or a.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(package)
        for a in node.names
    }


@functools.cache
def _parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def reached_by_attribute(
    root: Path, importers: tuple[str, ...], package: str = "pytest_convperf"
) -> list[str]:
    """``mod.X`` on a module of the package imported whole (``from <package>.a import mod``,
    ``import <package>.a.mod as mod``) where ``mod`` imports X instead of defining it."""
    found = []
    for folder in importers:
        for path in sorted((root / folder).rglob("*.py")) if (root / folder).is_dir() else []:
            tree = ast.parse(path.read_text(encoding="utf-8"))
            modules: dict[str, str] = {}
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(package + "."):
                    for a in node.names:
                        if _module_file(root, f"{node.module}.{a.name}"):
                            modules[a.asname or a.name] = f"{node.module}.{a.name}"
                elif isinstance(node, ast.Import):
                    modules.update(
                        (a.asname, a.name) for a in node.names if a.asname and a.name.startswith(package)
                    )
            for node in ast.walk(tree):
                if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)):
                    continue
                owner = _module_file(root, modules[node.value.id]) if node.value.id in modules else None
                if owner is None:
                    continue
                owner_tree = _parsed(owner)
                if node.attr not in defined_names(owner_tree) and node.attr in _from_package(
                    owner_tree, package
                ):
                    where = f"{path.relative_to(root)}:{node.lineno}"
                    found.append(f"{where}: {node.value.id}.{node.attr}, which {node.value.id} only imports")
    return found


def test_no_module_marks_a_reexport() -> None:
    found = marked_reexports(PACKAGE)
    assert not found, "re-exports (import the name from the module that defines it):\n" + "\n".join(found)


def test_no_importer_reaches_a_name_through_a_module_that_does_not_own_it() -> None:
    found = reached_through(REPO, IMPORTERS)
    assert not found, "imports through a re-export (import from the owning module):\n" + "\n".join(found)


def test_no_importer_reaches_a_name_as_an_attribute_of_a_module_that_does_not_own_it() -> None:
    found = reached_by_attribute(REPO, IMPORTERS)
    assert not found, "attributes through a re-export (import from the owning module):\n" + "\n".join(found)


def test_a_reexport_is_found(tmp_path: Path) -> None:
    # Negative control: both forms in a small package, and an importer going through one.
    pkg = tmp_path / "pytest_convperf"
    (pkg / "core").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from pytest_convperf.core.a import A as A\n")  # the face: allowed
    (pkg / "core" / "__init__.py").write_text("")
    (pkg / "core" / "a.py").write_text("class A:\n    pass\n")
    (pkg / "core" / "b.py").write_text("from pytest_convperf.core.a import A as A\n__all__ = ['A']\n")
    (pkg / "core" / "c.py").write_text("from pytest_convperf.core.a import A\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text(
        "from pytest_convperf.core.c import A\nfrom pytest_convperf.core.a import A as B\n"
        "from pytest_convperf.core import c\nc.A\n"
    )
    assert marked_reexports(pkg) == [
        "pytest_convperf/core/b.py:1: import A as A",
        "pytest_convperf/core/b.py:2: __all__ lists the imported 'A'",
    ]
    assert reached_through(tmp_path, ("tests",)) == [
        "tests/test_x.py:1: A from pytest_convperf.core.c, which only imports it"
    ]
    assert reached_by_attribute(tmp_path, ("tests",)) == ["tests/test_x.py:4: c.A, which c only imports"]
