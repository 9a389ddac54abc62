"""The convperf suite (run with ``pytest --convperf perf_tests``); a package so its test module
names cannot clash with ``tests/`` (e.g. both have ``test_edsr.py``)."""

from __future__ import annotations
