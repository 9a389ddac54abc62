"""scripts/results_page.py: the results page of a GPU session, built from what the plugin wrote."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.ci.scripts import ROOT, load_script


def _row(
    nodeid: str, ours_s: float, ref_s: float, ci: tuple[float, float], floor_us: float
) -> dict[str, Any]:
    return {
        "key": nodeid.split("::")[1],
        "nodeid": nodeid,
        "module": "test_depthwise",
        "phase": "forward",
        "machine": "gpu-x",
        "verdict": "NEW",
        "env": {"torch": "2.11.0", "cuda": "13.0", "cudnn": "91900", "driver": "580"},
        "comparison": {
            "candidate": {"median": ours_s},
            "reference": {"median": ref_s},
            "time_ratio": ours_s / ref_s,
            "time_ratio_ci": list(ci),
            "facts": {
                "reference_backend": "CudaDepthwise2d",
                "roofline_spec_floor_us": floor_us,
                "roofline_floor_us": floor_us * 1.1,
                "timer": "cuda events",
                "flush": "read",
            },
        },
    }


def test_page_has_every_check_the_goals_and_the_failures(tmp_path: Path) -> None:
    page_mod = load_script(ROOT / "scripts" / "results_page.py")
    report = tmp_path / "report-depthwise"
    report.mkdir()
    rows = [
        _row(
            "perf_tests/test_depthwise.py::test_seed_shape[a-fp32-nchw-forward]",
            10e-6,
            25e-6,
            (0.39, 0.41),
            8.0,
        ),
        _row(
            "perf_tests/test_depthwise.py::test_seed_shape[b-fp32-nchw-forward]",
            20e-6,
            20e-6,
            (0.99, 1.01),
            4.0,
        ),
    ]
    (report / "rows.json").write_text(json.dumps(rows))
    (report / "pcilt.md").write_text(
        "# PCILT\n\n| comparison | problem | speedup | goal (H100) | goal met |\n|---|---|---|---|---|\n"
        "| tiled vs naive | p1 | 4.6x | >= 5x | not met |\n| other | p2 | 1x | - | - |\n"
    )
    (tmp_path / "junit-depthwise.xml").write_text(
        '<testsuites><testsuite><testcase classname="perf_tests.test_edsr" name="test_x">'
        '<failure message="REFERENCE DEFECT: cuDNN grad_weight">tb</failure></testcase>'
        "</testsuite></testsuites>"
    )
    page = page_mod.build_page("Results", [report], None, "intro")
    # speedup = 1 / time ratio and the CI's ends swap: ratio CI [0.39, 0.41] -> [2.439, 2.564]
    assert "| 2.500x [2.439, 2.564] |" in page
    assert "CudaDepthwise2d" in page and "| 80 % |" in page  # 8 us floor / 10 us ours
    # the depthwise goals are computed from the seed rows: geomean sqrt(2.5 * 1) = 1.58x
    assert "2 seed shapes: 1.58x | >= 1.5x | met |" in page
    assert "80%, 20%" in page and "| >= 80% | not met |" in page
    # a family table's goal rows, not its rows without a goal
    assert "| pcilt.md | tiled vs naive / p1 | >= 5x | not met |" in page and "other / p2" not in page
    assert "1 of 3 goals met." in page
    assert "`perf_tests.test_edsr::test_x`: REFERENCE DEFECT: cuDNN grad_weight" in page


def test_a_cpu_nights_seed_rows_have_no_bandwidth_goal(tmp_path: Path) -> None:
    """A CPU's seed rows carry no spec floor (no datasheet bandwidth): the page still builds (the
    harvest of a dry run's night, issue 35), with the geomean goal alone."""
    page_mod = load_script(ROOT / "scripts" / "results_page.py")
    row = _row(
        "perf_tests/test_depthwise.py::test_seed_shape[a-fp32-nchw-forward]", 10e-6, 20e-6, (0.4, 0.6), 8.0
    )
    row["comparison"]["facts"]["roofline_spec_floor_us"] = None
    goals = page_mod.depthwise_goals([row])
    assert [g[1].split(":")[0] for g in goals] == [
        "geomean speedup over PyTorch's native kernel, fp32 NCHW forward, 1 seed shapes"
    ]


def test_a_section_is_replaced_or_added_after_another(tmp_path: Path) -> None:
    page_mod = load_script(ROOT / "scripts" / "results_page.py")
    page = "# R\n\nintro\n\n## A\n\na\n\n## B\n\nb\n"
    added = page_mod.replace_section(page, "N", "new")
    assert added == "# R\n\nintro\n\n## N\n\nnew\n\n## A\n\na\n\n## B\n\nb\n"
    after = page_mod.replace_section(added, "S", "s", after="A")
    assert after == "# R\n\nintro\n\n## N\n\nnew\n\n## A\n\na\n\n## S\n\ns\n\n## B\n\nb\n"
    assert page_mod.replace_section(after, "A", "a2") == after.replace("## A\n\na\n", "## A\n\na2\n")
    assert page_mod.replace_section("# R\n", "N", "x") == "# R\n\n## N\n\nx\n"
