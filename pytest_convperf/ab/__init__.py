"""Layer 9, A/B: a candidate against its twin at another git revision, and bisect.

See docs/architecture.md for the layer order, which tests/ci/test_import_graph.py enforces.
"""
