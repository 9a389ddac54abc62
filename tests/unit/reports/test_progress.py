"""The live progress line (pytest_convperf.reports.progress) against a recording stand-in for pytest's
terminal reporter, and the summary's story on first and recording runs (report.terminal_lines)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from pytest_convperf.core import stats
from pytest_convperf.core.results import Verdict
from pytest_convperf.judge.outcome import Decision
from pytest_convperf.reports.cells import fmt_time
from pytest_convperf.reports.progress import LiveProgress, Tally, verdict_text
from pytest_convperf.reports.report import counts, terminal_lines
from tests.rows import check_row


class Terminal:
    """Records what the progress line asks of pytest's TerminalReporter."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.currentfspath: Any = "x.py"

    def ensure_newline(self) -> None:
        self.calls.append(("newline", ""))

    def rewrite(self, line: str, erase: bool = False) -> None:
        self.calls.append(("rewrite", line))

    def write(self, text: str) -> None:
        self.calls.append(("write", text))

    def write_line(self, text: str) -> None:
        self.calls.append(("line", text))

    def write_fspath_result(self, nodeid: str, res: str) -> None:
        self.calls.append(("fspath", nodeid))


def row(
    verdict: str = "NEW", key: str = "test_x[p]", module: str = "test_m", update: str | None = None
) -> Any:
    return check_row(
        {
            "key": key,
            "module": module,
            "nodeid": f"{module}.py::{key}",
            "verdict": verdict,
            "message": "NEW: no baseline entry; speedup 0.500x. Record it with --convperf-update-baselines",
            "comparison": {
                "time_ratio": 2.0,
                "time_ratio_ci": [1.9, 2.1],
                "n_rounds": 63,
                "candidate": {"median": 2.073e-3},
                "reference": {"median": 1.0e-3},
            },
            "update": {"action": update, "written": True} if update else None,  # as the controller marks it
        }
    )


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def run_rounds(progress: LiveProgress, clock: Clock, timer: Any) -> None:
    for i in range(13):
        clock.t += 1.0
        timer.observe_round("warm-up", i, ["candidate", "reference"], [2e-3, 1e-3])
    for i in range(40):
        clock.t += 1.0
        timer.observe_round("timing", i, ["candidate", "reference"], [2e-3 * (1 + i % 3 / 100), 1e-3])


def test_on_a_terminal_the_line_is_rewritten_in_place_then_left_as_the_verdict() -> None:
    term, clock = Terminal(), Clock()
    progress = LiveProgress(term, verbosity=0, live=True, clock=clock, width=lambda: 200)
    timer = progress.wrap(object(), "m.py::test_x[p]", "test_x[p]")
    run_rounds(progress, clock, timer)
    rewrites = [text for kind, text in term.calls if kind == "rewrite"]
    assert term.calls[0] == ("newline", "")  # off pytest's dots line first
    assert rewrites[0].strip() == "test_x[p]: warm-up, 1 rounds"
    assert "screen, 40 rounds, speedup 0.49" in rewrites[-1] and "[0.4" in rewrites[-1]
    progress.done(row(), "m.py::test_x[p]")
    assert term.calls[-2] == ("rewrite", verdict_text(row()))
    # pytest's next status letter goes on a fresh "<file> " line, as pytest itself writes it
    assert term.calls[-1] == ("fspath", "m.py::test_x[p]") and term.currentfspath is None


def test_without_a_terminal_only_complete_lines_are_written() -> None:
    term, clock = Terminal(), Clock()
    progress = LiveProgress(term, verbosity=0, live=False, clock=clock)
    timer = progress.wrap(object(), "m.py::t", "t")
    run_rounds(progress, clock, timer)  # 53 s of rounds: one progress line (every 30 s)
    progress.done(row(), "m.py::t")
    kinds = [kind for kind, _ in term.calls]
    assert "rewrite" not in kinds
    assert kinds.count("line") == 1
    assert ("write", verdict_text(row())) in term.calls


def test_quiet_runs_and_xdist_workers_show_nothing_and_get_the_timer_itself() -> None:
    timer = object()
    quiet = LiveProgress(Terminal(), verbosity=-1, live=True)
    worker = LiveProgress(None, verbosity=1, live=False)
    assert quiet.wrap(timer, "n", "c") is timer and worker.wrap(timer, "n", "c") is timer
    quiet.done(row(), "n")  # no terminal use at all
    assert quiet.terminal.calls == []


def test_a_confirm_run_is_named_and_its_ratio_starts_over() -> None:
    tally = Tally("t")
    for i in range(10):
        tally.observe("timing", i, ["candidate", "reference"], [2e-3, 1e-3])
    tally.observe("warm-up", 0, ["candidate", "reference"], [1e-3, 1e-3])
    assert tally.text() == "t: warm-up, 1 rounds"
    for i in range(8):
        tally.observe("timing", i, ["reference", "candidate"], [1e-3, 4e-3])
    assert tally.text().startswith("t: confirm, 8 rounds, speedup 0.250x")
    assert math.isclose(math.exp(tally.log_ratios[0]), 4.0)


