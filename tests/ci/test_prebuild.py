"""The suite's prebuild: every family built once in the main process before a CUDA run starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from kernels import _build
from perf_tests.conftest import prebuild_kernels


class _Config:
    def __init__(self, device: str = "auto", worker: bool = False) -> None:
        self._device = device
        if worker:
            self.workerinput: dict[str, Any] = {"workerid": "gw0"}

    def getoption(self, name: str, default: object = None) -> object:
        return self._device

    def getini(self, name: str) -> str:
        return ""


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    names: list[str] = []

    def fake_ensure_built(spec: _build.BuildSpec) -> tuple[Path, bool]:
        if spec.family == "_controls":
            raise _build.KernelBuildError("planted: x.cu(3): error: undeclared")
        names.append(spec.family)
        return spec.library, True

    monkeypatch.setattr(_build, "ensure_built", fake_ensure_built)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    return names


def test_controller_builds_every_family_and_reports_failures(built: list[str]) -> None:
    failures = prebuild_kernels(_Config())  # type: ignore[arg-type]
    assert built == [f for f in _build.families() if f != "_controls"]
    assert len(failures) == 1 and failures[0].startswith("_controls: planted")


@pytest.mark.parametrize("config", [_Config(worker=True), _Config(device="cpu")], ids=["worker", "cpu"])
def test_workers_and_cpu_runs_build_nothing(built: list[str], config: _Config) -> None:
    assert prebuild_kernels(config) == []  # type: ignore[arg-type]
    assert built == []


def test_no_gpu_builds_nothing(built: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert prebuild_kernels(_Config()) == []  # type: ignore[arg-type]
    assert built == []
