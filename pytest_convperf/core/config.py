"""ConvperfConfig: every option and environment variable parsed once, validated, frozen, kept in
``config.stash``.

The options are defined once, in :data:`pytest_convperf.core.options.OPTIONS`; the environment
variables in :data:`pytest_convperf.core.environment.ENVIRONMENT`. Import them from there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

import pytest

from pytest_convperf.core.environment import (
    DEFAULT_FLUSH,
    from_environment,
)
from pytest_convperf.core.options import (
    CLI_ONLY,
    DEFAULT_ALPHA,
    DEFAULT_METHOD,
    OPTIONS,
    Device,
    Method,
    OptionSpec,
    _parse_confirm,
    _parse_device,
    _parse_seconds,
    _parse_tolerance,
    parse_against,
    parse_aliases,
    parse_false_alarms,
    parse_floors,
    parse_gpus,
    parse_record_runs,
    parse_update,
)
from pytest_convperf.core.slugs import resolve_machine


def is_controller(config: pytest.Config) -> bool:
    """True in a plain run and in the xdist controller; False in an xdist worker."""
    return not hasattr(config, "workerinput")


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
    check_timeout: float | None = None  # None: derived from the round caps (measure/rule.py, StopRule)
    gpus: tuple[int, ...] | Literal["auto"] | None = None
    # Night-wide false-alarm control of speed FAILs (multiplicity.control), decided at session end.
    false_alarms: Method = DEFAULT_METHOD
    false_alarm_level: float = DEFAULT_ALPHA
    # Where a speed FAIL is confirmed (fresh_confirm.py): "fresh" (a pytest subprocess) or "process".
    confirm: str = "fresh"
    # ``--convperf-record-runs``: processes a recorded entry is the median of (night/fresh_record.py);
    # None: the per-device default.
    record_runs: int | None = None
    # Lowest speedup a family's worst-speedup search accepts (``convperf_speedup_floor``); absent: off.
    speedup_floors: Mapping[str, float] = field(default_factory=dict)
    # ``--convperf-store=URL`` (reports/results_writer.py): the results store; None: the default.
    store_url: str | None = None
    # ``--convperf-json=FILE`` (reports/json_file.py): results.json also to this file.
    json_file: str | None = None
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
        return replace(self, **from_environment(environ))

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
            record_runs=parse_record_runs(raw(spec["convperf-record-runs"])),
            store_url=(raw(spec["convperf-store"]) or "").strip() or None,
            json_file=(raw(spec["convperf-json"]) or "").strip() or None,
            against=parse_against(raw(spec["convperf-against"])),
            confirm_run=Path(plan) if (plan := raw(spec["convperf-confirm-run"])) else None,
            rootdir=rootdir,
            **from_environment(environ),
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


CONFIG_KEY = pytest.StashKey[ConvperfConfig]()


def get_config(config: pytest.Config) -> ConvperfConfig:
    """The session's frozen config (built in ``pytest_configure``)."""
    return config.stash[CONFIG_KEY]
