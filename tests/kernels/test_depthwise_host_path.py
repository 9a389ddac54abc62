"""The depthwise op's per-call host path: no lookup, import or Python argument check per call."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from perf_tests import swap


def _loaded_ops():  # type: ignore[no-untyped-def]
    from kernels import _build
    from kernels.depthwise import ops

    try:
        ops.ensure_loaded()
    except (_build.KernelBuildError, OSError) as exc:
        pytest.skip(f"the depthwise library could not be built/loaded: {exc}")
    return ops


def test_prepared_call_runs_no_lookup_and_no_python_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    ops = _loaded_ops()
    w = torch.empty(8, 1, 3, 3, device="meta")
    prepared = ops.prepare(w, None, 1, 1, 1, 8)

    def forbidden(*_: object) -> None:
        raise AssertionError("called on the hot path")

    monkeypatch.setattr(ops, "_ops", forbidden)
    monkeypatch.setattr(ops, "depthwise_args", forbidden)
    y = prepared(torch.empty(2, 8, 10, 10, device="meta"), w, None)  # the op's meta kernel: shapes only
    assert tuple(y.shape) == (2, 8, 10, 10)


def test_prepare_checks_the_geometry_once() -> None:
    ops = _loaded_ops()
    with pytest.raises(ValueError, match="groups=4"):
        ops.prepare(torch.empty(8, 1, 3, 3), None, 1, 1, 1, 4)
    with pytest.raises(ValueError, match="numeric padding"):
        ops.prepare(torch.empty(8, 1, 3, 3), None, 1, "same", 1, 8)


def test_swapped_layer_resolves_once_per_device(monkeypatch: pytest.MonkeyPatch) -> None:
    resolved: list[torch.device] = []

    def counting(device: torch.device) -> swap.ConvFn:
        resolved.append(device)
        return swap.stock_depthwise(device)

    monkeypatch.setitem(swap.DEPTHWISE, "counting", counting)
    layer = swap.SwappedDepthwise(nn.Conv2d(4, 4, 3, padding=1, groups=4), impl="counting")
    x = torch.randn(1, 4, 6, 6)
    for _ in range(3):
        out = layer(x)
    assert resolved == [x.device]
    torch.testing.assert_close(out, nn.functional.conv2d(x, layer.weight, layer.bias, 1, 1, 1, 4))
