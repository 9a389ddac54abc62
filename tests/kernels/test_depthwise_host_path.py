"""The depthwise op's per-call host path: no lookup, import or Python argument check per call."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch
from torch import nn
from torch.nn import grad as nn_grad

from perf_tests import swap
from tests.kernels import launch_count


def _loaded_ops() -> ModuleType:
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


def test_cpp_autograd_gives_the_gradients_of_conv2d() -> None:
    """binding.cpp's autograd kernel, run on the CPU: the ops get CPU kernels for this test (the
    reference and ``torch.nn.grad``), and the input, weight and bias gradients that come back through
    the C++ backward must be F.conv2d's."""
    ops = _loaded_ops()
    from kernels.depthwise import reference

    def forward_cpu(x, w, b, s, p, d):  # type: ignore[no-untyped-def]
        return reference.forward(x, w, b, s, p, d, x.shape[1])

    def input_grad_cpu(g, w, hw, s, p, d):  # type: ignore[no-untyped-def]
        return nn_grad.conv2d_input((g.shape[0], g.shape[1], *hw), w, g, s, p, d, g.shape[1])  # type: ignore[no-untyped-call]

    def weight_grad_cpu(g, x, khw, s, p, d):  # type: ignore[no-untyped-def]
        return nn_grad.conv2d_weight(x, (x.shape[1], 1, *khw), g, s, p, d, x.shape[1])  # type: ignore[no-untyped-call]

    def weight_bias_grad_cpu(g, x, khw, s, p, d):  # type: ignore[no-untyped-def]
        return weight_grad_cpu(g, x, khw, s, p, d), g.sum(dim=(0, 2, 3))  # type: ignore[no-untyped-call]

    lib = torch.library.Library(ops.NAMESPACE, "IMPL")  # type: ignore[no-untyped-call]
    try:
        lib.impl("forward", forward_cpu, "CPU")  # type: ignore[no-untyped-call]
        lib.impl("input_grad", input_grad_cpu, "CPU")  # type: ignore[no-untyped-call]
        lib.impl("weight_grad", weight_grad_cpu, "CPU")  # type: ignore[no-untyped-call]
        lib.impl("weight_bias_grad", weight_bias_grad_cpu, "CPU")  # type: ignore[no-untyped-call]
        gen = torch.Generator().manual_seed(0)
        x, w, b = (
            torch.randn(*s, generator=gen, dtype=torch.float64) for s in ((2, 3, 9, 8), (3, 1, 3, 3), (3,))
        )
        leaves = tuple(t.requires_grad_() for t in (x, w, b))
        out = ops._run_forward(x, w, b, [2, 2], [1, 1], [1, 1])
        g = torch.randn(out.shape, generator=gen, dtype=torch.float64)
        got = torch.autograd.grad(out, leaves, g)
        want = torch.autograd.grad(nn.functional.conv2d(x, w, b, 2, 1, 1, 3), leaves, g)
        for a, e in zip(got, want, strict=True):
            torch.testing.assert_close(a, e)
        (only_x,) = torch.autograd.grad(
            ops._run_forward(x, w.detach(), None, [1, 1], [1, 1], [1, 1]).sum(), (x,)
        )
        torch.testing.assert_close(
            only_x, torch.autograd.grad(nn.functional.conv2d(x, w.detach(), None, 1, 1, 1, 3).sum(), (x,))[0]
        )
    finally:
        lib._destroy()  # type: ignore[no-untyped-call]


@pytest.mark.parametrize(
    ("bias", "wants", "expected"),
    [
        (True, "xwb", ["input_grad", "weight_bias_grad"]),  # the bias grad comes with the weight's
        (False, "xw", ["input_grad", "weight_grad"]),
        (True, "wb", ["weight_bias_grad"]),
        (True, "b", ["sum"]),  # no weight grad wanted: the bias alone is a sum
    ],
)
def test_backward_launches(bias: bool, wants: str, expected: list[str]) -> None:
    """The ops (GPU launches) of the C++ backward, counted on meta tensors: with a bias, its gradient
    is fused into the weight grad's kernel; no separate ``sum`` (W1's) runs."""
    ops = _loaded_ops()
    x, w = torch.empty(2, 8, 10, 10, device="meta"), torch.empty(8, 1, 3, 3, device="meta")
    b = torch.empty(8, device="meta") if bias else None
    leaves = {"x": x, "w": w, **({"b": b} if b is not None else {})}
    wanted = [leaves[name].requires_grad_() for name in wants]
    out = ops._run_forward(x, w, b, [1, 1], [1, 1], [1, 1])
    grad = torch.empty_like(out)
    with launch_count.counting() as (rec, _):
        torch.autograd.grad(out, wanted, grad)
    assert sorted(rec.launches) == sorted(expected)
