"""README's main job on a CPU without baselines (issue 38.1, ``perf_tests/cpu_main.py``): a
representative selection recorded in a fresh process, then measured again and judged against that
recording, not the whole suite reading NEW. The fake timer stands in for the clock (correctness
runs for real); the judgement itself is the plugin's usual rule."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_cpu_main_job_records_then_judges_its_selection(tmp_path: Path) -> None:
    fake = tmp_path / "fake-timer.json"
    # A ratio of 1: the self-measurement (F.conv2d against itself) must read 1 as well.
    fake.write_text(json.dumps({"times": {"candidate": [1e-3], "reference": [1e-3]}, "call_jobs": False}))
    env = {**os.environ, "CONVPERF_FAKE_TIMER": str(fake), "PYTHONPATH": str(REPO)}
    env.pop("PYTEST_ADDOPTS", None)
    cmd = [sys.executable, "-m", "pytest", "--convperf", "perf_tests", "--convperf-device=cpu",
           f"--convperf-baselines={tmp_path / 'baselines'}", "-p", "no:cacheprovider"]  # fmt: skip
    update_md = REPO / "convperf-update.md"  # git-ignored: an earlier recording may have left one
    before = update_md.stat().st_mtime_ns if update_md.exists() else None
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=1200, check=False)
    out = proc.stdout
    assert proc.returncode == 0, out[-4000:] + proc.stderr[-2000:]
    assert "convperf CPU main job, step 1 of 2: recording 4 representative checks" in out
    assert "NEW 5 (5 recorded)" in out  # 4 tests, im2col forward + backward; no self-measurement
    assert "convperf CPU main job, step 2 of 2: 5 representative tests" in out
    assert " deselected / 5 selected" in out
    summary = out[out.index("step 2 of 2") :]
    assert "convperf: PASS 5" in summary and "NEW" not in summary.split("convperf: PASS 5")[1]
    assert not list((tmp_path / "baselines").glob("*")), "the repository's baselines folder is not written"
    assert (update_md.stat().st_mtime_ns if update_md.exists() else None) == before  # the checkout untouched
