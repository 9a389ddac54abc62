"""Depthwise family: the PyTorch-ops reference against F.conv2d (CPU), argument errors, fake/meta
registrations (CPU, with the built library), and the CUDA ops (GPU only: opcheck, accuracy,
determinism, CUDA controls)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernels import _build
from kernels.depthwise import ops, reference
from perf_tests.shapes import depthwise_problems
from pytest_convperf.core.problem import Conv2dProblem
from pytest_convperf.correctness.correctness_report import ConvMismatch
from pytest_convperf.correctness.oracle import assert_conv_close
from tests.kernels.sanitizer import sanitize

Candidate = Callable[..., torch.Tensor]
CUDA = torch.cuda.is_available()


def _pair(v: int | tuple[int, int]) -> list[int]:
    return [v, v] if isinstance(v, int) else list(v)


needs_gpu = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")

SWEEP = depthwise_problems(
    kernel_sizes=(1, 2, 3, 4, 5, 6, 7),
    strides=(1, 2),
    dilations=(1, 2),
    max_channels=8,
    max_batch=3,
    min_batch=0,
    max_out_size=12,
    max_elements=2**14,
)


@settings(max_examples=40, deadline=None, derandomize=True, database=None)
@given(problem=SWEEP, seed=st.integers(0, 2**16))
def test_reference_matches_conv2d(problem: Conv2dProblem, seed: int) -> None:
    """Output and all three gradients of the reference against the fp64 F.conv2d oracle."""
    assert_conv_close(reference.forward, problem, seed=seed, backward=True, device="cpu")


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")
@pytest.mark.parametrize(
    ("kernel", "padding", "stride", "dilation"),
    [
        (4, "same", 1, 1),
        (3, "same", 1, 2),
        ((2, 5), "same", 1, 1),
        (3, "valid", 2, 1),
        ((3, 1), (2, 0), (2, 1), 1),
    ],
)
def test_reference_padding_modes_and_unbatched(kernel: Any, padding: Any, stride: Any, dilation: Any) -> None:
    kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
    x = torch.randn(2, 5, 11, 10, dtype=torch.float64)
    w = torch.randn(5, 1, kh, kw, dtype=torch.float64)
    b = torch.randn(5, dtype=torch.float64)
    for inp in (x, x[0]):  # batched and unbatched (C, H, W)
        expected = F.conv2d(inp, w, b, stride, padding, dilation, 5)
        torch.testing.assert_close(reference.forward(inp, w, b, stride, padding, dilation, 5), expected)


def test_reference_keeps_channels_last_and_empty_batch() -> None:
    x = torch.randn(0, 4, 6, 6)
    assert reference.forward(x, torch.randn(4, 1, 3, 3), None, 1, 1, 1, 4).shape == (0, 4, 6, 6)
    xc = torch.randn(2, 4, 6, 6).contiguous(memory_format=torch.channels_last)
    y = reference.forward(xc, torch.randn(4, 1, 3, 3), None, 1, 1, 1, 4)
    assert y.is_contiguous(memory_format=torch.channels_last)


BAD_CALLS: list[tuple[str, dict[str, Any], str]] = [
    ("dense", {"weight": torch.randn(4, 4, 3, 3), "groups": 1}, "not a depthwise conv"),
    ("grouped", {"weight": torch.randn(4, 2, 3, 3), "groups": 2}, "not a depthwise conv"),
    ("multiplier", {"weight": torch.randn(8, 1, 3, 3)}, "channel multiplier 2"),
    ("same+stride", {"padding": "same", "stride": 2}, "'same'"),
    ("bad padding", {"padding": -1}, "padding"),
    ("bad stride", {"stride": 0}, "stride"),
    ("kernel too big", {"weight": torch.randn(4, 1, 9, 9)}, "smaller than the dilated kernel"),
    ("bias shape", {"bias": torch.randn(3)}, "bias must have shape"),
    ("5-D input", {"input": torch.randn(1, 4, 2, 6, 6)}, "3-D"),
]


@pytest.mark.parametrize("fn", [reference.forward, ops.forward], ids=["reference", "ops"])
@pytest.mark.parametrize(("case", "changes", "match"), BAD_CALLS, ids=[c[0] for c in BAD_CALLS])
def test_bad_calls_raise_clear_value_errors(
    fn: Candidate, case: str, changes: dict[str, Any], match: str
) -> None:
    args: dict[str, Any] = {"input": torch.randn(2, 4, 6, 6), "weight": torch.randn(4, 1, 3, 3), "groups": 4}
    args.update(changes)
    with pytest.raises(ValueError, match=match):
        fn(**args)


def test_ops_on_cpu_tensors_points_to_the_reference() -> None:
    with pytest.raises(ValueError, match=r"reference\.forward"):
        ops.forward(torch.randn(1, 2, 5, 5), torch.randn(2, 1, 3, 3), groups=2)


# ---- registrations, with the built library (no GPU needed to load it) ----------------------------


@pytest.fixture(scope="module")
def dw_library() -> None:
    """The depthwise library loaded into this process (built first if needed: ~1.5 min here)."""
    spec = _build.make_spec("depthwise")
    if not spec.library.exists() and _build.nvcc_path() is None:
        pytest.skip(
            "the depthwise library is not built and nvcc is missing: run python -m kernels._build --all"
        )
    ops.ensure_loaded()


@pytest.fixture
def fake_mode() -> Iterator[Any]:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        yield mode


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize(
    ("kernel", "stride", "padding", "dilation"), [((3, 3), 1, 1, 1), ((2, 5), (2, 1), (1, 2), 2)]
)
def test_fake_shapes_strides_and_grads(
    dw_library: None,
    fake_mode: Any,
    layout: str,
    kernel: tuple[int, int],
    stride: Any,
    padding: Any,
    dilation: Any,
) -> None:
    """Under FakeTensorMode forward and both grads have F.conv2d's metadata.

    The forward goes through ``ops.forward`` on CUDA fakes; autograd runs on CPU fakes through the
    raw op (the autograd engine needs a real CUDA device for CUDA tensors, even fake ones).
    """
    fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
    with torch.device("meta"):
        expected = F.conv2d(
            torch.empty(2, 6, 13, 12), torch.empty(6, 1, *kernel), None, stride, padding, dilation, 6
        )
    x = torch.empty(2, 6, 13, 12, device="cuda").contiguous(memory_format=fmt)
    y = ops.forward(x, torch.empty(6, 1, *kernel, device="cuda"), None, stride, padding, dilation, 6)
    assert y.shape == expected.shape and y.device.type == "cuda"
    assert y.is_contiguous(memory_format=fmt)

    xc = torch.empty(2, 6, 13, 12).contiguous(memory_format=fmt).requires_grad_()
    w = torch.empty(6, 1, *kernel, requires_grad=True)
    b = torch.empty(6, requires_grad=True)
    yc = torch.ops.convperf_depthwise.forward(xc, w, b, _pair(stride), _pair(padding), _pair(dilation))
    assert yc.shape == expected.shape and yc.is_contiguous(memory_format=fmt)
    gx, gw, gb = torch.autograd.grad(yc, (xc, w, b), torch.empty_like(yc))
    assert gx.shape == xc.shape and gx.is_contiguous(memory_format=fmt)
    assert gw.shape == w.shape and gb.shape == b.shape


def test_meta_tensors(dw_library: None) -> None:
    x = torch.empty(3, 4, 9, 9, device="meta")
    w = torch.empty(4, 1, 3, 3, device="meta")
    y = torch.ops.convperf_depthwise.forward(x, w, None, [2, 2], [1, 1], [1, 1])
    assert y.shape == (3, 4, 5, 5)
    gx = torch.ops.convperf_depthwise.input_grad(y, w, [9, 9], [2, 2], [1, 1], [1, 1])
    assert gx.shape == x.shape
    gw = torch.ops.convperf_depthwise.weight_grad(y, x, [3, 3], [2, 2], [1, 1], [1, 1])
    assert gw.shape == w.shape


# ---- CUDA (skipped without a GPU) -----------------------------------------------------------------

OPCHECK_CASES = [
    # (n, c, h, w, kh, kw, stride, padding, dilation, dtype, channels_last)
    (2, 8, 17, 15, 3, 3, 1, 1, 1, torch.float32, False),
    (2, 8, 17, 15, 5, 5, 2, 2, 1, torch.float16, False),
    (1, 3, 9, 11, 2, 5, (2, 1), (0, 2), 2, torch.bfloat16, False),
    (2, 8, 17, 15, 3, 3, 1, 1, 1, torch.float32, True),
    (0, 4, 7, 7, 3, 3, 1, 1, 1, torch.float32, False),
]


@needs_gpu
@pytest.mark.parametrize("case", OPCHECK_CASES)
def test_opcheck(case: tuple[Any, ...]) -> None:
    n, c, h, w, kh, kw, s, p, d, dtype, cl = case
    ops.ensure_loaded()
    x = torch.randn(n, c, h, w, device="cuda", dtype=dtype)
    if cl:
        x = x.contiguous(memory_format=torch.channels_last)
    wt = torch.randn(c, 1, kh, kw, device="cuda", dtype=dtype)
    b = torch.randn(c, device="cuda", dtype=dtype)
    ns = torch.ops.convperf_depthwise
    torch.library.opcheck(
        ns.forward,
        (x.requires_grad_(), wt.requires_grad_(), b.requires_grad_(), _pair(s), _pair(p), _pair(d)),
    )
    y = ns.forward(x.detach(), wt.detach(), b.detach(), _pair(s), _pair(p), _pair(d))
    torch.library.opcheck(
        ns.input_grad, (torch.randn_like(y), wt.detach(), [h, w], _pair(s), _pair(p), _pair(d))
    )
    torch.library.opcheck(
        ns.weight_grad, (torch.randn_like(y), x.detach(), [kh, kw], _pair(s), _pair(p), _pair(d))
    )


CUDA_FUZZ = depthwise_problems(
    strides=(1, 2, 3),
    dilations=(1, 2),
    max_channels=40,
    max_batch=4,
    min_batch=0,
    max_out_size=40,
)


@needs_gpu
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=CUDA_FUZZ, seed=st.integers(0, 2**31 - 1))
def test_cuda_ops_match_oracle(problem: Conv2dProblem, seed: int) -> None:
    assert_conv_close(ops.forward, problem, seed=seed, backward=True, device="cuda")


@needs_gpu
@sanitize("depthwise")
@pytest.mark.parametrize(("layout", "stride"), [("nchw", 1), ("nhwc", 2)])
def test_cuda_small_forward_backward(layout: str, stride: int) -> None:
    """A small shape in each layout, forward and both gradients: the sanitizers' depthwise case."""
    problem = Conv2dProblem(
        n=2, c_in=8, h=9, w=11, c_out=8, kernel=(3, 3), stride=(stride, stride), padding=(1, 1),
        groups=8, layout=layout,
    )  # fmt: skip
    assert_conv_close(ops.forward, problem, backward=True, device="cuda")


