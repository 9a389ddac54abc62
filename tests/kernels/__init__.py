"""Kernel tests: each family's build, CPU twin, emulated CUDA and controls (no GPU needed)."""
