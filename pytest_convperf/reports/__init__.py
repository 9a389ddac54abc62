"""Layer 7, reports: terminal lines, Markdown, results.json, the journal, live progress, review.

See docs/architecture.md for the layer order, which tests/ci/test_import_graph.py enforces.
"""
