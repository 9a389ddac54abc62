"""The A/B decision (ab.decide_ab) and the bisect walk (bisect.walk), on constructed comparisons."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from pytest_convperf.ab.bisect import AMBIGUOUS, FOUND, NO_STEP, walk
from pytest_convperf.ab.revisions import Revision
from pytest_convperf.ab.rule import (
    FASTER,
    INCONCLUSIVE,
    SAME,
    SLOWER,
    ABResult,
    ab_policy,
    decide_ab,
)
from pytest_convperf.core.results import Comparison, Measurement

CPU = ab_policy("cpu")


def comparison(ratio: float, se: float = 0.005, n: int = 100, inconclusive: str | None = None) -> Comparison:
    m = Measurement(samples=(1e-3,), median=1e-3, ci=(1e-3, 1e-3), n=n)
    return Comparison(m, m, (math.log(ratio),) * n, ratio, (ratio, ratio), se, n, inconclusive=inconclusive)


def never(n_rounds: int) -> Comparison:
    raise AssertionError("no confirm expected")


def test_a_clear_slowdown_is_slower_after_a_confirm_with_three_times_the_rounds() -> None:
    asked: list[int] = []

    def confirm(n_rounds: int) -> Comparison:
        asked.append(n_rounds)
        return comparison(1.2, se=0.003, n=n_rounds)

    result = decide_ab(comparison(1.2, n=100), confirm, CPU)
    assert result.verdict == SLOWER and asked == [300]
    assert result.ratio == pytest.approx(1.2) and result.ci[0] < 1.2 < result.ci[1]
    assert result.stage == "confirm" and result.change == pytest.approx(0.2)


def test_a_clear_speedup_is_faster() -> None:
    assert decide_ab(comparison(0.8), lambda n: comparison(0.8, n=n), CPU).verdict == FASTER


def test_no_change_is_same_without_a_confirm_and_says_what_it_could_see() -> None:
    result = decide_ab(comparison(1.01), never, CPU)
    assert result.verdict == SAME and result.mde is not None and result.mde <= CPU.max_mde
    assert "would be seen" in result.message


def test_a_screen_the_confirm_does_not_repeat_is_inconclusive_never_a_guess() -> None:
    result = decide_ab(comparison(1.2), lambda n: comparison(1.0, n=n), CPU)
    assert result.verdict == INCONCLUSIVE and "did not repeat" in result.message


def test_too_noisy_to_call_it_same_is_inconclusive() -> None:
    result = decide_ab(comparison(1.0, se=0.2, n=21), never, CPU)
    assert result.verdict == INCONCLUSIVE and "too noisy" in result.message


def test_dropped_rounds_make_it_inconclusive() -> None:
    result = decide_ab(comparison(1.5, inconclusive="40 % of rounds dropped"), never, CPU)
    assert result.verdict == INCONCLUSIVE and "40 %" in result.message


def test_the_noise_floor_widens_the_interval_and_can_be_overridden() -> None:
    """The gate's rule: sigma^2 = se^2 + floor^2; a 7 % change is SLOWER only on a quiet floor."""
    quiet = ab_policy("cpu", noise_floor=0.005)
    assert (
        decide_ab(comparison(1.07, se=0.002), lambda n: comparison(1.07, se=0.001, n=n), quiet).verdict
        == SLOWER
    )
    loud = ab_policy("cpu", noise_floor=0.05)
    assert decide_ab(comparison(1.07, se=0.002), never, loud).verdict != SLOWER


def test_result_round_trips_through_a_dict() -> None:
    result = decide_ab(comparison(1.2), lambda n: comparison(1.2, n=n), CPU)
    assert ABResult.from_dict(result.to_dict()) == result


# ---- the bisect walk ---------------------------------------------------------------------------
def history(n: int) -> list[Revision]:
    return [Revision(f"c{k}", f"{k:040x}", f"commit {k}") for k in range(1, n + 1)]


def stepped(at: int, revs: list[Revision], calls: list[tuple[int, int]] | None = None):  # type: ignore[no-untyped-def]
    """A compare whose commits from ``at`` (1-based) are 1.2x slower; exact, like a fake timer."""

    def cost(rev: Revision) -> float:
        return 1.2 if revs.index(rev) + 1 >= at else 1.0

    def compare(a: Revision, ref: Revision) -> ABResult:
        if calls is not None:
            calls.append((revs.index(a) + 1, revs.index(ref) + 1))
        ratio = cost(a) / cost(ref)
        return decide_ab(comparison(ratio), lambda n: comparison(ratio, n=n), CPU)

    return compare


@pytest.mark.parametrize("at", [2, 5, 8])
def test_bisect_names_the_first_slow_commit_with_its_step(at: int) -> None:
    revs = history(8)
    calls: list[tuple[int, int]] = []
    result = walk(revs, stepped(at, revs, calls), log=lambda line: None)
    assert result.status == FOUND and result.first_bad == revs[at - 1]
    assert result.step is not None and result.step.verdict == SLOWER
    assert result.step.ratio == pytest.approx(1.2)
    assert calls[-1] == (at, at - 1)  # the step is measured against the parent
    # Every midpoint is measured against both ends of the interval.
    mids = calls[1:-1]
    assert len(mids) % 2 == 0 and all(a == b for (a, _), (b, _) in zip(mids[::2], mids[1::2]))


def test_bisect_finds_a_speedup_too() -> None:
    revs = history(8)
    slow = stepped(4, revs)

    def faster(a: Revision, ref: Revision) -> ABResult:  # the inverse history: commit 4 made it faster
        r = slow(a, ref)
        ratio = 1 / r.ratio
        return decide_ab(comparison(ratio), lambda n: comparison(ratio, n=n), CPU)

    result = walk(revs, faster, log=lambda line: None)
    assert result.status == FOUND and result.first_bad == revs[3] and result.step is not None
    assert result.step.verdict == FASTER


