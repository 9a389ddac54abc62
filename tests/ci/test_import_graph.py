"""No import circle in ``pytest_convperf`` (issue 14) nor anywhere in the repository (the plugin, the
kernels, the suite and the tests together: issue 39), counting every import: module level,
``TYPE_CHECKING`` blocks and imports inside functions alike; the layers of docs/architecture.md in the
plugin and of kernels/README.md in ``kernels/``."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pytest_convperf"
KERNELS = ROOT / "kernels"
# Every package of the repository (scripts/ are loose files, imported by path, not as a package).
REPOSITORY = ("pytest_convperf", "kernels", "perf_tests", "tests")


def module_name(path: Path, root: Path) -> str:
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, name: str, is_package: bool, tops: tuple[str, ...] = ()) -> set[str]:
    """Every module of the package (or of the packages ``tops``) that ``path`` imports anywhere in its
    body."""
    keep = tops or (name.split(".")[0],)
    here = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here.rsplit(".", node.level - 1)[0] if node.level > 1 else here
                base = f"{anchor}.{base}" if base else anchor
            found.add(base)
            # ``from pkg import module`` imports that module too.
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {m for m in found if m.split(".")[0] in keep}


def import_graph(*roots: Path) -> nx.DiGraph:
    """The imports between the modules of the packages at ``roots`` (one package: its own imports)."""
    paths = {module_name(p, root): p for root in roots for p in root.rglob("*.py")}
    tops = tuple(root.name for root in roots)
    graph = nx.DiGraph()
    graph.add_nodes_from(paths)
    for name, path in paths.items():
        for target in imports_of(path, name, path.name == "__init__.py", tops):
            # A package's ``__init__`` is what ``import pkg`` runs; only edges between real modules count.
            if target in paths and target != name:
                graph.add_edge(name, target)
    return graph


def circles(graph: nx.DiGraph) -> list[list[str]]:
    # A module importing its own package's ``__init__`` (which imports it back) is Python's normal
    # package pattern, not a circle between two modules: drop the edges into a parent package.
    plain = nx.DiGraph((a, b) for a, b in graph.edges if not a.startswith(b + "."))
    return [sorted(c) for c in nx.simple_cycles(plain)]


def test_the_plugin_has_no_import_circle() -> None:
    graph = import_graph(PACKAGE)
    assert graph.number_of_edges() > 50  # the parser sees the package's imports at all
    found = circles(graph)
    assert not found, "import circles (break each by moving the shared part down a layer):\n" + "\n".join(
        " -> ".join(c) for c in found
    )


def test_a_circle_through_type_checking_and_a_function_is_found(tmp_path: Path) -> None:
    # Negative control: the same check on a package with a circle hidden from a plain import.
    pkg = tmp_path / "pytest_convperf"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pytest_convperf.b import B\n"
    )
    (pkg / "b.py").write_text("def f():\n    from . import c\n")
    (pkg / "c.py").write_text("def g():\n    import pytest_convperf.a\n")
    assert circles(import_graph(pkg)) == [["pytest_convperf.a", "pytest_convperf.b", "pytest_convperf.c"]]


# The layers of docs/architecture.md, lowest first. A module's layer is its subpackage; the modules
# directly in the package (plugin, session, hookspecs, header, crash_watch, __main__) are the hooks,
# and the package itself (its public face) sits on top of them.
LAYERS = (
    "core",
    "measure",
    "correctness",
    "judge",
    "baselines",
    "resultsdb",
    "night",
    "reports",
    "check",
    "ab",
    "hooks",
)
TOP = "pytest_convperf"


def layer_of(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1:
        return len(LAYERS)  # the public face
    return LAYERS.index(parts[1]) if parts[1] in LAYERS else LAYERS.index("hooks")


def upward_imports(graph: nx.DiGraph) -> list[tuple[str, str]]:
    """Every import from a module to a module of a higher layer (a layer's own ``__init__`` is no layer)."""
    found = []
    for a, b in graph.edges:
        if b != TOP and b.count(".") == 1 and b.split(".")[1] in LAYERS:
            continue  # a layer package's ``__init__`` (a docstring): no code to depend on
        if layer_of(b) > layer_of(a):
            found.append((a.removeprefix(TOP + "."), b.removeprefix(TOP + ".")))
    return sorted(found)


def test_every_module_sits_in_a_documented_layer() -> None:
    doc = (PACKAGE.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    for layer in LAYERS[:-1]:
        assert (PACKAGE / layer / "__init__.py").is_file(), f"layer package {layer}/ is missing"
        assert f"`{layer}/`" in doc, f"docs/architecture.md does not describe the layer `{layer}/`"
    strays = [
        p.name for p in PACKAGE.glob("*/") if p.is_dir() and p.name not in LAYERS and p.name != "__pycache__"
    ]
    assert not strays, (
        f"subpackages outside the documented layers: {strays} (add them to LAYERS and the docs)"
    )


def test_no_module_imports_a_higher_layer() -> None:
    found = upward_imports(import_graph(PACKAGE))
    assert not found, (
        "imports from a lower layer to a higher one (docs/architecture.md's order is "
        + " < ".join(LAYERS)
        + "); move the shared part down or call up through a hook:\n"
        + "\n".join(f"{a} -> {b}" for a, b in found)
    )


def test_an_upward_import_is_found(tmp_path: Path) -> None:
    # Negative control: core importing judge, hidden in a function.
    pkg = tmp_path / "pytest_convperf"
    for layer in ("core", "judge"):
        (pkg / layer).mkdir(parents=True)
        (pkg / layer / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "core" / "a.py").write_text("def f():\n    from pytest_convperf.judge import b\n")
    (pkg / "judge" / "b.py").write_text("from pytest_convperf.core import a\n")
    assert upward_imports(import_graph(pkg)) == [("core.a", "judge.b")]


def test_the_repository_has_no_import_circle() -> None:
    graph = import_graph(*(ROOT / name for name in REPOSITORY))
    assert {n.split(".")[0] for n in graph.nodes} == set(REPOSITORY)
    kernels = [(a, b) for a, b in graph.edges if a.startswith("kernels.")]
    assert len(kernels) > 50  # the parser sees the kernels' imports at all
    found = circles(graph)
    assert not found, "import circles (break each by moving the shared part down a layer):\n" + "\n".join(
        " -> ".join(c) for c in found
    )


def test_a_circle_across_packages_is_found(tmp_path: Path) -> None:
    # Negative control: kernels -> the suite -> kernels, the way back inside a function.
    for name in ("kernels", "perf_tests"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("")
    (tmp_path / "kernels" / "ops.py").write_text("def f():\n    from perf_tests import conftest\n")
    (tmp_path / "perf_tests" / "conftest.py").write_text("from kernels.ops import f\n")
    assert circles(import_graph(tmp_path / "kernels", tmp_path / "perf_tests")) == [
        ["kernels.ops", "perf_tests.conftest"]
    ]


# kernels/README.md's layers, lowest first: shared helpers (the build, conv arguments, the H100's
# facts, the SASS reader, a sweep row), the families (one folder with a binding.cpp each, never
# importing another family), the controls built on them (``_controls``), the cost model
# (``kernels/model``) and the sweep (``kernels/sweep*.py`` and every family's ``sweep_plan.py``).
KERNEL_LAYERS = ("helpers", "families", "controls", "model", "sweep")


def kernel_layer(module: str, root: Path = KERNELS) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "helpers"  # ``kernels/__init__.py``: a docstring
    if parts[-1] == "sweep_plan" or parts[1].startswith("sweep"):
        return "sweep"
    if parts[1] == "model":
        return "model"
    if parts[1] == "_controls":
        return "controls"
    return "families" if (root / parts[1] / "binding.cpp").is_file() else "helpers"


def kernel_layer_breaks(graph: nx.DiGraph, root: Path = KERNELS) -> list[tuple[str, str]]:
    """Imports from a lower kernel layer to a higher one, and from one family to another."""
    found = []
    for a, b in graph.edges:
        la, lb = kernel_layer(a, root), kernel_layer(b, root)
        across = la == lb == "families" and a.split(".")[1] != b.split(".")[1]
        if KERNEL_LAYERS.index(lb) > KERNEL_LAYERS.index(la) or across:
            found.append((a, b))
    return sorted(found)


def test_kernels_keep_their_layers() -> None:
    graph = import_graph(KERNELS)
    layers = {kernel_layer(m) for m in graph.nodes}
    assert layers == set(KERNEL_LAYERS), layers
    found = kernel_layer_breaks(graph)
    assert not found, (
        "kernels/ imports against its layers (" + " < ".join(KERNEL_LAYERS) + "; a family imports no "
        "other family): move the shared part to a helper (kernels/conv_args.py, kernels/h100.py) or up:\n"
        + "\n".join(f"{a} -> {b}" for a, b in found)
    )


def test_a_kernel_layer_break_is_found(tmp_path: Path) -> None:
    # Negative control: a helper reaching the model inside a function, one family importing another.
    root = tmp_path / "kernels"
    for folder in ("depthwise", "pcilt", "model"):
        (root / folder).mkdir(parents=True)
        (root / folder / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    for family in ("depthwise", "pcilt"):
        (root / family / "binding.cpp").write_text("")
    (root / "conv_args.py").write_text("def f():\n    from kernels.model import static\n")
    (root / "model" / "static.py").write_text("from kernels.depthwise import ops\n")
    (root / "depthwise" / "ops.py").write_text(
        "from kernels import conv_args\nfrom kernels.pcilt.ops import g\n"
    )
    (root / "pcilt" / "ops.py").write_text("from kernels.conv_args import f\n")
    (root / "depthwise" / "sweep_plan.py").write_text("from kernels.model import static\n")
    assert kernel_layer_breaks(import_graph(root), root) == [
        ("kernels.conv_args", "kernels.model"),  # ``from kernels.model import ...`` runs its __init__ too
        ("kernels.conv_args", "kernels.model.static"),
        ("kernels.depthwise.ops", "kernels.pcilt.ops"),
    ]
