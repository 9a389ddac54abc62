"""Monte-Carlo nights through the real decision path: fake timer -> measure_pair -> decision_of -> control.

Simulates whole nights of the decision rule (docs/design.md §7), judged by
:mod:`pytest_convperf.night.multiplicity`, under this noise model. Per check, one measurement is ``n``
paired rounds of ``ln(t_cand / t_ref) = mu + drift + b + e_i``:

- ``b`` is the per-process offset, ``sb * t5`` (unit variance), drawn for every screen; the
  in-process confirm keeps it, and a FAIL is confirmed again in a fresh process with its own
  offset (``confirm_offset="fresh"``, the plugin's default ``--convperf-confirm=fresh``) or not
  (``"shared"``: ``--convperf-confirm=process``);
- ``e_i ~ N(0, cw)`` with 5 % outliers of 5x scale, skewed slow (70 % positive);
- ``cw ~ U(0.01, cw_hi)`` and the true between-run SD ``sb ~ U(0.003, sb_hi)`` per check.

The stored entry is what the project really makes: ``time_ratio`` the median of the ``ref_runs``
runs of the recording session (each run's median as ``measure_pair`` takes it, over AB/BA
pairs), ``noise`` from ``noise_runs`` calibration runs by
:func:`~pytest_convperf.baselines.calibration.noise_of`, floored (so it is mis-estimated by sampling alone),
and the ratio pooled with the calibration runs by :func:`~pytest_convperf.baselines.calibration.recentre`
(``recentre``). The truth is the unchanged ratio (ln 0), so the stored ratio's own error is
real. On top: ``misestimated`` of the checks got noisier since calibration (their true
``sb`` is ``noise_factor`` x what calibration saw), and every check drifts slowly since its
baseline (at most ``max_drift``, under the tolerance: still not a regression). A false FAIL is a
FAIL of a check whose true slowdown is within its tolerance.

The timer is :class:`~pytest_convperf.measure.fake.FakeTimer` replaying these durations through
:func:`~pytest_convperf.measure.rounds.measure_pair` with a fixed number of rounds (the adaptive
stop would only add rounds), so the Comparison, ``policy.decision_of`` with its confirm callback and
``multiplicity.control`` are the code a session runs. Run ``python -m tools.nightsim``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from pytest_convperf.baselines.calibration import noise_of, recentre, spike_free
from pytest_convperf.core.options import METHODS, Method
from pytest_convperf.core.results import Comparison, Verdict
from pytest_convperf.core.stats import MIN_CROSSOVER_UNITS
from pytest_convperf.judge.decision import Policy
from pytest_convperf.judge.entry import Entry
from pytest_convperf.judge.outcome import Decision
from pytest_convperf.judge.policy import decision_of
from pytest_convperf.judge.verdict import default_policy
from pytest_convperf.measure.fake import FakeTimer
from pytest_convperf.measure.rounds import measure_pair
from pytest_convperf.measure.rule import StopRule
from pytest_convperf.night.fresh_confirm import FRESH_PROCESSES, across_processes
from pytest_convperf.night.multiplicity import control

REF_SECONDS = 1e-3
# Warm-up of the fake timer: its three minimum calls and one window, then the cap (0 s) stops it.
_RULE = StopRule(warmup_window=1, warmup_cap_s=0.0, max_time_s=math.inf)


@dataclass(frozen=True)
class Scenario:
    """Noise of one kind of night (defaults: the reference sim's nominal GPU runner)."""

    name: str = "nominal"
    checks: int = 500
    rounds: int = 21
    cw_hi: float = 0.03
    sb_hi: float = 0.015
    ref_runs: int = 1
    noise_runs: int = 10
    recentre: bool = True
    confirm_offset: str = "fresh"
    fresh_processes: int = FRESH_PROCESSES
    misestimated: float = 0.2
    noise_factor: float = 2.0
    max_drift: float = 0.01
    nights_per_suite: int = 50
    device: str = "cuda"


@dataclass
class Tally:
    """Per method: nights with any false FAIL, false FAILs in all, first-night detections."""

    nights: int = 0
    false_nights: dict[str, int] = field(default_factory=dict)
    false_fails: dict[str, int] = field(default_factory=dict)
    detected: dict[str, int] = field(default_factory=dict)
    regressed_nights: int = 0
    gated: int = 0
    family: int = 0
    seconds: float = 0.0


def _noise(rng: np.random.Generator, shape: tuple[int, ...], cw: float) -> np.ndarray:
    e = cw * rng.standard_normal(shape)
    out = rng.random(shape) < 0.05
    sign = rng.choice(np.array([-1.0, 1.0]), shape, p=[0.3, 0.7])
    outliers = out * np.abs(rng.standard_normal(shape)) * 5 * cw * sign
    total: np.ndarray = e + outliers
    return total


class _Check:
    """One check of a suite: its true noise, its stored entry, its drift."""

    def __init__(self, rng: np.random.Generator, sc: Scenario, floor: float) -> None:
        self.cw = float(rng.uniform(0.01, sc.cw_hi))
        seen_sb = float(rng.uniform(0.003, sc.sb_hi))
        self.sb = seen_sb * (sc.noise_factor if rng.random() < sc.misestimated else 1.0)
        ref = self.run_medians(rng, sc.ref_runs, sc.rounds, seen_sb)
        cal = [float(x) for x in self.run_medians(rng, sc.noise_runs, sc.rounds, seen_sb)]
        noise = noise_of(cal, floor)
        self.entry = Entry(
            time_ratio=math.exp(float(np.median(ref))),
            noise=noise,
            us_candidate=REF_SECONDS * 1e6,
            us_reference=REF_SECONDS * 1e6,
            noise_runs=len(spike_free(cal)),  # as calibrate stores it
            ref_runs=sc.ref_runs,
        )
        if sc.recentre:
            centre = recentre(self.entry, cal, noise, other_code=None)
            self.entry = replace(self.entry, time_ratio=centre.time_ratio, ref_runs=centre.ref_runs)
        self.drift_rate = float(rng.uniform(-sc.max_drift, sc.max_drift)) / sc.nights_per_suite

    def offset(self, rng: np.random.Generator) -> float:
        """One process's offset of the log ratio (the true, possibly mis-estimated, ``sb``)."""
        return float(self.sb * rng.standard_t(5) / math.sqrt(5 / 3))

    def run_medians(self, rng: np.random.Generator, runs: int, n: int, sb: float) -> np.ndarray:
        """Median log ratio of ``runs`` runs of ``n`` rounds at mu = 0, each with its own offset
        (one batch of draws: the calibration of 500 checks is most of a night's cost otherwise)."""
        b = sb * rng.standard_t(5, size=(runs, 1)) / math.sqrt(5 / 3)
        return _paired_medians(b + _noise(rng, (runs, n), self.cw))


def _paired_medians(lr: np.ndarray) -> np.ndarray:
    """Each row's median log ratio as ``measure_pair`` takes it (``stats.paired_summary``): over
    the means of its AB/BA pairs of rounds, or its rounds when under 6 pairs are whole."""
    pairs = lr.shape[1] // 2
    if pairs < MIN_CROSSOVER_UNITS:
        return np.asarray(np.median(lr, axis=1))
    units = 0.5 * (lr[:, 0 : 2 * pairs : 2] + lr[:, 1 : 2 * pairs : 2])
    return np.asarray(np.median(units, axis=1))


def measure(rng: np.random.Generator, check: _Check, mu: float, rounds: int, offset: float) -> Comparison:
    """One paired measurement through the fake timer and ``measure_pair`` at a process ``offset``."""
    # Warm-up samples are drawn from the same process, then exactly ``rounds`` timed rounds.
    total = rounds + _RULE.warmup_min_calls + _RULE.warmup_window
    ln = mu + offset + _noise(rng, (total,), check.cw)
    cand = REF_SECONDS * np.exp(ln)

    def times(name: str, index: int) -> float:
        return float(cand[index]) if name == "candidate" else REF_SECONDS

    rule = StopRule(**{**_RULE.__dict__, "min_rounds": rounds, "max_rounds": rounds})
    return measure_pair(FakeTimer(times, call_jobs=False), _noop, _noop, mode="warm", rule=rule)


def _noop() -> None:
    return None


def judge_check(
    rng: np.random.Generator, check: _Check, mu: float, sc: Scenario, policy: Policy
) -> tuple[Decision, Decision]:
    """One check as the plugin judges it: (in this process, after the fresh-process confirm).

    Screen and confirm in one process (one offset): what ``--convperf-false-alarms=none`` decides
    on. Under ``confirm_offset="fresh"`` a FAIL is decided again with the mean of
    ``fresh_processes`` fresh-process confirms (``fresh_confirm.rejudge``: the same rule)."""
    b = check.offset(rng)
    first = measure(rng, check, mu, sc.rounds, b)
    here = decision_of(first, check.entry, policy, confirm=lambda n: measure(rng, check, mu, n, b))
    if sc.confirm_offset != "fresh" or here.verdict is not Verdict.FAIL:
        return here, here
    n = policy.confirm_factor * sc.rounds
    fresh = across_processes(
        [measure(rng, check, mu, n, check.offset(rng)) for _ in range(sc.fresh_processes)]
    )
    return here, decision_of(first, check.entry, policy, confirm=lambda _n: fresh)


def label(method: Method, alpha: float) -> str:
    """Tally key: ``holm@0.01``; the per-check rule alone is ``none``."""
    return "none" if method == "none" else f"{method}@{alpha:g}"


def run_nights(
    nights: int,
    scenario: Scenario,
    *,
    slowdown: float = 0.0,
    alphas: Sequence[float] = (0.01,),
    methods: Sequence[Method] = METHODS,
    seed: int = 2026,
    policy: Policy | None = None,
    progress: Callable[[int, Tally], None] | None = None,
) -> Tally:
    """Simulate ``nights``; with ``slowdown`` > 0 one random gateable check per night regresses by it."""
    rng = np.random.default_rng(seed)
    policy = policy or default_policy(scenario.device)
    tol = math.log1p(policy.tolerance)
    tally = Tally(nights=nights)
    labels = [(m, a, label(m, a)) for m in methods for a in (alphas if m != "none" else alphas[:1])]
    for _, _, name in labels:
        tally.false_nights[name] = tally.false_fails[name] = tally.detected[name] = 0
    start = time.perf_counter()
    suite: list[_Check] = []
    for night in range(nights):
        age = night % scenario.nights_per_suite
        if age == 0:
            suite = [_Check(rng, scenario, policy.noise_floor) for _ in range(scenario.checks)]
        bad = int(rng.integers(len(suite))) if slowdown > 0 else -1
        verdicts: dict[str, tuple[str, float | None]] = {}
        alone: dict[str, tuple[str, float | None]] = {}
        truly_slower: set[str] = set()
        for j, check in enumerate(suite):
            # The truth is relative to the unchanged ratio (ln 0), not to the stored estimate of it.
            mu = check.drift_rate * age
            if j == bad:
                mu += math.log1p(slowdown)
            key = f"c{j}"
            if mu > tol:
                truly_slower.add(key)
            here, final = judge_check(rng, check, mu, scenario, policy)
            verdicts[key] = (final.verdict.value, final.p_value)
            alone[key] = (here.verdict.value, here.p_value)  # "none": no fresh-process confirm
        tally.gated += sum(v in ("PASS", "FAIL", "IMPROVED") for v, _ in verdicts.values())
        for m, a, name in labels:
            judged = alone if m == "none" else verdicts
            night_ctl = control(judged, method=m, alpha=a, per_check_alpha=1 - policy.confirm_q)
            false = [k for k in night_ctl.fails if k not in truly_slower]
            tally.false_nights[name] += bool(false)
            tally.false_fails[name] += len(false)
            tally.detected[name] += f"c{bad}" in night_ctl.fails
            tally.family = night_ctl.m
        tally.regressed_nights += bad >= 0
        if progress is not None:
            tally.seconds = time.perf_counter() - start
            progress(night + 1, tally)
    tally.seconds = time.perf_counter() - start
    return tally


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.nightsim", description=__doc__)
    parser.add_argument("--nights", type=int, default=1000)
    parser.add_argument("--checks", type=int, default=500)
    parser.add_argument(
        "--alpha", type=float, nargs="+", default=[0.01, 0.05, 0.25], help="night-wide levels to tally"
    )
    parser.add_argument("--slowdown", type=float, default=0.0, help="one check per night slower by this")
    parser.add_argument("--scenario", choices=("quiet", "nominal", "harsh"), default="nominal")
    parser.add_argument("--noise-runs", type=int, default=10, help="calibration runs behind each noise")
    parser.add_argument(
        "--ref-runs", type=int, default=1, help="runs of the recording session behind a ratio"
    )
    parser.add_argument(
        "--no-recentre", action="store_true", help="keep the recorded ratio (calibrate before it pooled)"
    )
    parser.add_argument(
        "--confirm-offset",
        choices=("shared", "fresh"),
        default="fresh",
        help="fresh: a FAIL is confirmed again in a fresh process (--convperf-confirm=fresh, the default); "
        "shared: the in-process confirm alone (--convperf-confirm=process)",
    )
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--every", type=int, default=50, help="print the running figures every N nights")
    args = parser.parse_args(argv)
    hi = {"quiet": (0.02, 0.0075), "nominal": (0.03, 0.015), "harsh": (0.05, 0.03)}[args.scenario]
    sc = Scenario(
        name=args.scenario,
        checks=args.checks,
        cw_hi=hi[0],
        sb_hi=hi[1],
        noise_runs=args.noise_runs,
        ref_runs=args.ref_runs,
        recentre=not args.no_recentre,
        confirm_offset=args.confirm_offset,
    )
    print(f"scenario {sc}, alpha {args.alpha}, seed {args.seed}", flush=True)

    def show(done: int, t: Tally) -> None:
        if done % args.every and done != args.nights:
            return
        print(
            f"{done} nights x {sc.checks} checks, family {t.family}, gated (not ADVISORY) "
            f"{t.gated / (done * sc.checks):.2f}, {t.seconds:.0f} s"
        )
        for m in t.false_nights:
            line = (
                f"  {m:9s} nights with a false FAIL {t.false_nights[m] / done:.4f} "
                f"({t.false_nights[m]}/{done}); false FAILs {t.false_fails[m]}"
            )
            if t.regressed_nights:
                line += (
                    f"; {args.slowdown:.0%} regression caught on night 1: "
                    f"{t.detected[m] / t.regressed_nights:.3f} ({t.detected[m]}/{t.regressed_nights})"
                )
            print(line, flush=True)

    run_nights(args.nights, sc, slowdown=args.slowdown, alphas=args.alpha, seed=args.seed, progress=show)
    return 0


if __name__ == "__main__":
    sys.exit(main())
