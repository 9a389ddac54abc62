"""The dashboard (issue 27.3): a static page of a store's or a report folder's history, checked in
a real headless Chromium (Debian's ``chromium`` and ``chromium-driver``, which ``.ci/run``
installs): it loads with no console error, a known check's plot has its points, the planted
change point is drawn, the last night's FAIL is listed first; a screenshot goes to
``$CONVPERF_CI_LOGS`` (the CI log folder) when set. Without the browser the test skips, unless
``$CONVPERF_REQUIRE_BROWSER`` is set (CI), where a missing browser fails it."""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from pytest_convperf.__main__ import main
from pytest_convperf.reports.dashboard import page_data, render

CHROMEDRIVER = "/usr/bin/chromedriver"
STEP_KEY = "test_depthwise::test_fwd@n8-c64"
FLAT_KEY = "test_depthwise::test_bwd@n8-c64"
# Issue 37.7: after ``<!--<script>`` the HTML parser's script "double escaped" state swallowed the app.
HOSTILE_KEY = "test_x[<!--<script> & \u2028 </script><img src=x onerror=alert(1)>]"


def history(n: int = 12, step_at: int = 7) -> list[dict[str, Any]]:
    """Two checks on two machines: STEP_KEY slows 25 % from run ``step_at`` on (its last run a FAIL)."""
    out = []
    for i in range(n):
        for machine in ("h100", "a100"):
            for key in (STEP_KEY, FLAT_KEY):
                wobble = 0.004 * math.sin(3 * i + len(key))
                ratio = (
                    0.5 * (1.25 if key == STEP_KEY and i >= step_at and machine == "h100" else 1.0) + wobble
                )
                verdict = "FAIL" if (key == STEP_KEY and machine == "h100" and i == n - 1) else "PASS"
                out.append(
                    {
                        "schema": "convperf-history/1",
                        "when": f"2026-03-{i + 1:02d}T02:00:00+00:00",
                        "commit": f"c{i:03d}",
                        "machine": machine,
                        "module": "test_depthwise",
                        "key": key,
                        "verdict": verdict,
                        "time_ratio": ratio,
                        "ln_ratio": math.log(ratio),
                        "ratio_ci": [ratio * 0.98, ratio * 1.02],
                        "baseline_ratio": 0.5,
                        "tolerance": 0.05,
                        "kernels": [{"name": f"dw_fwd_v{1 + (i >= step_at)}", "calls": 1.0, "share": 0.9}],
                    }
                )
    return out


def test_page_data_marks_the_planted_step_and_the_last_nights_fail() -> None:
    data = page_data(history(), source="test")
    step = next(c for c in data["checks"] if c["machine"] == "h100" and c["key"] == STEP_KEY)
    assert len(step["points"]) == 12 and [cp["index"] for cp in step["change_points"]] == [7]
    cp = step["change_points"][0]
    assert cp["change"] == pytest.approx(-0.2, abs=0.01)  # speedup 2.0 -> 1.6
    # One number, one direction (issue 38.10): the label and the text say the same -20.x % slower.
    number = f"{cp['change'] * 100:+.1f} %"
    assert cp["label"] == f"slower: speedup {number}" and cp["text"].startswith(cp["label"])
    # "Last night" reads the charts' own change points: the step is listed there, in the same words.
    assert data["last_night"]["h100"]["older_steps"] == [
        {"key": STEP_KEY, "index": 7, "text": cp["text"], "when": cp["when"]}
    ]
    assert step["points"][0][7:] == [pytest.approx(2.0), 0.05]  # baseline speedup and tolerance
    flat = [c for c in data["checks"] if c["key"] == FLAT_KEY or c["machine"] == "a100"]
    assert all(not c["change_points"] for c in flat)
    assert data["last_night"]["h100"]["fails"] == [{"key": STEP_KEY, "verdict": "FAIL", "commit": "c011"}]
    assert len(data["kernels"]) == 2  # two distinct tables, stored once each
    assert data["machines"] == ["a100", "h100"]


def test_the_page_inlines_everything_and_no_string_ends_its_script(tmp_path: Path) -> None:
    records = history()
    records[0]["key"] = "test_x</script><script>alert(1)</script>"
    report = tmp_path / "report"
    report.mkdir()
    (report / "history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert main(["dashboard", str(report), "--out", str(tmp_path / "site")]) == 0
    page = (tmp_path / "site" / "index.html").read_text()
    assert page.count("</script>") == 2  # the data's and the code's: the key's is escaped
    for remote in ("http://", "https://", "src=", "@import"):
        assert remote not in page.replace("http://www.w3.org/2000/svg", ""), remote


def _browser() -> Any:
    found = {
        "selenium": _has_selenium(),
        CHROMEDRIVER: os.path.exists(CHROMEDRIVER),
        "chromium": shutil.which("chromium") is not None,
    }
    missing = [what for what, ok in found.items() if not ok]
    if missing:
        why = (
            f"no headless browser ({', '.join(missing)} missing: apt-get install -y chromium chromium-driver)"
        )
        if os.environ.get("CONVPERF_REQUIRE_BROWSER"):
            pytest.fail(why + "; $CONVPERF_REQUIRE_BROWSER is set (CI)")
        pytest.skip(why)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1400,1800",
    ):
        options.add_argument(flag)
    return options, Service(CHROMEDRIVER), webdriver


