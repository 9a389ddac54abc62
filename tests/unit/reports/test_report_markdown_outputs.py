"""Every Markdown output with a hostile test id and reason (issue 37.8): ``report.md`` (the job
summary), ``review``'s pull-request comment, ``convperf-update.md``, ``ab.md``, the session and cliff
sections and the nightly summary render no mention, reference, link, image or HTML, and a newline in
``--convperf-reason`` breaks no table and opens no code fence (tests/markdown_model.py's rules)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_convperf.ab.ab_report import markdown as ab_markdown
from pytest_convperf.ab.rule import ABResult
from pytest_convperf.baselines.update_record import render_update_md
from pytest_convperf.core.config import ConvperfConfig
from pytest_convperf.judge.cliffs import CliffChange, render_md
from pytest_convperf.judge.entry import Entry
from pytest_convperf.night.decide import night_markdown
from pytest_convperf.reports.report import markdown
from pytest_convperf.reports.review import file_section
from tests.ci.scripts import ROOT, load_script
from tests.markdown_model import assert_inert, table_cells
from tests.rows import check_row

ID = "test_x[a --> @octocat #1 [l](https://e.example) ![i](https://e.example/i.png) <img src=x>|`` \n```]"
REASON = "faster loads\n```\n| @octocat | #2 |\n![i](https://e.example/i.png)"


def _tables_keep_their_cells(md: str) -> None:
    rows = [line for line in md.splitlines() if line.startswith("|")]
    widths = {len(table_cells(r)) for r in rows if not r.startswith("|-")}
    assert len(widths) <= 1, md  # every row of every table has the header's cell count


def _check(md: str) -> None:
    assert_inert(md)
    _tables_keep_their_cells(md)
    assert "\n```\n" not in md.replace("```text", ""), "no fence opened by a reason"


def test_report_md() -> None:
    rows = [
        check_row({"key": ID, "module": "test_m", "verdict": v, "message": f"FAIL: {ID} slower\n{REASON}"})
        for v in ("FAIL", "PASS", "NEW")
    ]
    _check(markdown(rows))


def test_review_comment() -> None:
    old = {ID: {"time_ratio": 0.5, "env": {"torch": "@octocat"}}}
    new = {ID: {"time_ratio": 0.6, "env": {"torch": "2.1\n| x |"}, "updated": {"reason": REASON}}}
    _check("\n".join(file_section(f"baselines/m/{ID}.yaml", old, new)))


def test_update_record(tmp_path: Path) -> None:
    cfg = ConvperfConfig(
        enabled=True, update=frozenset({"new"}), baselines_dir=tmp_path, rootdir=tmp_path, reason=REASON
    )
    entry = Entry(0.5, 0.01, 5.0, 10.0, env={"torch": "@octocat #3"}, updated={"reason": REASON})
    per_file = {("box", "test_m"): {ID: (entry, None)}}
    md = render_update_md(cfg, per_file, [f"{ID} (test_m): in band"], [f"{ID} (m): {REASON}"], "c@x")
    _check(md)


def test_ab_md() -> None:
    result = ABResult("SLOWER", 1.2, (1.1, 1.3), "m", "confirm", 100, 0.02, 0.01)
    ab = {"a": "HEAD @octocat", "ref": "main\n```", "result": result.to_dict()}
    _check(ab_markdown([check_row({"key": ID, "facts": {"ab": ab}})]))


def test_session_and_cliff_sections() -> None:
    night = {"summary": "1 FAIL", "fails": [ID], "cleared": [ID], "adjusted": {ID: 0.01}}
    _check(night_markdown(night, [f"{ID} [h100]: step +12.0 %"]))
    change = CliffChange("pin", "box", "test_m", ID, "depthwise @x", ID, 0.8, 0.3, f"new {REASON}")
    _check("\n".join(render_md([change], REASON)))


def test_orphans_section(tmp_path: Path) -> None:
    from pytest_convperf.baselines.orphans import render_md as orphans_md

    _check("\n".join(orphans_md({("box", "test_m"): [ID, "@octocat"]}, tmp_path)))


def test_nightly_job_summary() -> None:
    nightly = load_script(ROOT / ".ci" / "nightly_verdicts.py")
    md = nightly.markdown(
        [(ID, "failed", REASON)],
        [{"nodeid": ID, "verdict": "FAIL", "message": REASON}],
        "1",
        {"summary": "s", "cleared": [ID], "change_points_new": [ID]},
    )
    _check(md)


@pytest.mark.parametrize("raw", [f"| {ID} | x |", "@octocat"])
def test_the_checks_catch_raw_text(raw: str) -> None:
    # Negative control: the same id written raw, as before issue 37.8, fails the checks.
    with pytest.raises(AssertionError):
        _check(f"| a | b |\n|---|---|\n{raw}")
