"""Calibration re-centres a stored ratio on its runs when they agree with it, and never absorbs a change.

Why it matters: an entry recorded by one session carries its own error, noise^2 / ref_runs with
ref_runs 1, in every later gate's sigma; docs/statistics.md measures what pooling buys.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pytest

from pytest_convperf.baselines.calibration import (
    calibrate_records,
    code_difference,
    recentre,
    write_calibration,
)
from pytest_convperf.baselines.store import dump_text, read_file
from pytest_convperf.judge.entry import Entry, entry_digest

NOISE = 0.01
# Five runs around ln(0.5): median exactly ln(0.5), spread of the order of NOISE.
RUNS = [math.log(0.5) + d for d in (-0.01, 0.0, 0.01, 0.005, -0.005)]


def _entry(ratio: float, ref_runs: int = 1, **kw: object) -> Entry:
    return Entry(time_ratio=ratio, noise=NOISE, us_candidate=5.0, us_reference=10.0, ref_runs=ref_runs, **kw)  # type: ignore[arg-type]


def test_agreeing_runs_are_pooled_with_the_stored_ratio_by_their_counts() -> None:
    # 0.505 is 1 % above the runs' median: inside 2.576 x 1 % x sqrt(1 + 1/5).
    out = recentre(_entry(0.505), RUNS, NOISE, other_code=None)
    assert out.moved and out.ref_runs == 6
    # (1 x ln 0.505 + 5 x ln 0.5) / 6, by hand: 0.5 x 1.01^(1/6).
    assert out.time_ratio == pytest.approx(0.5 * 1.01 ** (1 / 6), rel=1e-9)
    assert "pooled with the 5 runs: 1 -> 6 runs" in out.why


def test_a_stored_ratio_with_more_runs_weighs_more() -> None:
    out = recentre(_entry(0.505, ref_runs=15), RUNS, NOISE, other_code=None)
    assert out.ref_runs == 20
    assert out.time_ratio == pytest.approx(0.5 * 1.01 ** (15 / 20), rel=1e-9)


@pytest.mark.parametrize("stored", [0.55, 0.505])  # far outside the noise, and inside it
def test_runs_of_other_code_never_move_the_ratio_and_say_why(stored: float) -> None:
    # The candidate may have changed: even a shift inside the noise, pooled night after night,
    # would ratchet into the baseline. A change is recorded by an update, with its review.
    recorded = _entry(stored, updated={"commit": "a1", "code": "a1"})
    out = recentre(recorded, RUNS, NOISE, other_code=code_difference(recorded, {"code": "b2"}))
    assert not out.moved and out.time_ratio == stored and out.ref_runs == 1
    assert "other code" in out.why and "--convperf-update-baselines" in out.why


def test_outside_git_the_ratio_is_recentred_and_says_why(tmp_path: Path) -> None:
    # Issue 38.4 (changes issue 24.4's choice to keep it): a recording made under load (0.299x) stayed
    # the centre while every run read 0.32-0.37x, so unchanged code read -8 to -18 %. Outside git
    # calibrate takes the runs as the recorded code (its contract) and says so.
    path = tmp_path / "box" / "m.yaml"
    path.parent.mkdir()
    path.write_text(
        dump_text("box", {"k": _entry(0.299, env={"torch": "2.11.0"}, updated={})}), encoding="utf-8"
    )
    runs = [math.log(r) for r in (0.32, 0.33, 0.34, 0.35, 0.36, 0.37)]
    check = _check(runs, commit="unused", seen=_seen(path))
    check["code"] = None  # updates.code_state outside git
    lines = write_calibration(str(path), "box", {"k": check})
    centre = math.exp(statistics.median(runs))
    assert read_file(path).entries["k"].time_ratio == pytest.approx(centre, rel=1e-3)
    assert "ratio replaced" in lines[0] and "recorded run was the outlier" in lines[0]
    assert "outside a git repository calibrate cannot see a code change" in lines[0]
    # A recording made in git, runs where git cannot say: nothing vouches for the runs; kept.
    recorded = _entry(0.299, updated={"commit": "a1", "code": "a1"})
    why = code_difference(recorded, {"code": None})
    assert why is not None and "ratio is kept" in why


def test_runs_of_the_recording_commit_replace_an_outlier_recording() -> None:
    # Same code: one recorded run against five that agree with each other; the one was the outlier.
    out = recentre(_entry(0.55), RUNS, NOISE, other_code=None)
    assert out.moved and out.time_ratio == pytest.approx(0.5) and out.ref_runs == 5
    assert "recorded run was the outlier" in out.why


def test_too_few_runs_do_not_move_the_ratio() -> None:
    out = recentre(_entry(0.505), RUNS[:2], NOISE, other_code=None)
    assert not out.moved and out.time_ratio == 0.505 and "too few" in out.why


def _seen(path: Path) -> list[str]:
    """What runs judged against the entry ``k`` now in ``path`` say in their history records."""
    return [str(entry_digest(read_file(path).entries["k"].to_yaml()))]


def _check(
    lns: list[float], mode: str | None = None, commit: str = "b2", *, seen: list[str]
) -> dict[str, object]:
    return {
        "entry_seen": seen,
        "code": commit,
        "device_kind": "cpu",
        "runs": len(lns),
        "sd": NOISE,
        "noise": NOISE,
        "ln_ratios": lns,
        "time_ratio": math.exp(sorted(lns)[len(lns) // 2]),
        "us": {"candidate": 5.0, "reference": 10.0},
        "env": {"torch": "2.11.0"},
        "timing": {"mode": mode} if mode else {},
    }


def test_write_calibration_pools_and_repeated_calibration_accumulates(tmp_path: Path) -> None:
    # Recorded and calibrated at code a1: agreeing runs pool, and a second calibration adds to it.
    path = tmp_path / "box" / "m.yaml"
    path.parent.mkdir()
    path.write_text(
        dump_text(
            "box", {"k": _entry(0.505, env={"torch": "2.11.0"}, updated={"commit": "a1", "code": "a1"})}
        ),
        encoding="utf-8",
    )
    lines = write_calibration(str(path), "box", {"k": _check(RUNS, commit="a1", seen=_seen(path))})
    entry = read_file(path).entries["k"]
    assert entry.ref_runs == 6 and entry.noise_runs == 5 and "pooled" in lines[0]
    write_calibration(str(path), "box", {"k": _check(RUNS, commit="a1", seen=_seen(path))})
    assert read_file(path).entries["k"].ref_runs == 11


@pytest.mark.parametrize(
    ("stored", "runs_mode", "runs_env"),
    [
        ({"mode": "graph"}, "cold", "2.11.0"),  # timed another way: not the same measurement
        ({}, None, "2.14.1"),  # another torch: the ratio may have moved for a reason
    ],
)
def test_runs_of_another_mode_or_env_update_the_noise_only(
    tmp_path: Path, stored: dict[str, str], runs_mode: str | None, runs_env: str
) -> None:
    path = tmp_path / "box" / "m.yaml"
    path.parent.mkdir()
    path.write_text(
        dump_text("box", {"k": _entry(0.505, env={"torch": "2.11.0"}, updated={"code": "a1"}, **stored)}),
        encoding="utf-8",
    )
    check = _check(RUNS, runs_mode, commit="a1", seen=_seen(path))
    check["env"] = {"torch": runs_env}
    lines = write_calibration(str(path), "box", {"k": check})
    entry = read_file(path).entries["k"]
    assert entry.time_ratio == 0.505 and entry.ref_runs == 1 and entry.noise_runs == 5
    assert "another mode or env" in lines[0]


def test_write_calibration_replaces_only_at_the_recording_code(tmp_path: Path) -> None:
    path = tmp_path / "box" / "m.yaml"
    path.parent.mkdir()
    stored = {"k": _entry(0.55, env={"torch": "2.11.0"}, updated={"commit": "a1", "code": "a1"})}
    path.write_text(dump_text("box", stored), encoding="utf-8")
    lines = write_calibration(str(path), "box", {"k": _check(RUNS, commit="b2", seen=_seen(path))})
    assert read_file(path).entries["k"].time_ratio == 0.55 and "other code" in lines[0]
    lines = write_calibration(str(path), "box", {"k": _check(RUNS, commit="a1+dirty", seen=_seen(path))})
    assert read_file(path).entries["k"].time_ratio == 0.55 and "other code" in lines[0]
    lines = write_calibration(str(path), "box", {"k": _check(RUNS, commit="a1", seen=_seen(path))})
    assert read_file(path).entries["k"].time_ratio == pytest.approx(0.5) and "outlier" in lines[0]


def test_code_state_ignores_baselines_and_reports_but_not_code(tmp_path: Path) -> None:
    from pytest_convperf.baselines.updates import code_state
    from pytest_convperf.core.config import ConvperfConfig
    from tools.ab_scratch import git

    git(tmp_path, "init", "-q")
    (tmp_path / "kernel.py").write_text("x = 1\n")
    (tmp_path / "baselines" / "box").mkdir(parents=True)
    (tmp_path / "baselines" / "box" / "m.yaml").write_text("a: 1\n")
    git(tmp_path, "add", "-A")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    head = git(tmp_path, "rev-parse", "--short", "HEAD").strip()
    cfg = ConvperfConfig(
        rootdir=tmp_path, baselines_dir=tmp_path / "baselines", report_dir=tmp_path / "report"
    )
    assert code_state(cfg) == head
    # Recording baselines (and writing a report) before calibrating does not make it other code ...
    (tmp_path / "baselines" / "box" / "m.yaml").write_text("a: 2\n")
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "history.jsonl").write_text("{}\n")
    assert code_state(cfg) == head
    # ... an uncommitted kernel edit does.
    (tmp_path / "kernel.py").write_text("x = 2\n")
    assert code_state(cfg) == f"{head}+dirty"


def _repo(tmp_path: Path) -> tuple[object, str]:
    """A repository with one committed kernel module; its config and HEAD."""
    from pytest_convperf.core.config import ConvperfConfig
    from tools.ab_scratch import git

    git(tmp_path, "init", "-q")
    (tmp_path / "kernel.py").write_text("x = 1\n")
    (tmp_path / ".gitignore").write_text("build/\n")
    git(tmp_path, "add", "-A")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    cfg = ConvperfConfig(rootdir=tmp_path, baselines_dir=tmp_path / "baselines", report_dir=None)
    return cfg, git(tmp_path, "rev-parse", "--short", "HEAD").strip()


def test_an_untracked_module_is_not_the_recorded_code(tmp_path: Path) -> None:
    # Issue 25.2: a candidate in an untracked module became 30 % slower and calibrate, seeing a
    # clean HEAD, re-centred the ratio onto the regression. An untracked file is code HEAD lacks.
    from pytest_convperf.baselines.updates import code_state

    cfg, head = _repo(tmp_path)
    (tmp_path / "convperf-update.md").write_text("# review record\n")  # what an update writes
    assert code_state(cfg) == head  # type: ignore[arg-type]
    (tmp_path / "fast_conv.py").write_text("def candidate(*a): ...\n")
    assert code_state(cfg) == f"{head}+dirty"  # type: ignore[arg-type]


def test_an_imported_ignored_module_is_not_the_recorded_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # git status does not list an ignored file; a module of this process loaded from one is still
    # code that no commit holds.
    import importlib
    import sys

    from pytest_convperf.baselines.updates import code_state

    cfg, head = _repo(tmp_path)
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "gen_conv.py").write_text("y = 1\n")
    assert code_state(cfg) == head  # type: ignore[arg-type]
    monkeypatch.syspath_prepend(str(tmp_path / "build"))
    importlib.import_module("gen_conv")
    try:
        assert code_state(cfg) == f"{head}+dirty"  # type: ignore[arg-type]
    finally:
        sys.modules.pop("gen_conv", None)
    # A committed module imported by this process is the recorded code.
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("kernel")
    try:
        assert code_state(cfg) == head  # type: ignore[arg-type]
    finally:
        sys.modules.pop("kernel", None)


def _records(entry: str | None, n: int = 5, *, code: str = "a1") -> list[list[dict[str, object]]]:
    """``n`` calibrate runs of check ``k`` at ratio ~1.01, each judged against ``entry`` (a digest)."""
    return [
        [
            {
                "ln_ratio": math.log(1.01) + d,
                "baselines_file": "f.yaml",
                "machine": "box",
                "key": "k",
                "device_kind": "cpu",
                "code": code,
                "entry": entry,
                "us": {"candidate": 10.1, "reference": 10.0},
                "env": {"torch": "2.11.0"},
            }
        ]
        for d in (-0.002, 0.0, 0.002, 0.001, -0.001)[:n]
    ]


def _write(path: Path, ratio: float, reason: str | None = None) -> Entry:
    updated = {"commit": "a1", "code": "a1", **({"reason": reason} if reason else {})}
    path.parent.mkdir(exist_ok=True)
    path.write_text(
        dump_text("box", {"k": _entry(ratio, env={"torch": "2.11.0"}, updated=updated)}), encoding="utf-8"
    )
    return read_file(path).entries["k"]


def test_calibrate_never_overwrites_an_entry_recorded_while_its_runs_went_on(tmp_path: Path) -> None:
    # Issue 25.2: beside an update, calibrate replaced that update's deliberately recorded 1.32 (with
    # a reason) by 1.01 from runs that began before it. The runs say which entry they were judged
    # against; the file must still hold it (compare-and-swap under the file's lock).
    path = tmp_path / "box" / "m.yaml"
    before = _write(path, 1.012)
    folded = calibrate_records(_records(entry_digest(before.to_yaml())))
    recorded = _write(path, 1.32, reason="the new tiling is slower on small shapes, accepted")
    lines = write_calibration(str(path), "box", folded["f.yaml"]["checks"])
    assert read_file(path).entries["k"] == recorded
    assert "not the one the runs were judged against" in lines[0] and "calibrate again" in lines[0]
    # The same runs against the entry still in the file do move it (same code, agreeing runs).
    folded = calibrate_records(_records(entry_digest(recorded.to_yaml())))
    write_calibration(str(path), "box", folded["f.yaml"]["checks"])
    assert read_file(path).entries["k"].time_ratio == pytest.approx(1.01, rel=1e-3)


def test_runs_judged_against_different_entries_or_none_known_write_nothing(tmp_path: Path) -> None:
    path = tmp_path / "box" / "m.yaml"
    now = _write(path, 1.012)
    runs = _records(entry_digest(now.to_yaml()), 3) + _records("0123456789abcdef", 2)  # changed mid-way
    for records in (runs, _records(None), [[{k: v for k, v in r[0].items() if k != "entry"}] for r in runs]):
        lines = write_calibration(str(path), "box", calibrate_records(records)["f.yaml"]["checks"])
        assert read_file(path).entries["k"] == now and "not written" in lines[0]
    # Runs of a check without an entry do not overwrite one an update created meanwhile ...
    path2 = tmp_path / "box" / "n.yaml"
    path2.write_text(dump_text("box", {}), encoding="utf-8")
    folded = calibrate_records(_records(None))["f.yaml"]["checks"]
    write_calibration(str(path2), "box", folded)
    assert read_file(path2).entries["k"].ref_runs == 5  # ... but create it when none came
    created = read_file(path2).entries["k"]
    write_calibration(str(path2), "box", folded)
    assert read_file(path2).entries["k"] == created


def test_a_new_entry_from_the_runs_keeps_the_median_runs_witness(tmp_path: Path) -> None:
    """Issue 36: the records carry the reference timed alone (``us.witness``); an entry calibrate
    creates keeps the median run's, so a later session reads the machine's move from it."""
    runs = _records(None)
    for i, run in enumerate(runs):
        run[0]["us"] = {"candidate": 10.1, "reference": 10.0, "witness": 9.0 + i}
    path = tmp_path / "box" / "w.yaml"
    path.parent.mkdir()
    path.write_text(dump_text("box", {}), encoding="utf-8")
    write_calibration(str(path), "box", calibrate_records(runs)["f.yaml"]["checks"])
    assert read_file(path).entries["k"].us_witness == 10.0  # the median ratio's run (d = 0.0)
    path.write_text(dump_text("box", {}), encoding="utf-8")
    write_calibration(str(path), "box", calibrate_records(_records(None))["f.yaml"]["checks"])
    assert read_file(path).entries["k"].us_witness is None  # records from before the witness
    # A bad witness in a record (history.jsonl is a file anyone can edit) leaves none, and the
    # entry written stays readable.
    for run in runs:
        run[0]["us"] = {"candidate": 10.1, "reference": 10.0, "witness": -3.0}
    path.write_text(dump_text("box", {}), encoding="utf-8")
    write_calibration(str(path), "box", calibrate_records(runs)["f.yaml"]["checks"])
    assert read_file(path).entries["k"].us_witness is None
