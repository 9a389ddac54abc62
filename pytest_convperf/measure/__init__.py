"""Layer 2, measure: timers (CUDA events, thread CPU clock), paired rounds, memory, profiler traces,
the timing slot. Imports only core.

See docs/architecture.md for the layer order, which tests/ci/test_import_graph.py enforces.
"""
