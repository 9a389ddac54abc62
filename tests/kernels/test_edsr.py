"""EDSR models, the fused dw+pw reference and backward formula, and the depthwise swap helper.

CPU-only and fast (tiny images), except the tests marked as needing a CUDA GPU or nvcc.
"""

from __future__ import annotations

import copy
import shutil
import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from kernels.edsr import ops, reference
from perf_tests import edsr_models as models
from perf_tests import swap
from perf_tests.edsr_models import EDSR, count_parameters
from tests.kernels.sanitizer import sanitize

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")


# ---- parameter counts (docs/design.md §16) ---------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"block": "standard"}, 1_332_931),
        ({"block": "separable"}, 304_835),
        ({"block": "standard", "post_body_conv": True}, 1_369_859),
        ({"block": "separable", "post_body_conv": True}, 309_635),
        ({"block": "standard", "scale": 3}, 1_517_571),
        ({"block": "standard", "scale": 4}, 1_480_643),
        ({"block": "separable", "scale": 3}, 489_475),
        ({"block": "separable", "scale": 4}, 452_547),
        ({"block": "standard", "scale": 3, "post_body_conv": True}, 1_554_499),
        ({"block": "standard", "scale": 4, "post_body_conv": True}, 1_517_571),
    ],
    ids=str,
)
def test_trainable_parameter_counts(kwargs: dict[str, object], expected: int) -> None:
    model = EDSR(**kwargs)  # type: ignore[arg-type]
    assert count_parameters(model) == expected


def test_meanshift_is_frozen_and_counted_only_in_all_parameters() -> None:
    model = EDSR(block="standard")
    assert count_parameters(model, trainable_only=False) == 1_332_931 + 24
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
    assert sorted(frozen) == ["add_mean.bias", "add_mean.weight", "sub_mean.bias", "sub_mean.weight"]


def test_full_edsr_x2_count() -> None:
    model = EDSR(n_resblocks=32, n_feats=256, res_scale=0.1, post_body_conv=True)
    assert count_parameters(model) == 40_729_603


def test_bad_options_name_the_problem() -> None:
    with pytest.raises(ValueError, match="block='dense'"):
        EDSR(block="dense")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="scale=5"):
        EDSR(scale=5)
    with pytest.raises(ValueError, match="needs block='separable'"):
        EDSR(block="standard", depthwise="fused")
    with pytest.raises(ValueError, match="must be one of"):
        EDSR(block="separable").set_depthwise("cudnn")


# ---- forward semantics ------------------------------------------------------------------------


@pytest.mark.parametrize("block", ["standard", "separable"])
def test_edsr_upscales_by_two(block: models.Block) -> None:
    torch.manual_seed(0)
    model = EDSR(block=block, n_resblocks=2).eval()
    with torch.no_grad():
        out = model(torch.rand(2, 3, 7, 9) * 255)
    assert out.shape == (2, 3, 14, 18)
    assert torch.isfinite(out).all()


def test_separable_block_is_dw_then_pw_with_relu_between_convs() -> None:
    torch.manual_seed(1)
    block = models.ResBlock(8, "separable", res_scale=0.5).double()
    x = torch.randn(2, 8, 5, 6, dtype=torch.float64)
    c1, c2 = block.conv1, block.conv2
    assert isinstance(c1, models.SeparableConv2d) and isinstance(c2, models.SeparableConv2d)
    h = F.relu(c1.pw(F.conv2d(x, c1.dw.weight, c1.dw.bias, 1, 1, 1, 8)))
    expected = x + 0.5 * c2.pw(F.conv2d(h, c2.dw.weight, c2.dw.bias, 1, 1, 1, 8))
    torch.testing.assert_close(block(x), expected, rtol=1e-12, atol=1e-12)


def _separable_model(depthwise: models.Depthwise = "torch") -> EDSR:
    torch.manual_seed(2)
    return EDSR(block="separable", n_resblocks=3, n_feats=16, depthwise=depthwise).double()


def test_fused_reference_backend_matches_stock_model_fp64() -> None:
    stock = _separable_model()
    fused = copy.deepcopy(stock).set_depthwise("fused")
    x = torch.rand(1, 3, 10, 12, dtype=torch.float64) * 255
    torch.testing.assert_close(fused(x), stock(x), rtol=1e-10, atol=1e-9)


def test_our_depthwise_backend_matches_stock_model_fp64() -> None:
    pytest.importorskip("kernels.depthwise.reference", reason="kernels.depthwise (H3) not present yet")
    stock = _separable_model()
    ours = copy.deepcopy(stock).set_depthwise("ours")
    x = torch.rand(1, 3, 10, 12, dtype=torch.float64) * 255
    torch.testing.assert_close(ours(x), stock(x), rtol=1e-10, atol=1e-9)


