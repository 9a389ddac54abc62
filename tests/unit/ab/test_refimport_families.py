"""Every kernel family through the A/B's REF import: two checkouts' kernels in one process are two
implementations, and a planted 2x in REF is seen (issue 37 item 1, issue 39 item 6).

REF is a copy of this repository's ``kernels/`` in which the family's innermost body (the function a
registration captures: im2col's ``custom_op`` body, the CPU twins' bodies) first does as much extra
work as the whole candidate does at HEAD. "Work" is deterministic: the builtin calls a candidate
makes (``sys.setprofile``'s ``c_call`` events), replayed as durations by a fake timer, so the A/B's
paired rounds (``measure_pair``) and rule (``decide_ab``) run as in a session, without a clock. Before
the fix, im2col's REF body replaced HEAD's process-wide (both sides did 2x: SAME), and REF's
module-level op names (``depthwise.ops.NAMESPACE``, ``edsr.ops.OP_NAME``) were HEAD's.

The collision guard (:mod:`pytest_convperf.ab.distinct`) is tested on a scratch package of its own,
so that the refused registration never replaces an op that other tests of this process use.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib
import itertools
import shutil
import sys
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from pytest_convperf.ab.distinct import NotDistinct, OpLedger, op_sides, same_callable
from pytest_convperf.ab.refimport import ref_candidate
from pytest_convperf.ab.rule import SAME, SLOWER, ab_policy, decide_ab
from pytest_convperf.core.results import Comparison
from pytest_convperf.measure.fake import FakeTimer
from pytest_convperf.measure.protocol import Job
from pytest_convperf.measure.rounds import measure_pair
from pytest_convperf.measure.rule import StopRule

REPO = Path(__file__).resolve().parents[3]
ROUNDS = 8  # paired rounds of a first measurement (the confirm takes 3x): work is exact, 1 % wobble
SHA = "ab" * 20


@dataclass(frozen=True)
class Case:
    """One family's candidate (``module:attribute``), the function of REF's copy that gets the planted
    work (``file:function``), and a call of the candidate on small CPU inputs."""

    name: str
    candidate: str
    planted: str
    call: Callable[[Callable[..., Any]], object]


def _conv(fn: Callable[..., Any], c: int = 4, groups: int = 1, **kw: Any) -> object:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, c, 10, 10, generator=g)
    w = torch.randn(c, c // groups, 3, 3, generator=g)
    return fn(x, w, torch.randn(c, generator=g), 1, 1, 1, groups, **kw)


def _edsr(fn: Callable[..., Any]) -> object:
    g = torch.Generator().manual_seed(0)
    c = 16
    x = torch.randn(1, c, 8, 8, generator=g)
    dw, pw = torch.randn(c, 1, 3, 3, generator=g), torch.randn(c, c, 1, 1, generator=g)
    return fn(x, dw, torch.randn(c, generator=g), pw, torch.randn(c, generator=g))


def _depthwise(fn: Callable[..., Any]) -> object:
    return _conv(fn, c=4, groups=4)


CASES = [
    Case("depthwise", "kernels.depthwise.reference:forward", "depthwise/reference.py:forward", _depthwise),
    Case("im2col_gemm", "kernels.im2col_gemm.ops:forward", "im2col_gemm/ops.py:_conv2d", _conv),
    Case(
        "im2col_gemm-sparse",
        "kernels.im2col_gemm.ops:sparse_forward",
        "im2col_gemm/ops.py:_sparse_forward",
        _conv,
    ),
    Case(
        "im2col_gemm-structured",
        "kernels.im2col_gemm.ops:structured_forward",
        "im2col_gemm/ops.py:_structured_forward",
        _conv,
    ),
    Case(
        "im2col_gemm-reference",
        "kernels.im2col_gemm.reference:forward",
        "im2col_gemm/reference.py:_forward",
        _conv,
    ),
    Case("pcilt", "kernels.pcilt.reference:forward", "pcilt/reference.py:lut_conv", _conv),
    Case("edsr", "kernels.edsr.reference:sep_conv", "edsr/reference.py:sep_conv", _edsr),
    Case("controls", "kernels._controls.cpu:wrong_border", "_controls/cpu.py:_wrong_border", _depthwise),
]
# The modules whose op names are process-global (the CUDA families' ops and im2col's Python custom ops).
OPS_MODULES = ["depthwise", "edsr", "im2col_gemm", "pcilt", "_controls"]


def resolve(spec: str) -> Callable[..., Any]:
    module, attr = spec.split(":")
    fn: Callable[..., Any] = getattr(importlib.import_module(module), attr)
    return fn


# ---- work: builtin calls made by a call, deterministic ---------------------------------------------
def work(call: Callable[[], object]) -> int:
    count = 0

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal count
        if event == "c_call":
            count += 1

    old = sys.getprofile()
    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(old)
    return count


class WorkTimer(FakeTimer):
    """A fake timer whose sample of a job is the job's work (1 us per builtin call, 1 % wobble)."""

    def __init__(self) -> None:
        self.last: dict[str, int] = {}
        super().__init__(lambda name, i: self.last[name] * 1e-6 * (1 + 0.01 * ((i * 7919) % 13 - 6) / 6))

    def job(self, name: str, call: Callable[[], object], mode: str) -> Job:
        def counted() -> None:
            self.last[name] = work(call)

        return super().job(name, counted, mode)


