"""Integration tests: whole pytest sessions of a small suite (pytester, subprocesses, xdist).

``_lifecycle`` builds those suites.
"""
