"""Repository tests: workflows, CI scripts and import hygiene."""
