"""The pure decision rule (verdict.decide) on synthetic comparisons: every verdict and its message."""

from __future__ import annotations

import math

import pytest

from pytest_convperf.core.env import env_diff, env_from_facts
from pytest_convperf.core.results import Comparison, ErrorStats, Measurement, Verdict
from pytest_convperf.judge.decision import Policy
from pytest_convperf.judge.entry import Entry
from pytest_convperf.judge.policy import decision_of
from pytest_convperf.judge.quality import QUALITY_DB_DROP, QUALITY_REL_L2_FACTOR, QUALITY_REL_L2_FLOOR
from pytest_convperf.judge.verdict import CPU_TOLERANCE, GPU_NOISE_FLOOR, decide, default_policy

ENV = {"torch": "2.11.0", "cuda": "13.0", "cudnn": "92400", "driver": "580"}
GPU = default_policy("cuda")


def comparison(
    ratio: float,
    *,
    se: float = 0.002,
    n: int = 41,
    cand_us: float | None = None,
    inconclusive: str | None = None,
) -> Comparison:
    """A comparison whose median time ratio is ``ratio`` with standard error ``se``."""
    ref_s = 30e-6
    cand_s = (cand_us * 1e-6) if cand_us is not None else ratio * ref_s

    def meas(t: float) -> Measurement:
        return Measurement(samples=(t,) * n, median=t, ci=(t, t), n=n, mode="fake", l2="n/a")

    lr = math.log(ratio)
    return Comparison(
        meas(cand_s),
        meas(cand_s / ratio),
        (lr,) * n,
        ratio,
        (ratio * math.exp(-2 * se), ratio * math.exp(2 * se)),
        se,
        n,
        inconclusive=inconclusive,
    )


def entry(ratio: float = 0.6, *, noise: float = 0.005, **kw: object) -> Entry:
    base: dict[str, object] = {
        "us_candidate": ratio * 30.0,
        "us_reference": 30.0,
        "env": ENV,
        "reference_backend": "CudnnConv",
        "correctness": {"max_abs": 1e-6, "max_rel": 1e-6},
    }
    base.update(kw)
    return Entry(time_ratio=ratio, noise=noise, **base)  # type: ignore[arg-type]


def errors(
    max_abs: float = 1e-6, *, ok: bool = True, nonfinite: int = 0, name: str = "output"
) -> list[ErrorStats]:
    return [
        ErrorStats(
            name,
            max_abs,
            max_abs,
            max_abs,
            1e-4,
            1e-5,
            (0, 1, 2, 3),
            1.0,
            1.0,
            nonfinite,
            0 if ok else 3,
            1000,
        )
    ]


def test_within_tolerance_passes() -> None:
    d = decide(comparison(0.606), entry(0.6), GPU, env=ENV, backend="CudnnConv")
    assert d.verdict is Verdict.PASS and d.outcome == "pass"
    assert d.delta == pytest.approx(0.01, abs=1e-3)
    assert "tolerance 2.0 %" in d.message and "noise 0.50 %" in d.message


def test_missing_entry_is_new_and_strict_fails() -> None:
    d = decide(comparison(0.6), None, GPU)
    assert (d.verdict, d.outcome) == (Verdict.NEW, "pass")
    strict = decide(comparison(0.6), None, default_policy("cuda", strict=True))
    assert (strict.verdict, strict.outcome) == (Verdict.NEW, "fail")
    assert "--convperf-strict" in strict.message


def test_drift_fails_only_when_confirm_agrees() -> None:
    calls: list[int] = []

    def confirm_slow(n: int) -> Comparison:
        calls.append(n)
        return comparison(0.6 * 1.10, n=n)

    d = decision_of(comparison(0.6 * 1.10, n=41), entry(0.6), GPU, env=ENV, confirm=confirm_slow)
    assert calls == [123]  # 3x the rounds
    assert (d.verdict, d.outcome, d.stage) == (Verdict.FAIL, "fail", "confirm")
    assert d.delta == pytest.approx(0.10, abs=1e-3)
    for part in ("confirm (123 rounds)", "+10.0 %", "candidate", "reference", "tolerance 2.0 %", "noise"):
        assert part in d.message

    d2 = decision_of(
        comparison(0.6 * 1.10), entry(0.6), GPU, env=ENV, confirm=lambda n: comparison(0.601, n=n)
    )
    assert (d2.verdict, d2.outcome) == (Verdict.PASS, "pass")
    assert "suspect cleared" in d2.notes


def test_unconfirmed_screen_fails_with_stage() -> None:
    d = decide(comparison(0.7), entry(0.6), GPU, env=ENV)
    assert (d.verdict, d.stage) == (Verdict.FAIL, "screen")


def test_noise_floor_and_between_run_noise_widen_the_gate() -> None:
    # 3 % slower with a calibrated noise of 3 %: the lower bound stays under the tolerance.
    noisy = entry(0.6, noise=0.03, noise_runs=30)
    d = decision_of(
        comparison(0.6 * 1.03),
        noisy,
        Policy(0.02, GPU_NOISE_FLOOR, 1.0),
        env=ENV,
        confirm=lambda n: pytest.fail("confirm must not run"),
    )
    assert d.verdict is Verdict.PASS
    # Noise below the floor is floored.
    quiet = decide(comparison(0.6), entry(0.6, noise=0.0), GPU, env=ENV)
    assert quiet.noise == GPU_NOISE_FLOOR


