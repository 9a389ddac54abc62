"""Gate a paired comparison of two arbitrary callables (whole models, fused blocks) like a check.

``convperf.check`` takes a conv candidate and a ``Conv2dProblem``. A model-level comparison
(the stock network against the same network running our kernels) has no problem spec, so this
module times the pair with the plugin's public pieces (``timing.rounds.measure_pair`` on the
fixture's timer) and hands the comparison to ``convperf.gate``, the same last step as a check:
the baseline decision of docs/design.md §7, which fails a confirmed regression of the time ratio and passes
NEW/PASS/IMPROVED/ADVISORY with a note, and the one recorded result row.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from typing import Any

import torch

from perf_tests.models import phase_callables
from pytest_convperf.check.fixture import ConvperfFixture
from pytest_convperf.core.precision import ieee_fp32
from pytest_convperf.core.results import Comparison, ErrorStats
from pytest_convperf.correctness.tolerance import Ruling
from pytest_convperf.measure.rounds import StopRule, Workload, measure_pair

# Paired rounds need at least 6 kept rounds for a CI; the CPU gets a short rule.
PAIR_CPU_RULE: dict[str, Any] = {
    "min_rounds": 7,
    "max_time_s": 1.0,
    "warmup_min_calls": 1,
    "warmup_window": 2,
    "warmup_cap_s": 0.5,
}


def pair_rule(device: torch.device) -> dict[str, Any]:
    """Stop-rule overrides for :func:`gated_pair`: the plugin's defaults on a GPU, a short CPU rule."""
    return {} if device.type == "cuda" else PAIR_CPU_RULE


def gated_pair(
    convperf: ConvperfFixture,
    *,
    what: str,
    phase: str,
    candidate: Callable[[], object],
    reference: Callable[[], object],
    errors: Sequence[ErrorStats] = (),
    facts: Mapping[str, Any] | None = None,
    rule: Mapping[str, Any] | None = None,
    mode: str = "cold",
    ieee: bool = True,
) -> Comparison:
    """Time ``candidate`` against ``reference`` in paired rounds, record a row, decide on the item.

    ``what`` names the workload (e.g. ``mobilenet_v2-n8-224``; the row's ``problem``), ``phase``
    the part timed (``forward``/``backward``). ``errors`` are the candidate's correctness stats
    (checked by the caller; their drift is gated too). ``rule`` overrides the stop rule (the
    CPU defaults of ``perf_tests.models.rule_for``). ``ieee`` pins fp32 convs and matmuls to IEEE
    (TF32 off) on both sides while timing, like ``convperf.check`` does for fp32. Returns the comparison.
    """
    timer = convperf.timer
    the_rule = StopRule.for_timer(timer, **dict(rule or {}))
    base_facts: dict[str, Any] = {
        "machine": convperf.device.slug,
        "phase": phase,
        "tf32": "off" if ieee else "pytorch default",
        **dict(facts or {}),
    }

    def run(r: StopRule, extra: Mapping[str, Any]) -> Comparison:
        with ieee_fp32() if ieee else nullcontext():
            return measure_pair(
                timer,
                Workload("candidate", candidate),
                Workload("reference", reference),
                mode=mode,
                rule=r,
                facts={**base_facts, **extra},
            )

    first = run(the_rule, {})

    def confirm(n_rounds: int) -> Comparison:
        return run(the_rule.for_rounds(n_rounds, first.n_rounds), {"confirm_of_rounds": first.n_rounds})

    name = str(convperf.request.node.name)
    return convperf.gate(
        first,
        name=what,
        phase=phase,
        errors=errors,
        confirm=confirm,
        key=name if phase in name else f"{name}:{phase}",
        facts={k: v for k, v in base_facts.items() if isinstance(v, (str, int, float, bool, type(None)))},
    )


def gated_model_pair(
    convperf: ConvperfFixture,
    *,
    what: str,
    phase: str,
    candidate: torch.nn.Module,
    reference: torch.nn.Module,
    x: torch.Tensor,
    **kwargs: Any,
) -> Comparison:
    """:func:`gated_pair` of two whole models on input ``x``: their ``phase`` callables
    (``perf_tests.models.phase_callables``), under :func:`pair_rule` for ``x``'s device.
    ``kwargs`` go to :func:`gated_pair` (``errors``, ``facts``, ``ieee``)."""
    candidate_calls = phase_callables(candidate, x)
    reference_calls = phase_callables(reference, x)
    return gated_pair(
        convperf,
        what=what,
        phase=phase,
        candidate=candidate_calls[phase],
        reference=reference_calls[phase],
        rule=pair_rule(x.device),
        **kwargs,
    )


def ratio_line(label: str, comparison: Comparison, goal: tuple[str, str] | None = None) -> str:
    """A Markdown table row: label, candidate and reference medians, speedup with its 95 % CI; with
    ``goal`` = (goal, met/not met), the two cells of :data:`GOAL_RATIO_HEADER` after them."""
    low, high = comparison.speedup_ci
    noisy = " (noisy)" if comparison.noisy else ""
    line = (
        f"|{label}|{comparison.candidate.median * 1e3:.3f} ms|{comparison.reference.median * 1e3:.3f} ms|"
        f"{comparison.speedup:.3f}x [{low:.3f}, {high:.3f}]{noisy}|{comparison.n_rounds}|"
    )
    return line + (f"{goal[0]}|{goal[1]}|" if goal is not None else "")


RATIO_HEADER: tuple[str, str] = (
    "|Workload|Ours (median)|Stock PyTorch (median)|Speedup [95% CI]|Rounds|",
    "|:---|:---:|:---:|:---:|:---:|",
)
# RATIO_HEADER plus a speedup goal and whether this run met it (reported, not asserted).
GOAL_RATIO_HEADER: tuple[str, str] = (
    RATIO_HEADER[0] + "Goal (H100)|Goal met|",
    RATIO_HEADER[1] + ":---:|:---:|",
)


# Accuracy of a whole model against its fp64 copy, next to the stock model's (tolerance.Ruling).
ACCURACY_HEADER: tuple[str, str] = (
    "|Workload|Tensor|Ours max_abs|Stock max_abs|Ours rel_l2|Stock rel_l2|Fixed atol|Passed by|",
    "|:---|:---|---:|---:|---:|---:|---:|:---|",
)


def accuracy_lines(label: str, rulings: Sequence[Ruling]) -> list[str]:
    """Rows of :data:`ACCURACY_HEADER`: each tensor's errors, ours and stock's, and the rule that
    passed it (the fixed tolerance, or within 2x the stock model's own fp32 error) or FAIL."""
    lines = []
    for r in rulings:
        stock = r.reference
        cells = (
            f"{stock.max_abs:.3g}|" if stock else "-|",
            f"{stock.rel_l2:.3g}|" if stock else "-|",
        )
        passed = ("fixed tolerance" if not r.by_reference else "2x stock's own error") if r.ok else "FAIL"
        lines.append(
            f"|{label}|{r.apriori.name}|{r.apriori.max_abs:.3g}|{cells[0]}{r.apriori.rel_l2:.3g}|{cells[1]}"
            f"{r.apriori.atol:.3g}|{passed}|"
        )
    return lines
