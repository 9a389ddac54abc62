"""The YAML store: round trips, validation of hand-broken files, atomic merges, concurrent writers."""

from __future__ import annotations

import multiprocessing
import re
from pathlib import Path

import pytest
import yaml

from pytest_convperf.baselines.store import (
    SCHEMA,
    Store,
    dump_text,
    merge_files,
    merge_into,
    read_file,
    validate_files,
)
from pytest_convperf.core.slugs import resolve_machine, slugify
from pytest_convperf.judge.entry import Entry, InvalidEntry, parse_entry

MACHINE = "nvidia-h100-80gb-hbm3"
KEY = "test_depthwise_forward[n16-ci32-h112-w112-co32-k3x3-s1-p1-d1-g32-fp32-nchw]"


def make_entry(ratio: float = 0.61, **kw: object) -> Entry:
    base: dict[str, object] = {
        "noise": 0.007,
        "us_candidate": 18.9,
        "us_reference": 31.0,
        "reference_backend": "CudaDepthwise2d",
        "env": {"torch": "2.11.0", "cuda": "13.0", "cudnn": "92400", "driver": "580"},
        "correctness": {"max_abs": 3.1e-6, "max_rel": 1.2e-6},
        "updated": {"commit": "a1b2c3d", "reason": "vectorized loads"},
    }
    base.update(kw)
    return Entry(time_ratio=ratio, **base)  # type: ignore[arg-type]


def write(tmp_path: Path, text: str, machine: str = MACHINE, module: str = "test_mod") -> Path:
    path = tmp_path / machine / f"{module}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_round_trip_matches_design_format(tmp_path: Path) -> None:
    entries = {KEY: make_entry(), "test_a[x]": make_entry(0.9, ref_runs=5, noise_runs=10, tolerance=0.03)}
    text = dump_text(MACHINE, entries)
    data = yaml.safe_load(text)
    assert list(data) == ["benchmarks", "machine", "schema"]  # sorted keys
    assert data["schema"] == SCHEMA and data["machine"] == MACHINE
    assert list(data["benchmarks"]) == sorted(entries)
    assert data["benchmarks"][KEY]["us"] == {"candidate": 18.9, "reference": 31.0}
    assert data["benchmarks"][KEY]["env"]["cuda"] == "13.0"  # a string, not the float 13.0
    assert not re.search(r"^\s*(date|time|timestamp|datetime|saved)\s*:", text, re.M)
    path = write(tmp_path, text)
    loaded = read_file(path)
    assert loaded.machine == MACHINE
    assert all(loaded.entries[k].same_values(v) for k, v in entries.items())
    # Re-dumping what was read gives the same bytes (no churn).
    assert dump_text(MACHINE, loaded.entries) == text


def test_missing_file_is_empty(tmp_path: Path) -> None:
    assert Store(tmp_path, MACHINE).get("test_mod", KEY) is None


