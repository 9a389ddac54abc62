"""The Hypothesis profiles of the plugin (``--hypothesis-profile=convperf-dev|ci|nightly``) and
their one-line descriptions for ``pytest --help``, both from one settings table."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings

# Profile name -> (what it is for, its settings). The help text is built from the same settings.
_PROFILES: dict[str, tuple[str, dict[str, Any]]] = {
    "convperf-dev": ("local work", {"max_examples": 25}),
    "convperf-ci": (
        "CI runs",
        {"max_examples": 60, "derandomize": True, "database": None, "print_blob": True},
    ),
    "convperf-nightly": ("deep fuzzing", {"max_examples": 2000, "print_blob": True}),
}
PROFILES = tuple(_PROFILES)


def register_profiles() -> None:
    """Register ``convperf-dev``, ``convperf-ci`` (derandomized) and ``convperf-nightly``.

    The first example of a session pays for CUDA context, cuDNN handles and kernel JIT, so no
    profile has a deadline; ``too_slow`` is suppressed for the same reason.
    """
    slow = [HealthCheck.too_slow, HealthCheck.data_too_large]
    # Hypothesis loads its own "ci" profile (derandomized, no database) when it sees $CI, and a
    # profile without a parent inherits the loaded one: start from "default" so that each profile
    # means what its help line says on every machine.
    parent = settings.get_profile("default")
    for name, (_, values) in _PROFILES.items():
        settings.register_profile(name, parent=parent, deadline=None, suppress_health_check=slow, **values)


def profiles_help() -> str:
    """One line per profile for ``pytest --help``: what its settings do and what it is for."""
    lines = []
    for name, (use, values) in _PROFILES.items():
        facts = [f"{values['max_examples']} examples"]
        facts.append("derandomized" if values.get("derandomize") else "random")
        facts.append("no database" if "database" in values else "database on")
        if values.get("print_blob"):
            facts.append("print blob")
        lines.append(f"{name:<17s}{', '.join(facts)}: {use}")
    return "\n".join(lines)


def unknown_profile(name: str | None) -> str | None:
    """Why ``--hypothesis-profile=name`` cannot load (one line naming the profiles), or None.

    Hypothesis raises its ``InvalidArgument`` inside ``pytest_configure``: a 24-line INTERNALERROR
    for a typo. The plugin checks first (its profiles are registered by then, a rootdir conftest's
    too) and stops with this line instead."""
    from hypothesis.errors import InvalidArgument

    if not name:
        return None
    try:
        settings.get_profile(name)
    except InvalidArgument:
        known = sorted(getattr(settings, "_profiles", {}) or PROFILES)
        return (
            f"--hypothesis-profile={name} is not a registered Hypothesis profile; use one of "
            f"{', '.join(known)} (or register it with settings.register_profile in a conftest.py)"
        )
    return None


def lift_default_deadline() -> None:
    """Run the session's Hypothesis tests without a deadline unless a profile was chosen.

    Hypothesis' default deadline (200 ms) fails a conv test whose first example pays for kernel
    JIT, cuDNN handles or a loaded box (``DeadlineExceeded`` before the planted bug is found).
    Only the ``default`` profile is replaced, by ``convperf-default`` (the same settings, no
    deadline): a profile loaded by ``--hypothesis-profile``, a conftest or ``$CI`` is kept, and a
    test's own ``@settings(deadline=...)`` still applies."""
    if settings.get_current_profile_name() != "default":
        return
    settings.register_profile("convperf-default", parent=settings.get_profile("default"), deadline=None)
    settings.load_profile("convperf-default")
