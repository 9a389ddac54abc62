"""convperf's optional features are plugins reached through its hooks (hookspecs.py): a third-party
conftest implements the same hooks and sees the rows; a feature left out leaves the checks working."""

from __future__ import annotations

import json

import pytest

from tests.integration._lifecycle import Suite

# A third-party plugin (here a conftest) on every convperf hook: what it saw, in order, in seen.jsonl.
OBSERVER = """
import json

import pytest


def _log(event, **fields):
    with open("seen.jsonl", "a") as fh:
        fh.write(json.dumps({"event": event, **fields}) + "\\n")


def pytest_convperf_check_timed(context, comparison):
    _log("timed", problem=context.problem.id, phase=context.phase, speedup=comparison.speedup)
    return {"observer": {"speedup": comparison.speedup}}


def pytest_convperf_row_recorded(row, nodeid, from_worker):
    _log("recorded", nodeid=nodeid, key=row.key, verdict=row.verdict, from_worker=from_worker)


def pytest_convperf_modify_rows(rows):
    # Between the fresh confirm (tryfirst) and the false-alarm control (trylast): no night yet.
    _log("modify", verdicts=[r.verdict for r in rows], night=[r.night for r in rows])
    return ["observer saw %d rows" % len(rows)]


def pytest_convperf_summary_lines(rows):
    return ["observer summary: " + ",".join(r.verdict for r in rows)]
"""


def _seen(suite: Suite) -> list[dict[str, object]]:
    lines = (suite.pytester.path / "seen.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def _rows(suite: Suite) -> list[dict[str, object]]:
    return list(json.loads((suite.pytester.path / "report" / "rows.json").read_text()))


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]) -> Suite:
    s = Suite(pytester, monkeypatch, plugin_args)
    s.run("--convperf-update-baselines").assert_outcomes(passed=2)
    return s


def test_a_third_party_plugin_sees_each_row_once_and_the_rows_before_the_night(suite: Suite) -> None:
    suite.pytester.makeconftest(OBSERVER)
    suite.set_ratio(0.6)  # +20 %: two speed FAILs the session keeps
    result = suite.run("--convperf-report=report", "--convperf-confirm=process")
    result.assert_outcomes(failed=2)
    seen = _seen(suite)
    events = [e["event"] for e in seen]
    assert events == ["timed", "recorded", "timed", "recorded", "modify"], events
    timed = [e for e in seen if e["event"] == "timed"]
    assert all(e["phase"] == "forward" and abs(float(e["speedup"]) - 1 / 0.6) < 1e-6 for e in timed)  # type: ignore[arg-type]
    recorded = [e for e in seen if e["event"] == "recorded"]
    assert [str(e["nodeid"]).split("[")[0] for e in recorded] == [
        "test_suite.py::test_a",
        "test_suite.py::test_b",
    ]
    assert all(e["verdict"] == "FAIL" and e["from_worker"] is False for e in recorded)
    # The hook ran before the false-alarm control (trylast): no row had its night decision yet.
    (modify,) = [e for e in seen if e["event"] == "modify"]
    assert modify["verdicts"] == ["FAIL", "FAIL"] and modify["night"] == [None, None]
    rows = _rows(suite)
    # ... which then decided every row, and the facts the plugin returned are in the rows.
    assert all(r["night"]["kept"] for r in rows)  # type: ignore[index]
    assert all(abs(r["facts"]["observer"]["speedup"] - 1 / 0.6) < 1e-6 for r in rows)  # type: ignore[index]
    result.stdout.fnmatch_lines(["*observer summary: FAIL,FAIL*", "*note: observer saw 2 rows*"])


def test_a_third_party_plugin_under_xdist_sees_the_workers_rows_on_the_controller(suite: Suite) -> None:
    pytest.importorskip("xdist")
    suite.pytester.makeconftest(OBSERVER)
    result = suite.run("--convperf-report=report", "-n", "2")
    result.assert_outcomes(passed=2)
    seen = _seen(suite)
    recorded = [e for e in seen if e["event"] == "recorded"]
    # Timed in the workers; recorded once each, on the controller, from the workers' reports.
    assert sorted(str(e["event"]) for e in seen) == ["modify", "recorded", "recorded", "timed", "timed"]
    assert len(recorded) == 2 and all(e["from_worker"] is True for e in recorded)
    assert all("observer" in r["facts"] for r in _rows(suite))  # type: ignore[operator]


