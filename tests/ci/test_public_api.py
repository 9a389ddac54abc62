"""The public face: ``pytest_convperf.__all__`` names the supported API, every name resolves, the
lazy runtime table and the ``TYPE_CHECKING`` imports agree, and ``import pytest_convperf`` stays
cheap (no torch until a name that needs it is used)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import pytest_convperf

ROOT = Path(__file__).resolve().parents[2]
INIT = ROOT / "pytest_convperf" / "__init__.py"


def type_checking_imports() -> dict[str, str]:
    """``name -> module`` of the imports under ``if TYPE_CHECKING:`` in ``__init__.py``."""
    found: dict[str, str] = {}
    for node in ast.parse(INIT.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom) and stmt.module, ast.dump(stmt)
                found.update({alias.name: stmt.module for alias in stmt.names})
    return found


# Resolved in a fresh interpreter: an in-process pytester run (tests/integration/test_model_bench.py)
# restores sys.modules after itself, so a name resolved during it outlives its module's entry there.
RESOLVE = """
import sys
import pytest_convperf
exports = pytest_convperf._EXPORTS
for name in pytest_convperf.__all__:
    if getattr(pytest_convperf, name) is not getattr(sys.modules[exports[name]], name):
        print("NOT THE MODULE'S OBJECT", name)
print("RESOLVED", len(pytest_convperf.__all__))
"""


def fresh_interpreter(script: str) -> subprocess.CompletedProcess[str]:
    """``script`` run by a new interpreter with only this checkout on its path; it must succeed."""
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def test_every_public_name_resolves_to_the_object_its_module_defines() -> None:
    exports = pytest_convperf._EXPORTS
    assert len(pytest_convperf.__all__) == len(set(pytest_convperf.__all__)) >= 30
    assert set(pytest_convperf.__all__) == set(exports)
    # What mypy and IDEs see is what runs: the same names from the same modules.
    assert type_checking_imports() == exports
    proc = fresh_interpreter(RESOLVE)
    assert proc.stdout.strip().splitlines() == [f"RESOLVED {len(pytest_convperf.__all__)}"], proc.stdout


def test_the_public_face_names_what_the_issue_asks_for() -> None:
    wanted = {
        "Conv2dProblem", "ConvInputs", "conv2d_problems", "assert_conv_close", "check_conv",
        "ConvperfFixture", "MeasureOne", "TrackMemory", "StartTrace", "Comparison", "Verdict",
        "check_pair",
    }  # fmt: skip
    assert wanted <= set(pytest_convperf.__all__)


def test_an_unknown_name_is_a_clear_attribute_error() -> None:
    with pytest.raises(AttributeError, match=r"no attribute 'check_conv2d'.*__all__"):
        pytest_convperf.check_conv2d  # noqa: B018
    assert "check_pair" in dir(pytest_convperf)


PROBE = """
import sys
import pytest_convperf
print("AFTER_IMPORT", "torch" in sys.modules)
pytest_convperf.Conv2dProblem, pytest_convperf.conv2d_problems
print("AFTER_PROBLEM", "torch" in sys.modules)
pytest_convperf.check_pair
print("AFTER_CHECK_PAIR", "torch" in sys.modules)
"""


def test_import_pytest_convperf_imports_no_torch() -> None:
    proc = fresh_interpreter(PROBE)
    assert "AFTER_IMPORT False" in proc.stdout
    assert "AFTER_PROBLEM False" in proc.stdout  # the problem and its strategies need no torch
    assert "AFTER_CHECK_PAIR True" in proc.stdout  # the control: the probe sees a torch import
