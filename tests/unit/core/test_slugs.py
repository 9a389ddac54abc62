"""Machine slugs (``core/slugs.py``): the baseline folder's name, and the overrides that cannot name one."""

from __future__ import annotations

import pytest

from pytest_convperf.core.slugs import resolve_machine, slugify


def test_slugify_lowers_and_joins_runs_of_other_characters_with_one_dash() -> None:
    assert slugify("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    assert slugify("  ../Tesla  T4!! ") == "tesla-t4"
    assert slugify("...") == ""


def test_the_override_wins_over_the_detected_machine_then_the_alias_map_applies() -> None:
    aliases = {"ci-box": "NVIDIA H100"}
    assert resolve_machine("detected", None, {}) == "detected"
    assert resolve_machine("detected", "CI Box", {}) == "ci-box"
    assert resolve_machine("detected", "CI Box", aliases) == "nvidia-h100"
    assert resolve_machine("ci-box", None, aliases) == "nvidia-h100"


@pytest.mark.parametrize("override", ["", "...", " / "])
def test_an_override_with_no_letters_or_digits_is_refused_not_ignored(override: str) -> None:
    with pytest.raises(pytest.UsageError, match="has no letters or digits"):
        resolve_machine("detected", override, {})


def test_an_alias_to_an_empty_name_is_refused() -> None:
    with pytest.raises(pytest.UsageError, match="maps 'ci-box' to an empty name"):
        resolve_machine("ci-box", None, {"ci-box": "--"})
