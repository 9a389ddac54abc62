"""Issue 36 item 1: the machine's between-session noise is learned from its judged sessions and used
by the gate where it exceeds the floor, with its degrees of freedom."""

from __future__ import annotations

import dataclasses
import json
import math
import random
from pathlib import Path

from pytest_convperf.core.results import Verdict
from pytest_convperf.judge.decision import LearnedNoise, entry_noise
from pytest_convperf.judge.entry import Entry
from pytest_convperf.judge.policy import decision_of
from pytest_convperf.judge.verdict import default_policy
from pytest_convperf.night.machine_noise import MIN_PAIRS, learn, machine_noise, noise_lines
from tests.unit.judge.test_decision_machine_drift import ENV, timed


def sessions(noise: float, *, checks: int = 10, runs: int = 20, seed: int = 3) -> list[dict[str, object]]:
    rng = random.Random(seed)
    out: list[dict[str, object]] = []
    for c in range(checks):
        for i in range(runs):
            out.append(
                {
                    "machine": "box",
                    "key": f"k{c}",
                    "device_kind": "cpu",
                    "verdict": "PASS",
                    "when": f"2026-11-01T{i:02d}:00:00+00:00",
                    "ln_ratio": math.log(0.5 + c) + rng.gauss(0, noise),
                    "se": 0.0,
                    "entry": f"e{c}",
                }
            )
    return out


def test_the_learned_noise_is_the_between_session_sd() -> None:
    learned = learn(sessions(0.03), "box", "cpu")
    assert learned is not None and learned.pairs == 10 * 19
    assert 0.025 < learned.sigma < 0.035 and 0.3 * learned.pairs < learned.df < 0.4 * learned.pairs
    assert learn(sessions(0.03), "other", "cpu") is None and learn(sessions(0.03), "box", "cuda") is None
    assert learn(sessions(0.03, checks=1, runs=MIN_PAIRS), "box", "cpu") is None  # too few pairs


def test_a_code_change_and_a_re_recording_do_not_count_as_noise() -> None:
    recs = sessions(0.01)
    for rec in recs:
        if rec["key"] == "k0" and str(rec["when"]) >= "2026-11-01T10":
            rec["ln_ratio"] = float(rec["ln_ratio"]) + math.log(1.5)  # one 50 % step
        if rec["key"] == "k1" and str(rec["when"]) >= "2026-11-01T10":
            rec["ln_ratio"], rec["entry"] = float(rec["ln_ratio"]) + 1.0, "e1-new"
    learned = learn(recs, "box", "cpu")
    assert learned is not None and learned.sigma < 0.015


def test_the_gate_uses_the_learned_noise_above_the_floor(tmp_path: Path) -> None:
    entry = Entry(time_ratio=3.0, noise=0.02, us_candidate=600.0, us_reference=200.0, env=ENV)
    cpu = default_policy("cpu")
    learned = LearnedNoise(0.08, 400, 148.0)
    noisy = dataclasses.replace(cpu, learned=learned)
    assert entry_noise(entry, noisy) == (0.08, 148.0)
    assert entry_noise(entry, dataclasses.replace(cpu, learned=LearnedNoise(0.01, 400, 148.0)))[0] == 0.02
    slower = timed(600.0 * 1.2, 200.0)  # 20 % slower, the reference where it was

    def confirm(n: int) -> object:
        return timed(600.0 * 1.2, 200.0, n=n)

    assert decision_of(slower, entry, cpu, env=ENV, confirm=confirm).verdict is Verdict.FAIL  # type: ignore[arg-type]
    assert decision_of(slower, entry, noisy, env=ENV, confirm=confirm).verdict is not Verdict.FAIL  # type: ignore[arg-type]
    # From a report folder: the header's line.
    (tmp_path / "history.jsonl").write_text("\n".join(json.dumps(r) for r in sessions(0.03)) + "\n")
    assert machine_noise(tmp_path, "box", "cpu") == learn(sessions(0.03), "box", "cpu")
    (line,) = noise_lines(tmp_path, "box", "cpu")
    assert line.startswith("convperf: machine noise ") and "(190 check-session pairs, df 70)" in line
    assert noise_lines(None, "box", "cpu") == [] and noise_lines(tmp_path / "none", "box", "cpu") == []