@needs_gpu
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_cuda_weight_grad_is_deterministic(layout: str) -> None:
    problem = Conv2dProblem(
        n=8, c_in=64, h=56, w=56, c_out=64, kernel=(3, 3), padding=(1, 1), groups=64, layout=layout
    )
    ops.ensure_loaded()  # the raw op below exists only once the library is loaded (run alone: -k)
    x = problem.make_inputs(0, "cuda").input
    gy = torch.randn(problem.output_shape, device="cuda")
    runs = [torch.ops.convperf_depthwise.weight_grad(gy, x, [3, 3], [1, 1], [1, 1], [1, 1]) for _ in range(3)]
    assert all(torch.equal(runs[0], r) for r in runs[1:])


@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize(("k", "s"), [(3, 1), (5, 1), (7, 2)])
def test_cuda_w3_nhwc_weight_grad_against_w2_and_fp64(
    monkeypatch: pytest.MonkeyPatch, dtype: torch.dtype, k: int, s: int
) -> None:
    """channels_last: W3 (``wgrad_nhwc_vec``) and W2 (the generic kernel it replaces) in one process,
    both against the fp64 weight and bias grads; W3 bitwise repeatable, and a repeated call allocates
    only its two outputs (the workspace is the binding's cached one)."""
    from torch.nn import grad as nn_grad

    ops.ensure_loaded()
    c, p = 64, k // 2
    gen = torch.Generator(device="cuda").manual_seed(k)
    x = torch.randn(4, c, 29, 30, device="cuda", generator=gen).to(dtype)
    x = x.contiguous(memory_format=torch.channels_last)
    ho, wo = (29 + 2 * p - k) // s + 1, (30 + 2 * p - k) // s + 1
    gy = torch.randn(4, c, ho, wo, device="cuda", generator=gen).to(dtype)
    gy = gy.contiguous(memory_format=torch.channels_last)
    want = nn_grad.conv2d_weight(x.double(), (c, 1, k, k), gy.double(), s, p, 1, c)  # type: ignore[no-untyped-call]
    eps = torch.finfo(dtype).eps
    tol = 4 * eps * (4 * ho * wo) ** 0.5 + eps
    seen: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    for variant in ("w2", "w3", "w3"):
        monkeypatch.setenv("CONVPERF_DEPTHWISE_WGRAD", variant)
        allocs = torch.cuda.memory_stats()["allocation.all.allocated"]
        dw, db = torch.ops.convperf_depthwise.weight_bias_grad(gy, x, [k, k], [s, s], [p, p], [1, 1])
        if variant in seen:
            assert torch.cuda.memory_stats()["allocation.all.allocated"] - allocs == 2  # dw and db
        torch.testing.assert_close(dw.double(), want, rtol=tol, atol=tol)
        torch.testing.assert_close(db.double(), gy.double().sum(dim=(0, 2, 3)), rtol=tol, atol=tol)
        if variant in seen:  # the second w3 call: bitwise the first
            assert torch.equal(dw, seen[variant][0]) and torch.equal(db, seen[variant][1])
        seen[variant] = (dw, db)


