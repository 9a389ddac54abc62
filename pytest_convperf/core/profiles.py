"""The Hypothesis profiles of the plugin (``--hypothesis-profile=convperf-dev|ci|nightly``) and
their one-line descriptions for ``pytest --help``, both from one settings table."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import HealthCheck, settings


@dataclass(frozen=True)
class _Profile:
    """What a profile is for and the settings it sets; the help line is built from the same fields."""

    use: str
    max_examples: int
    derandomize: bool = False
    database: bool = True  # False: no example database (a CI machine starts clean each run)
    print_blob: bool = False


_PROFILES = {
    "convperf-dev": _Profile("local work", 25),
    "convperf-ci": _Profile("CI runs", 60, derandomize=True, database=False, print_blob=True),
    "convperf-nightly": _Profile("deep fuzzing", 2000, print_blob=True),
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
    for name, p in _PROFILES.items():
        # derandomize and print_blob False are the parent's values; the database is left to the
        # parent's (the default directory) unless the profile has none.
        no_database = {} if p.database else {"database": None}
        settings.register_profile(
            name,
            parent=parent,
            deadline=None,
            suppress_health_check=slow,
            max_examples=p.max_examples,
            derandomize=p.derandomize,
            print_blob=p.print_blob,
            **no_database,
        )


def profiles_help() -> str:
    """One line per profile for ``pytest --help``: what its settings do and what it is for."""
    lines = []
    for name, p in _PROFILES.items():
        facts = [f"{p.max_examples} examples"]
        facts.append("derandomized" if p.derandomize else "random")
        facts.append("database on" if p.database else "no database")
        if p.print_blob:
            facts.append("print blob")
        lines.append(f"{name:<17s}{', '.join(facts)}: {p.use}")
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
