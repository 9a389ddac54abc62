"""Layer 8, check: one check from candidate to row (context, calls, paired timing, faults, judgement,
the fixture).

See docs/architecture.md for the layer order, which tests/ci/test_import_graph.py enforces.
"""
