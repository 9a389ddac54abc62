"""Depthwise conv2d on CUDA: ``forward`` with ``F.conv2d``'s signature, differentiable.

The ops ``torch.ops.convperf_depthwise.{forward,input_grad,weight_grad,weight_bias_grad}`` come from
``binding.cpp`` (``weight_bias_grad``: the weight and bias gradients from one kernel);
the library is built and loaded by ``kernels._build.LazyOps`` on the first call (or on
:func:`ensure_loaded`), which also registers their fake (meta) implementations. The autograd
formula of ``forward`` (input, weight and bias gradients; the gradient ops are not differentiable
again) is a C++ autograd kernel in ``binding.cpp``. Call ``ensure_loaded()`` before ``torch.compile``
traces a function that uses ``forward``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from kernels import _build
from kernels.conv_args import IntPair, Padding, output_hw
from kernels.depthwise.reference import depthwise_args

FAMILY = "depthwise"
NAMESPACE = _build.namespace(FAMILY)


def _wants_channels_last(t: torch.Tensor) -> bool:
    # Same rule as binding.cpp, so fake tensors get the strides the CUDA op returns.
    return not t.is_contiguous() and t.is_contiguous(memory_format=torch.channels_last)


def _empty(like: torch.Tensor, shape: Sequence[int], channels_last: bool) -> torch.Tensor:
    out = like.new_empty(tuple(shape))
    return out.contiguous(memory_format=torch.channels_last) if channels_last else out


def _register() -> None:
    def forward_fake(
        input: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        stride: Sequence[int],
        padding: Sequence[int],
        dilation: Sequence[int],
    ) -> torch.Tensor:
        ho, wo = output_hw(
            (input.shape[2], input.shape[3]), (weight.shape[2], weight.shape[3]),
            (stride[0], stride[1]), (padding[0], padding[1]), (dilation[0], dilation[1]),
        )  # fmt: skip
        return _empty(input, (input.shape[0], input.shape[1], ho, wo), _wants_channels_last(input))

    def input_grad_fake(
        grad_output: torch.Tensor,
        weight: torch.Tensor,
        input_hw: Sequence[int],
        stride: Sequence[int],
        padding: Sequence[int],
        dilation: Sequence[int],
    ) -> torch.Tensor:
        n, c = grad_output.shape[0], grad_output.shape[1]
        return _empty(grad_output, (n, c, input_hw[0], input_hw[1]), _wants_channels_last(grad_output))

    def weight_grad_fake(
        grad_output: torch.Tensor,
        input: torch.Tensor,
        kernel_hw: Sequence[int],
        stride: Sequence[int],
        padding: Sequence[int],
        dilation: Sequence[int],
    ) -> torch.Tensor:
        return input.new_empty((input.shape[1], 1, kernel_hw[0], kernel_hw[1]))

    def weight_bias_grad_fake(
        grad_output: torch.Tensor,
        input: torch.Tensor,
        kernel_hw: Sequence[int],
        stride: Sequence[int],
        padding: Sequence[int],
        dilation: Sequence[int],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return (
            weight_grad_fake(grad_output, input, kernel_hw, stride, padding, dilation),
            input.new_empty((input.shape[1],)),
        )

    torch.library.register_fake(f"{NAMESPACE}::forward")(forward_fake)
    torch.library.register_fake(f"{NAMESPACE}::input_grad")(input_grad_fake)
    torch.library.register_fake(f"{NAMESPACE}::weight_grad")(weight_grad_fake)
    torch.library.register_fake(f"{NAMESPACE}::weight_bias_grad")(weight_bias_grad_fake)
    global _forward_op
    _forward_op = getattr(torch.ops, NAMESPACE).forward.default


# The forward overload, bound once when the library loads: a call pays no LazyOps lookup, import or
# namespace formatting (the host cost per call is what whole-model timing sees, issue 29).
_forward_op: Any = None


# Build/load the library once and register the fake rules of its ops (the autograd kernel of forward
# is C++, in binding.cpp: no Python runs per call of forward or backward).
_ops = _build.LazyOps(FAMILY, _register)


def ensure_loaded() -> None:
    """Build/load the CUDA library once and register the ops' fake implementations."""
    _ops()


def _run_forward(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
) -> torch.Tensor:
    """The one call site of the forward op: :func:`forward` and :class:`Prepared` both end here."""
    op = _forward_op
    if op is None:
        _ops()  # the first call: build/load, register, bind the overloads
        op = _forward_op
    out: torch.Tensor = op(input, weight, bias, stride, padding, dilation)
    return out


def forward(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    stride: IntPair = 1,
    padding: Padding = 0,
    dilation: IntPair = 1,
    groups: int = 1,
) -> torch.Tensor:
    """Depthwise conv2d on CUDA with the signature and semantics of ``torch.nn.functional.conv2d``.

    Only depthwise calls (``groups == C_in``, weight ``(C_in, 1, kh, kw)``) are accepted; anything else
    raises ``ValueError``. fp32/fp16/bf16 (fp32 accumulation), NCHW or channels_last (the output keeps
    the input's layout), any kernel size, stride, padding (ints, pairs, ``'same'``, ``'valid'``) and
    dilation; an empty batch gives an empty result. Gradients flow to input, weight and bias.
    """
    a = depthwise_args(input, weight, bias, stride, padding, dilation, groups)
    if a.input.device.type != "cuda":
        raise ValueError(
            f"kernels.depthwise.ops.forward runs on CUDA tensors, but input is on {a.input.device}; "
            "use kernels.depthwise.reference.forward on the CPU"
        )
    out = _run_forward(a.input, weight, bias, list(a.stride), list(a.padding), list(a.dilation))
    return out.squeeze(0) if a.unbatched else out


class Prepared:
    """A depthwise conv2d whose geometry :func:`prepare` checked once: a call runs the op with no
    Python argument checks (the binding still checks device, dtype and shapes in C++). For a layer
    called many times with the same geometry, e.g. a swapped model layer; 4-D input only."""

    __slots__ = ("dilation", "padding", "stride")

    def __init__(self, stride: list[int], padding: list[int], dilation: list[int]) -> None:
        self.stride, self.padding, self.dilation = stride, padding, dilation

    def __call__(self, input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return _run_forward(input, weight, bias, self.stride, self.padding, self.dilation)


def prepare(
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride: IntPair,
    padding: IntPair,
    dilation: IntPair,
    groups: int,
) -> Prepared:
    """Check a depthwise conv's weight, bias and geometry once, as :func:`forward` does per call
    (``ValueError`` naming the problem), and return the checked-once callable. Padding must be
    numeric: ``'same'`` with an even kernel pads the input per call, which only :func:`forward` does."""
    if isinstance(padding, str):
        raise ValueError(f"prepare needs numeric padding, got {padding!r}; use forward for 'same'/'valid'")
    # A meta input larger than any dilated kernel: the checks that depend on the input are per call
    # (C++), the rest run here once.
    probe = torch.empty((1, int(weight.shape[0]) if weight.dim() else 0, 1 << 16, 1 << 16), device="meta")
    a = depthwise_args(probe, weight, bias, stride, padding, dilation, groups)
    return Prepared(list(a.stride), list(a.padding), list(a.dilation))
