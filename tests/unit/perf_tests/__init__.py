"""Unit tests of ``perf_tests``: ``test_<module>.py`` (or ``test_<module>_<aspect>.py``) per module."""
