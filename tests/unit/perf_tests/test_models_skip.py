"""The model benchmarks skip with a reason when torchvision cannot be imported (issue 24.4): an
offline CPU install leaves a torchvision built for another torch, whose import raises a
RuntimeError that ``pytest.importorskip`` does not turn into a skip."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from perf_tests.models import build_model


def test_a_torchvision_for_another_torch_skips_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "torchvision"
    fake.mkdir()
    (fake / "__init__.py").write_text('raise RuntimeError("operator torchvision::nms does not exist")\n')
    for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(pytest.skip.Exception, match=r"torchvision::nms does not exist\); install the one"):
        build_model("resnet18", torch.device("cpu"))
