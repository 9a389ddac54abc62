"""Layer 4, judge: the pure decision rule (verdict, decision, few-rounds, quality drift, cliffs). No
torch, no pytest.

See docs/architecture.md for the layer order, which tests/ci/test_import_graph.py enforces.
"""
