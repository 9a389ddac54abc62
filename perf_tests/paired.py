"""The suite's paired model checks and their report tables.

A model-level comparison (the stock network against the same network running our kernels) is the
plugin's public paired check, :func:`pytest_convperf.check_pair` (timed like a check, under the
timing slot, then ``convperf.judge``); :func:`check_model_pair` gives it a model's phase callables
and the suite's CPU stop rule. The rest formats the Markdown rows of ``models.md``/``edsr.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from perf_tests.models import phase_callables
from pytest_convperf import Comparison, ConvperfFixture, Ruling, check_pair

# Paired rounds need at least 6 kept rounds for a CI; the CPU gets a short rule.
PAIR_CPU_RULE: dict[str, Any] = {
    "min_rounds": 7,
    "max_time_s": 1.0,
    "warmup_min_calls": 1,
    "warmup_window": 2,
    "warmup_cap_s": 0.5,
}


def pair_rule(device: torch.device) -> dict[str, Any]:
    """Stop-rule overrides for ``check_pair``: the plugin's defaults on a GPU, a short CPU rule."""
    return {} if device.type == "cuda" else PAIR_CPU_RULE


def check_model_pair(
    convperf: ConvperfFixture,
    *,
    name: str,
    phase: str,
    candidate: torch.nn.Module,
    reference: torch.nn.Module,
    x: torch.Tensor,
    **kwargs: Any,
) -> Comparison:
    """:func:`pytest_convperf.check_pair` of two whole models on input ``x``: their ``phase``
    callables (``perf_tests.models.phase_callables``), under :func:`pair_rule` for ``x``'s device.
    ``kwargs`` go to ``check_pair`` (``errors``, ``facts``, ``ieee``)."""
    candidate_calls = phase_callables(candidate, x)
    reference_calls = phase_callables(reference, x)
    return check_pair(
        convperf,
        name=name,
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
