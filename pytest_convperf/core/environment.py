"""The environment variables convperf reads, each once, into ``ConvperfConfig`` (core/config.py).

:data:`ENVIRONMENT` is the one list of them; :func:`env_value` the one reader (the plugin reads them
through :func:`from_environment`; code used outside pytest, such as the kernel sweep, falls back to
:func:`env_value` when no value is passed down). Parsers raise ``ValueError`` naming the variable;
the config turns it into a ``UsageError``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

import pytest

from pytest_convperf.core.results import FLUSH_KINDS


@dataclass(frozen=True)
class EnvSpec:
    """One environment variable the plugin reads (also in subprocesses, which inherit it)."""

    name: str
    help: str


# Every environment variable convperf reads, read once into ``ConvperfConfig`` (the plugin passes
# the values down); :func:`env_value` is the one reader, also for code used outside pytest.
FAKE_TIMER_ENV = "CONVPERF_FAKE_TIMER"
CPU_THREADS_ENV = "CONVPERF_CPU_THREADS"
FLUSH_ENV = "CONVPERF_L2_FLUSH"
ENVIRONMENT: tuple[EnvSpec, ...] = (
    EnvSpec(FAKE_TIMER_ENV, "a JSON replay file: every check is timed by the fake timer (tests)"),
    EnvSpec(CPU_THREADS_ENV, "threads the CPU timer pins (default 1; part of the machine slug)"),
    EnvSpec(FLUSH_ENV, "the CUDA timer's L2 flush: read (default) or write"),
)


def env_value(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The stripped value of one of :data:`ENVIRONMENT`'s variables; None when unset or empty."""
    if name not in {spec.name for spec in ENVIRONMENT}:
        raise KeyError(f"{name} is not one of convperf's environment variables (environment.ENVIRONMENT)")
    raw = (os.environ if environ is None else environ).get(name, "").strip()
    return raw or None


def parse_cpu_threads(raw: str | None) -> int:
    """``$CONVPERF_CPU_THREADS``: a positive integer, 1 when unset."""
    if raw is None or not raw.strip():
        return 1
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{CPU_THREADS_ENV}={raw!r} must be a positive integer (threads for CPU timing)")
    return value


# Read: the lines a flush leaves in L2 are clean (measure/cuda.py's docstring).
DEFAULT_FLUSH = "read"


def parse_flush(value: str | None, *, source: str = f"${FLUSH_ENV}=") -> str:
    """The L2 flush kind: ``read`` (the default, when ``value`` is None) or ``write``."""
    raw = value if value is not None else DEFAULT_FLUSH
    if raw not in FLUSH_KINDS:
        raise ValueError(
            f"{source}{raw!r} is not an L2 flush kind: use 'read' (sum the 2 x L2 buffer; default) "
            "or 'write' (zero it)"
        )
    return raw


class EnvironmentFields(TypedDict):
    """The config fields the environment sets (``ConvperfConfig(**fields)``, ``replace(cfg, **fields)``)."""

    fake_timer: Path | None
    cpu_threads: int
    l2_flush: str


def from_environment(environ: Mapping[str, str] | None) -> EnvironmentFields:
    """The config fields of :data:`ENVIRONMENT`; a bad value is a ``UsageError`` naming the variable."""
    fake = env_value(FAKE_TIMER_ENV, environ)
    try:
        return EnvironmentFields(
            fake_timer=Path(fake) if fake else None,
            cpu_threads=parse_cpu_threads(env_value(CPU_THREADS_ENV, environ)),
            l2_flush=parse_flush(env_value(FLUSH_ENV, environ)),
        )
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