def test_bisect_is_ambiguous_with_the_interval_when_a_midpoint_is_on_neither_side() -> None:
    """Two half steps (commit 3 and commit 6, 1.1x each): the midpoint differs from both ends."""
    revs = history(8)

    def cost(rev: Revision) -> float:
        k = revs.index(rev) + 1
        return 1.0 * (1.1 if k >= 3 else 1.0) * (1.1 if k >= 6 else 1.0)

    def compare(a: Revision, ref: Revision) -> ABResult:
        ratio = cost(a) / cost(ref)
        return decide_ab(
            comparison(ratio, se=0.002),
            lambda n: comparison(ratio, se=0.001, n=n),
            ab_policy("cpu", noise_floor=0.005),
        )

    lines: list[str] = []
    result = walk(revs, compare, log=lines.append)
    assert result.status == AMBIGUOUS and result.first_bad is None
    assert result.interval == (revs[0], revs[7])
    assert "AMBIGUOUS" in lines[-1] and revs[0].label in lines[-1] and revs[7].label in lines[-1]


def test_bisect_without_a_step_says_so() -> None:
    revs = history(4)
    result = walk(revs, stepped(99, revs), log=lambda line: None)
    assert result.status == NO_STEP and "no step" in result.log[-1]


@pytest.mark.parametrize("arg", ["--convperf-against=HEAD", "--convperf-against", "--convperf-report=out"])
def test_bisect_refuses_an_option_it_sets_itself(arg: str, capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_convperf.ab.bisect import main

    assert main("HEAD~1", "HEAD", ["test_ab.py", arg, "x"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and arg.split("=")[0] in err and "drop it" in err


@pytest.mark.parametrize("spec", ["", "  "])
def test_an_empty_against_is_a_usage_error_not_a_run_without_ab(spec: str) -> None:
    # The option is parsed with every other one, into ConvperfConfig.against (core/config.py).
    from pytest_convperf.core.options import parse_against

    with pytest.raises(pytest.UsageError, match="--convperf-against is empty"):
        parse_against(spec)


def test_a_hanging_ref_candidate_is_named_as_ref_when_the_check_is_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time
    from types import SimpleNamespace

    import torch.nn.functional as F

    from pytest_convperf.ab import ab_plugin
    from pytest_convperf.ab.revisions import Revision
    from pytest_convperf.check import calls  # noqa: F401  (imported here: a loaded box takes > 0.3 s)
    from pytest_convperf.check.faults import CheckProgress, CheckTimeout, deadline
    from pytest_convperf.core.problem import Conv2dProblem

    def hangs(*args: object) -> None:
        time.sleep(30)

    monkeypatch.setattr(ab_plugin, "ref_candidate", lambda *args: hangs)
    monkeypatch.setattr(ab_plugin, "same_callable", lambda *args: None)  # ``hangs`` stands for REF's code
    (tmp_path / "test_x.py").write_text("")
    ab = ab_plugin.ABSession.__new__(ab_plugin.ABSession)
    ab._ledger = None
    ab.repo, ab.ref = tmp_path, Revision("HEAD~1", "a" * 40, "slow")
    ab.checkouts = SimpleNamespace(path=lambda rev: tmp_path)  # type: ignore[assignment]
    node = SimpleNamespace(path=tmp_path / "test_x.py")
    fixture = SimpleNamespace(request=SimpleNamespace(node=node), progress=CheckProgress())
    problem = Conv2dProblem(n=1, c_in=2, h=4, w=4, c_out=2, kernel=3, padding=1)
    ctx: Any = SimpleNamespace(  # the parts of a CheckContext the A/B's first call uses
        candidate=F.conv2d, problem=problem, phase="forward", inputs=problem.make_inputs(1, "cpu"),
        seed=1, device=SimpleNamespace(torch_device="cpu"), grad_out=None,
    )  # fmt: skip
    stopped = pytest.raises(CheckTimeout, match=r"during REF HEAD~1 \(aaaaaaaaaa\)'s candidate")
    with stopped, deadline(0.3, "the check", fixture.progress):
        ab.compare(fixture, ctx, a_speedup=(1.0, (1.0, 1.0)))


def test_an_advisory_check_gets_the_ab_gate_named_in_the_summary() -> None:
    """Issue 36 item 3: ADVISORY against a stored baseline says which gate would judge the check."""
    from pytest_convperf.ab.ab_plugin import GateHint
    from tests.rows import check_row

    rows = [
        check_row({"verdict": v, "nodeid": f"t{i}"}) for i, v in enumerate(["ADVISORY", "PASS", "ADVISORY"])
    ]
    (line,) = GateHint().pytest_convperf_summary_lines(rows)
    assert line.startswith("convperf: 2 check(s) ADVISORY") and "--convperf-against=auto" in line
    assert GateHint().pytest_convperf_summary_lines(rows[1:2]) == []


def test_the_gate_hint_is_registered_without_against_only(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        "def pytest_sessionfinish(session):\n"
        "    names = [n for n, p in session.config.pluginmanager.list_name_plugin() if n and p is not None]\n"
        "    open('plugins.txt', 'w').write(','.join(n for n in names if n.startswith('convperf-ab')))\n"
    )
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    pytester.runpytest_subprocess("--convperf", "-p", "no:cacheprovider").assert_outcomes(passed=1)
    assert (pytester.path / "plugins.txt").read_text() == "convperf-ab-hint"
    pytester.runpytest_subprocess("--convperf", "-p", "no:convperf-ab-hint").assert_outcomes(passed=1)
    assert (pytester.path / "plugins.txt").read_text() == ""
