"""Unit tests of ``measure``: ``test_<module>.py`` (or ``test_<module>_<aspect>.py``) per module."""
