"""Put our depthwise kernel into any model: walk it and swap depthwise ``nn.Conv2d`` layers.

A swapped layer keeps the *same* ``Parameter`` objects (weights are shared, not copied), so the
stock model and the swapped model compute the same function and their outputs and times can be
compared directly. The conv function is chosen per call from the input's device: on a GPU
``kernels.depthwise.ops.forward`` (our CUDA custom op), on a CPU ``kernels.depthwise.reference
.forward`` (the same algorithm in PyTorch ops). Both have ``F.conv2d``'s signature.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn


class ConvFn(Protocol):
    """A callable with the signature of ``torch.nn.functional.conv2d``."""

    def __call__(
        self,
        input: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        stride: tuple[int, int],
        padding: tuple[int, int],
        dilation: tuple[int, int],
        groups: int,
    ) -> torch.Tensor: ...


def stock_depthwise(device: torch.device) -> ConvFn:
    """PyTorch's own conv (cuDNN or the native depthwise kernel): the baseline."""
    fn: ConvFn = F.conv2d
    return fn


def our_depthwise(device: torch.device) -> ConvFn:
    """Our depthwise conv for ``device``: the CUDA op on a GPU, its PyTorch twin on a CPU."""
    if device.type == "cuda":
        from kernels.depthwise import ops

        gpu: ConvFn = ops.forward
        return gpu
    from kernels.depthwise import reference

    cpu: ConvFn = reference.forward
    return cpu


Resolver = Callable[[torch.device], ConvFn]

#: A conv with its geometry fixed: (input, weight, bias) -> output.
BoundConv = Callable[[torch.Tensor, torch.Tensor, "torch.Tensor | None"], torch.Tensor]

#: The depthwise implementations a model can be switched between, by name.
DEPTHWISE: dict[str, Resolver] = {"torch": stock_depthwise, "ours": our_depthwise}


def resolve(name: str) -> Resolver:
    """The resolver registered under ``name`` (raises ``ValueError`` listing the known names)."""
    try:
        return DEPTHWISE[name]
    except KeyError:
        raise ValueError(
            f"unknown depthwise implementation {name!r}; choose one of {sorted(DEPTHWISE)}"
        ) from None


def is_depthwise(module: nn.Module) -> bool:
    """True for an ``nn.Conv2d`` with ``groups == in_channels == out_channels > 1`` (channel
    multiplier 1, what ``kernels.depthwise`` implements), numeric padding and zero padding mode."""
    return (
        isinstance(module, nn.Conv2d)
        and module.groups == module.in_channels == module.out_channels
        and module.in_channels > 1
        and module.padding_mode == "zeros"
        and not isinstance(module.padding, str)
    )


class SwappedDepthwise(nn.Module):
    """A depthwise conv computed by a chosen implementation, sharing the original's parameters."""

    def __init__(self, conv: nn.Conv2d, impl: str = "ours") -> None:
        super().__init__()
        if not is_depthwise(conv):
            raise ValueError(
                "SwappedDepthwise needs a depthwise nn.Conv2d (groups == in_channels == out_channels > 1, "
                f"numeric padding, padding_mode='zeros'), got {conv}"
            )
        self.weight = conv.weight
        self.bias = conv.bias
        self.in_channels = conv.in_channels
        self.out_channels = conv.out_channels
        self.kernel_size = conv.kernel_size
        self.stride: tuple[int, int] = (int(conv.stride[0]), int(conv.stride[1]))
        padding = conv.padding
        assert not isinstance(padding, str)  # guaranteed by is_depthwise
        self.padding: tuple[int, int] = (int(padding[0]), int(padding[1]))
        self.dilation: tuple[int, int] = (int(conv.dilation[0]), int(conv.dilation[1]))
        self.groups = conv.groups
        self.impl = impl
        self._resolver = resolve(impl)
        self._bound: tuple[torch.device, BoundConv] | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Resolved once per device, not per call: the host cost per call is what whole-model timing
        # sees (issue 29: the per-call import and checks made EfficientNet-B0 slower with our kernel).
        bound = self._bound
        if bound is None or bound[0] != x.device:
            bound = (x.device, self._bind(x.device))
            self._bound = bound
        return bound[1](x, self.weight, self.bias)

    def _bind(self, device: torch.device) -> BoundConv:
        if self.impl == "ours" and device.type == "cuda":
            from kernels.depthwise import ops

            # geometry checked once here; per call only the C++ binding's tensor checks run
            return ops.prepare(self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)
        fn = self._resolver(device)
        stride, padding, dilation, groups = self.stride, self.padding, self.dilation, self.groups
        return lambda x, w, b: fn(x, w, b, stride, padding, dilation, groups)

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
            f"padding={self.padding}, dilation={self.dilation}, groups={self.groups}, impl={self.impl!r}"
        )


def swap_depthwise(model: nn.Module, impl: str = "ours") -> int:
    """Replace, in place, every depthwise ``nn.Conv2d`` of ``model`` by a :class:`SwappedDepthwise`.

    Parameters are shared with the replaced layers. Returns how many layers were swapped; a model
    that has none raises ``ValueError`` (swapping nothing would make a comparison meaningless).
    """
    resolve(impl)
    targets = [(name, mod) for name, mod in model.named_modules() if is_depthwise(mod)]
    for name, conv in targets:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        assert isinstance(conv, nn.Conv2d)
        setattr(parent, child, SwappedDepthwise(conv, impl))
    if not targets:
        raise ValueError(f"swap_depthwise: {type(model).__name__} has no depthwise nn.Conv2d to swap")
    return len(targets)


def count_depthwise(model: nn.Module, impl: str | None = None) -> int:
    """Depthwise layers still stock (``impl=None``) or swapped to ``impl``."""
    if impl is None:
        return sum(1 for m in model.modules() if is_depthwise(m))
    return sum(1 for m in model.modules() if isinstance(m, SwappedDepthwise) and m.impl == impl)
