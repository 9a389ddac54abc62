"""Loading the plugin must not import torch (HypothesisWorks' plugin is the model)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import sys, pytest
args = {args!r}
code = pytest.main(args)
print("TORCH_LOADED", "torch" in sys.modules)
raise SystemExit(int(code))
"""


def _run(tmp_path: Path, plugin_args: tuple[str, ...], args: list[str]) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE.format(args=[*plugin_args, *args])],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_help_does_not_import_torch(tmp_path: Path, plugin_args: tuple[str, ...]) -> None:
    out = _run(tmp_path, plugin_args, ["--help"])
    assert "--convperf-device" in out
    assert "TORCH_LOADED False" in out


def test_session_without_convperf_fixtures_does_not_import_torch(
    tmp_path: Path, plugin_args: tuple[str, ...]
) -> None:
    (tmp_path / "test_plain.py").write_text(
        "import pytest\n\n"
        "def test_plain():\n    assert 1 + 1 == 2\n\n"
        "@pytest.mark.convperf\ndef test_marked():\n    pass\n"
    )
    out = _run(tmp_path, plugin_args, ["-q", "-p", "no:cacheprovider", "test_plain.py"])
    assert "1 passed, 1 skipped" in out
    assert "TORCH_LOADED False" in out


def test_the_probe_can_see_torch_when_a_test_imports_it(tmp_path: Path, plugin_args: tuple[str, ...]) -> None:
    # Proves the probe is able to fail: the same session with a torch import reports True.
    (tmp_path / "test_torch.py").write_text("def test_t():\n    import torch  # noqa: F401\n")
    out = _run(tmp_path, plugin_args, ["-q", "-p", "no:cacheprovider", "test_torch.py"])
    assert "TORCH_LOADED True" in out