def test_without_against_no_ab_plugin_is_registered_and_checks_work(suite: Suite) -> None:
    suite.pytester.makeconftest(
        "def pytest_sessionfinish(session):\n"
        "    names = [n for n, _ in session.config.pluginmanager.list_name_plugin() if n]\n"
        "    open('plugins.txt', 'w').write(','.join(n for n in names if n.startswith('convperf-')))\n"
    )
    result = suite.run("--convperf-report=report")
    result.assert_outcomes(passed=2)
    names = set((suite.pytester.path / "plugins.txt").read_text().split(","))
    assert "convperf-ab" not in names
    assert {
        "convperf-progress",
        "convperf-cliffs",
        "convperf-false-alarms",
        "convperf-fresh-confirm",
    } <= names
    assert all("ab" not in r["facts"] for r in _rows(suite))  # type: ignore[operator]


def test_leaving_the_ab_plugin_out_leaves_the_checks_working(suite: Suite) -> None:
    # --convperf-against would time REF (and needs a git repository, which this folder is not);
    # -p no:convperf-ab leaves the A/B out: the checks run, judged as usual, with no A/B facts.
    result = suite.run("--convperf-report=report", "--convperf-against=HEAD", "-p", "no:convperf-ab")
    result.assert_outcomes(passed=2)
    assert [r["verdict"] for r in _rows(suite)] == ["PASS", "PASS"]
    assert all("ab" not in r["facts"] for r in _rows(suite))  # type: ignore[operator]
    assert "convperf A/B" not in result.stdout.str()
    # Negative control: with the plugin, the same run is an A/B, which needs a git repository.
    with_ab = suite.run("--convperf-report=report", "--convperf-against=HEAD")
    assert with_ab.ret == pytest.ExitCode.USAGE_ERROR
    assert "--convperf-against=HEAD" in with_ab.stderr.str()


def test_leaving_the_false_alarm_control_out_under_holm_is_a_usage_error(suite: Suite) -> None:
    # Its speed FAILs would be deferred to a decision nobody makes: said, not passed silently.
    result = suite.run("-p", "no:convperf-false-alarms")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*-p no:convperf-false-alarms*--convperf-false-alarms=none*"])
    # With each check deciding alone, the control is not needed.
    suite.run("-p", "no:convperf-false-alarms", "--convperf-false-alarms=none").assert_outcomes(passed=2)


# A conftest that changes the environment after convperf's pytest_configure (as a fresh confirm's
# conftest points $CONVPERF_FAKE_TIMER at its replay), then asks each plugin what config it reads.
LATE_ENVIRONMENT = """
import json
import os


def pytest_configure(config):
    os.environ["CONVPERF_L2_FLUSH"] = "write"


def pytest_collection_finish(session):
    pm = session.config.pluginmanager
    names = ("convperf-session", "convperf-fresh-confirm", "convperf-false-alarms")
    seen = {name: pm.get_plugin(name).cfg.l2_flush for name in names}
    open("seen.json", "w").write(json.dumps(seen))
"""


def test_every_plugin_reads_the_config_the_session_replaced_at_its_start(
    suite: Suite, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 39.4: one config for the session and its plugins; a copy taken at configure time
    # would still say "read" here.
    monkeypatch.setenv("CONVPERF_L2_FLUSH", "read")  # restored after the conftest's change
    suite.pytester.makeconftest(LATE_ENVIRONMENT)
    suite.run("--convperf-report=report").assert_outcomes(passed=2)
    seen = json.loads((suite.pytester.path / "seen.json").read_text())
    assert seen == {
        "convperf-session": "write",
        "convperf-fresh-confirm": "write",
        "convperf-false-alarms": "write",
    }


OPTIONAL = (
    "convperf-ab-hint",
    "convperf-fresh-confirm",
    "convperf-progress",
    "convperf-cliffs",
    "convperf-orphans",
    "convperf-results-store",
    "convperf-crash-watch",
)


def test_each_optional_plugin_left_out_leaves_a_working_session(suite: Suite) -> None:
    # Issue 39.4: the core looks an optional plugin up by name where it may be absent and imports
    # none of them at module level; -p no:convperf-ab and -p no:convperf-false-alarms: above.
    suite.pytester.makeconftest(
        "def pytest_sessionfinish(session):\n"
        "    names = [n for n, p in session.config.pluginmanager.list_name_plugin() if n and p]\n"
        "    open('plugins.txt', 'w').write(','.join(n for n in names if n.startswith('convperf-')))\n"
    )
    for name in OPTIONAL:
        result = suite.run("--convperf-report=report", "-p", f"no:{name}")
        result.assert_outcomes(passed=2)
        result.stdout.fnmatch_lines(["*convperf: PASS 2*"])
        names = set((suite.pytester.path / "plugins.txt").read_text().split(","))
        assert name not in names and "convperf-session" in names, name
        assert [r["verdict"] for r in _rows(suite)] == ["PASS", "PASS"], name
