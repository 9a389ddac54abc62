"""Layer 5b, resultsdb: the results store, one database many runners write (SQLite or PostgreSQL
through SQLAlchemy Core): its schema and migrations, the session's records in, history out.

See docs/results-store.md, and docs/architecture.md for the layer order, which
tests/ci/test_import_graph.py enforces.
"""
