"""Layer 5, baselines: the YAML store, its lifecycle (entries, update plans, writes), calibrate,
orphans.

See docs/architecture.md for the layer order, which tests/ci/test_import_graph.py enforces.
"""
