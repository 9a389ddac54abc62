"""pytest entry point (``pytest11: convperf``): options, marker, fixtures and thin hooks.

Nothing here imports torch: fixtures import their implementation on first use, so
``pytest --help`` and sessions that use no convperf fixture never load it.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import pytest

from pytest_convperf.core.config import CONFIG_KEY, ConvperfConfig, is_controller
from pytest_convperf.core.options import CLI_ONLY, INI_ONLY, OPTIONS
from pytest_convperf.session import SESSION_KEY, ConvperfSession

if TYPE_CHECKING:
    from collections.abc import Callable, Generator, Mapping, Sequence
    from pathlib import Path

    from pytest_convperf.check.cliff_search import CliffSearch
    from pytest_convperf.check.fixture import ConvperfFixture
    from pytest_convperf.core.device import DeviceInfo
    from pytest_convperf.judge.check_row import CheckRow
    from pytest_convperf.measure.memory import TrackMemory
    from pytest_convperf.measure.profiling import StartTrace
    from pytest_convperf.measure.protocol import Timer
    from pytest_convperf.measure.timers import MeasureOne
    from pytest_convperf.reports.sections import ReportSections

MARKER = "convperf"
GPU_TIMER_DEPRECATED = (
    "the gpu_timer fixture is renamed convperf_measure_one (it times on the CPU too); "
    "gpu_timer will be removed: use convperf_measure_one"
)
SKIP_REASON = "convperf check: timing and baselines run only with --convperf (or ini convperf = true)"


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    """Register convperf's hook specs (``hookspecs.py``)."""
    import pytest_convperf.hookspecs as hookspecs

    pluginmanager.add_hookspecs(hookspecs)


@pytest.hookimpl(trylast=True)
def pytest_convperf_write_report(
    rows: Sequence[CheckRow],
    report_dir: Path,
    machine_info: Mapping[str, Any],
    commit_info: Mapping[str, Any],
    when: str,
    night: Mapping[str, Any],
    session_id: str,
) -> list[str]:
    """The built-in reports (report.md, results.json, rows.json, history.jsonl, night.json, speedup.png)."""
    from pytest_convperf.reports.report_files import write_reports

    return write_reports(
        report_dir,
        rows,
        machine_info=machine_info,
        commit_info=commit_info,
        when=when,
        night=night,
        session_id=session_id,
    )


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the ``convperf`` option group; every option is also an ini key."""
    from pytest_convperf.core.profiles import profiles_help

    # argparse prints a group's description as its heading, verbatim: the profiles go there.
    profiles = profiles_help().replace("\n", "\n    ")
    group = parser.getgroup(
        "convperf",
        "convperf: conv2d kernel correctness and speedup baselines\n"
        "  Hypothesis profiles (--hypothesis-profile=NAME, no deadline):\n"
        f"    {profiles}\n  convperf options",
    )
    for spec in OPTIONS:
        if spec.is_flag:
            group.addoption(spec.flag, action="store_true", default=None, dest=spec.ini, help=spec.help)
        elif spec.flag_value is not None:
            group.addoption(
                spec.flag, nargs="?", const=spec.flag_value, default=None, dest=spec.ini, help=spec.help
            )
        elif spec.name not in INI_ONLY:
            extra = {"metavar": spec.metavar} if spec.metavar else {}
            group.addoption(spec.flag, default=None, dest=spec.ini, help=spec.help, **extra)
        if spec.name not in CLI_ONLY:
            parser.addini(spec.ini, spec.help, type="string", default="")


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(
    early_config: pytest.Config, parser: pytest.Parser, args: list[str]
) -> None:
    """A bare ``--convperf-update-baselines`` followed by a path works as printed (before the final parse)."""
    from pytest_convperf.core.options import bare_update_flag

    args[:] = bare_update_flag(args)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Parse options once into a frozen config, register the marker and the session object."""
    config.addinivalue_line(
        "markers", f"{MARKER}: a timing/baseline check; skipped unless --convperf is given"
    )
    # Before Hypothesis' own pytest_configure loads --hypothesis-profile (we run tryfirst).
    from pytest_convperf.core.profiles import lift_default_deadline, register_profiles, unknown_profile

    register_profiles()
    chosen = config.getoption("--hypothesis-profile", default=None)
    typo = unknown_profile(chosen)
    if typo is not None:
        raise pytest.UsageError(typo)
    if not chosen:
        lift_default_deadline()
    cfg = ConvperfConfig.from_pytest_config(config)
    if cfg.device == "cuda":  # a one-line usage error, like an unknown device, not a failure per check
        from pytest_convperf.core.device import cuda_missing

        missing = cuda_missing()
        if missing is not None:
            raise pytest.UsageError(missing)
    if cfg.confirm_run is not None:
        # A fresh-process confirm measures only: whatever addopts or $PYTEST_ADDOPTS say, it
        # writes no report, trace or baseline of the controller's.
        cfg = dataclasses.replace(cfg, report_dir=None, update=frozenset(), trace=False)
    # The one config of the session: the session replaces it at session start (with the environment
    # as the conftests left it) and every convperf plugin reads it here, never a copy of its own.
    config.stash[CONFIG_KEY] = cfg
    session = ConvperfSession(config)
    config.stash[SESSION_KEY] = session
    config.pluginmanager.register(session, "convperf-session")
    from pytest_convperf.reports import json_file, results_writer  # the results store, --convperf-json

    results_writer.configure(config, cfg, confirm_run=cfg.confirm_run is not None)
    json_file.configure(config, cfg, confirm_run=cfg.confirm_run is not None)
    # Each correctness run and check on disk while it runs: a crash is named at the next start.
    from pytest_convperf.crash_watch import CrashWatch

    config.pluginmanager.register(CrashWatch(config), "convperf-crash-watch")
    if cfg.enabled:  # baseline entries no collected test produced (orphans.py)
        from pytest_convperf.baselines.orphans import PLUGIN_NAME as ORPHANS
        from pytest_convperf.baselines.orphans import OrphanWatch

        config.pluginmanager.register(OrphanWatch(config), ORPHANS)
    # xdist: pin this worker to its GPU before anything starts CUDA (see parallel.py).
    from pytest_convperf.measure import parallel

    parallel.configure(config)
    _register_features(config, cfg)


