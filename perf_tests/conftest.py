"""Fixtures of the convperf suite: the candidate for the device in use (others may append).

On CUDA the depthwise candidate is our kernel (``kernels.depthwise.ops.forward``); on a CPU it is
the same algorithm in PyTorch ops (``kernels.depthwise.reference.forward``), compared with
PyTorch's CPU conv. Either way the reference is ``F.conv2d`` on that device.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from pytest_convperf.device import DeviceInfo

Candidate = Callable[..., torch.Tensor]


def depthwise_candidate(device_kind: str) -> Candidate:
    """``ops.forward`` on CUDA (built and loaded here, once), ``reference.forward`` on a CPU."""
    if device_kind == "cuda":
        from kernels.depthwise import ops

        ops.ensure_loaded()
        return ops.forward
    from kernels.depthwise import reference

    return reference.forward


@pytest.fixture
def dw_candidate(convperf_device: DeviceInfo) -> Candidate:
    """The depthwise candidate for the device in use (see :func:`depthwise_candidate`)."""
    return depthwise_candidate(convperf_device.kind)
