"""The suite (``perf_tests/``) and the kernels (``kernels/``) use the plugin through its public face:
``from pytest_convperf import <name in __all__>``; the suite also the internal modules allowed below
(the timing harness's self-benchmark measures the engine itself), the kernels none. Every import
counts: module level, ``TYPE_CHECKING`` blocks and imports inside functions."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest_convperf

ROOT = Path(__file__).resolve().parents[2]
TOP = "pytest_convperf"
# test_harness.py times the plugin's engine against torch.utils.benchmark and pytest-benchmark
# (measure_pair on a bare timer, with no check around it) and summarises the spreads the same way
# test_self_measure.py does: 3 plugin modules in all with the public face.
ALLOWED_INTERNAL = frozenset({"pytest_convperf.core.stats", "pytest_convperf.measure.rounds"})


def plugin_imports(path: Path) -> list[tuple[int, str]]:
    """``(line, what)`` for every import of the plugin in ``path``: a module, or ``pytest_convperf:<name>``
    for a name taken from the package itself."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == TOP]
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == TOP:
            module = node.module or ""
            if module == TOP:
                found += [(node.lineno, f"{TOP}:{a.name}") for a in node.names]
            else:  # ``from pytest_convperf.core import stats`` imports the module core.stats
                for a in node.names:
                    sub = f"{module}.{a.name}"
                    found.append((node.lineno, sub if sub in ALLOWED_INTERNAL else module))
    return found


def violations(folder: Path, allowed: frozenset[str] = ALLOWED_INTERNAL) -> list[str]:
    public = set(pytest_convperf.__all__)
    bad = []
    for path in sorted(folder.rglob("*.py")):
        for line, what in plugin_imports(path):
            where = f"{path.relative_to(folder.parent)}:{line}"
            if what.startswith(f"{TOP}:"):
                if what.split(":", 1)[1] not in public:
                    bad.append(f"{where}: {what.split(':', 1)[1]} is not in pytest_convperf.__all__")
            elif what == TOP:
                continue  # ``import pytest_convperf``
            elif what not in allowed:
                bad.append(f"{where}: {what} is internal")
    return bad


def modules_used(folder: Path) -> set[str]:
    return {what.split(":")[0] for path in folder.rglob("*.py") for _, what in plugin_imports(path)}


def test_the_suite_imports_only_the_public_face() -> None:
    bad = violations(ROOT / "perf_tests")
    assert not bad, (
        "perf_tests imports plugin internals; import the name from pytest_convperf (add it to the "
        "public face, pytest_convperf/__init__.py, if the suite really needs it):\n" + "\n".join(bad)
    )
    used = modules_used(ROOT / "perf_tests")
    assert TOP in used and len(used) <= 3, sorted(used)


def test_the_kernels_import_only_the_public_face() -> None:
    bad = violations(ROOT / "kernels", allowed=frozenset())
    assert not bad, (
        "kernels/ imports plugin internals; import the name from pytest_convperf (the public face) or do "
        "without the plugin:\n" + "\n".join(bad)
    )
    assert modules_used(ROOT / "kernels") == {TOP}  # the parser sees the kernels' imports at all


def test_an_internal_import_is_found(tmp_path: Path) -> None:
    # Negative control: internal modules imported at module level, in a function and by name.
    suite = tmp_path / "perf_tests"
    suite.mkdir()
    (suite / "test_a.py").write_text(
        "from pytest_convperf import Conv2dProblem, nope\n"
        "from pytest_convperf.core import stats\n"
        "def f():\n    from pytest_convperf.check.fixture import ConvperfFixture\n"
        "import pytest_convperf.judge.verdict\n"
    )
    assert violations(suite) == [
        "perf_tests/test_a.py:1: nope is not in pytest_convperf.__all__",
        "perf_tests/test_a.py:5: pytest_convperf.judge.verdict is internal",
        "perf_tests/test_a.py:4: pytest_convperf.check.fixture is internal",
    ]
    # The kernels may not use even the suite's allowed internals.
    assert violations(suite, allowed=frozenset())[1:] == [
        "perf_tests/test_a.py:2: pytest_convperf.core.stats is internal",
        "perf_tests/test_a.py:5: pytest_convperf.judge.verdict is internal",
        "perf_tests/test_a.py:4: pytest_convperf.check.fixture is internal",
    ]