def test_improvement() -> None:
    d = decide(comparison(0.5), entry(0.6), GPU, env=ENV)
    assert (d.verdict, d.outcome) == (Verdict.IMPROVED, "pass")
    assert "--convperf-update-baselines=improved" in d.message


def test_stale_env_names_what_changed_and_which_side_moved() -> None:
    env = dict(ENV, cudnn="92600")
    # Same candidate time, reference got faster: the reference moved.
    d = decide(comparison(0.7, cand_us=18.0), entry(0.6), GPU, env=env)
    assert (d.verdict, d.outcome) == (Verdict.STALE, "pass")
    assert d.env_diff == {"cudnn": ("92400", "92600")}
    assert "cudnn 92400 -> 92600" in d.message and "the reference moved" in d.message
    backend = decide(comparison(0.6), entry(0.6), GPU, env=ENV, backend="Slow2d")
    assert backend.verdict is Verdict.STALE and "reference_backend CudnnConv -> Slow2d" in backend.message


def test_advisory_when_too_noisy_says_what_would_help() -> None:
    # Noise-dominated: no number of rounds helps.
    d = decide(comparison(0.6), entry(0.6, noise=0.05), GPU, env=ENV)
    assert (d.verdict, d.outcome) == (Verdict.ADVISORY, "pass")
    assert d.mde is not None and d.mde > 0.10 and d.rounds_needed is None
    assert "no number of rounds" in d.message
    # Round-dominated: more rounds would make it gateable.
    d2 = decide(comparison(0.6, se=0.03, n=21), entry(0.6, noise=0.001), GPU, env=ENV)
    assert d2.verdict is Verdict.ADVISORY and d2.rounds_needed is not None and d2.rounds_needed > 21
    assert f"about {d2.rounds_needed} paired rounds" in d2.message
    # With that many rounds the same noise is gateable.
    se_then = 0.03 * math.sqrt(21 / d2.rounds_needed)
    d3 = decide(comparison(0.6, se=se_then, n=d2.rounds_needed), entry(0.6, noise=0.001), GPU, env=ENV)
    assert d3.verdict is Verdict.PASS


def test_inconclusive_skips() -> None:
    d = decide(comparison(0.9, inconclusive="40 % of rounds dropped (throttling)"), entry(0.6), GPU)
    assert (d.verdict, d.outcome) == (Verdict.INCONCLUSIVE, "skip")
    assert "throttling" in d.message
    d2 = decision_of(
        comparison(0.7),
        entry(0.6),
        GPU,
        env=ENV,
        confirm=lambda n: comparison(0.7, n=n, inconclusive="clocks"),
    )
    assert (d2.verdict, d2.outcome) == (Verdict.INCONCLUSIVE, "skip")


def test_correctness_breach_nonfinite_and_drift() -> None:
    # A breach of the tolerance fails the check before timing: decide() refuses such errors.
    with pytest.raises(ValueError, match="fail the check on its correctness report first"):
        decide(comparison(0.6), entry(0.6), GPU, errors=errors(ok=False))
    with pytest.raises(ValueError):
        decide(comparison(0.6), None, GPU, errors=errors(nonfinite=2, ok=False))
    drift = decide(comparison(0.6), entry(0.6), GPU, errors=errors(5e-6))  # 5x stored 1e-6
    assert (drift.verdict, drift.stage) == (Verdict.CORRECTNESS_FAIL, "drift")
    assert "over 4x the stored" in drift.message
    ok = decide(comparison(0.6), entry(0.6), GPU, errors=errors(3.9e-6), env=ENV)
    assert ok.verdict is Verdict.PASS
    # Per-output stored values for multi-output checks.
    multi = entry(0.6, correctness={"input_grad": {"max_abs": 1e-6}, "weight_grad": {"max_abs": 1e-3}})
    errs = errors(1e-5, name="input_grad") + errors(1e-3, name="weight_grad")
    assert decide(comparison(0.6), multi, GPU, errors=errs).stage == "drift"


def test_quality_tolerances_agree() -> None:
    # sqnr_db = -20 log10(rel_l2): one tolerance expressed in both metrics.
    assert math.isclose(QUALITY_REL_L2_FACTOR, 10 ** (QUALITY_DB_DROP / 20))
    assert QUALITY_DB_DROP == 1.0 and QUALITY_REL_L2_FLOOR == 1e-5