def _register_features(config: pytest.Config, cfg: ConvperfConfig) -> None:
    """The optional features, each a plugin object the core reaches through convperf's hooks
    (``hookspecs.py``), as pytest-xdist registers its ``DSession``; ``-p no:<name>`` leaves one out."""
    from pytest_convperf.ab import ab_plugin
    from pytest_convperf.check.cliff_search import PLUGIN_NAME as CLIFFS
    from pytest_convperf.check.cliff_search import CliffPins
    from pytest_convperf.night import decide, fresh_confirm, fresh_record
    from pytest_convperf.reports.progress import PLUGIN_NAME as PROGRESS
    from pytest_convperf.reports.progress import ProgressPlugin

    ab_plugin.configure(config, cfg)  # only with --convperf-against
    config.pluginmanager.register(CliffPins(config), CLIFFS)
    config.pluginmanager.register(ProgressPlugin(config), PROGRESS)
    if not (cfg.enabled and is_controller(config) and cfg.confirm_run is None):
        return  # the session-end decisions are the controller's (a fresh-process confirm makes none)
    if cfg.false_alarms != "none" and config.pluginmanager.is_blocked(decide.PLUGIN_NAME):
        raise pytest.UsageError(
            f"-p no:{decide.PLUGIN_NAME} with --convperf-false-alarms={cfg.false_alarms}: speed FAILs "
            "would wait for a session decision nobody makes; add --convperf-false-alarms=none (each "
            "check decides alone) or drop -p no:convperf-false-alarms"
        )
    if fresh_record.applies(cfg):
        config.pluginmanager.register(fresh_record.FreshRecord(config), fresh_record.PLUGIN_NAME)
    if fresh_confirm.applies(cfg):
        config.pluginmanager.register(fresh_confirm.FreshConfirm(config), fresh_confirm.PLUGIN_NAME)
    config.pluginmanager.register(decide.FalseAlarmControl(config), decide.PLUGIN_NAME)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test using the ``convperf`` fixture is a convperf check (the fixture implies the marker, so
    ``-m convperf`` selects it). Without --convperf a marked test without the fixture is skipped;
    one with the fixture runs in disabled mode (each ``check`` runs its correctness once)."""
    for item in items:
        if MARKER in getattr(item, "fixturenames", ()) and item.get_closest_marker(MARKER) is None:
            item.add_marker(getattr(pytest.mark, MARKER))
    if config.stash[CONFIG_KEY].enabled:
        return
    skip = pytest.mark.skip(reason=SKIP_REASON)
    for item in items:
        # Disabled mode: a test using the fixture runs (its checks run correctness only, check.py).
        if item.get_closest_marker(MARKER) is not None and "convperf" not in getattr(
            item, "fixturenames", ()
        ):
            item.add_marker(skip)


def _session(request: pytest.FixtureRequest) -> ConvperfSession:
    return request.config.stash[SESSION_KEY]


@pytest.fixture
def convperf(request: pytest.FixtureRequest) -> ConvperfFixture:
    """Check a conv2d candidate against its reference and the stored baseline.

    A test using this fixture is a convperf check, marked or not. Without --convperf it runs in
    disabled mode (like pytest-benchmark's ``--benchmark-disable``): ``check`` runs the
    correctness check once, fails on a wrong candidate and otherwise skips the test (no timing,
    no baseline); ``measure`` and ``judge`` skip it.

    ``convperf.check(candidate, problem, *, reference=None, phase="forward")`` runs the
    correctness check (fp64 oracle), times candidate and reference in paired rounds, decides
    against ``baselines/<machine>/<module>.yaml`` and records a row for the report.
    ``convperf.measure(candidate, problem, *, reference=None, phase="forward")`` only times and
    returns a :class:`~pytest_convperf.core.results.Comparison`. A candidate has the signature of
    ``torch.nn.functional.conv2d``; the reference defaults to ``F.conv2d`` on the device in use.
    ``phase`` is ``forward``, ``input_grad``, ``weight_grad`` or ``backward``.
    """
    from pytest_convperf.check.disabled import DisabledConvperf
    from pytest_convperf.check.fixture import ConvperfFixture

    session = _session(request)
    return (ConvperfFixture if session.cfg.enabled else DisabledConvperf)(session, request)


@pytest.fixture(scope="session")
def convperf_report(request: pytest.FixtureRequest) -> ReportSections:
    """Add Markdown to the report directory: ``convperf_report.section("models.md", text, title=...)``.

    Safe under pytest-xdist: sections travel to the controller on test reports and each file is
    written once at session end (sections of one file joined in arrival order, the title once).
    The directory is ``--convperf-report``'s; without it nothing is written and the terminal summary
    names the sections and the option.
    """
    return _session(request).sections.own


@pytest.fixture(scope="session")
def convperf_speedup_floor(request: pytest.FixtureRequest) -> Callable[[str, float, str], None]:
    """Fail when a family's worst speedup breaks its floor: ``convperf_speedup_floor("depthwise", s, shape)``.

    Floors come from the ini key ``convperf_speedup_floor`` (lines ``family = speedup``); a family
    without one (the default) never fails here.
    """
    from pytest_convperf.judge.cliffs import floor_message

    floors = request.config.stash[CONFIG_KEY].speedup_floors

    def check(family: str, speedup: float, shape: str) -> None:
        message = floor_message(family, speedup, shape, floors)
        if message is not None:
            pytest.fail(message, pytrace=False)

    return check


@pytest.fixture
def convperf_cliffs(convperf: ConvperfFixture) -> CliffSearch:
    """A family's worst-speedup search with pinned cliffs: ``convperf_cliffs.search(family, candidate,
    problems, max_examples=N)`` then ``convperf_cliffs.enforce(result)``.

    Re-checks the cliffs pinned in the test's baseline file (like seed shapes), then lets Hypothesis
    steer towards the slowest speedup; under the family's ``convperf_speedup_floor`` it shrinks the
    shape to the simplest one still under it. ``--convperf-update-baselines=cliffs`` pins a new cliff
    and retires a pinned one measured at or above the floor (listed in ``convperf-update.md``).
    """
    from pytest_convperf.check.cliff_search import CliffSearch

    return CliffSearch(convperf)


@pytest.fixture(scope="session")
def convperf_device(request: pytest.FixtureRequest) -> DeviceInfo:
    """The device in use (``.torch_device``) and its fingerprint (``.slug``, ``.facts``).

    ``cuda`` when a GPU is available (or forced with --convperf-device=cuda), else ``cpu``.
    """
    return _session(request).device_info()


@pytest.fixture
def convperf_timer(request: pytest.FixtureRequest) -> Any:
    """The Timer that ``convperf`` and ``convperf_measure_one`` measure with (CUDA events, CPU
    clock, or fake).

    Override it in a conftest to replay exact durations, e.g. ``return
    FakeTimer({"candidate": 5e-4, "reference": 1e-3})`` (``from pytest_convperf import FakeTimer``);
    ``$CONVPERF_FAKE_TIMER`` naming a JSON replay file does the same for a whole session.
    """
    return _session(request).timer()


@pytest.fixture
def convperf_measure_one(request: pytest.FixtureRequest, convperf_timer: Timer) -> MeasureOne:
    """Time a no-argument callable: ``convperf_measure_one(fn, *, mode="cold", **rule) -> Measurement``.

    On a GPU: CUDA events; ``cold`` flushes L2 before each sample, ``warm`` does not, ``graph``
    replays a CUDA graph for kernels under ~20 us. On a CPU: the thread's CPU clock (the wall clock
    with ``$CONVPERF_CPU_THREADS`` > 1) at a fixed thread count; the mode is reported as
    ``cpu-thread`` (or ``cpu``). Stops adaptively on the CI of the median; ``rule`` overrides
    ``StopRule`` fields. ``m.inconclusive`` (None when fine) says why the clocks were too unstable.
    """
    from pytest_convperf.measure.timers import make_measure_one

    return make_measure_one(_session(request).device_info(), convperf_timer)


@pytest.fixture
def gpu_timer(convperf_measure_one: MeasureOne) -> MeasureOne:
    """Deprecated alias of ``convperf_measure_one`` (it times on the CPU too). Time a no-argument
    callable: ``gpu_timer(fn, *, mode="cold", **rule) -> Measurement``."""
    import warnings

    warnings.warn(GPU_TIMER_DEPRECATED, DeprecationWarning, stacklevel=2)
    return convperf_measure_one


@pytest.fixture
def gpu_memory(request: pytest.FixtureRequest) -> TrackMemory:
    """Peak memory of a block: ``with gpu_memory() as mem: ...`` then ``mem.peak_bytes``.

    On a GPU: peak bytes from the CUDA caching allocator (``mem.peak_bytes``) and device memory
    in use from NVML (``mem.nvml_used_bytes``, None without NVML). On a CPU: the growth of the
    process's peak resident set during the block (``mem.source == "cpu-rss"``), a coarse bound.
    """
    from pytest_convperf.measure.memory import memory_tracker

    device = _session(request).device_info()
    return lambda: memory_tracker(device)


@pytest.fixture
def profiler_trace(request: pytest.FixtureRequest) -> StartTrace:
    """Profile a block: ``with profiler_trace("name") as tr: ...``.

    Afterwards ``tr.path`` is a Chrome/Perfetto JSON trace under the report directory (a
    temporary directory without --convperf-report), named from the test id, and
    ``tr.kernels`` lists rows (name, calls, total and mean time, share): CUDA kernels on a GPU,
    CPU operators on a CPU.
    """
    from pytest_convperf.measure.profiling import trace_factory

    session = _session(request)
    return trace_factory(session.trace_dir(), request.node.nodeid, session.device_info())


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    """Where the run measures and where its baselines live (and whether they exist yet)."""
    if not config.stash[CONFIG_KEY].enabled:
        return None
    return config.stash[SESSION_KEY].header_lines(fake=config.stash[CONFIG_KEY].fake)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    """Attach this test's convperf rows and pending report sections to its report (xdist ships them)."""
    report = yield
    session = item.config.stash[SESSION_KEY]
    if call.when == "call":
        session.attach_rows(item, report)
    session.attach_sections(report)
    return report
