"""Why EfficientNet-B0 is slower on our depthwise kernel (0.70x forward on the first H100 window):
``python scripts/effnet_diagnosis.py --out FILE.json [--reps N] [--device cuda|cpu]``.

Three numbers for the stock network against the same network with its 16 depthwise layers swapped
to ours (perf_tests/swap.py), forward under no_grad at the suite's input (perf_tests/models.py):

- eager ratio: median ours / stock, each forward timed with CUDA events (warm, no L2 flush: the
  suite's model checks are end to end too);
- CUDA-graph ratio: the same forwards captured once in a CUDA graph and replayed: launch and host
  costs gone, so what remains is device time. Eager ratio >> graph ratio means the host is the cost;
- host enqueue per swapped layer: (host seconds to enqueue our forward - the stock's) / swapped
  layers, each measured with the device idle before it (synchronized) and without waiting for it.

On a CPU (``--device cpu``, the dry run) the graph is skipped and "enqueue" is the whole call.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from perf_tests import models as mb
from perf_tests import swap

_CUDA: Any = torch.cuda  # Event and CUDAGraph are untyped in torch's stubs
MODEL = "efficientnet_b0"


def device_ms(fn: Callable[[], object], reps: int) -> float:
    """Median milliseconds of ``fn`` between CUDA events."""
    times = []
    for _ in range(reps):
        start, end = _CUDA.Event(enable_timing=True), _CUDA.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(float(start.elapsed_time(end)))
    return statistics.median(times)


def host_us(fn: Callable[[], object], reps: int, cuda: bool) -> float:
    """Median microseconds the host spends issuing ``fn`` (the device idle before each call)."""
    times = []
    for _ in range(reps):
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e6)
    if cuda:
        torch.cuda.synchronize()
    return statistics.median(times)


def graphed(fn: Callable[[], object]) -> Callable[[], object]:
    """``fn`` captured in a CUDA graph (after warm-up on a side stream), as a replay."""
    stream = _CUDA.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = _CUDA.CUDAGraph()
    with _CUDA.graph(graph):
        fn()
    return lambda: graph.replay()


def diagnose(device: torch.device, reps: int) -> dict[str, Any]:
    stock = mb.build_model(MODEL, device).eval()
    ours = copy.deepcopy(stock)
    swapped = swap.swap_depthwise(ours, "ours")
    x = mb.seeded_input(mb.model_input_shape(MODEL, device), device)
    cuda = device.type == "cuda"

    def forward(model: torch.nn.Module) -> Callable[[], object]:
        def run() -> object:
            with torch.no_grad():
                return model(x)

        return run

    calls = {"stock": forward(stock), "ours": forward(ours)}
    for call in calls.values():  # kernel loads, cuDNN plans, allocator
        for _ in range(3):
            call()
    out: dict[str, Any] = {
        "model": MODEL,
        "input": list(x.shape),
        "swapped_layers": swapped,
        "device": str(device),
    }
    host = {name: host_us(call, reps, cuda) for name, call in calls.items()}
    out["host_us"] = host
    out["host_enqueue_us_per_swapped_layer"] = (host["ours"] - host["stock"]) / swapped
    if cuda:
        eager = {name: device_ms(call, reps) for name, call in calls.items()}
        graph = {name: device_ms(graphed(call), reps) for name, call in calls.items()}
        out |= {"eager_ms": eager, "graph_ms": graph}
        out["eager_ratio"] = eager["ours"] / eager["stock"]
        out["graph_ratio"] = graph["ours"] / graph["stock"]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/effnet_diagnosis.py", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    result = diagnose(torch.device(args.device), args.reps)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
