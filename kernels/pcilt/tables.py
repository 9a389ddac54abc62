"""PCILT tables: for every weight, its products with every activation level (pure torch).

Activations are quantized to ``bits``-bit signed codes ``q = round(clamp(x / s_x))`` in
``[-2^(b-1), 2^(b-1) - 1]`` (see :mod:`kernels.quant`) and stored unsigned, ``u = q + 2^(b-1)``,
so the zero level (padding) is ``u = 2^(b-1)`` and its table entries are exactly 0.

Two kinds of tables, both independent of the activation step (so they are built once per weight):

- integer (default): weights quantized to int8 with ``weight_step``; ``T[..., u] = q_w * q`` (int32),
  output ``s_x * s_w * sum(T) + bias``: the accumulators are exact;
- float: ``T[..., u] = float32(w * q)``, output ``s_x * sum(T) + bias``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernels.quant import qrange, quantize_codes

BITS = (2, 4, 8)
WEIGHT_BITS = 8


def check_bits(bits: int) -> None:
    """Reject activation widths the packed kernels do not handle."""
    if bits not in BITS:
        raise ValueError(f"bits={bits!r} must be one of {BITS} (codes are packed 32/bits to a 32-bit word)")


def weight_step_for(weight: torch.Tensor) -> float:
    """Symmetric int8 step ``max|w| / 127`` (1.0 for an all-zero weight)."""
    m = float(weight.detach().abs().max()) if weight.numel() else 0.0
    return m / qrange(WEIGHT_BITS)[1] if m > 0 else 1.0


@dataclass(frozen=True)
class PCILTTables:
    """Lookup tables ``[C_out, C_in/groups, kh, kw, 2^bits]`` and what they were built from."""

    tables: torch.Tensor
    bits: int
    integer: bool
    weight_step: float | None

    @property
    def table_bytes(self) -> int:
        return self.tables.numel() * self.tables.element_size()


def check_tables(tables: PCILTTables, weight: torch.Tensor, bits: int) -> None:
    """Reject prebuilt ``tables`` that were not built for ``weight`` (shape, device) and ``bits``."""
    expected = (*weight.shape, 1 << bits)
    if tuple(tables.tables.shape) != expected:
        raise ValueError(
            f"tables of shape {tuple(tables.tables.shape)} do not match the weight {tuple(weight.shape)} "
            f"at bits={bits} (expected {expected}): build them with build_tables(weight, bits)"
        )
    if tables.bits != bits:
        raise ValueError(f"tables were built for bits={tables.bits}, the call asks for bits={bits}")
    if tables.tables.device != weight.device:
        raise ValueError(f"tables are on {tables.tables.device}, the weight on {weight.device}")


def levels(bits: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """Signed activation level of every unsigned code ``u``: ``u - 2^(b-1)`` (int64)."""
    qn, _ = qrange(bits)
    return torch.arange(1 << bits, device=device, dtype=torch.int64) + qn


def build_tables(
    weight: torch.Tensor, bits: int, *, integer: bool = True, weight_step: float | None = None
) -> PCILTTables:
    """Tables of ``weight`` for ``bits``-bit activations (see the module docstring)."""
    check_bits(bits)
    lv = levels(bits, weight.device)
    if integer:
        step = weight_step if weight_step is not None else weight_step_for(weight)
        wq = quantize_codes(weight, step, WEIGHT_BITS).to(torch.int32)
        tables = wq.unsqueeze(-1) * lv.to(torch.int32)
        return PCILTTables(tables.contiguous(), bits, True, step)
    tables = weight.detach().float().unsqueeze(-1) * lv.to(torch.float32)
    return PCILTTables(tables.contiguous(), bits, False, None)


def memory_report(weight: torch.Tensor, bits: int, *, integer: bool = True) -> dict[str, int]:
    """Bytes of the weight and of its real PCILT tables (built here with the same ``integer`` setting
    and measured: ``numel * element_size`` of the tables tensor, ``2^bits`` entries per weight)."""
    check_bits(bits)
    with torch.no_grad():
        t = build_tables(weight, bits, integer=integer)
    return {"weight_bytes": weight.numel() * weight.element_size(), "table_bytes": t.table_bytes}


def activation_codes(x: torch.Tensor, act_step: float, bits: int) -> torch.Tensor:
    """Unsigned codes ``u`` (int64) of the activations."""
    qn, _ = qrange(bits)
    return quantize_codes(x, act_step, bits).to(torch.int64) - qn


def default_act_step(x: torch.Tensor, bits: int) -> float:
    """Dynamic symmetric step ``max|x| / (2^(b-1) - 1)`` (1.0 for an all-zero input)."""
    m = float(x.detach().abs().max()) if x.numel() else 0.0
    return m / qrange(bits)[1] if m > 0 else 1.0


def pack_codes(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Pack unsigned codes ``[N, C, H, W]`` along W, ``32/bits`` to an int32 word (the kernels' layout).

    Code of column ``ix`` sits in word ``ix * bits // 32`` at bit ``ix * bits % 32``; the tail of the
    last word is zero.
    """
    check_bits(bits)
    per = 32 // bits
    n, c, h, w = codes.shape
    wp = -(-w * bits // 32)
    padded = torch.nn.functional.pad(codes.to(torch.int64), (0, wp * per - w)).view(n, c, h, wp, per)
    shifts = torch.arange(per, device=codes.device, dtype=torch.int64) * bits
    words = (padded << shifts).sum(-1)  # disjoint bit fields: the sum is the bitwise or
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)
