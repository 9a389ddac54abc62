"""ConvperfConfig: every option parsed once, validated, frozen, kept in ``config.stash``.

Each option is a command-line flag and an ini key of the same name (dashes become
underscores: ``--convperf-device`` <-> ``convperf_device``); the command line wins.
Parsers raise ``pytest.UsageError`` naming the option, the bad value and what is allowed.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pytest

from pytest_convperf.core.results import FLUSH_KINDS
from pytest_convperf.core.slugs import resolve_machine, slugify

# Night-wide false-alarm control (``night.multiplicity``): its methods are option values.
Method = Literal["holm", "bh", "none"]
METHODS: tuple[Method, ...] = ("holm", "bh", "none")
DEFAULT_METHOD: Method = "holm"
# Holm at 0.05 met both of issue 18's goals in the night simulation (docs/statistics.md: a false
# FAIL on 1 of 400 nights, a 10 % regression caught on night 1 in 91 %) when the noise comes from 30
# calibration runs; at 0.01 the catch rate was 85 %. The guarantee itself is P(any false FAIL) <= 0.05.
DEFAULT_ALPHA = 0.05

if TYPE_CHECKING:
    from collections.abc import Mapping

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
    default: str | None = None
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
    OptionSpec("convperf-device", "device to measure on: auto (cuda if available), cuda or cpu", "auto"),
    OptionSpec(
        "convperf-baselines", "directory of baseline files (baselines/<machine>/<module>.yaml)", "baselines"
    ),
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
        "holm",
    ),
    OptionSpec(
        "convperf-confirm",
        "where a speed FAIL is confirmed before the session decides it: fresh (again in a fresh pytest "
        "process at session end, so this process's offset cannot confirm itself) or process (in this "
        "process only); default fresh; used with --convperf-false-alarms=holm|bh, not while updating",
        "fresh",
    ),
    OptionSpec(
        "convperf-false-alarm-level",
        "the session-wide level of --convperf-false-alarms, a fraction (default 0.05)",
        "0.05",
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
        "convperf-against",
        "also time every check's candidate at git revision REF (branch, tag, HEAD~1, a hash) and "
        "report FASTER/SLOWER/SAME/INCONCLUSIVE per check; REF is checked out in a temporary worktree",
        metavar="REF",
    ),
    OptionSpec(
        "convperf-confirm-run",
        "internal: the fresh-process confirm of a session's speed FAILs (a JSON plan written by "
        "the controller); measures the listed checks' confirm and judges nothing",
        metavar="PLAN",
    ),
)


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
        raise KeyError(f"{name} is not one of convperf's environment variables (core.config.ENVIRONMENT)")
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


def is_controller(config: pytest.Config) -> bool:
    """True in a plain run and in the xdist controller; False in an xdist worker."""
    return not hasattr(config, "workerinput")


def _parse_device(value: str) -> Device:
    if value not in DEVICES:
        raise pytest.UsageError(
            f"--convperf-device={value!r} is not allowed; use one of: {', '.join(DEVICES)}"
        )
    return value  # type: ignore[return-value]


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


@dataclass(frozen=True)
class ConvperfConfig:
    """The plugin's settings for one session, built once by :meth:`from_pytest_config`."""

    enabled: bool = False
    device: Device = "auto"
    baselines_dir: Path = Path("baselines")
    update: frozenset[str] = frozenset()
    reason: str | None = None
    machine: str | None = None
    machine_aliases: Mapping[str, str] = field(default_factory=dict)
    report_dir: Path | None = None
    trace: bool = False
    tolerance: float | None = None
    noise_floor: float | None = None
    strict: bool = False
    check_timeout: float | None = None  # None: derived from the round caps (timing.rule.StopRule)
    gpus: tuple[int, ...] | Literal["auto"] | None = None
    # Night-wide false-alarm control of speed FAILs (multiplicity.control), decided at session end.
    false_alarms: Method = DEFAULT_METHOD
    false_alarm_level: float = DEFAULT_ALPHA
    # Where a speed FAIL is confirmed (fresh_confirm.py): "fresh" (a pytest subprocess) or "process".
    confirm: str = "fresh"
    # Lowest speedup a family's worst-speedup search accepts (``convperf_speedup_floor``); absent: off.
    speedup_floors: Mapping[str, float] = field(default_factory=dict)
    # ``--convperf-against=REF`` (ab/ab_plugin.py): the revision an A/B compares against.
    against: str | None = None
    # ``--convperf-confirm-run=PLAN``: this process is a fresh-process confirm (night/fresh_confirm.py).
    confirm_run: Path | None = None
    # The environment (:data:`ENVIRONMENT`): the fake timer's replay file, CPU threads, L2 flush kind.
    fake_timer: Path | None = None
    cpu_threads: int = 1
    l2_flush: str = DEFAULT_FLUSH
    rootdir: Path = Path(".")

    @property
    def updating(self) -> bool:
        return bool(self.update)

    def with_environment(self, environ: Mapping[str, str] | None = None) -> ConvperfConfig:
        """This config with :data:`ENVIRONMENT` read again: the session reads it once more when it
        starts, after every conftest's ``pytest_configure`` (which may set a variable, as a fresh
        confirm's conftest points ``$CONVPERF_FAKE_TIMER`` at its replay), before any timer or
        device exists."""
        return replace(self, **_from_environment(environ))

    @property
    def fake(self) -> bool:
        """Every check of this session is timed by the fake timer (``$CONVPERF_FAKE_TIMER``)."""
        return self.fake_timer is not None

    @classmethod
    def from_pytest_config(
        cls, config: pytest.Config, environ: Mapping[str, str] | None = None
    ) -> ConvperfConfig:
        def raw(spec: OptionSpec) -> str | None:
            value = config.getoption(spec.ini, default=None)
            if spec.name in CLI_ONLY:
                return None if value is None else str(value)
            if value is None or value is False:
                ini = config.getini(spec.ini)
                value = ini if ini not in ("", [], None) else None
            if value is True:
                return "true"
            return None if value is None else str(value)

        def flag(spec: OptionSpec) -> bool:
            value = raw(spec)
            if value is None:
                return False
            if value.lower() in ("1", "true", "yes", "on"):
                return True
            if value.lower() in ("0", "false", "no", "off"):
                return False
            raise pytest.UsageError(f"{spec.ini}={value!r}: use true or false")

        spec = {s.name: s for s in OPTIONS}
        rootdir = Path(str(config.rootpath))

        def path(value: str | None) -> Path | None:
            if value is None:
                return None
            p = Path(value)
            return p if p.is_absolute() else rootdir / p

        machine = raw(spec["convperf-machine"])
        aliases = parse_aliases(raw(spec["convperf-machine-aliases"]))
        if machine is not None:
            resolve_machine("", machine, aliases)  # refuses an empty slug now, before any test runs
        baselines = path(raw(spec["convperf-baselines"]) or "baselines")
        assert baselines is not None
        enabled = flag(spec["convperf"])
        cfg = cls(
            enabled=enabled,
            device=_parse_device(raw(spec["convperf-device"]) or "auto"),
            baselines_dir=baselines,
            update=parse_update(raw(spec["convperf-update-baselines"])),
            reason=raw(spec["convperf-reason"]),
            machine=machine,
            machine_aliases=aliases,
            report_dir=path(raw(spec["convperf-report"])),
            trace=flag(spec["convperf-trace"]),
            tolerance=_parse_tolerance(raw(spec["convperf-tolerance"])),
            noise_floor=_parse_tolerance(raw(spec["convperf-noise-floor"]), "convperf-noise-floor"),
            strict=flag(spec["convperf-strict"]),
            check_timeout=_parse_seconds(raw(spec["convperf-check-timeout"]), "convperf-check-timeout"),
            gpus=parse_gpus(raw(spec["convperf-gpus"])),
            speedup_floors=parse_floors(raw(spec["convperf-speedup-floor"])),
            false_alarms=parse_false_alarms(raw(spec["convperf-false-alarms"])),
            false_alarm_level=_parse_tolerance(
                raw(spec["convperf-false-alarm-level"]), "convperf-false-alarm-level"
            )
            or DEFAULT_ALPHA,
            confirm=_parse_confirm(raw(spec["convperf-confirm"]) or "fresh"),
            against=parse_against(raw(spec["convperf-against"])),
            confirm_run=Path(plan) if (plan := raw(spec["convperf-confirm-run"])) else None,
            rootdir=rootdir,
            **_from_environment(environ),
        )
        if not enabled:
            # Only the command line: an ini may set these for the runs that do enable convperf.
            given = [
                f"--{name}"
                for name in ("convperf-update-baselines", "convperf-reason", "convperf-strict")
                if config.getoption(spec[name].ini, default=None) not in (None, False)
            ]
            if given:
                raise pytest.UsageError(
                    f"{', '.join(given)} given without --convperf: convperf checks are off, so "
                    "nothing would be checked or updated; add --convperf (or ini convperf = true)"
                )
        return cfg


def _from_environment(environ: Mapping[str, str] | None) -> dict[str, Any]:
    """The config fields of :data:`ENVIRONMENT`; a bad value is a ``UsageError`` naming the variable."""
    fake = env_value(FAKE_TIMER_ENV, environ)
    try:
        return {
            "fake_timer": Path(fake) if fake else None,
            "cpu_threads": parse_cpu_threads(env_value(CPU_THREADS_ENV, environ)),
            "l2_flush": parse_flush(env_value(FLUSH_ENV, environ)),
        }
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


CONFIG_KEY = pytest.StashKey[ConvperfConfig]()


def get_config(config: pytest.Config) -> ConvperfConfig:
    """The session's frozen config (built in ``pytest_configure``)."""
    return config.stash[CONFIG_KEY]
