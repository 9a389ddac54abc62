"""README's "Using the plugin" example, extracted from README.md and run from a temporary folder.

It must run outside this repository (nothing of ``kernels/`` or ``perf_tests/`` importable), with
``--convperf`` so the timed check runs too. ``.ci/run`` also runs this file in the CPU-only
environment (the CPU build of torch, the plugin installed without extras).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def readme_example(readme: Path = ROOT / "README.md") -> str:
    """The first python block of the "Using the plugin" section."""
    text = readme.read_text()
    section = text.split("## Using the plugin", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match, "README.md's 'Using the plugin' section has no ```python block"
    return match.group(1)


def test_the_example_is_the_users_own_code() -> None:
    code = readme_example()
    assert "import kernels" not in code and "from kernels" not in code
    assert "perf_tests" not in code


def test_readme_example_runs_in_a_fresh_folder(tmp_path: Path) -> None:
    (tmp_path / "test_my_conv.py").write_text(readme_example())
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS")}
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "--convperf",
         "--convperf-device=cpu", "-rA", "test_my_conv.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    assert re.search(r"\b3 passed\b", out) and "skipped" not in out, out[-4000:]
    assert "ModuleNotFoundError" not in out
