"""A corrupt or hand-broken baseline file stops the run with a UsageError naming the file, the entry
and the fix; the file is left byte for byte as it was (also when an update was asked for)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.integration._lifecycle import Suite

CASES: dict[str, tuple[Callable[[str], str], str]] = {
    "bad_yaml": (lambda t: t.replace("benchmarks:", "benchmarks: [", 1), "is not valid YAML"),
    "truncated": (lambda t: t[: len(t) // 2] + '\n  "unterminated: [1,', "is not valid YAML"),
    "unknown_schema": (lambda t: t.replace("schema: convperf/1", "schema: convperf/7"), "unknown schema"),
    "wrong_type": (
        lambda t: t.replace("time_ratio: 0.5", "time_ratio: '0.5x'"),
        "'time_ratio' must be a number",
    ),
    "duplicate_key": (
        lambda t: t.replace("    time_ratio: 0.5\n", "    time_ratio: 0.5\n    time_ratio: 0.9\n"),
        "duplicate key 'time_ratio' at line",
    ),
    "machine_mismatch": (
        lambda t: t.replace("machine: testbox", "machine: otherbox"),
        "machine 'otherbox' does not match its folder 'testbox'",
    ),
}


@pytest.fixture(scope="module")
def good_text(tmp_path_factory: pytest.TempPathFactory) -> str:
    from pytest_convperf.baselines.store import dump_text
    from pytest_convperf.judge.entry import Entry

    entry = Entry(
        time_ratio=0.5, noise=0.02, us_candidate=500.0, us_reference=1000.0, env={"torch": "2.11.0"}
    )
    key = "test_a[n1-ci4-h8-w8-co4-k3x3-s1-p1-d1-g1-fp32-nchw]"
    return dump_text("testbox", {key: entry})


@pytest.mark.parametrize("case", sorted(CASES))
def test_corrupt_file_stops_the_run_and_is_left_untouched(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    plugin_args: tuple[str, ...],
    good_text: str,
    case: str,
) -> None:
    suite = Suite(pytester, monkeypatch, plugin_args)
    mutate, expected = CASES[case]
    suite.file.parent.mkdir(parents=True)
    suite.file.write_text(mutate(good_text))
    before = suite.file.read_bytes()
    result = suite.run("--convperf-update-baselines=all", "--convperf-reason=x")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "ERROR: convperf baseline file" in err and str(suite.file) in err
    assert expected in err and "Fix:" in err and "left unchanged" in err
    if case == "wrong_type":
        assert "entry 'test_a[n1-ci4-h8-w8-co4-k3x3-s1-p1-d1-g1-fp32-nchw]'" in err
    assert suite.file.read_bytes() == before