def _chrome(tmp_path: Path, browser: Any) -> Any:
    """A headless Chrome from :func:`_browser`'s (options, service, webdriver), with its own profile
    folder under ``tmp_path`` and the browser's console log kept for the test to read."""
    options, service, webdriver = browser
    profile = tmp_path / "profile"
    profile.mkdir()
    options.add_argument(f"--user-data-dir={profile}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=options, service=service)


def _has_selenium() -> bool:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return False
    return True


def test_the_dashboard_in_headless_chromium(tmp_path: Path) -> None:
    browser = _browser()
    sa = pytest.importorskip("sqlalchemy", reason="the results store needs SQLAlchemy")
    del sa
    from pytest_convperf.resultsdb import db

    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    engine, _ = db.open_store(url)
    records = history()
    hostile = [dict(r, key=HOSTILE_KEY) for r in records if r["key"] == FLAT_KEY]
    db.write(engine, records + hostile, source="test")
    engine.dispose()
    assert main(["dashboard", url, "--out", str(tmp_path / "site")]) == 0
    driver = _chrome(tmp_path, browser)
    try:
        driver.get((tmp_path / "site" / "index.html").as_uri())
        assert driver.execute_script("return document.body.dataset.ready") == "1"
        driver.execute_script(
            "const s = document.getElementById('machine'); s.value = 'h100';"
            "s.dispatchEvent(new Event('change'));"
        )
        # The last night's FAIL and the (no longer new) step: the FAIL is listed first.
        first = driver.execute_script("return document.querySelector('#attention-list li').textContent")
        assert first.startswith(f"FAIL: {STEP_KEY}"), first
        card = f'.card[data-check="{STEP_KEY}"]'
        driver.execute_script(f"document.querySelector('{card}').scrollIntoView()")
        drawn = driver.execute_script(
            f"const svg = document.querySelector('{card} svg');"
            "return new Promise(done => { const t0 = Date.now(); (function wait() {"
            " if (svg.dataset.drawn || Date.now() - t0 > 5000) done(!!svg.dataset.drawn);"
            " else setTimeout(wait, 50); })(); });"
        )
        assert drawn
        assert driver.execute_script(f"return document.querySelectorAll('{card} svg circle.pt').length") == 12
        cps = driver.execute_script(
            f"return [...document.querySelectorAll('{card} svg line.cp')].map(l => l.dataset.index)"
        )
        assert cps == ["7"]
        # Verdict colours per run, the baseline and its band, dates and commits on the x axis.
        verdicts = driver.execute_script(
            f"return [...document.querySelectorAll('{card} svg circle.pt')].map(c => c.getAttribute('class'))"
        )
        assert verdicts[-1] == "pt v-FAIL" and verdicts[0] == "pt v-PASS"
        fills = driver.execute_script(
            f"const c = document.querySelectorAll('{card} svg circle.pt');"
            "return [getComputedStyle(c[0]).fill, getComputedStyle(c[11]).fill]"
        )
        assert fills[0] != fills[1], fills  # a FAIL is drawn in another colour than a PASS
        assert driver.execute_script(f"return document.querySelectorAll('{card} svg .baseline').length") == 1
        assert driver.execute_script(f"return document.querySelectorAll('{card} svg .baseband').length") == 1
        ticks = driver.execute_script(
            f"return [...document.querySelectorAll('{card} svg text.xtick')].map(t => t.textContent)"
        )
        assert ticks[0] == "03-01c000" and ticks[-1] == "03-12c011", ticks
        # The chart's label, the card's text and "Last night" tell the step with one number.
        label = driver.execute_script(f"return document.querySelector('{card} svg text.cplabel').textContent")
        older = driver.execute_script(
            "return [...document.querySelectorAll('#attention-older li')].map(l => l.textContent)"
        )
        card_text = driver.execute_script(f"return document.querySelector('{card} .cps div').textContent")
        assert label.startswith("slower: speedup -20.") and older == [f"{STEP_KEY}: {card_text}"]
        assert card_text.startswith(label)
        # The hostile id is a card of its own, its name shown as text.
        names = driver.execute_script(
            "return [...document.querySelectorAll('.card h3')].map(h => h.textContent)"
        )
        assert f"{HOSTILE_KEY} (12 runs)" in names
        assert driver.execute_script("return document.querySelectorAll('img').length") == 0
        # A point's details: commit, verdict and its kernel table.
        driver.execute_script(
            f"document.querySelectorAll('{card} svg circle.pt')[11].dispatchEvent(new MouseEvent('click'))"
        )
        assert driver.find_element("id", "detail-commit").text.startswith("commit c011")
        assert driver.find_element("id", "detail-verdict").text == "verdict FAIL"
        assert driver.find_element("id", "detail-baseline").text == "baseline 2.000x, tolerance \u00b15.0 %"
        assert "dw_fwd_v2" in driver.find_element("id", "detail-kernels").text
        logs = os.environ.get("CONVPERF_CI_LOGS")
        shot = Path(logs) if logs else tmp_path
        shot.mkdir(parents=True, exist_ok=True)
        assert driver.save_screenshot(str(shot / "dashboard.png"))
        errors = [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
        assert errors == []
    finally:
        driver.quit()


def test_an_empty_store_says_so_in_the_browser(tmp_path: Path) -> None:
    browser = _browser()
    pytest.importorskip("sqlalchemy", reason="the results store needs SQLAlchemy")
    from pytest_convperf.resultsdb import db

    url = f"sqlite:///{tmp_path / 'empty.sqlite'}"
    engine, _ = db.open_store(url)
    engine.dispose()
    assert main(["dashboard", url, "--out", str(tmp_path / "site")]) == 0
    driver = _chrome(tmp_path, browser)
    try:
        driver.get((tmp_path / "site" / "index.html").as_uri())
        assert driver.execute_script("return document.body.dataset.ready") == "1"
        text = driver.find_element("id", "empty-store").text
        assert text.startswith("No runs: ") and "holds no usable run yet" in text
        assert not driver.find_element("id", "checks").is_displayed()
        assert [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "ERROR")] == []
    finally:
        driver.quit()


def test_the_data_has_no_character_the_html_parser_reads_in_a_script(tmp_path: Path) -> None:
    # Issue 37.7: escaping only ``</`` left ``<!--<script>``, which swallows the page.
    records = history()
    records[0]["key"] = HOSTILE_KEY
    page = render(page_data(records, source="test"))
    payload = page.split('type="application/json">', 1)[1].split("</script>", 1)[0]
    assert not set(payload) & set("<>&\u2028\u2029"), "raw <, >, & or U+2028/9 in the inlined data"
    assert json.loads(payload)["checks"]


def test_a_console_error_is_caught(tmp_path: Path) -> None:
    # Negative control of the check above: a page that throws shows up in the browser's log.
    browser = _browser()
    page = tmp_path / "bad.html"
    page.write_text('<!DOCTYPE html><link rel="icon" href="data:,"><script>null.x;</script>')
    driver = _chrome(tmp_path, browser)
    try:
        driver.get(page.as_uri())
        assert [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    finally:
        driver.quit()


def test_change_points_in_the_window_keep_their_index_in_the_whole_series() -> None:
    data = page_data(history(n=40, step_at=30), source="test", window=20)
    step = next(c for c in data["checks"] if c["machine"] == "h100" and c["key"] == STEP_KEY)
    assert len(step["points"]) == 40 and [cp["index"] for cp in step["change_points"]] == [30]
    assert step["change_points"][0]["commit"] == "c030"
    old = page_data(history(n=40, step_at=5), source="test", window=20)  # the step before the window
    assert not next(c for c in old["checks"] if c["machine"] == "h100" and c["key"] == STEP_KEY)[
        "change_points"
    ]


def test_history_records_carry_the_baseline_and_tolerance_the_charts_draw() -> None:
    from pytest_convperf.judge.entry import Entry
    from pytest_convperf.reports.report_files import history_records
    from tests.rows import check_row

    row = check_row(
        {
            "verdict": "PASS",
            "comparison": {"candidate": {"median": 1.0}, "reference": {"median": 2.0}},
            "baseline": Entry(0.45, 0.01, 1.0, 2.0).to_yaml(),
            "decision": {"verdict": "PASS", "outcome": "pass", "message": "m", "tolerance": 0.05},
        }
    )
    (rec,) = history_records([row], when="2026-03-01T02:00:00+00:00", commit="c")
    assert rec["baseline_ratio"] == 0.45 and rec["tolerance"] == 0.05
    (point,) = page_data([rec], source="t")["checks"][0]["points"]
    assert point[7] == pytest.approx(1 / 0.45) and point[8] == 0.05