GOOD = dump_text(MACHINE, {KEY: make_entry()})
CORRUPT = {
    "bad_yaml": (GOOD.replace("benchmarks:", "benchmarks: [", 1), ["not valid YAML", "line"]),
    "truncated": (GOOD[: len(GOOD) // 2] + '\n  "unterminated: [1,', ["not valid YAML"]),
    "unknown_schema": (GOOD.replace(SCHEMA, "convperf/9"), ["unknown schema 'convperf/9'", "upgrade"]),
    "wrong_type": (
        GOOD.replace("time_ratio: 0.61", "time_ratio: fast"),
        [f"entry {KEY!r}", "'time_ratio' must be a number", "'fast'"],
    ),
    "wrong_env_type": (GOOD.replace("driver: '580'", "driver: [580]"), ["'env.driver' must be a string"]),
    "negative": (GOOD.replace("time_ratio: 0.61", "time_ratio: -1"), ["must be > 0"]),
    "missing_field": (GOOD.replace("    noise: 0.007\n", ""), ["missing field 'noise'"]),
    "unknown_field": (
        GOOD.replace("noise: 0.007", "noise: 0.007\n    speed: 3"),
        ["unknown field(s) 'speed'"],
    ),
    "machine_mismatch": (
        GOOD.replace(f"machine: {MACHINE}", "machine: nvidia-a100-40gb"),
        ["machine 'nvidia-a100-40gb' does not match its folder", "move the file"],
    ),
    "not_a_mapping": ("- just\n- a list\n", ["top level must be a mapping"]),
    "tolerance_percent": (
        GOOD.replace("noise: 0.007", "noise: 0.007\n    tolerance: 5"),
        ["'tolerance' must be a fraction between 0 and 1", "0.02 means 2 %"],
    ),
}


@pytest.mark.parametrize("case", sorted(CORRUPT))
def test_corrupt_files_name_file_entry_and_fix_and_stay_untouched(tmp_path: Path, case: str) -> None:
    text, parts = CORRUPT[case]
    path = write(tmp_path, text)
    before = path.read_bytes()
    with pytest.raises(pytest.UsageError) as info:
        validate_files([path])
    msg = str(info.value)
    assert str(path) in msg and "Fix:" in msg and "left unchanged" in msg
    for part in parts:
        assert part in msg
    # A write into a corrupt file refuses as well and leaves the bytes as they were.
    with pytest.raises(pytest.UsageError):
        merge_into(path, MACHINE, {"test_other": make_entry()})
    assert path.read_bytes() == before
    assert not list(path.parent.rglob("*.tmp"))


def test_merge_keeps_other_entries_and_skips_identical_writes(tmp_path: Path) -> None:
    store = Store(tmp_path, MACHINE)
    assert store.write("test_mod", {"a": make_entry(0.5), "b": make_entry(0.6)})
    assert store.write("test_mod", {"b": make_entry(0.7)})
    entries = store.load("test_mod")
    assert set(entries) == {"a", "b"} and entries["b"].time_ratio == 0.7 and entries["a"].time_ratio == 0.5
    path = store.path("test_mod")
    mtime = path.stat().st_mtime_ns
    assert not store.write("test_mod", {"b": make_entry(0.70000001)})  # rounds to the stored value
    assert path.stat().st_mtime_ns == mtime


def _writer(args: tuple[str, int, int]) -> None:
    root, worker, count = args
    store = Store(Path(root), MACHINE)
    for i in range(count):
        store.write("test_mod", {f"w{worker}-{i}": make_entry(0.5 + i / 100)})


def test_two_concurrent_processes_lose_nothing(tmp_path: Path) -> None:
    count = 15
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=((str(tmp_path), w, count),)) for w in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    entries = Store(tmp_path, MACHINE).load("test_mod")
    assert set(entries) == {f"w{w}-{i}" for w in range(2) for i in range(count)}


def test_machine_slug_and_aliases() -> None:
    assert slugify("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    aliases = {"nvidia-h100-80gb-hbm3": "h100", "nvidia-h100-sxm5-80gb": "h100"}
    assert resolve_machine("nvidia-h100-80gb-hbm3", None, aliases) == "h100"
    assert resolve_machine("nvidia-h100-80gb-hbm3", "NVIDIA H100 SXM5 80GB", aliases) == "h100"
    assert resolve_machine("cpu-x", "my-box", aliases) == "my-box"


def test_merge_files_unions_and_reports_conflicts(tmp_path: Path) -> None:
    a = write(tmp_path / "a", dump_text(MACHINE, {"x": make_entry(0.5), "y": make_entry(0.6)}))
    b = write(tmp_path / "b", dump_text(MACHINE, {"y": make_entry(0.65), "z": make_entry(0.7)}))
    machine, merged, conflicts = merge_files([a, b])
    assert machine == MACHINE and set(merged) == {"x", "y", "z"} and conflicts == ["y"]
    assert merged["y"].time_ratio == 0.6
    _, merged2, _ = merge_files([a, b], prefer_last=True)
    assert merged2["y"].time_ratio == 0.65


def test_writes_leave_no_temp_files_and_only_the_ignored_lock_folder(tmp_path: Path) -> None:
    from pytest_convperf.core.files import LOCK_DIR

    Store(tmp_path, MACHINE).write("test_mod", {"a": make_entry()})
    assert sorted(p.name for p in (tmp_path / MACHINE).iterdir()) == [LOCK_DIR, "test_mod.yaml"]
    assert not list((tmp_path / MACHINE).rglob("*.tmp"))


def test_the_entry_stores_its_witness_and_old_entries_still_load() -> None:
    """Issue 36: the reference timed alone when recorded (``us.witness``, CPU) is kept; an entry
    without it loads with none, and a bad one or a stray key in ``us`` is refused by name."""
    raw = yaml.safe_load(yaml.safe_dump(make_entry(us_witness=180.123456).to_yaml()))
    assert raw["us"]["witness"] == 180.1
    assert parse_entry("k", raw).us_witness == 180.1
    del raw["us"]["witness"]
    assert parse_entry("k", raw).us_witness is None
    assert "witness" not in make_entry().to_yaml()["us"]
    for bad in (0, -1.0, "fast", float("nan")):
        with pytest.raises(InvalidEntry, match=r"us\.witness"):
            parse_entry("k", {**raw, "us": {**raw["us"], "witness": bad}})
    with pytest.raises(InvalidEntry, match=r"unknown key.*'alone'"):
        parse_entry("k", {**raw, "us": {**raw["us"], "alone": 1.0}})
