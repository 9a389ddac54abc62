"""The decisions' text (``judge/messages.py``), apart from the rule: the branches a message takes
(a noisy check's caveat, an advisory, the bits lost). The rule's own messages in a decision:
``tests/unit/judge/test_verdict.py``."""

from __future__ import annotations

import math

from pytest_convperf.judge import messages
from pytest_convperf.judge.verdict import default_policy
from tests.unit.judge.test_verdict import comparison

GPU = default_policy("cuda")


def test_a_confirmed_fail_says_how_noisy_the_check_is_only_when_it_is() -> None:
    quiet = messages.fail_confirmed(GPU, "conf", 30, "screen", None)
    assert quiet.startswith(
        f"FAIL (confirmed): slower than the baseline by more than {GPU.tolerance * 100:.1f} %"
    )
    assert "noisy" not in quiet and "screen (30 rounds): screen" in quiet
    assert quiet.endswith("--convperf-update-baselines --convperf-reason=...")
    assert messages.fail_confirmed(GPU, "c", 3, "s", 0.25).endswith(
        "(a noisy check: it catches only slowdowns over 25.0 %)"
    )
    assert messages.fail_confirmed(GPU, "c", 3, "s", 1.5).endswith(
        "(a noisy check: it cannot catch a slowdown under 2x)"
    )


def test_a_pass_with_an_advisory_leads_with_the_advisory() -> None:
    assert messages.passed("within noise", None) == "PASS: within noise"
    assert messages.passed("within noise", "ADVISORY: too noisy") == "ADVISORY: too noisy; within noise"


def test_correctness_drift_counts_the_bits_lost() -> None:
    text = messages.correctness_drift("output", 4e-3, 1e-3, 1e-2, 2.0)
    assert "max_abs 0.004 is over 2x the stored 0.001" in text and "about 2.0 bits lost" in text
    assert f"about {math.inf:.1f} bits lost" in messages.correctness_drift("output", 1e-3, 0.0, 1e-2, 2.0)


def test_a_new_check_names_strict_only_under_strict() -> None:
    c = comparison(0.8)
    assert messages.new_check(c, strict=False).startswith(f"NEW: no baseline entry; speedup {c.speedup:.3f}x")
    assert "--convperf-strict" not in messages.new_check(c, strict=False)
    assert "--convperf-strict fails checks without a baseline" in messages.new_check(c, strict=True)
