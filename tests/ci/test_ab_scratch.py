"""tools/ab_scratch.py's depthwise scratch repository imports: its reference's own imports travel with it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tools.ab_scratch import make_repo


def test_the_depthwise_scratch_reference_imports(tmp_path: Path) -> None:
    make_repo(tmp_path, slow_from=None, n_commits=1, kind="depthwise")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    probe = "import kernels.depthwise.reference as r; print(r.__file__)"
    res = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-800:]
    assert res.stdout.strip().startswith(str(tmp_path))
