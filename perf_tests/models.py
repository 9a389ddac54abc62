"""Helpers for the model and layer benchmarks: sizes, phase callables, tables, report files.

Whole-model timings of stock PyTorch are absolute times, far noisier between runs than the
paired ratios the baselines gate, so they are written to the report as tables (seed 004's
layout) and never asserted. On a CPU the defaults are scaled down so the files finish in a few
minutes on 2 cores; ``CONVPERF_MODELS_FULL=1`` runs the GPU sizes on a CPU too.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from pytest_convperf import DeviceInfo, Measurement

FULL_ENV = "CONVPERF_MODELS_FULL"

MODELS: tuple[str, ...] = (
    "vgg16",
    "vgg16_bn",
    "vgg19",
    "vgg19_bn",
    "resnet18",
    "resnet34",
    "resnet50",
    "resnet101",
    "resnet152",
)
DISPLAY: dict[str, str] = {
    "vgg16": "VGG16",
    "vgg16_bn": "VGG16 BN",
    "vgg19": "VGG19",
    "vgg19_bn": "VGG19 BN",
    "resnet18": "Resnet18",
    "resnet34": "Resnet34",
    "resnet50": "Resnet50",
    "resnet101": "Resnet101",
    "resnet152": "Resnet152",
    "mobilenet_v2": "MobileNetV2",
    "efficientnet_b0": "EfficientNet-B0",
}
#: Seed 004: batch 8 x 3 x 224 x 224, batch 4 for the two deepest ResNets.
GPU_BATCH: dict[str, int] = {"resnet101": 4, "resnet152": 4}
GPU_IMAGE = 224
CPU_BATCH = 1
CPU_IMAGE = 64

MODEL_PHASES: tuple[str, ...] = ("forward", "backward", "total", "inference")
LAYER_PHASES: tuple[str, ...] = ("forward", "backward", "total")

# On a CPU a whole VGG step takes about a second: few rounds, a short warm-up, stated in the
# report. On a GPU the plugin's defaults (docs/design.md §5) apply.
CPU_RULE: dict[str, Any] = {
    "min_rounds": 3,
    "max_time_s": 0.5,
    "warmup_min_calls": 1,
    "warmup_window": 1,
    "warmup_cap_s": 0.3,
}


def full_size(device: torch.device) -> bool:
    """True on a GPU, or on a CPU when ``CONVPERF_MODELS_FULL=1``."""
    return device.type == "cuda" or os.environ.get(FULL_ENV, "") not in ("", "0")


# Layers take milliseconds on a CPU: more rounds for the same wall time.
LAYER_CPU_RULE: dict[str, Any] = {"min_rounds": 11, "max_time_s": 0.5, "warmup_cap_s": 0.3}


# Whole models on a GPU: advisory numbers, so a 1 s cap per phase keeps the 36 timings of the model
# table near a minute on an H100 instead of up to 5 s each.
MODEL_GPU_RULE: dict[str, Any] = {"max_time_s": 1.0, "warmup_cap_s": 1.0}


def rule_for(device: torch.device, *, layer: bool = False) -> dict[str, Any]:
    """Stop-rule overrides for ``convperf_measure_one``: CPU rules (models, layers); on a GPU a
    shorter cap for whole models and the plugin's defaults (docs/design.md §5) for layers."""
    if device.type == "cuda":
        return {} if layer else dict(MODEL_GPU_RULE)
    return dict(LAYER_CPU_RULE if layer else CPU_RULE)


@contextmanager
def benchmark_device(info: DeviceInfo, *, empty_cache: bool = False) -> Iterator[torch.device]:
    """The torch device in use, cuDNN benchmark mode on for timing (restored afterwards); with
    ``empty_cache`` the CUDA caching allocator is emptied afterwards too (big models)."""
    saved = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = info.is_cuda
    try:
        yield torch.device(info.torch_device)
    finally:
        torch.backends.cudnn.benchmark = saved
        if empty_cache and info.is_cuda:
            torch.cuda.empty_cache()


def model_input_shape(name: str, device: torch.device) -> tuple[int, int, int, int]:
    """(batch, 3, image, image): seed 004's sizes on a GPU, batch 1 x 64 x 64 on a CPU."""
    if full_size(device):
        return (GPU_BATCH.get(name, 8), 3, GPU_IMAGE, GPU_IMAGE)
    return (CPU_BATCH, 3, CPU_IMAGE, CPU_IMAGE)


def torchvision_or_skip() -> Any:
    """torchvision, or a skip naming why it cannot be used: missing, or installed for another torch
    (an offline CPU install leaves one whose import fails with ``operator torchvision::nms does not
    exist``, which ``pytest.importorskip`` lets through as an error)."""
    try:
        import torchvision
    except Exception as exc:  # ImportError, or the RuntimeError of a torchvision built for another torch
        pytest.skip(
            f"the model benchmarks need a working torchvision: import torchvision failed "
            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); install the one "
            f"matching torch {torch.__version__} (pip install -e '.[suite]' -c constraints.txt)"
        )
    return torchvision


def build_model(name: str, device: torch.device, seed: int = 0) -> nn.Module:
    """A torchvision model with random weights (``weights=None``: nothing is downloaded)."""
    tv = torchvision_or_skip()
    torch.manual_seed(seed)
    model: nn.Module = tv.models.get_model(name, weights=None)
    return model.to(device)