def test_times_have_units_and_no_exponent_forms() -> None:
    assert fmt_time(1.117e4) == "11.17 ms"
    assert fmt_time(355.123) == "355.1 us"
    assert fmt_time(2.3e6) == "2.300 s"
    assert fmt_time(0.04123) == "0.04123 us"
    assert "e+" not in verdict_text(row()) and "cand 2.073 ms  ref 1.000 ms" in verdict_text(row())


def test_a_first_run_groups_new_checks_per_module_and_says_how_to_record() -> None:
    rows = [row(key=f"test_x[{i}]") for i in range(16)] + [row(module="test_n")]
    lines = terminal_lines(rows)
    how = "(not recorded: --convperf-update-baselines=new records them)"
    assert lines == [
        "NEW (17)",
        f"  test_m: 16 new checks, speedup 0.500x {how}",
        f"  test_n: 1 new check, speedup 0.500x {how}",
    ]
    assert len(terminal_lines(rows, verbose=1)) == 1 + 2 * 17  # -v: every check with its note


def test_the_recording_run_does_not_ask_to_record_and_tells_one_story_with_pytest() -> None:
    new = [row(update="write")]
    assert "Record it" not in "\n".join(terminal_lines(new, verbose=1))
    assert counts(new) == "NEW 1 (1 recorded)"
    failed = [row(verdict="FAIL", key=f"t[{i}]", update="write") for i in range(3)]
    assert counts(failed) == "FAIL 3 (3 recorded)"
    lines = terminal_lines(failed)
    assert (
        lines[0]
        == "FAIL (3): 3 recorded as the new baseline by --convperf-update-baselines; these tests pass"
    )
    assert lines[2].strip() == "recorded as the new baseline"


def test_the_plot_title_names_the_machine_and_the_date() -> None:
    from pytest_convperf.reports.report_files import plot_title

    info = {"machine": "amd-epyc-1t", "name": "AMD EPYC"}
    assert plot_title(info, "2026-11-22T22:15:03+00:00") == (
        "convperf speedups: amd-epyc-1t (AMD EPYC), 2026-11-22 22:15 UTC"
    )
    assert plot_title({}, None) == "convperf speedups: unknown machine"


def test_the_roofline_note_comes_only_with_a_check_line_that_shows_a_roofline() -> None:
    """A first run folds NEW checks into module lines without a roofline column: a note about that
    column dangled at the end of every such summary (issue 24.4)."""
    new = row()
    roofed = dataclasses.replace(
        new, comparison=dataclasses.replace(new.comparison, facts={"roofline_floor_us": 500.0})
    )
    assert not any(line.startswith("roofline:") for line in terminal_lines([roofed]))
    verbose = terminal_lines([roofed], verbose=1)
    assert any(line.startswith("roofline:") for line in verbose) and "roofline 24% of copy BW" in "\n".join(
        verbose
    )


def test_the_live_line_the_verdict_line_and_the_summary_name_their_measurement() -> None:
    # Issue 24.4: the live line said 0.310x and the summary 0.226x for the same check, neither
    # saying which measurement it was (the first measurement's, then the confirm's).
    tally = Tally("t")
    for i in range(10):
        tally.observe("timing", i, ["candidate", "reference"], [2e-3, 1e-3])
    assert tally.text().startswith("t: screen, 10 rounds, speedup 0.500x")
    first = row("FAIL")
    assert first.comparison is not None
    assert verdict_text(first).endswith("(screen, 63 rounds)")
    confirm = dataclasses.replace(first.comparison, time_ratio=4.0, time_ratio_ci=(3.8, 4.2), n_rounds=189)
    failed = dataclasses.replace(first, decision=Decision(Verdict.FAIL, "fail", "", confirm=confirm))
    line = verdict_text(failed)
    assert "speedup 0.250x [0.238, 0.263]" in line and line.endswith("(confirm, 189 rounds)")
    summary = "\n".join(terminal_lines([failed]))
    assert "speedup 0.250x [0.238, 0.263]" in summary and "(confirm, 189 rounds)" in summary
    fresh = dataclasses.replace(confirm, facts={"processes": 2})
    line = verdict_text(
        dataclasses.replace(first, decision=Decision(Verdict.FAIL, "fail", "", confirm=fresh))
    )
    assert line.endswith("(confirm in 2 fresh processes, 189 rounds)")


