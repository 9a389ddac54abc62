"""Layer 1, core: the data every layer shares (problem, results, statistics, config, device, files,
env). Imports nothing of the plugin above it.

See docs/architecture.md for the layer order, which tests/ci/test_import_graph.py enforces.
"""
