"""A crash (abort) inside a correctness run ends its session; the next session names it (issue 24.3).

The record (``inflight``) is written before the run and left behind by the crash; the next start
prints the test, problem, seed and repro line, runs the repro first in its own process (which
crashes again, without ending the session) and forgets the record.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

TEST = """
import os
from pytest_convperf import Conv2dProblem
from pytest_convperf.correctness.oracle import assert_conv_close


def crashing(x, w, b=None, *args):
    os.abort()  # a segfaulting extension, as far as the process can tell


def test_crash():
    assert_conv_close(crashing, Conv2dProblem(n=1, c_in=2, h=5, w=5, c_out=3, kernel=3), seed=7)


def test_fine():
    pass
"""


def _pytest(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    env["PYTHONPATH"] = str(ROOT)
    env["TMPDIR"] = str(folder / "tmp")  # the records' folder: this test's own
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-q", *args],
        cwd=folder, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def test_a_crash_is_named_and_retried_at_the_next_start(tmp_path: Path) -> None:
    (tmp_path / "tmp").mkdir()
    (tmp_path / "test_crashy.py").write_text(TEST)
    first = _pytest(tmp_path, "test_crashy.py::test_crash")
    assert first.returncode < 0 or first.returncode == 134, first.stdout + first.stderr

    second = _pytest(tmp_path, "test_crashy.py::test_fine")
    out = second.stdout + second.stderr
    assert second.returncode == 0, out
    assert "died (segfault, abort or kill) in test_crashy.py::test_crash: the correctness run of" in out
    assert "n1-ci2-h5-w5-co3-k3x3-s1-p0-d1-g1-fp32-nchw (seed 7, forward)" in out
    assert "candidate test_crashy:crashing" in out
    assert 'repro: python -c "from pytest_convperf.correctness.oracle import reproduce' in out
    assert "it crashes again (signal 6)" in out

    third = _pytest(tmp_path, "test_crashy.py::test_fine")
    assert "died" not in third.stdout + third.stderr  # named once, then forgotten
