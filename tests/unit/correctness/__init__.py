"""Unit tests of ``correctness``: ``test_<module>.py`` (or ``test_<module>_<aspect>.py``) per module."""
