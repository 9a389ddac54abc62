""".ci/regression_issues.py (issue 27.5): one issue per kept FAIL, deduplicated by check, commented
while it fails, closed when the check passes again; a check that did not run keeps its issue."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.ci.scripts import ROOT, load_script

issues_script = load_script(ROOT / ".ci" / "regression_issues.py")


def row(key: str, verdict: str, machine: str = "h100") -> dict[str, Any]:
    return {
        "machine": machine,
        "module": "test_dw",
        "key": key,
        "verdict": verdict,
        "message": "FAIL: 12 % slower; kernels moved: dw_fwd_v3 (0.9 -> 0.0 share), dw_fwd_v1 (new)",
        "comparison": {"time_ratio": 0.56, "time_ratio_ci": [0.55, 0.57]},
        "baseline": {"time_ratio": 0.5},
    }


def issue(number: int, check: str) -> dict[str, Any]:
    return {
        "number": number,
        "title": f"convperf regression: {check}",
        "body": f"<!-- convperf-check: {check} -->\n",
    }


def test_open_comment_close_and_leave_alone() -> None:
    rows = [row("new_fail", "FAIL"), row("old_fail", "FAIL"), row("fixed", "PASS"), row("cleared", "SUSPECT")]
    open_issues = [
        issue(7, "h100 | test_dw::old_fail"),
        issue(8, "h100 | test_dw::fixed"),
        issue(9, "h100 | test_dw::not_run_tonight"),
        issue(10, "a100 | test_dw::fixed"),  # the same check on another machine: its own issue
    ]
    actions = issues_script.plan(rows, open_issues, commit="abc123", run_url="https://ci/run/1")
    got = {(a.kind, a.check, a.number) for a in actions}
    assert got == {
        ("open", "h100 | test_dw::new_fail", None),
        ("comment", "h100 | test_dw::old_fail", 7),
        ("close", "h100 | test_dw::fixed", 8),
    }
    opened = next(a for a in actions if a.kind == "open")
    assert opened.title == "convperf regression: test_dw::new_fail [h100]"
    assert opened.body.startswith("<!-- convperf-check: h100 | test_dw::new_fail -->")
    assert "kernels moved: dw_fwd_v3" in opened.body and "https://ci/run/1" in opened.body
    assert "speedup 1.786x (95 % CI 1.754 .. 1.818), baseline 2.000x" in opened.body
    # The marker of the opened issue finds it the next night: a comment, not a second issue.
    again = issues_script.plan(
        [row("new_fail", "FAIL")],
        [{"number": 11, "title": opened.title, "body": opened.body}],
        commit="def",
        run_url="u",
    )
    assert [(a.kind, a.number) for a in again] == [("comment", 11)]


HOSTILE = "test_x[a --> @octocat #1 [l](https://e.example) ![i](https://e.example/i.png)\n| ```]"


def test_a_hostile_id_renders_inert_and_finds_its_issue_the_next_night() -> None:
    # Issue 37.8: ``-->`` ended the hidden marker early, so the mention, reference, link and image
    # after it rendered, and the next night opened a second issue instead of commenting.
    from tests.markdown_model import assert_inert

    bad = row(HOSTILE, "FAIL", machine="h100 @ops")
    bad["message"] = "FAIL: slower\n```\n@octocat see #2 ![i](https://e.example/i.png)"
    (opened,) = issues_script.plan([bad], [], commit="abc`@x", run_url="u")
    marker, _, rest = opened.body.partition("\n")
    assert marker.startswith("<!-- ") and marker.endswith(" -->") and marker.count("-->") == 1
    assert "\n" not in opened.title and "\r" not in opened.title
    assert_inert(rest)
    again = issues_script.plan(
        [bad], [{"number": 5, "title": opened.title, "body": opened.body}], commit="d", run_url="u"
    )
    assert [(a.kind, a.number) for a in again] == [("comment", 5)]
    assert_inert(again[0].body)
    passed = dict(bad, verdict="PASS")
    (closed,) = issues_script.plan(
        [passed], [{"number": 5, "title": opened.title, "body": opened.body}], commit="e", run_url="u"
    )
    assert closed.kind == "close"
    assert_inert(closed.body)


def test_an_issue_title_is_bounded() -> None:
    (opened,) = issues_script.plan([row("k" * 5000, "FAIL")], [], commit="c", run_url="u")
    assert len(opened.title) <= 256


def test_the_cli_prints_the_plan(tmp_path: Path, capsys: Any) -> None:
    (tmp_path / "rows.json").write_text(json.dumps([row("x", "FAIL")]))
    (tmp_path / "issues.json").write_text("[]")
    args = ["--report", str(tmp_path), "--issues", str(tmp_path / "issues.json"), "--run-url", "u"]
    assert issues_script.main(args) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert json.loads(line)["kind"] == "open"


def test_a_history_fail_is_alerted_over_its_advisory_row(tmp_path: Path, capsys: Any) -> None:
    """Issue 36.2: the night's history gate (history_findings.json) opens an issue for a check whose
    session alone was ADVISORY; an improvement found by history alerts nothing."""
    (tmp_path / "rows.json").write_text(json.dumps([row("stepped", "ADVISORY"), row("faster", "PASS")]))
    finding = {"machine": "h100", "module": "test_dw", "message": "HISTORY_FAIL: stepped: slower by 30 %"}
    found = [
        {**finding, "key": "stepped", "verdict": "HISTORY_FAIL"},
        {**finding, "key": "faster", "verdict": "HISTORY_IMPROVED"},
    ]
    (tmp_path / "history_findings.json").write_text(json.dumps(found))
    (tmp_path / "issues.json").write_text("[]")
    args = ["--report", str(tmp_path), "--issues", str(tmp_path / "issues.json"), "--run-url", "u"]
    assert issues_script.main(args) == 0
    (line,) = capsys.readouterr().out.splitlines()
    action = json.loads(line)
    assert action["kind"] == "open" and action["check"] == "h100 | test_dw::stepped"
    assert "HISTORY_FAIL" in action["body"]
