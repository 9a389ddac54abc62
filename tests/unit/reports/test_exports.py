"""Exports (issue 27.4): Bencher Metric Format and github-action-benchmark's customBiggerIsBetter,
each checked against its format's schema as the tools document it (no JSON Schema library here:
the rules are written out, every field's type, the required keys and no others)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from pytest_convperf.__main__ import main
from pytest_convperf.reports.exports import bmf, bmf_name, gab, latest


def rec(key: str, when: str, ratio: float, *, machine: str = "h100", ci: bool = True) -> dict[str, Any]:
    return {
        "when": when,
        "commit": f"c-{when}",
        "machine": machine,
        "module": "test_dw",
        "key": key,
        "verdict": "PASS",
        "time_ratio": ratio,
        "ln_ratio": math.log(ratio),
        "ratio_ci": [ratio * 0.98, ratio * 1.02] if ci else None,
        "us": {"candidate": 250.0, "reference": 500.0},
        "correctness": {
            "out": {"max_abs": 1e-6, "max_rel": 1e-5},
            "grad": {"max_abs": 3e-6, "max_rel": 1e-5},
        },
    }


HISTORY = [
    rec("test_a", "2026-01-01", 0.5),
    rec("test_a", "2026-01-02", 0.4),  # the newest of test_a
    rec("test_b", "2026-01-02", 0.25, ci=False),
    rec("test_a", "2026-01-03", 0.9, machine="a100"),
    {**rec("test_c", "2026-01-02", 0.5), "time_ratio": None},  # a correctness failure: no ratio
]


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def assert_bmf(doc: Any) -> None:
    """Bencher Metric Format: an object of benchmark name -> object of measure slug -> metric, a
    metric being {value (required), lower_value, upper_value} numbers, lower <= value <= upper."""
    assert isinstance(doc, dict) and doc
    for name, measures in doc.items():
        assert isinstance(name, str) and name and isinstance(measures, dict) and measures
        assert len(name.encode("utf-8", "surrogatepass")) <= 1024, "Bencher's name limit"
        for slug, metric in measures.items():
            assert isinstance(slug, str) and slug == slug.lower() and " " not in slug
            assert isinstance(metric, dict) and "value" in metric
            assert set(metric) <= {"value", "lower_value", "upper_value"}
            assert all(_number(v) for v in metric.values())
            assert (
                metric.get("lower_value", metric["value"])
                <= metric["value"]
                <= metric.get("upper_value", metric["value"])
            )


def assert_gab(doc: Any) -> None:
    """customBiggerIsBetter: a list of {name: str, unit: str, value: number, range?: str, extra?: str}."""
    assert isinstance(doc, list) and doc
    for item in doc:
        assert isinstance(item, dict) and {"name", "unit", "value"} <= set(item)
        assert set(item) <= {"name", "unit", "value", "range", "extra"}
        assert isinstance(item["name"], str) and isinstance(item["unit"], str) and _number(item["value"])
        assert all(isinstance(item.get(k, ""), str) for k in ("range", "extra"))


def test_the_latest_run_of_each_check_on_the_newest_records_machine() -> None:
    machine, chosen = latest(HISTORY, None)
    assert machine == "a100" and [r["time_ratio"] for r in chosen] == [0.9]
    machine, chosen = latest(HISTORY, "h100")
    assert [(r["key"], r["time_ratio"]) for r in chosen] == [("test_a", 0.4), ("test_b", 0.25)]


def test_bmf_has_speedup_with_its_ci_latency_and_the_correctness_error() -> None:
    doc = bmf(latest(HISTORY, "h100")[1])
    assert_bmf(doc)
    a = doc["test_dw::test_a"]
    assert a["speedup"] == {
        "value": 2.5,
        "lower_value": pytest.approx(2.5 / 1.02),
        "upper_value": pytest.approx(2.5 / 0.98),
    }
    assert a["latency"] == {"value": 250_000.0} and a["correctness-max-abs"] == {"value": 3e-6}
    assert doc["test_dw::test_b"]["speedup"] == {"value": 4.0}  # no CI stored: no bounds


def test_gab_is_a_custom_bigger_is_better_list() -> None:
    doc = gab(latest(HISTORY, "h100")[1])
    assert_gab(doc)
    assert doc[0]["name"] == "test_dw::test_a" and doc[0]["value"] == 2.5
    assert doc[0]["range"] == f"± {2.5 / 0.98 - 2.5:.4f}" and "PASS at commit c-2026-01-02" in doc[0]["extra"]
    assert doc[1]["range"] == ""


@pytest.mark.parametrize("bad", [{"x": {"speedup": {"lower_value": 1.0}}}, [{"name": "a", "value": "1"}]])
def test_the_schema_checks_catch_a_wrong_document(bad: Any) -> None:
    with pytest.raises(AssertionError):
        assert_bmf(bad) if isinstance(bad, dict) else assert_gab(bad)


def test_the_export_command_writes_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in HISTORY))
    assert (
        main(
            ["export", "--format", "bmf", str(tmp_path), "--machine", "h100", "-o", str(tmp_path / "b.json")]
        )
        == 0
    )
    assert_bmf(json.loads((tmp_path / "b.json").read_text()))
    assert main(["export", "--format", "gab", str(tmp_path)]) == 0
    assert_gab(json.loads(capsys.readouterr().out))
    assert main(["export", "--format", "gab", str(tmp_path), "--machine", "nope"]) == 2
    assert "no timed check on machine nope" in capsys.readouterr().err


def test_bmf_names_over_benchers_limit_are_shortened_stably() -> None:
    # Issue 37.9: a long parametrize id made a name Bencher refuses (1,024 characters).
    long_a, long_b = "test_dw::test_a[" + "é" * 900 + "a]", "test_dw::test_a[" + "é" * 900 + "b]"
    records = [
        rec(long_a[len("test_dw::") :], "2026-01-01", 0.4),
        rec(long_b[len("test_dw::") :], "2026-01-01", 0.5),
    ]
    doc = bmf(records)
    assert_bmf(doc)
    assert len(doc) == 2 and all(name.startswith("test_dw::test_a[é") for name in doc)
    assert bmf_name(long_a) in doc and bmf_name(long_a) == bmf(records[:1]).popitem()[0]  # stable
    assert bmf_name("test_dw::test_a") == "test_dw::test_a"  # a usual id is unchanged
    assert len(bmf_name("x\udce9" * 600).encode("utf-8", "surrogatepass")) <= 1024
