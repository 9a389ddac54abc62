"""Layer 6, night: the session's end (false-alarm control, fresh-process confirm, change points over
history).

See docs/architecture.md for the layer order, which tests/ci/test_import_graph.py enforces.
"""
