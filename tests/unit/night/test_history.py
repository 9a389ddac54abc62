"""Change points over history.jsonl: a known step is found with its commit and size, none is invented,
a step counts only after 3 runs, and the CLI prints lines and draws history.png."""

from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path

import pytest

from pytest_convperf.__main__ import main
from pytest_convperf.night.history import all_change_points, read_history, series_from_records

pytest.importorskip("ruptures")


def _records(
    ratios: list[float],
    *,
    key: str = "test_dw[x]",
    machine: str = "h100",
    verdicts: dict[int, str] | None = None,
) -> list[dict[str, object]]:
    verdicts = verdicts or {}
    return [
        {
            "when": f"2026-10-{1 + i // 24:02d}T{i % 24:02d}:00:00+00:00",
            "commit": f"c{i:03d}",
            "machine": machine,
            "key": key,
            "verdict": verdicts.get(i, "PASS"),
            "time_ratio": r,
            "ln_ratio": math.log(r),
        }
        for i, r in enumerate(ratios)
    ]


def _noisy(
    n: int, seed: int, *, step_at: int | None = None, step: float = 0.10, sd: float = 0.01
) -> list[float]:
    rng = random.Random(seed)
    return [
        0.6 * math.exp(rng.gauss(0, sd) + (math.log1p(step) if step_at is not None and i >= step_at else 0.0))
        for i in range(n)
    ]


def _write(path: Path, records: list[dict[str, object]]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.mark.parametrize("seed", range(5))
def test_a_known_step_is_found_at_its_commit_with_its_size(seed: int) -> None:
    cps = all_change_points(series_from_records(_records(_noisy(30, seed, step_at=20))))
    assert len(cps) == 1, [c.line() for c in cps]
    cp = cps[0]
    assert (cp.index, cp.commit, cp.n_before, cp.n_after) == (20, "c020", 20, 10)
    assert cp.ci[0] < 0.10 < cp.ci[1] and cp.ci[0] > 0.05
    assert not cp.new and "step +" in cp.line() and "at commit c020" in cp.line()


@pytest.mark.parametrize("seed", range(20))
def test_a_history_without_a_step_has_no_change_point(seed: int) -> None:
    assert all_change_points(series_from_records(_records(_noisy(40, seed)))) == []


def test_a_step_counts_once_it_persists_three_runs() -> None:
    base = _noisy(20, 1)
    for nights_after, expected in ((1, 0), (2, 0), (3, 1)):
        ratios = base + [0.6 * 1.15] * nights_after
        cps = all_change_points(series_from_records(_records(ratios)))
        assert len(cps) == expected, (nights_after, [c.line() for c in cps])
    (cp,) = cps
    assert cp.new and cp.commit == "c020" and "NEW in this run" in cp.line()


def test_a_single_outlier_night_is_not_a_step() -> None:
    ratios = _noisy(30, 3)
    ratios[15] *= 1.3
    assert all_change_points(series_from_records(_records(ratios))) == []


def test_unusable_runs_are_left_out_and_checks_kept_apart() -> None:
    recs = _records(_noisy(24, 2, step_at=12), verdicts={5: "INCONCLUSIVE"}) + _records(
        _noisy(24, 4), key="other"
    )
    series = series_from_records(recs)
    assert len(series[("h100", "test_dw[x]")]) == 23 and len(series[("h100", "other")]) == 24
    assert [c.key for c in all_change_points(series)] == ["test_dw[x]"]


def test_cli_prints_one_line_per_change_point_and_draws_the_plot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    recs = _records(_noisy(30, 0, step_at=20)) + _records(_noisy(30, 1), key="flat")
    d = _write(tmp_path / "rep", recs)
    assert main(["history", str(d)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len([line for line in out if "step" in line]) == 1 and "test_dw[x] [h100]" in out[0]
    assert (d / "history.png").stat().st_size > 0


def test_cli_errors_name_the_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["history", str(tmp_path), "--no-plot"]) == 2
    assert "history.jsonl not found" in capsys.readouterr().err
    # A bad line is named (file, line, why) and skipped; the rest of the history is used (issue 25.3).
    (tmp_path / "history.jsonl").write_text('{"key": 1}\nnot json\n')
    assert main(["history", str(tmp_path), "--no-plot"]) == 0
    out = capsys.readouterr().out
    assert "history.jsonl:1: no key (a non-empty string); line skipped" in out
    assert "history.jsonl:2: not JSON (JSONDecodeError" in out and "no change points in 0 checks" in out


def test_without_ruptures_the_command_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = _write(tmp_path, _records(_noisy(30, 0, step_at=20)))
    monkeypatch.setitem(sys.modules, "ruptures", None)
    with pytest.raises(ImportError, match=r"pip install 'pytest-convperf\[history\]'"):
        all_change_points(read_history(d)[0])


@pytest.mark.parametrize("seed", range(20))
def test_the_prefix_sum_cost_segments_as_ruptures_l2_does(seed: int) -> None:
    # The speed-up (O(1) per segment) must not move a single breakpoint: PELT with ruptures' own
    # CostL2 on the same series, penalty and minimum size.
    import numpy as np
    import ruptures

    from pytest_convperf.night.history import PENALTY, breakpoints, night_sigma

    rng = random.Random(seed)
    n = rng.randrange(8, 120)
    values = [math.log(0.5) + rng.gauss(0, 0.01) for _ in range(n)]
    for _ in range(rng.randrange(0, 4)):
        at, size = rng.randrange(n), rng.choice([-1, 1]) * rng.uniform(0.01, 0.1)
        values[at:] = [v + size for v in values[at:]]
    if seed % 5 == 0:
        values = [values[0]] * n  # flat: sigma at its floor
    sigma = night_sigma(values)
    own = ruptures.Pelt(model="l2", min_size=3, jump=1).fit(np.asarray(values))
    expected = [int(e) for e in own.predict(pen=PENALTY * sigma * sigma * math.log(n))[:-1]] if n >= 6 else []
    assert breakpoints(values) == expected
