"""Unit tests: one plugin module at a time (``session``, ``judgement``, ``updates`` ...), no session."""
