"""Unit tests: one plugin module at a time (``session``, ``gate``, ``updates`` ...), no pytest session."""
