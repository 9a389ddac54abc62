"""PyTorch's CPU weight gradient of a strided 1x1 NHWC conv crashes (oneDNN issue 6035); the default
reference takes another path there and says so (issue 24.3)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch.nn.functional as F

from pytest_convperf.core.problem import Conv2dProblem
from pytest_convperf.correctness.known_defects import ONEDNN_6035, conv2d_on_nchw_copies, defect_for

ROOT = Path(__file__).resolve().parents[3]
# Found by the README example's fuzz test; F.conv2d's weight gradient segfaults on it (torch 2.14.1).
CRASHING = Conv2dProblem.from_id("n7-ci8-h16-w5-co5-k1x1-s2x1-p0-d1-g1-fp32-nhwc-nobias")


def test_only_the_default_reference_on_the_defective_path_is_replaced() -> None:
    assert defect_for(F.conv2d, CRASHING, "cpu", weight_grad=True) is ONEDNN_6035
    assert defect_for(F.conv2d, CRASHING, "cpu", weight_grad=False) is None  # forward is fine
    assert defect_for(F.conv2d, CRASHING, "cuda:0", weight_grad=True) is None
    assert defect_for(conv2d_on_nchw_copies, CRASHING, "cpu", weight_grad=True) is None  # the user's own
    nchw = Conv2dProblem.from_id(CRASHING.id.replace("nhwc", "nchw"))
    unstrided = Conv2dProblem.from_id(CRASHING.id.replace("s2x1", "s1"))
    assert defect_for(F.conv2d, nchw, "cpu", weight_grad=True) is None
    assert defect_for(F.conv2d, unstrided, "cpu", weight_grad=True) is None


def test_the_crashing_problem_is_checked_and_the_reference_named() -> None:
    # In its own process: before the fix this segfaults (rc -11) inside torch.autograd.grad.
    code = (
        "from pytest_convperf.correctness.oracle import assert_conv_close\n"
        "from pytest_convperf.correctness.known_defects import conv2d_on_nchw_copies\n"
        "from pytest_convperf.core.problem import Conv2dProblem\n"
        f"p = Conv2dProblem.from_id({CRASHING.id!r})\n"
        "r = assert_conv_close(conv2d_on_nchw_copies, p, seed=297966, backward=True)\n"
        "print(r.reference)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "torch.nn.functional:conv2d (computed on NCHW copies" in res.stdout
    assert "oneDNN issue 6035" in res.stdout
