"""Machine slugs: the name of a machine's baseline folder (``baselines/<slug>/``).

Below ``config`` and ``baselines`` (both use it), so that neither imports the other.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import pytest

__all__ = ["resolve_machine", "slugify"]

_SLUG_RE = re.compile(r"[^a-z0-9]+")


def slugify(text: str) -> str:
    """Lower-case; runs of other characters become one dash ('NVIDIA H100 80GB' -> 'nvidia-h100-80gb')."""
    return _SLUG_RE.sub("-", text.lower()).strip("-")


def resolve_machine(detected: str, override: str | None, aliases: Mapping[str, str]) -> str:
    """The baseline folder: ``--convperf-machine`` if given, else the detected slug; then the alias map.

    An empty slug is refused: ``--convperf-machine=`` must not fall back to the detected machine
    (fake numbers would reach its folder), nor ``...`` write into the baselines root.
    """
    if override is not None and not slugify(override):
        raise pytest.UsageError(
            f"--convperf-machine={override!r} has no letters or digits, so it names no baseline folder; "
            "give a machine slug such as 'ci-h100', or leave the option out to use the detected machine"
        )
    slug = slugify(override) if override is not None else detected
    machine = slugify(aliases.get(slug, slug))
    if not machine:
        raise pytest.UsageError(
            f"convperf_machine_aliases maps {slug!r} to an empty name; give the alias a machine slug"
        )
    return machine
