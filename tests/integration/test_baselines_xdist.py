"""pytest-xdist: workers hand their rows to the controller, which writes each file once; an update
with -n 2 loses no entry, and entries of tests that did not run are kept."""

from __future__ import annotations

import pytest

from tests.integration._lifecycle import MACHINE, MANY, Suite, subprocess_env

pytest.importorskip("xdist")


def test_update_under_xdist_loses_no_entry(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    suite = Suite(pytester, monkeypatch, plugin_args)
    pytester.makepyfile(test_many=MANY)
    subprocess_env(monkeypatch)
    base = (
        *plugin_args,
        "--convperf",
        f"--convperf-machine={MACHINE}",
        "--convperf-device=cpu",
        "-p",
        "no:cacheprovider",
    )
    # test_many[0..5] on two workers, plus a pre-existing entry that must survive.
    from pytest_convperf.baselines.store import Store
    from pytest_convperf.judge.entry import Entry

    store = Store(pytester.path / "baselines", MACHINE)
    store.write(
        "test_many",
        {"test_old[gone]": Entry(time_ratio=0.7, noise=0.02, us_candidate=7.0, us_reference=10.0)},
    )
    result = pytester.runpytest_subprocess(*base, "test_many.py", "-n", "2", "--convperf-update-baselines")
    result.assert_outcomes(passed=6)
    entries = Store(pytester.path / "baselines", MACHINE).load("test_many")
    assert len(entries) == 7 and "test_old[gone]" in entries
    assert all(entries[k].time_ratio == pytest.approx(0.5) for k in entries if k.startswith("test_many"))
    result.stdout.fnmatch_lines(["*convperf: NEW 6*", "*baseline update written for review*"])
    # Workers never write: one temp-free file, and the controller's summary saw all six rows.
    assert not list(store.path("test_many").parent.rglob("*.tmp"))
    del suite
