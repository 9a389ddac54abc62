"""Unit tests of ``reports``: ``test_<module>.py`` (or ``test_<module>_<aspect>.py``) per module."""