def seeded_input(shape: Sequence[int], device: torch.device, seed: int = 0) -> torch.Tensor:
    """Normal random input from a fixed seed, generated on the CPU so every device sees the same data."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(device)


def phase_callables(model: nn.Module, x: torch.Tensor) -> dict[str, Callable[[], object]]:
    """No-argument calls for the four phases of seed 004.

    ``forward``: a training-mode forward (autograd graph built). ``backward``: the backward of one
    stored graph (``retain_graph``) with gradients reset first, as in a training step.
    ``total``: forward plus backward. ``inference``: eval mode under ``torch.inference_mode``.
    The model is left in train mode; ``inference`` switches to eval for its call only.
    """
    model.train()
    out = model(x)
    grad = torch.randn_like(out)

    def forward() -> object:
        return model(x)

    def backward() -> object:
        model.zero_grad(set_to_none=True)
        out.backward(grad, retain_graph=True)
        return None

    def total() -> object:
        model.zero_grad(set_to_none=True)
        model(x).backward(grad)
        return None

    def inference() -> object:
        model.eval()
        try:
            with torch.inference_mode():
                return model(x)
        finally:
            model.train()

    return {"forward": forward, "backward": backward, "total": total, "inference": inference}


# ---- layer benchmarks -------------------------------------------------------------------------


@dataclass(frozen=True)
class LayerSpec:
    """One row of seed 004's layer table: a layer factory and its input shape."""

    name: str
    description: str
    make: Callable[[], nn.Module]
    gpu_shape: tuple[int, ...]
    cpu_shape: tuple[int, ...]

    def input_shape(self, device: torch.device) -> tuple[int, ...]:
        return self.gpu_shape if full_size(device) else self.cpu_shape


_CONV_GPU = (8, 64, 56, 56)
_CONV_CPU = (1, 64, 56, 56)
LAYERS: tuple[LayerSpec, ...] = (
    LayerSpec(
        "Conv3x3/1",
        "Conv2d 64->64, 3x3 kernel, 1x1 padding, 1x1 stride",
        lambda: nn.Conv2d(64, 64, 3, stride=1, padding=1),
        _CONV_GPU,
        _CONV_CPU,
    ),
    LayerSpec(
        "Conv5x5/1",
        "Conv2d 64->64, 5x5 kernel, 2x2 padding, 1x1 stride",
        lambda: nn.Conv2d(64, 64, 5, stride=1, padding=2),
        _CONV_GPU,
        _CONV_CPU,
    ),
    LayerSpec(
        "Conv3x3/2",
        "Conv2d 64->64, 3x3 kernel, 1x1 padding, 2x2 stride",
        lambda: nn.Conv2d(64, 64, 3, stride=2, padding=1),
        _CONV_GPU,
        _CONV_CPU,
    ),
    LayerSpec(
        "Conv5x5/2",
        "Conv2d 64->64, 5x5 kernel, 2x2 padding, 2x2 stride",
        lambda: nn.Conv2d(64, 64, 5, stride=2, padding=2),
        _CONV_GPU,
        _CONV_CPU,
    ),
    LayerSpec("Dense", "Linear 1024 => 512", lambda: nn.Linear(1024, 512), (64, 1024), (64, 1024)),
    LayerSpec(
        "BatchNorm", "BatchNorm2d(64), training mode", lambda: nn.BatchNorm2d(64), _CONV_GPU, _CONV_CPU
    ),
)


def layer_callables(layer: nn.Module, x: torch.Tensor) -> dict[str, Callable[[], object]]:
    """``forward``, ``backward`` (one stored graph, input and weight grads) and ``total``."""
    x = x.detach().requires_grad_(True)
    out = layer(x)
    grad = torch.randn_like(out)

    def forward() -> object:
        return layer(x)

    def backward() -> object:
        layer.zero_grad(set_to_none=True)
        x.grad = None
        out.backward(grad, retain_graph=True)
        return None

    def total() -> object:
        layer.zero_grad(set_to_none=True)
        x.grad = None
        layer(x).backward(grad)
        return None

    return {"forward": forward, "backward": backward, "total": total}


# ---- tables and report files ------------------------------------------------------------------


def framework() -> str:
    """``PyTorch <version>`` as in seed 004's Framework column."""
    return f"PyTorch {torch.__version__.split('+')[0]}"


def device_line(device: torch.device) -> str:
    """``GPU USED --- <name>`` / ``CPU USED --- <model> (<n> threads)`` as in seed 004."""
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return f"GPU USED --- {props.name} {props.total_memory / 2**30:.0f} GB"
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"CPU USED --- {cpu} ({torch.get_num_threads()} threads)"


def fmt_time(m: Measurement | None, unit: str) -> str:
    """``0.0245 s`` / ``0.2312 ms`` (4 significant digits), ``*`` when the timing was noisy."""
    if m is None:
        return "-"
    scale = {"s": 1.0, "ms": 1e3, "us": 1e6}[unit]
    value = m.median * scale
    text = f"{value:.4f}" if value < 10 else f"{value:.4g}"
    return f"{text} {unit}" + ("*" if m.noisy else "")


def seed_table(
    rows: Sequence[tuple[str, Mapping[str, Measurement]]], phases: Sequence[str], unit: str, first: str
) -> list[str]:
    """Markdown lines in seed 004's layout: ``|Model|Framework|Forward Pass|...|``."""
    titles = {
        "forward": "Forward Pass",
        "backward": "Backward Pass",
        "total": "Total Time",
        "inference": "Inference",
    }
    head = [first, "Framework", *(titles.get(p, p) for p in phases)]
    lines = ["|" + "|".join(head) + "|", "|" + "|".join(":---:" for _ in head) + "|"]
    for name, times in rows:
        cells = [name, framework(), *(fmt_time(times.get(p), unit) for p in phases)]
        lines.append("|" + "|".join(cells) + "|")
    return lines
