"""``pytest --help`` describes the convperf Hypothesis profiles from their registered settings."""

from __future__ import annotations

import pytest
from hypothesis import settings

from pytest_convperf.core.profiles import PROFILES, profiles_help, register_profiles


def test_help_lists_every_profile_with_its_settings(
    pytester: pytest.Pytester, plugin_args: tuple[str, ...]
) -> None:
    result = pytester.runpytest(*plugin_args, "--help")
    result.stdout.fnmatch_lines(
        [
            "convperf: conv2d kernel correctness and speedup baselines",
            "  Hypothesis profiles (--hypothesis-profile=NAME, no deadline):",
            "    convperf-dev     25 examples, random, database on: local work",
            "    convperf-ci      60 examples, derandomized, no database, print blob: CI runs",
            "    convperf-nightly 2000 examples, random, database on, print blob: deep fuzzing",
            "  convperf options:",
            "  --convperf *",
        ]
    )


def test_help_text_matches_the_registered_settings() -> None:
    register_profiles()
    lines = dict(line.split(maxsplit=1) for line in profiles_help().splitlines())
    assert tuple(lines) == PROFILES
    for name in PROFILES:
        profile = settings.get_profile(name)
        assert lines[name].startswith(f"{profile.max_examples} examples")
        assert ("derandomized" in lines[name]) == profile.derandomize
        assert ("no database" in lines[name]) == (profile.database is None)
        assert profile.deadline is None