def ab_verdict(a: Callable[[], object], ref: Callable[[], object]) -> tuple[str, float]:
    """The A/B's answer for A against REF: paired rounds of work, then the CPU A/B rule."""
    timer = WorkTimer()
    rule = StopRule(min_rounds=ROUNDS, max_rounds=ROUNDS, warmup_min_calls=1, warmup_window=2)

    def measure(n_rounds: int | None = None) -> Comparison:
        r = rule if n_rounds is None else rule.for_rounds(n_rounds, ROUNDS)
        return measure_pair(timer, a, ref, mode="cold", rule=r)

    result = decide_ab(measure(), measure, ab_policy("cpu"))
    return result.verdict, result.ratio


# ---- REF: a copy of kernels/ with planted work -----------------------------------------------------
def plant(file: Path, function: str, extra: int) -> None:
    """Make ``function`` in ``file`` first make ``extra`` more builtin calls (its body is unchanged)."""
    text = file.read_text()
    tree = ast.parse(text)
    node = next(
        n
        for n in ast.walk(tree)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == function
    )
    first = node.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and len(node.body) > 1:
        first = node.body[1]  # after the docstring
    lines = text.splitlines(keepends=True)
    indent = " " * first.col_offset
    lines.insert(first.lineno - 1, f"{indent}for _planted in range({extra}):\n{indent}    abs(0)\n")
    file.write_text("".join(lines))


@pytest.fixture(scope="module")
def ref_trees(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[Path, str, int]]]:
    """Per case: REF's tree (one each, so one family's planted work is not inside another's), its
    revision id, and HEAD's work per call (REF's planted body adds as much again)."""
    trees = {}
    for i, case in enumerate(CASES):
        tree = tmp_path_factory.mktemp(f"ref-{case.name}")
        shutil.copytree(REPO / "kernels", tree / "kernels", ignore=shutil.ignore_patterns("__pycache__"))
        fn = resolve(case.candidate)
        case.call(fn)  # caches (weights, tables) filled: the work of a call in the timed rounds
        head_work = work(functools.partial(case.call, fn))
        file, function = case.planted.split(":")
        plant(tree / "kernels" / file, function, head_work)
        trees[case.name] = (tree, f"{i:02d}" + "ab" * 19, head_work)
    yield trees
    for key in [k for k in sys.modules if k.startswith("_convperf_ref_")]:
        del sys.modules[key]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_a_family_imported_from_two_checkouts_is_two_implementations_and_the_ab_sees_2x(
    case: Case, ref_trees: dict[str, tuple[Path, str, int]]
) -> None:
    tree, sha, head_work = ref_trees[case.name]
    head = resolve(case.candidate)
    ledger = OpLedger(REPO, tree)
    ledger.note("before REF's import")
    ref = ref_candidate(head, REPO, tree, sha, "REF")
    assert same_callable(head, ref, REPO, tree) is None
    torch.testing.assert_close(case.call(ref), case.call(head))  # the same values: only the work differs
    ledger.note("after REF's first call")  # raises NotDistinct on a shared op
    # HEAD still runs HEAD's code after REF's import, REF runs REF's: about 2x the work.
    assert work(lambda: case.call(head)) == pytest.approx(head_work, rel=0.05)
    assert work(lambda: case.call(ref)) == pytest.approx(2 * head_work, rel=0.05)
    verdict, ratio = ab_verdict(lambda: case.call(ref), lambda: case.call(head))
    assert verdict == SLOWER and ratio == pytest.approx(2.0, rel=0.1), (verdict, ratio)
    verdict, _ = ab_verdict(lambda: case.call(head), lambda: case.call(head))
    assert verdict == SAME  # the control: the same code reads SAME through the same path


