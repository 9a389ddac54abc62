"""convperf's options: the one table that defines them (:data:`OPTIONS`) and their value parsers.

Each option is a command-line flag and an ini key of the same name (dashes become
underscores: ``--convperf-device`` <-> ``convperf_device``); the command line wins;
:data:`INI_ONLY` and :data:`CLI_ONLY` name the exceptions. Parsers raise ``pytest.UsageError``
naming the option, the bad value and what is allowed. ``ConvperfConfig`` (core/config.py) holds
one typed field per option.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import pytest

from pytest_convperf.core.slugs import slugify

# Night-wide false-alarm control (``night.multiplicity``): its methods are option values.
Method = Literal["holm", "bh", "none"]
METHODS: tuple[Method, ...] = ("holm", "bh", "none")
DEFAULT_METHOD: Method = "holm"
# Holm at 0.05 met both of issue 18's goals in the night simulation (docs/statistics.md: a false
# FAIL on 1 of 400 nights, a 10 % regression caught on night 1 in 91 %) when the noise comes from 30
# calibration runs; at 0.01 the catch rate was 85 %. The guarantee itself is P(any false FAIL) <= 0.05.
DEFAULT_ALPHA = 0.05

Device = Literal["auto", "cuda", "cpu"]
DEVICES: tuple[Device, ...] = ("auto", "cuda", "cpu")
# prune (orphaned entries, orphans.py) is never implied by all: removing entries is asked for by name.
UPDATE_KINDS = ("failed", "new", "improved", "cliffs", "all", "prune")
DEFAULT_UPDATE: frozenset[str] = frozenset({"failed", "new"})


@dataclass(frozen=True)
class OptionSpec:
    """One option: flag, ini key, help; ``flag_value`` is what a bare ``--flag`` means; ``metavar``
    names the value in ``--help``."""

    name: str
    help: str
    is_flag: bool = False
    flag_value: str | None = None
    metavar: str | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name

    @property
    def ini(self) -> str:
        return self.name.replace("-", "_")


OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec("convperf", "run the tests marked convperf (timing and baseline checks)", is_flag=True),
    OptionSpec("convperf-device", "device to measure on: auto (cuda if available), cuda or cpu"),
    OptionSpec("convperf-baselines", "directory of baseline files (baselines/<machine>/<module>.yaml)"),
    OptionSpec(
        "convperf-update-baselines",
        "rewrite baselines of the selected tests; comma list of failed,new,improved,cliffs or all "
        "(bare flag: failed,new; cliffs pins and retires performance cliffs; prune removes entries no "
        "collected test produced, in a whole-module run)",
        flag_value="failed,new",
    ),
    OptionSpec("convperf-reason", "why a slower ratio is being recorded (stored with the entry)"),
    OptionSpec("convperf-machine", "machine slug that keys the baseline folder (default: detected)"),
    OptionSpec(
        "convperf-machine-aliases",
        "ini: lines 'slug = class' mapping detected machine slugs to a baseline class",
    ),
    OptionSpec("convperf-report", "directory for report.md, results.json, history.jsonl, traces, plots"),
    OptionSpec("convperf-trace", "write a profiler trace for every convperf check", is_flag=True),
    OptionSpec(
        "convperf-tolerance", "allowed slowdown before FAIL, as a fraction (default 0.02 GPU, 0.05 CPU)"
    ),
    OptionSpec(
        "convperf-noise-floor",
        "lowest between-run noise (SD of ln ratio) assumed for any entry (default 0.004 GPU, 0.02 CPU)",
    ),
    OptionSpec("convperf-strict", "fail checks that have no baseline (NEW) instead of passing", is_flag=True),
    OptionSpec(
        "convperf-false-alarms",
        "how the session's speed FAILs are decided together: holm (chance of any false FAIL), bh "
        "(Benjamini-Hochberg: share of false FAILs) or none (each check alone); default holm",
    ),
    OptionSpec(
        "convperf-confirm",
        "where a speed FAIL is confirmed before the session decides it: fresh (again in a fresh pytest "
        "process at session end, so this process's offset cannot confirm itself) or process (in this "
        "process only); default fresh; used with --convperf-false-alarms=holm|bh, not while updating",
    ),
    OptionSpec(
        "convperf-record-runs",
        "while updating baselines: each written entry's ratio is the median of N pytest processes "
        "(this one and N-1 fresh ones); default 3 for CPU timing, 1 for CUDA and the fake timer",
        metavar="N",
    ),
    OptionSpec(
        "convperf-false-alarm-level",
        "the session-wide level of --convperf-false-alarms, a fraction (default 0.05)",
    ),
    OptionSpec(
        "convperf-speedup-floor",
        "ini: lines 'family = speedup' (e.g. depthwise = 0.8): a worst-speedup search fails below its "
        "family's floor (default: no floor)",
    ),
    OptionSpec(
        "convperf-check-timeout",
        "seconds one convperf check may run before it fails as hung; 0 turns it off "
        "(default: 3 x the worst case of the round caps, screen and confirm: 102 s CPU, 252 s GPU)",
    ),
    OptionSpec(
        "convperf-gpus", "with pytest-xdist: auto, a count N, or a list 0,1,... of GPUs, one per worker"
    ),
    OptionSpec(
        "convperf-store",
        "results store every session appends its rows to: sqlite:///PATH or postgresql://USER@HOST/DB "
        "(default: convperf.sqlite in the --convperf-report folder, else in <rootdir>/.convperf/); off: none",
        metavar="URL",
    ),
    OptionSpec(
        "convperf-json",
        "write the session's results.json (pytest-benchmark's schema) to FILE, like --benchmark-json",
        metavar="FILE",
    ),
    OptionSpec(
        "convperf-against",
        "also time every check's candidate at git revision REF (branch, tag, HEAD~1, a hash; 'auto': "
        "the merge base with origin/$GITHUB_BASE_REF, else origin/HEAD) and report "
        "FASTER/SLOWER/SAME/INCONCLUSIVE per check; REF is checked out in a temporary worktree",
        metavar="REF",
    ),
    OptionSpec(
        "convperf-confirm-run",
        "internal: the fresh-process confirm of a session's speed FAILs (a JSON plan written by "
        "the controller); measures the listed checks' confirm and judges nothing",
        metavar="PLAN",
    ),
)


def parse_against(value: str | None) -> str | None:
    """``--convperf-against=REF``: None when not given; an empty REF is a ``UsageError``."""
    if value is None:
        return None
    if not str(value).strip():  # "--convperf-against=" (an unset variable) would run no A/B, silently
        raise pytest.UsageError(
            "--convperf-against is empty: give the revision to compare against (a branch, tag, hash or "
            "HEAD~1), or drop the option"
        )
    return str(value)


def _parse_device(value: str) -> Device:
    if value not in DEVICES:
        raise pytest.UsageError(
            f"--convperf-device={value!r} is not allowed; use one of: {', '.join(DEVICES)}"
        )
    return value  # type: ignore[return-value]


def parse_record_runs(value: str | None) -> int | None:
    """``--convperf-record-runs=N``: None when not given (the per-device default), else N >= 1."""
    if value is None:
        return None
    try:
        runs = int(value)
    except ValueError:
        runs = 0
    if runs < 1 or str(runs) != str(value).strip():
        raise pytest.UsageError(
            f"--convperf-record-runs={value!r} is not allowed; give a whole number of processes, at least 1 "
            "(1: record from this process alone)"
        )
    return runs


CONFIRM_WHERE = ("fresh", "process")


def _parse_confirm(value: str) -> str:
    if value not in CONFIRM_WHERE:
        raise pytest.UsageError(
            f"--convperf-confirm={value!r} is not allowed; use fresh (a fresh pytest process) or process"
        )
    return value


UPDATE_FLAG = "--convperf-update-baselines"


def _is_update_value(value: str) -> bool:
    parts = [part.strip() for part in value.split(",")]
    return bool(parts) and all(part in UPDATE_KINDS for part in parts)


def bare_update_flag(args: list[str]) -> list[str]:
    """The command line with a bare ``--convperf-update-baselines`` followed by a path (what the
    terminal and the FAIL hints print: ``... --convperf-update-baselines perf_tests``) spelled
    ``--convperf-update-baselines=failed,new perf_tests``: argparse would take the path as the
    value, and the run would stop on it."""
    out = list(args)
    for i, arg in enumerate(out[:-1]):
        following = out[i + 1]
        if arg == UPDATE_FLAG and not following.startswith("-") and not _is_update_value(following):
            out[i] = f"{UPDATE_FLAG}={','.join(sorted(DEFAULT_UPDATE))}"
    return out


def parse_update(value: str | None) -> frozenset[str]:
    """``None`` -> no update; ``failed,new`` / ``improved`` / ``all`` -> the set of verdicts to rewrite."""
    if value is None or value == "":
        return frozenset()
    kinds = frozenset(part.strip() for part in value.split(",") if part.strip())
    bad = sorted(kinds - set(UPDATE_KINDS))
    if bad or not kinds:
        raise pytest.UsageError(
            f"--convperf-update-baselines={value!r}: unknown {', '.join(bad) or 'empty value'}; "
            f"use a comma list of {', '.join(UPDATE_KINDS)} (bare flag means failed,new)"
        )
    return kinds


def _parse_tolerance(value: str | None, name: str = "convperf-tolerance") -> float | None:
    if value is None or value == "":
        return None
    try:
        tol = float(value)
    except ValueError:
        raise pytest.UsageError(
            f"--{name}={value!r} is not a number; give a fraction such as 0.02 for 2 %"
        ) from None
    if not 0.0 < tol < 1.0:
        raise pytest.UsageError(f"--{name}={value!r} must be a fraction between 0 and 1 (0.02 means 2 %)")
    return tol


def _parse_seconds(value: str | None, name: str) -> float | None:
    if value is None or value == "":
        return None
    try:
        seconds = float(value)
    except ValueError:
        raise pytest.UsageError(f"--{name}={value!r} is not a number of seconds (0 turns it off)") from None
    if not seconds >= 0 or seconds == float("inf"):
        raise pytest.UsageError(f"--{name}={value!r} must be a finite number of seconds >= 0 (0: off)")
    return seconds


def ini_pairs(text: str | None, key: str, form: str) -> list[tuple[str, str]]:
    """``left = right`` lines of an ini key (commas also split; ``#`` comments), stripped.

    Raises ``UsageError`` naming ``key``, the bad line and the ``form`` a line must have."""
    pairs = []
    for raw in (text or "").replace(",", "\n").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        left, sep, right = line.partition("=")
        if not sep or not left.strip() or not right.strip():
            raise pytest.UsageError(f"{key}: bad line {raw!r}; write one '{form}' per line")
        pairs.append((left.strip(), right.strip()))
    return pairs


def parse_aliases(text: str | None) -> dict[str, str]:
    """Parse ``slug = class`` lines (ini ``convperf_machine_aliases``); both sides are slugified."""
    # Lookups use slugs (resolve_machine), so keys and targets are slugified the same way.
    form = "detected-slug = class-slug"
    aliases: dict[str, str] = {}
    for slug, target in ini_pairs(text, "convperf_machine_aliases", form):
        # A side that slugifies to nothing would name the baselines root itself as a machine folder.
        if not slugify(slug) or not slugify(target):
            raise pytest.UsageError(
                f"convperf_machine_aliases: bad line '{slug} = {target}'; write one '{form}' per line"
            )
        aliases[slugify(slug)] = slugify(target)
    return aliases


# Options that are ini keys only (lines of ``a = b``), never command-line flags.
INI_ONLY = frozenset({"convperf-machine-aliases", "convperf-speedup-floor"})
# Options that are command-line flags only: a revision or an internal plan is per run, never an ini key.
CLI_ONLY = frozenset({"convperf-against", "convperf-confirm-run"})


def parse_floors(text: str | None) -> dict[str, float]:
    """``family = speedup`` lines (ini ``convperf_speedup_floor``) -> ``{family: floor}``."""
    form = "family = speedup"
    floors: dict[str, float] = {}
    for family, value in ini_pairs(text, "convperf_speedup_floor", form):
        try:
            floor = float(value)
        except ValueError:
            floor = math.nan
        if not floor > 0:
            raise pytest.UsageError(
                f"convperf_speedup_floor: bad line '{family} = {value}'; write one '{form}' per line, "
                "the speedup a positive number (0.8: the candidate may be at most 1.25x slower)"
            )
        floors[family] = floor
    return floors


def parse_gpus(value: str | None) -> tuple[int, ...] | Literal["auto"] | None:
    """``auto``, ``N`` (the first N GPUs) or ``0,2,3``; ``None`` when unset."""
    if value is None or value == "":
        return None
    if value == "auto":
        return "auto"
    try:
        if "," in value:
            ids = tuple(int(v) for v in value.split(",") if v.strip())
        else:
            ids = tuple(range(int(value)))
    except ValueError:
        raise pytest.UsageError(
            f"--convperf-gpus={value!r}: use auto, a count such as 4, or a list such as 0,1,3"
        ) from None
    if not ids or min(ids) < 0 or len(set(ids)) != len(ids):
        raise pytest.UsageError(
            f"--convperf-gpus={value!r}: give at least one GPU, non-negative and without repeats"
        )
    return ids


def parse_false_alarms(value: str | None) -> Method:
    """``holm`` / ``bh`` / ``none`` (default ``multiplicity.DEFAULT_METHOD``)."""
    if value is None or value == "":
        return DEFAULT_METHOD
    if value not in METHODS:
        raise pytest.UsageError(
            f"--convperf-false-alarms={value!r} is not allowed; use one of: {', '.join(METHODS)} "
            "(holm: family-wise rate, bh: false-discovery rate, none: each check alone)"
        )
    return value  # type: ignore[return-value]
