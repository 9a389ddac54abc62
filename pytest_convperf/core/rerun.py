"""How to run pytest again, in a fresh process, with this session's convperf settings.

Two callers need a fresh process: ``calibrate`` (K unchanged runs: their spread is the between-run
noise) and the fresh-process confirm of a speed FAIL (``fresh_confirm``: a second measurement that
does not share this process's offset). Both must load the same plugin code and measure the same
way; this is the one place that says how.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from pytest_convperf.core.options import OPTIONS

# Options a re-run must not inherit: it records nothing, reports nothing, traces nothing.
_NOT_FORWARDED = frozenset(
    {
        "convperf-update-baselines",
        "convperf-reason",
        "convperf-report",
        "convperf-trace",
        "convperf-record-runs",
    }
)
# pytest-level options that decide what is collected and how (pairs "-p X" or "--opt=X").
_PYTEST_PAIRS = (
    "-p",
    "-c",
    "--config-file",
    "-o",
    "--override-ini",
    "--rootdir",
    "--confcutdir",
    "--hypothesis-profile",
    "--hypothesis-seed",
)


def plugin_args(pytest_args: Sequence[str]) -> list[str]:
    """``-p pytest_convperf.plugin`` unless pytest loads it already (installed entry point, or given)."""
    from importlib.metadata import entry_points

    installed = any(ep.name == "convperf" for ep in entry_points(group="pytest11"))
    given = any("pytest_convperf.plugin" in a for a in pytest_args)
    return [] if installed or given else ["-p", "pytest_convperf.plugin"]


def forwarded_args(config: pytest.Config) -> list[str]:
    """This session's command-line convperf options and the pytest pairs a re-run needs (the ini
    file applies by itself: the re-run starts in the same folder)."""
    out: list[str] = []
    args = list(config.invocation_params.args)
    here = Path(config.invocation_params.dir)
    for i, arg in enumerate(args):
        for name in _PYTEST_PAIRS:
            if arg == name and i + 1 < len(args):
                out += [arg, _absolute(name, str(args[i + 1]), here)]
            elif name.startswith("--") and arg.startswith(name + "="):
                out.append(f"{name}={_absolute(name, arg[len(name) + 1 :], here)}")
    for spec in OPTIONS:
        if spec.name in _NOT_FORWARDED:
            continue
        value = config.getoption(spec.ini, default=None)
        if value is None or value is False:
            continue
        out.append(spec.flag if value is True else f"{spec.flag}={value}")
    return out


# Options whose value is a path relative to where pytest started (the re-run starts elsewhere).
_PATH_OPTIONS = frozenset({"-c", "--config-file", "--rootdir", "--confcutdir"})


def _absolute(name: str, value: str, here: Path) -> str:
    return str(here / value) if name in _PATH_OPTIONS and not Path(value).is_absolute() else value


def subprocess_env() -> dict[str, str]:
    """The environment with this plugin's source first on PYTHONPATH: the re-run loads the same code."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(
        [root, *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)]
    )
    return env