def test_quality_loss_fails_as_correctness_and_gains_pass() -> None:
    stored = entry(0.6, quality={"rel_l2": 0.01, "sqnr_db": 40.0})
    lost = decide(comparison(0.6), stored, GPU, env=ENV, quality={"rel_l2": 0.02, "sqnr_db": 33.98})
    assert (lost.verdict, lost.outcome, lost.stage) == (Verdict.CORRECTNESS_FAIL, "fail", "quality")
    for part in (
        "rel_l2 0.01 -> 0.02",
        "tolerance 1.12x above a 1e-05 floor",
        "sqnr_db 40 -> 33.98 dB (down 6.02 dB; tolerance 1 dB",
        "--convperf-update-baselines=failed --convperf-reason=",
    ):
        assert part in lost.message
    # One metric alone is enough; each has the same tolerance.
    only_db = decide(comparison(0.6), stored, GPU, env=ENV, quality={"sqnr_db": 38.9})
    assert only_db.stage == "quality" and "rel_l2" not in only_db.message
    only_l2 = decide(comparison(0.6), stored, GPU, env=ENV, quality={"rel_l2": 0.0113})
    assert only_l2.stage == "quality"
    for fine in ({"rel_l2": 0.0111, "sqnr_db": 39.1}, {"rel_l2": 0.001, "sqnr_db": 60.0}):
        assert decide(comparison(0.6), stored, GPU, env=ENV, quality=fine).verdict is Verdict.PASS
    # Nothing stored, or nothing measured: not gated.
    assert decide(comparison(0.6), entry(0.6), GPU, env=ENV, quality={"rel_l2": 1.0}).verdict is Verdict.PASS
    assert decide(comparison(0.6), stored, GPU, env=ENV).verdict is Verdict.PASS


def test_quality_floor_and_infinities() -> None:
    tiny = entry(0.6, quality={"rel_l2": 1e-8, "sqnr_db": 160.0})
    rounding = decide(comparison(0.6), tiny, GPU, env=ENV, quality={"rel_l2": 9e-6, "sqnr_db": 100.9})
    assert rounding.verdict is Verdict.PASS
    over = decide(comparison(0.6), tiny, GPU, env=ENV, quality={"rel_l2": 2e-5, "sqnr_db": 94.0})
    assert over.stage == "quality"
    exact = entry(0.6, quality={"rel_l2": 0.0, "sqnr_db": math.inf})
    assert decide(
        comparison(0.6), exact, GPU, env=ENV, quality={"rel_l2": 0.0, "sqnr_db": math.inf}
    ).verdict is (Verdict.PASS)
    assert (
        decide(comparison(0.6), exact, GPU, env=ENV, quality={"rel_l2": 0.01, "sqnr_db": 40.0}).stage
        == "quality"
    )


def test_quality_loss_fails_even_when_the_timing_is_too_noisy_to_gate() -> None:
    stored = entry(0.6, noise=0.2, quality={"rel_l2": 0.01})
    noisy = decide(comparison(0.6, se=0.1), stored, GPU, env=ENV)
    assert noisy.verdict is Verdict.ADVISORY
    lost = decide(comparison(0.6, se=0.1), stored, GPU, env=ENV, quality={"rel_l2": 0.05})
    assert (lost.verdict, lost.outcome) == (Verdict.CORRECTNESS_FAIL, "fail")


def test_cpu_defaults_and_tolerance_override() -> None:
    cpu = default_policy("cpu")
    assert cpu.tolerance == CPU_TOLERANCE and cpu.noise_floor > GPU_NOISE_FLOOR
    assert default_policy("cuda", tolerance=0.07).tolerance == 0.07


def test_env_diff_ignores_keys_missing_on_one_side() -> None:
    assert env_diff({"torch": "2.11", "driver": "580"}, {"torch": "2.12"}) == {"torch": ("2.11", "2.12")}


def test_to_dict_is_json_ready() -> None:
    import json

    d = decision_of(comparison(0.7), entry(0.6), GPU, env=ENV, confirm=lambda n: comparison(0.7, n=n))
    data = json.loads(json.dumps(d.to_dict()))
    assert data["verdict"] == "FAIL" and data["confirm"]["n_rounds"] == 123


def test_env_from_facts_keeps_versions_and_driver_major() -> None:
    facts = {
        "torch": "2.11.0",
        "cuda": "13.0",
        "cudnn": 92400,
        "driver": "580.65.06",
        "gpu": "H100",
        "python": "3.12",
    }
    assert env_from_facts(facts) == {"torch": "2.11.0", "cuda": "13.0", "cudnn": "92400", "driver": "580"}
    assert env_from_facts({"torch": "2.11.0", "cuda": None}) == {"torch": "2.11.0"}


def test_noisy_check_still_fails_on_a_confirmed_gross_regression() -> None:
    noisy = entry(0.6, noise=0.05)
    # Nothing detected: ADVISORY, also when a suspect is cleared by the confirm stage.
    assert decide(comparison(0.6), noisy, GPU, env=ENV).verdict is Verdict.ADVISORY
    cleared = decision_of(comparison(0.6 * 1.3), noisy, GPU, env=ENV, confirm=lambda n: comparison(0.6, n=n))
    assert (cleared.verdict, cleared.stage) == (Verdict.ADVISORY, "mde")
    # 2x slower is far beyond the noise: confirmed FAIL, with the note that the check is noisy.
    gross = decision_of(comparison(1.2), noisy, GPU, env=ENV, confirm=lambda n: comparison(1.2, n=n))
    assert (gross.verdict, gross.outcome) == (Verdict.FAIL, "fail")
    assert "a noisy check" in gross.message