# ---- fused reference and the custom op's backward formula -------------------------------------


def _sep_inputs(c: int = 16, dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, c, 9, 11, generator=g, dtype=dtype)
    wd = torch.randn(c, 1, 3, 3, generator=g, dtype=dtype) / 3
    bd = torch.randn(c, generator=g, dtype=dtype)
    wp = torch.randn(c, c, 1, 1, generator=g, dtype=dtype) / c**0.5
    bp = torch.randn(c, generator=g, dtype=dtype)
    res = torch.randn(2, c, 9, 11, generator=g, dtype=dtype)
    return x, wd, bd, wp, bp, res


@pytest.mark.parametrize(("relu", "with_res"), [(True, False), (False, True), (True, True), (False, False)])
@pytest.mark.parametrize("c", [12, 16])
def test_reference_equals_unfused_composition(relu: bool, with_res: bool, c: int) -> None:
    x, wd, bd, wp, bp, res = _sep_inputs(c)
    r = res if with_res else None
    got = reference.sep_conv(x, wd, bd, wp, bp, r, 0.3, relu)
    want = reference.sep_conv_unfused(x, wd, bd, wp, bp, r, 0.3, relu)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_reference_rejects_non_block_shapes() -> None:
    x, wd, bd, wp, bp, _ = _sep_inputs(16)
    with pytest.raises(ValueError, match=r"pw_weight must have shape \(16, 16, 1, 1\)"):
        reference.sep_conv(x, wd, bd, wp[:8], bp)
    with pytest.raises(ValueError, match="dw_weight"):
        reference.sep_conv(x, wd[..., :2], bd, wp, bp)
    with pytest.raises(ValueError, match="residual must have"):
        reference.sep_conv(x, wd, bd, wp, bp, x[:1])


@pytest.mark.parametrize(("relu", "with_res"), [(True, False), (False, True), (True, True)])
def test_op_backward_formula_matches_autograd_of_the_composition(relu: bool, with_res: bool) -> None:
    x, wd, bd, wp, bp, res = _sep_inputs(16)
    leaves = [t.clone().requires_grad_() for t in (x, wd, bd, wp, bp, res)]
    r = leaves[5] if with_res else None
    lx, lwd, lbd, lwp, lbp = leaves[:5]
    out = reference.sep_conv_unfused(lx, lwd, lbd, lwp, lbp, r, 0.7, relu)
    grad = torch.randn_like(out)
    wrt = leaves if with_res else leaves[:5]
    want = torch.autograd.grad(out, wrt, grad)

    ctx = types.SimpleNamespace(saved_tensors=None)

    def save(*tensors: torch.Tensor) -> None:
        ctx.saved_tensors = tensors

    ctx.save_for_backward = save  # type: ignore[attr-defined]
    ops._setup_context(ctx, (x, wd, bd, wp, bp, res if with_res else None, 0.7, relu), out.detach())
    got = ops._backward(ctx, grad)
    assert got[6] is None and got[7] is None
    assert (got[5] is None) == (not with_res)
    for g, w in zip([t for t in got[:6] if t is not None], want):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-10)


def test_ops_refuses_cpu_tensors_with_a_pointer_to_the_reference() -> None:
    x, wd, bd, wp, bp, _ = _sep_inputs(16, torch.float32)
    with pytest.raises(ValueError, match=r"reference\.sep_conv"):
        ops.sep_conv(x, wd, bd, wp, bp)


# ---- the depthwise swap helper ----------------------------------------------------------------


def test_swap_depthwise_in_mobilenet_v2_shares_parameters() -> None:
    tv = pytest.importorskip("torchvision")
    model = tv.models.mobilenet_v2(weights=None)
    n_dw = swap.count_depthwise(model)
    params_before = {id(p) for p in model.parameters()}
    assert swap.swap_depthwise(model, "torch") == n_dw == 17
    assert swap.count_depthwise(model) == 0
    assert swap.count_depthwise(model, "torch") == 17
    assert {id(p) for p in model.parameters()} == params_before


def test_swapped_model_computes_the_stock_function() -> None:
    pytest.importorskip("kernels.depthwise.reference", reason="kernels.depthwise (H3) not present yet")
    tv = pytest.importorskip("torchvision")
    torch.manual_seed(4)
    stock = tv.models.mobilenet_v2(weights=None).eval()
    ours = copy.deepcopy(stock)
    swap.swap_depthwise(ours, "ours")
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), stock(x), rtol=1e-4, atol=1e-5)