@pytest.mark.parametrize("family", OPS_MODULES)
def test_every_family_names_its_ops_per_checkout_at_import_time(
    family: str, ref_trees: dict[str, tuple[Path, str, int]]
) -> None:
    """Module-level op names (computed when the module runs) and the loader's namespace are REF's own."""
    tree, _, _ = ref_trees[CASES[0].name]
    from pytest_convperf.ab.refimport import import_from_tree

    head = importlib.import_module(f"kernels.{family}.ops")
    ref = import_from_tree(tree, f"kernels.{family}.ops", SHA)
    head_build = importlib.import_module("kernels._build")
    ref_build = sys.modules[ref.__name__.replace(f"{family}.ops", "_build")]
    assert ref_build is not head_build
    assert ref_build.namespace(family) != head_build.namespace(family)
    names = {k: v for k, v in vars(head).items() if isinstance(v, str) and v.startswith("convperf_")}
    for key, value in names.items():
        assert getattr(ref, key) != value, f"REF's {family}.ops.{key} is HEAD's {value!r}"
    assert not [name for name, sides in op_sides(REPO, tree).items() if len(sides) > 1]


# ---- the guard, on a scratch package -----------------------------------------------------------------
OP_PACKAGE = """
import torch

@torch.library.custom_op("{namespace}::work", mutates_args=())
def work(x: torch.Tensor) -> torch.Tensor:
    return x + {delta}


def candidate(x):
    return work(x)
"""
# One op namespace per test: a name an earlier test registered stays held for the whole process.
_SERIAL = itertools.count()


@dataclass(frozen=True)
class TwoCheckouts:
    a: Path
    ref: Path
    namespace: str


def _checkout(root: Path, namespace: str, delta: int) -> Path:
    pkg = root / "abtest_pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "ops.py").write_text(textwrap.dedent(OP_PACKAGE.format(namespace=namespace, delta=delta)))
    return root


@pytest.fixture
def two_checkouts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TwoCheckouts]:
    namespace = f"convperf_abtest{next(_SERIAL)}"
    a, ref = _checkout(tmp_path / "a", namespace, 1), _checkout(tmp_path / "ref", namespace, 2)
    monkeypatch.syspath_prepend(str(a))
    yield TwoCheckouts(a, ref, namespace)
    for key in [k for k in sys.modules if "abtest_pkg" in k]:
        del sys.modules[key]


def test_refs_registration_of_an_op_name_the_working_tree_holds_is_refused_before_it_frees_it(
    two_checkouts: TwoCheckouts,
) -> None:
    co = two_checkouts
    head = importlib.import_module("abtest_pkg.ops").candidate
    with pytest.raises(NotDistinct, match=rf"{co.namespace}::work, which this process already holds"):
        ref_candidate(head, co.a, co.ref, SHA, "REF")
    assert head(torch.zeros(1)).item() == 1.0  # HEAD's op is whole: HEAD's body, for every later check


def test_without_torchs_hook_an_op_name_both_checkouts_register_is_refused_not_answered(
    two_checkouts: TwoCheckouts, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A torch without ``get_library_allowing_overwrite``: the takeover happens; the ledger refuses."""
    co = two_checkouts
    monkeypatch.setattr("pytest_convperf.ab.refimport.no_op_takeover", contextlib.nullcontext)
    head = importlib.import_module("abtest_pkg.ops").candidate
    ledger = OpLedger(co.a, co.ref)
    ledger.note("before REF's import")
    ref = ref_candidate(head, co.a, co.ref, SHA, "REF")
    assert same_callable(head, ref, co.a, co.ref) is None  # distinct functions: only the op is shared
    x = torch.zeros(1)
    # The silent takeover: HEAD's op name now runs REF's body. Looked up afresh, never through HEAD's
    # own op object: REF's registration freed the operator that object points at, so calling it is a
    # use-after-free in torch (it crashed CI's pytest with SIGSEGV, stop 34).
    assert ref(x).item() == getattr(torch.ops, co.namespace).work(x).item() == 2.0
    with pytest.raises(NotDistinct, match=rf"{co.namespace}::work was registered by both"):
        ledger.note("after REF's first call")
    with pytest.raises(NotDistinct, match="refuses to answer"):  # and stays refused: HEAD's op is gone
        ledger.note("at the next check")


def test_a_working_tree_op_registered_after_refs_is_refused_too(two_checkouts: TwoCheckouts) -> None:
    co = two_checkouts
    from pytest_convperf.ab.refimport import import_from_tree

    ledger = OpLedger(co.a, co.ref)
    ledger.note("before REF's import")
    import_from_tree(co.ref, "abtest_pkg.ops", SHA)  # REF first: HEAD's module is not imported yet
    ledger.note("after REF's first call")
    importlib.import_module("abtest_pkg.ops")  # HEAD's registration now replaces REF's
    with pytest.raises(NotDistinct, match=rf"{co.namespace}::work"):
        ledger.note("at the next check")


def test_refs_candidate_that_is_the_working_trees_code_is_refused(tmp_path: Path) -> None:
    def candidate() -> None:
        """A working-tree function."""

    assert "working tree's object" in str(same_callable(candidate, candidate, REPO, tmp_path))
    clone = type(candidate)(candidate.__code__, candidate.__globals__, "clone")
    assert "working tree's code object" in str(same_callable(candidate, clone, REPO, tmp_path))
