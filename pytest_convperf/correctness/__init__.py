"""Layer 3, correctness: the fp64 oracle, tolerances, reference defects, integrity after timing.
Imports core and measure.

See docs/architecture.md for the layer order, which tests/ci/test_import_graph.py enforces.
"""
