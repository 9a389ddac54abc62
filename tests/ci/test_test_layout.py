"""Every module of ``pytest_convperf`` has its unit test where the package says (issue 39 item 7).

``tests/unit/`` mirrors the package: the module ``pytest_convperf/<layer>/<module>.py`` is tested by
``tests/unit/<layer>/test_<module>.py`` (or ``test_<module>_<aspect>.py`` where one module has several
files), a top-level ``pytest_convperf/<module>.py`` by ``tests/unit/test_<module>.py``, as syrupy's
``tests/syrupy/`` mirrors ``src/syrupy/``. A module without one is named in ``NO_UNIT_TEST`` with the
test that covers it instead, so a new module cannot arrive untested without someone saying why.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pytest_convperf"
UNIT = ROOT / "tests" / "unit"

# module -> the test that covers it instead of a unit test of its name, and what that test checks.
NO_UNIT_TEST: dict[str, str] = {}


def modules(package: Path = PACKAGE) -> list[str]:
    """Dotted names of the package's modules; a package ``__init__`` that is only a docstring is no module."""
    names = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package.parent).with_suffix("")
        if path.name == "__init__.py":
            body = ast.parse(path.read_text(encoding="utf-8")).body
            if all(isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) for node in body):
                continue
        names.append(".".join(rel.parts))
    return names


def unit_tests_of(module: str, unit: Path = UNIT) -> list[Path]:
    """The unit test files of ``module``: ``test_<name>.py`` or ``test_<name>_<aspect>.py`` in the folder
    mirroring its layer, minus an aspect file that is another module's own test (``test_history_gate.py``
    is ``history_gate``'s, not ``history``'s)."""
    *layers, name = module.split(".")[1:] or [""]
    name = name.strip("_")  # __main__ -> test_main.py
    folder = unit.joinpath(*layers)
    siblings = {p.stem for p in (PACKAGE.joinpath(*layers)).glob("*.py")}
    found = []
    for path in sorted(folder.glob(f"test_{name}*.py")):
        stem = path.stem.removeprefix("test_")
        if stem == name or (stem.startswith(name + "_") and stem not in siblings):
            found.append(path)
    return found


def missing(names: list[str], excused: dict[str, str], unit: Path = UNIT) -> list[str]:
    return [m for m in names if not unit_tests_of(m, unit) and m not in excused]


def test_every_module_has_a_unit_test_or_a_stated_reason() -> None:
    names = modules()
    assert len(names) > 90, names  # the walk found the package
    lacking = missing(names, NO_UNIT_TEST)
    assert not lacking, (
        "modules without tests/unit/<layer>/test_<module>.py: "
        + ", ".join(lacking)
        + "; write one, or name the test that covers each in NO_UNIT_TEST with what it checks"
    )


def test_no_unit_test_names_only_real_untested_modules() -> None:
    names = set(modules())
    stale = sorted(m for m in NO_UNIT_TEST if m not in names or unit_tests_of(m))
    assert not stale, f"NO_UNIT_TEST entries that are no module or have a unit test now (drop them): {stale}"
    for module, reason in NO_UNIT_TEST.items():
        for path in reason.split():
            if path.startswith("tests/") and "::" not in path:
                assert (ROOT / path.rstrip(":,;.")).exists(), (
                    f"{module}: its reason names {path}, which is gone"
                )


def test_a_new_module_without_a_test_fails(tmp_path: Path) -> None:
    # The negative control: a fake module list with one new module, and a fake tests/unit beside it.
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "test_stats.py").write_text("")
    names = ["pytest_convperf.core.stats", "pytest_convperf.core.brand_new"]
    assert missing(names, {}, tmp_path) == ["pytest_convperf.core.brand_new"]
    assert missing(names, {"pytest_convperf.core.brand_new": "tests/x.py covers it"}, tmp_path) == []
    # a test in the wrong layer's folder does not count
    (tmp_path / "judge").mkdir()
    (tmp_path / "judge" / "test_brand_new.py").write_text("")
    assert missing(names, {}, tmp_path) == ["pytest_convperf.core.brand_new"]
