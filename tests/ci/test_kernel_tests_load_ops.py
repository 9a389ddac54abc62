"""A CUDA kernel test that calls ``torch.ops.convperf_<family>.*`` must load the library itself.

On the first H100 run ``test_cuda_weight_grad_is_deterministic`` passed in the full file only
because an earlier test had loaded the depthwise ops; run alone (``-k``, or under a sanitizer) it
failed with "'_OpNamespace' 'convperf_depthwise' object has no attribute 'weight_grad'". The ops
exist once a family's ``LazyOps`` ran: through ``ops.ensure_loaded()`` / ``ops.load()``, any call of
the family's ``ops`` module, or a ``*_library`` fixture.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _raw_op_line(node: ast.AST) -> int | None:
    """The first line that reads ``torch.ops.convperf_*``, if any."""
    lines = [
        n.lineno
        for n in ast.walk(node)
        if isinstance(n, ast.Attribute)
        and n.attr.startswith("convperf_")
        and isinstance(n.value, ast.Attribute)
        and n.value.attr == "ops"
        and isinstance(n.value.value, ast.Name)
        and n.value.value.id == "torch"
    ]
    return min(lines) if lines else None


def _loads_first(fn: ast.FunctionDef, before: int) -> bool:
    if any(a.arg.endswith("_library") for a in fn.args.args):
        return True
    return any(
        isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and isinstance(n.func.value, ast.Name)
        and n.func.value.id in ("ops", "controls")
        and n.lineno < before
        for n in ast.walk(fn)
    )


def order_dependent_tests(source: str) -> list[str]:
    """Test functions in ``source`` that use a raw op before anything in them loads its library."""
    found = []
    for fn in ast.walk(ast.parse(source)):
        if isinstance(fn, ast.FunctionDef) and fn.name.startswith("test_"):
            line = _raw_op_line(fn)
            if line is not None and not _loads_first(fn, line):
                found.append(fn.name)
    return found


def test_kernel_tests_load_the_ops_they_call() -> None:
    offenders = {
        str(path.relative_to(ROOT)): names
        for path in sorted((ROOT / "tests" / "kernels").glob("test_*.py"))
        if (names := order_dependent_tests(path.read_text()))
    }
    assert not offenders, (
        f"tests that call torch.ops.convperf_* before loading the library (they pass only after another "
        f"test loaded it): {offenders}; call the family's ops.ensure_loaded() (or ops.load()) first"
    )


def test_the_check_catches_the_h100_failure() -> None:
    """The control: the determinism test as it was on the first GPU run."""
    before_the_fix = (
        "def test_cuda_weight_grad_is_deterministic(layout):\n"
        "    x = problem.make_inputs(0, 'cuda').input\n"
        "    runs = [torch.ops.convperf_depthwise.weight_grad(gy, x, [3, 3]) for _ in range(3)]\n"
    )
    assert order_dependent_tests(before_the_fix) == ["test_cuda_weight_grad_is_deterministic"]
    fixed = before_the_fix.replace("    x =", "    ops.ensure_loaded()\n    x =")
    assert order_dependent_tests(fixed) == []
