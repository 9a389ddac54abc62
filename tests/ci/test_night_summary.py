"""scripts/night_summary.py on synthetic reports: counts per module, FAILs with ratio and noise, false
alarms against the expected FAILs of the planted night, the fresh confirm's cost, wall times."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.ci.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
ns = load_script(ROOT / "scripts" / "night_summary.py")


def _row(
    module: str, test: str, verdict: str, *, delta: float | None = None, message: str = ""
) -> dict[str, Any]:
    return {
        "key": f"{test}@p:forward",
        "nodeid": f"perf_tests/{module}.py::{test}",
        "module": module,
        "verdict": verdict,
        "message": message,
        "decision": {"delta": delta, "noise": 0.004} if delta is not None else {"noise": 0.004},
    }


ROWS = [
    _row("test_depthwise", "test_seed_shape[a-forward]", "FAIL", delta=0.118, message="FAIL (confirmed)\n"
         "(confirmed again in 2 fresh pytest process(es); in this process: ...)"),
    _row("test_depthwise", "test_seed_shape[a-input_grad]", "PASS"),
    _row("test_depthwise", "test_seed_shape[b-forward]", "SUSPECT", message="SUSPECT: ..."),
    _row("test_edsr", "test_edsr_depthwise_check[forward]", "FAIL", delta=0.031),
    _row("test_edsr", "test_fused", "NEW"),
    _row("test_pcilt", "test_tiled", "CORRECTNESS_FAIL"),
    _row("test_pcilt", "test_naive", "INCONCLUSIVE"),
]  # fmt: skip
NIGHT = {
    "method": "holm",
    "alpha": 0.05,
    "m": 6,
    "fails": ["x"],
    "cleared": ["y"],
    "summary": "false alarms: Holm",
}
LOG = (
    "...\n2 speed FAIL(s) confirmed again in up to 2 fresh pytest processes: "
    "2 still FAIL, 0 cleared in 41.5 s\n"
)
JUNIT = """<testsuites><testsuite>
<testcase classname="perf_tests.test_depthwise" name="a" time="10.5"/>
<testcase classname="perf_tests.test_depthwise" name="b" time="2.0"/>
<testcase classname="perf_tests.test_edsr" name="c" time="3.25"/>
</testsuite></testsuites>"""


def test_counts_fails_and_costs_per_module() -> None:
    s = ns.summarize(ROWS, NIGHT, log=LOG, junit=JUNIT)
    by = {m.module: m for m in s.modules}
    dw = by["test_depthwise"]
    assert (dw.checks, dw.verdicts["FAIL"], dw.verdicts["PASS"], dw.verdicts["SUSPECT"]) == (3, 1, 1, 1)
    assert dw.fresh_confirmed == 1 and dw.wall_s == 12.5
    (fail,) = dw.fails
    assert fail.ratio == pytest.approx(1.118) and fail.noise == 0.004 and not fail.expected
    assert (
        fail.check
        == "perf_tests/test_depthwise.py::test_seed_shape[a-forward] [test_seed_shape[a-forward]@p:forward]"
    )
    assert by["test_pcilt"].verdicts["other"] == 1 and by["test_pcilt"].verdicts["INCONCLUSIVE"] == 1
    assert by["test_pcilt"].wall_s is None
    assert s.checks == 7 and s.false_fails == 2 and s.missed == []
    assert s.fresh_confirm == {"todo": 2, "still": 2, "cleared": 0, "seconds": 41.5}
    assert s.night["method"] == "holm" and s.night["m"] == 6
    text = ns.text(s)
    assert "checks: 7; false FAILs: 2" in text
    assert "FAIL (FALSE ALARM) perf_tests/test_edsr.py::test_edsr_depthwise_check[forward]" in text
    assert "ratio 1.031x, noise 0.40%" in text


def test_the_planted_night_splits_expected_fails_from_false_alarms() -> None:
    s = ns.summarize(ROWS, NIGHT, expect_fail=["-forward]", "[forward]"])
    assert s.false_fails == 0  # both FAILs are forward checks
    (missed,) = s.missed
    assert missed == ns.check_label(ROWS[2]) + ": SUSPECT"
    assert s.fresh_confirm is None and "fresh confirm: none needed" in ns.text(s)


def test_main_writes_the_json_and_names_a_missing_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "report"
    report.mkdir()
    out = tmp_path / "night.json"
    assert ns.main([str(report), "--out", str(out)]) == 2
    assert "rows.json is missing: the pytest run wrote no report" in capsys.readouterr().err
    (report / "rows.json").write_text(json.dumps(ROWS))
    (report / "night.json").write_text(json.dumps(NIGHT))
    (tmp_path / "log").write_text(LOG)
    assert ns.main([str(report), "--log", str(tmp_path / "log"), "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["checks"] == 7 and data["fresh_confirm"]["seconds"] == 41.5
    assert "test_depthwise: 3 checks, PASS=1 FAIL=1 SUSPECT=1" in capsys.readouterr().out


def test_a_fail_keeps_its_kernel_diff_line() -> None:
    """What names the planted kernel, and what sets a changed kernel apart from a false alarm (issue 35)."""
    diff = "kernels changed since the baseline: fwd_tile_nchw_v2 calls 1 -> 2"
    rows = [
        _row(
            "test_depthwise",
            "t[a-forward]",
            "FAIL",
            delta=0.1,
            message=f"FAIL: 10 % slower\nnoise ...\n{diff}",
        ),
        _row("test_depthwise", "t[b-forward]", "FAIL", delta=0.1, message="FAIL: 10 % slower"),
    ]
    fails = ns.summarize(rows, {}).modules[0].fails
    assert [f.kernel_diff for f in fails] == [diff, ""]