def test_a_median_at_the_end_of_its_own_ci_is_explained_not_hidden() -> None:
    # Issue 24.4 saw 0.366x in [0.287, 0.378]. Both come from one statistic, the median log ratio
    # and its order-statistic CI: rounds in two groups put the median at an end of its CI.
    lr = [math.log(1 / 0.37) + 0.001 * (i % 7) for i in range(35)]  # the faster group
    lr += [math.log(1 / 0.25) + 0.001 * (i % 7) for i in range(28)]  # the slower group
    s = stats.summarize(lr)
    speedup, lo, hi = math.exp(-s.median), math.exp(-s.ci[1]), math.exp(-s.ci[0])
    assert lo < 0.3 and hi - speedup < 0.25 * (speedup - lo)  # lopsided, yet one statistic
    base = row("PASS")
    assert base.comparison is not None
    two_groups = dataclasses.replace(
        base,
        comparison=dataclasses.replace(
            base.comparison, time_ratio=1 / speedup, time_ratio_ci=(1 / hi, 1 / lo)
        ),
    )
    assert "(median near its CI's end: rounds skewed or in two groups)" in verdict_text(two_groups)
    assert "two groups" in "\n".join(terminal_lines([two_groups]))
    assert "two groups" not in verdict_text(base) + verdict_text(row("FAIL"))
    even = dataclasses.replace(base.comparison, time_ratio=2.0, time_ratio_ci=(1.9, 2.1))
    assert "two groups" not in verdict_text(dataclasses.replace(base, comparison=even))


def test_a_fail_shows_its_whole_message_in_the_summary() -> None:
    # Under session-wide control no pytest failure report carries a speed FAIL's message (its test
    # was pending): the summary shows all of it, e.g. which kernels moved, once.
    message = "FAIL (confirmed): slower\nkernels changed: new kernel k"
    failed = dataclasses.replace(row("FAIL"), message=message)
    lines = terminal_lines([failed])
    assert "      FAIL (confirmed): slower" in lines and "      kernels changed: new kernel k" in lines
    assert sum("kernels changed" in line for line in lines) == 1


def test_the_session_pace_counts_checks_and_estimates_each_kind_at_its_own_mean() -> None:
    # Issue 38.2: pytest's [%] moves only at the end of each file; the pace says checks done / total.
    from pytest_convperf.reports.progress import PACE_EVERY_CHECKS, SessionPace, fmt_duration

    clock = Clock()
    pace = SessionPace({"m.py::c1", "m.py::c2", "m.py::c3"}, 5, clock=clock)
    assert pace.prefix() == "[0/3 checks, no estimate yet] "
    for when, seconds in (("setup", 0.5), ("call", 0.4), ("teardown", 0.1)):
        done = pace.report("m.py::t1", when, seconds)
    assert done and pace.pace.count() == (1, 5)
    pace.report("m.py::c1", "call", 30.0)
    assert pace.report("m.py::c1", "teardown", 0.0)
    # Left: 2 checks at 30 s and 1 test at 1 s, not 4 units at the overall mean (15.5 s).
    assert pace.pace.left_s() == 61.0 and pace.prefix() == "[1/3 checks, about 1m01s left] "
    clock.t = 125.0
    assert pace.text() == "convperf: 1/3 checks, 2/5 tests done in 2m05s; about 1m01s left"
    assert pace.due() and not pace.due()  # 60 s since the start; then not again at once
    assert PACE_EVERY_CHECKS > 1 and fmt_duration(3725) == "1h02m" and fmt_duration(9.4) == "9 s"


def test_in_a_log_the_pace_is_a_line_of_its_own_keeping_pytests_line_state() -> None:
    from pytest_convperf.reports.progress import SessionPace

    term, clock = Terminal(), Clock()
    progress = LiveProgress(term, verbosity=0, live=False, clock=clock)
    pace = SessionPace({"m.py::c1"}, 1, clock=clock)
    pace.report("m.py::c1", "teardown", 70.0)
    clock.t = 70.0
    assert pace.due()
    progress.line(pace.text(), "m.py::c1")
    assert term.calls == [
        ("newline", ""),
        ("write", "convperf: 1/1 checks, 1/1 tests done in 1m10s; about 0 s left"),
        ("fspath", "m.py::c1"),
    ]


def test_on_a_terminal_the_session_pace_leads_the_live_line() -> None:
    term, clock = Terminal(), Clock()
    lead = "[1/3 checks, about 1m01s left] "
    progress = LiveProgress(term, verbosity=0, live=True, clock=clock, width=lambda: 200, prefix=lambda: lead)
    timer = progress.wrap(object(), "m.py::test_x[p]", "test_x[p]")
    run_rounds(progress, clock, timer)
    rewrites = [text for kind, text in term.calls if kind == "rewrite"]
    assert rewrites and all(text.startswith("  " + lead + "test_x[p]: ") for text in rewrites)