@needs_gpu
@pytest.mark.parametrize("name", ["noop", "wrong_border", "wrong_odd_stride2"])
def test_cuda_controls_are_caught(name: str) -> None:
    from kernels._controls import ops as controls

    candidate = getattr(controls, name)

    @settings(max_examples=200, deadline=None, derandomize=True, database=None)
    @given(problem=CUDA_FUZZ, seed=st.integers(0, 2**16))
    def run(problem: Conv2dProblem, seed: int) -> None:
        assert_conv_close(candidate, problem, seed=seed, device="cuda")

    with pytest.raises(ConvMismatch):
        run()


@needs_gpu
@sanitize("_controls")
def test_cuda_correct_control_passes() -> None:
    from kernels._controls import ops as controls

    problem = Conv2dProblem(n=2, c_in=8, h=9, w=11, c_out=8, kernel=(3, 3), padding=(1, 1), groups=8)
    assert_conv_close(controls.correct, problem, device="cuda")
    assert_conv_close(controls.slowed(0.5), problem, device="cuda")


@needs_gpu
def test_huge_sample_fails_clearly() -> None:
    """(1, 2, 32800, 32800) fp16 (> 2^31 elements, as in PyTorch's 64-bit indexing test)."""
    if torch.cuda.get_device_properties(0).total_memory < 16 * 2**30:
        pytest.skip("needs 16 GiB of GPU memory")
    x = torch.zeros(1, 2, 32800, 32800, device="cuda", dtype=torch.float16)
    w = torch.ones(2, 1, 3, 3, device="cuda", dtype=torch.float16)
    with pytest.raises(RuntimeError, match="2\\^31"):
        ops.forward(x, w, None, 1, 1, 1, 2)


@needs_gpu
def test_torch_compile_traces_the_op() -> None:
    ops.ensure_loaded()
    x = torch.randn(2, 16, 20, 20, device="cuda", requires_grad=True)
    w = torch.randn(16, 1, 3, 3, device="cuda", requires_grad=True)
    compiled = torch.compile(lambda a, b: ops.forward(a, b, None, 1, 1, 1, 16).relu(), fullgraph=True)
    y = compiled(x, w)
    torch.testing.assert_close(y, F.conv2d(x, w, None, 1, 1, 1, 16).relu())
    gx, gw = torch.autograd.grad(y.sum(), (x, w))
    assert gx.shape == x.shape and gw.shape == w.shape
