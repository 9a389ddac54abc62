"""EDSR models (standard and depthwise-separable blocks), the fused dw+pw block kernel, and a
helper that swaps our depthwise kernel into any model. Importing this builds nothing."""

from __future__ import annotations