def test_swap_refuses_a_model_without_depthwise_convs() -> None:
    with pytest.raises(ValueError, match="no depthwise"):
        swap.swap_depthwise(nn.Sequential(nn.Conv2d(3, 8, 3)))
    with pytest.raises(ValueError, match="unknown depthwise implementation"):
        swap.swap_depthwise(nn.Sequential(nn.Conv2d(4, 4, 3, groups=4)), "cudnn")
    with pytest.raises(ValueError, match="needs a depthwise"):
        swap.SwappedDepthwise(nn.Conv2d(4, 8, 3))


# ---- the CUDA kernel: build report on any machine with nvcc, numerics on a GPU ----------------


@pytest.mark.skipif(
    shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists(), reason="needs nvcc"
)
def test_fused_kernel_compiles_without_register_spills() -> None:
    from kernels import _build

    rows = _build.ptxas_report(Path(ops.__file__).with_name("edsr.cu"), ("8.0", "9.0"))
    assert {r.arch for r in rows} == {"sm_80", "sm_90"}
    assert len(rows) == 12  # C in {16, 32, 64} x variants v1, v2 x two archs
    for r in rows:
        assert r.spill_stores == 0 and r.spill_loads == 0, r
        assert r.registers <= 168, r  # __launch_bounds__(128, 3): three blocks per SM


@needs_cuda
@pytest.mark.parametrize(
    "shape",
    [
        (2, 64, 48, 48),
        (1, 64, 37, 61),
        (1, 64, 20, 36),
        pytest.param((3, 32, 8, 33), marks=sanitize("edsr")),
        (1, 16, 1, 1),
    ],
)
@pytest.mark.parametrize(("relu", "with_res"), [(True, False), (False, True)])
def test_fused_kernel_matches_reference(shape: tuple[int, int, int, int], relu: bool, with_res: bool) -> None:
    c = shape[1]
    _, wd, bd, wp, bp, _ = (t.float().cuda() for t in _sep_inputs(c))
    x = torch.randn(shape, device="cuda")
    res = torch.randn(shape, device="cuda") if with_res else None
    got = ops.sep_conv(x, wd, bd, wp, bp, res, 0.5, relu)
    want = reference.sep_conv_unfused(
        x.double(),
        wd.double(),
        bd.double(),
        wp.double(),
        bp.double(),
        None if res is None else res.double(),
        0.5,
        relu,
    )
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-4)


@needs_cuda
@sanitize("edsr")
def test_fused_kernel_handles_a_misaligned_residual_view() -> None:
    shape = (2, 64, 20, 36)
    _, wd, bd, wp, bp, _ = (t.float().cuda() for t in _sep_inputs(64))
    x = torch.randn(shape, device="cuda")
    storage = torch.randn(x.numel() + 1, device="cuda")
    res = storage[1:].view(shape)  # 4-byte offset: the float4 epilogue must not read it directly
    got = ops.sep_conv(x, wd, bd, wp, bp, res, 0.25, True)
    want = reference.sep_conv_unfused(
        x.double(), wd.double(), bd.double(), wp.double(), bp.double(), res.double(), 0.25, True
    )
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-4)


@needs_cuda
def test_fused_op_passes_opcheck() -> None:
    x, wd, bd, wp, bp, res = (t.float().cuda() for t in _sep_inputs(16))
    ops.load()
    for args in ((x, wd, bd, wp, bp, None, 1.0, True), (x, wd, bd, wp, bp, res, 0.1, False)):
        torch.library.opcheck(torch.ops.convperf_edsr.sep_conv.default, args)


def _edsr_built() -> bool:
    from kernels import _build

    try:
        return _build.make_spec("edsr").library.exists()
    except Exception:
        return False


@pytest.mark.skipif(
    not _edsr_built(),
    reason="the edsr extension is not in this build cache; run `python -m kernels._build edsr` first",
)
def test_built_op_has_schema_fake_and_autograd_registrations() -> None:
    """Without a GPU: load the built library, run the op on meta tensors through autograd."""
    ops.load()
    op = torch.ops.convperf_edsr.sep_conv
    x = torch.empty(2, 64, 9, 11, device="meta", requires_grad=True)
    shapes = ((64, 1, 3, 3), (64,), (64, 64, 1, 1), (64,))
    weights = [torch.empty(s, device="meta", requires_grad=True) for s in shapes]
    y = op(x, *weights, None, 1.0, True)
    assert y.shape == x.shape and y.device.type == "meta"
    grads = torch.autograd.grad(y, [x, *weights], torch.empty_like(y))
    assert [g.shape for g in grads] == [x.shape, *(w.shape for w in weights)]
    with pytest.raises(NotImplementedError, match="CPU"):
        op(*(torch.zeros(t.shape) for t in (x, *weights)), None, 1.0, True)
