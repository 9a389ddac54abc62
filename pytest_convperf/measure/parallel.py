"""Several workers on one host: ``--convperf-gpus`` with pytest-xdist, and honest timing under ``-n``.

With ``--convperf-gpus=auto|N|0,1,...`` and ``-n N`` the controller gives xdist worker *i*
one GPU: ``CUDA_VISIBLE_DEVICES`` goes into the worker's spawn spec, so it is set before
the worker imports any conftest or touches CUDA, and the worker checks it again in its own
``pytest_configure``. Two workers never share a GPU; more workers than GPUs is a usage error.

Workers that share a device (the CPU, or one GPU without ``--convperf-gpus``) still run
correctness in parallel, but timing is serialized: every test holds a shared lock on its
device for its whole run and a measurement takes the lock exclusively, so while one worker
times, the others wait between tests instead of competing for the cores it is measuring.
The locks are ``flock`` files under the temp directory, keyed by the xdist run; a "gate"
file makes a waiting measurement block new tests, so it cannot be starved.

Results need nothing here: rows ride on ``report.user_properties`` to the controller
(``session.py``), which writes baselines and reports once.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pytest

from pytest_convperf.core.config import get_config

if TYPE_CHECKING:
    from collections.abc import Generator, Iterator, Mapping, Sequence

try:  # POSIX only; without it timing under xdist is refused (see timing_slot).
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

ENV = "CUDA_VISIBLE_DEVICES"
GPU_INPUT = "convperf_gpu"  # workerinput key: the CUDA_VISIBLE_DEVICES value of this worker
LOCK_PREFIX = "convperf-xdist-"


# ---- which GPUs, which worker ---------------------------------------------------------------------
def nvml_gpu_count() -> int | None:
    """Number of GPUs NVML sees (ignores ``CUDA_VISIBLE_DEVICES``); ``None`` when NVML is unusable.

    NVML, not torch: the controller must not start CUDA, and asking CUDA for a count would.
    """
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        return int(pynvml.nvmlDeviceGetCount())
    except Exception:
        return None
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def visible_gpus(env: Mapping[str, str], nvml_count: int | None) -> list[str] | None:
    """The GPUs this process may hand out, as ``CUDA_VISIBLE_DEVICES`` entries; ``None`` if unknown.

    An inherited ``CUDA_VISIBLE_DEVICES`` wins (CUDA stops reading it at the first invalid entry,
    so ``-1`` hides every GPU); otherwise every GPU NVML sees, by index.
    """
    raw = env.get(ENV)
    if raw is not None:
        entries: list[str] = []
        for part in raw.split(","):
            entry = part.strip()
            if not entry or entry.startswith("-"):
                break
            entries.append(entry)
        return entries
    if nvml_count is None:
        return None
    return [str(i) for i in range(nvml_count)]


def assign_gpus(
    requested: tuple[int, ...] | Literal["auto"], visible: Sequence[str] | None, workers: int
) -> list[str]:
    """``CUDA_VISIBLE_DEVICES`` value for xdist workers 0..workers-1; empty when there is no GPU.

    ``requested`` indexes the GPUs visible to this process (as ``cuda:i`` would); with an
    unknown visible set (no NVML) explicit indices are trusted as they are.
    """
    shown = "auto" if requested == "auto" else ",".join(str(i) for i in requested)
    if requested == "auto":
        pool = list(visible or [])
        if not pool:
            return []
    elif visible is None:
        pool = [str(i) for i in requested]
    else:
        missing = [i for i in requested if i >= len(visible)]
        if missing:
            where = f"{ENV}={os.environ[ENV]!r} shows" if ENV in os.environ else "this machine has"
            raise pytest.UsageError(
                f"--convperf-gpus={shown}: GPU index {', '.join(map(str, missing))} does not exist; "
                f"{where} {len(visible)} GPU(s), indices 0..{len(visible) - 1}"
            )
        pool = [visible[i] for i in requested]
    if workers > len(pool):
        raise pytest.UsageError(
            f"--convperf-gpus={shown}: {workers} xdist workers but only {len(pool)} GPU(s) "
            f"({', '.join(pool)}), so two workers would time on one GPU; "
            f"use -n {len(pool)} (or fewer) or list more GPUs"
        )
    return pool[:workers]


def xdist_worker_count(config: pytest.Config) -> int:
    """How many xdist workers this (controller) session will start; 0 without xdist."""
    if not config.pluginmanager.hasplugin("xdist") or getattr(config.option, "dist", "no") == "no":
        return 0
    from xdist import workermanage

    # Expands "3*popen"; named parse_spec_config before pytest-xdist 3.6.
    parse = getattr(workermanage, "parse_tx_spec_config", None) or getattr(
        workermanage, "parse_spec_config", None
    )
    if parse is None:
        return len(getattr(config.option, "tx", None) or [])
    return len(parse(config))


# ---- a readers-writer lock across the workers of one run -------------------------------------------
class DomainLock:
    """Tests of all workers on one device share it; a timed measurement holds it alone.

    ``fcntl.flock`` locks belong to an open file, so each worker process opens its own and the
    kernel drops them if a worker dies. Writers pass through the gate and keep it while they
    wait, so tests that start later queue behind the measurement.
    """

    def __init__(self, directory: Path, domain: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.domain = domain
        self._main = os.open(directory / f"{domain}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        self._gate = os.open(directory / f"{domain}.gate", os.O_RDWR | os.O_CREAT, 0o600)
        self._held: Literal["none", "shared", "exclusive"] = "none"
        self._depth = 0

    def _take(self, mode: int) -> None:
        fcntl.flock(self._gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(self._main, mode)
        finally:
            fcntl.flock(self._gate, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        """Held for the whole run of one test."""
        self._take(fcntl.LOCK_SH)
        self._held = "shared"
        try:
            yield
        finally:
            self._held = "none"
            fcntl.flock(self._main, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Held around one measurement; re-entrant; gives up the test's shared hold meanwhile."""
        if self._held == "exclusive":
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        was_shared = self._held == "shared"
        if was_shared:
            # Never convert shared -> exclusive in place: two workers doing so would deadlock.
            fcntl.flock(self._main, fcntl.LOCK_UN)
        self._take(fcntl.LOCK_EX)
        self._held = "exclusive"
        try:
            yield
        finally:
            fcntl.flock(self._main, fcntl.LOCK_UN)
            self._held = "none"
            if was_shared:
                self._take(fcntl.LOCK_SH)
                self._held = "shared"

    def close(self) -> None:
        for fd in (self._main, self._gate):
            with contextlib.suppress(OSError):
                os.close(fd)


def lock_dir(testrunuid: str) -> Path:
    """Folder of this xdist run's lock files (one run never waits on another)."""
    return Path(tempfile.gettempdir()) / f"{LOCK_PREFIX}{testrunuid}"


@dataclass
class WorkerState:
    """What a worker knows about its place: its worker id, its GPU and its device lock."""

    workerid: str
    gpu: str | None
    lock: DomainLock | None
    refuse_timing: bool = False  # workers share a device but this platform has no flock


WORKER_KEY = pytest.StashKey[WorkerState]()


@contextlib.contextmanager
def timing_slot(config: pytest.Config) -> Iterator[None]:
    """Wrap a timed measurement: exclusive on this worker's device under xdist, a no-op otherwise."""
    state = config.stash.get(WORKER_KEY, None)
    if state is not None and state.refuse_timing:
        raise RuntimeError(
            "convperf: timing under pytest-xdist needs POSIX file locks (fcntl), which this "
            "platform lacks; run the convperf checks without -n"
        )
    if state is None or state.lock is None:
        yield
        return
    with state.lock.exclusive():
        yield


# ---- hooks ------------------------------------------------------------------------------------------
class XdistControllerHooks:
    """Registered on the xdist controller only: hands GPUs to workers and says how timing runs."""

    def __init__(self, workers: int, pins: list[str], header: str | None) -> None:
        self.workers = workers
        self.pins = pins
        self.header = header
        self.by_worker: dict[str, str] = {}
        self.testrunuid: str | None = None

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_setupnodes(self, config: pytest.Config, specs: Sequence[Any]) -> None:
        """Put ``CUDA_VISIBLE_DEVICES`` into each spawn spec: set before the worker imports anything."""
        for index, spec in enumerate(specs):
            if index < len(self.pins):
                spec.env[ENV] = self.pins[index]
                self.by_worker[str(spec.id)] = self.pins[index]

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """Tell the worker its GPU, so it can check the pin in its own ``pytest_configure``."""
        self.testrunuid = node.workerinput.get("testrunuid")
        pin = self.by_worker.get(node.workerinput["workerid"])
        if pin is not None:
            node.workerinput[GPU_INPUT] = pin

    def pytest_report_header(self, config: pytest.Config) -> list[str] | None:
        """One line: each worker's GPU, or that timing is serialized across workers."""
        return [self.header] if self.header else None

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.testrunuid:
            shutil.rmtree(lock_dir(self.testrunuid), ignore_errors=True)


class HeaderHooks:
    """Registered without xdist when --convperf-gpus was given: say that it had no effect."""

    def __init__(self, header: str) -> None:
        self.header = header

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        """One line: --convperf-gpus needs xdist workers."""
        return [self.header]


class XdistWorkerHooks:
    """Registered on xdist workers that share a device: each test holds the device lock shared."""

    def __init__(self, lock: DomainLock) -> None:
        self.lock = lock

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, object, object]:
        with self.lock.shared():
            return (yield)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.lock.close()


def configure(config: pytest.Config) -> None:
    """Called from the plugin's (tryfirst) ``pytest_configure``: pin a worker or set up the controller."""
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    if workerinput is not None:
        _configure_worker(config, workerinput)
        return
    workers = xdist_worker_count(config)
    cfg = get_config(config)
    if workers == 0:
        if cfg.gpus is not None:
            shown = os.environ.get(ENV, "all GPUs")
            config.pluginmanager.register(
                HeaderHooks(
                    f"convperf: --convperf-gpus pins pytest-xdist workers (-n N); this single process uses "
                    f"{ENV}={shown}"
                ),
                "convperf-gpus-header",
            )
        return
    timing_shared = cfg.enabled and workers > 1
    # NVML only when the answer matters (a GPU list to resolve, or a message to word).
    visible = visible_gpus(os.environ, nvml_gpu_count()) if cfg.gpus is not None or timing_shared else None
    pins: list[str] = []
    if cfg.gpus is not None:
        pins = assign_gpus(cfg.gpus, visible, workers)
    header = None
    if pins:
        header = "convperf: one GPU per xdist worker: " + ", ".join(
            f"gw{i}->{ENV}={pin}" for i, pin in enumerate(pins)
        )
    elif timing_shared:
        if cfg.device == "cpu" or not visible:
            header = f"convperf: timing serialized across {workers} xdist workers on the CPU"
        else:
            header = (
                f"convperf: timing serialized across {workers} xdist workers sharing one GPU; "
                "--convperf-gpus=auto gives each worker its own"
            )
        header += " (while one worker times, the others wait)"
    config.pluginmanager.register(XdistControllerHooks(workers, pins, header), "convperf-xdist-controller")


def _configure_worker(config: pytest.Config, workerinput: Mapping[str, Any]) -> None:
    pin: str | None = workerinput.get(GPU_INPUT)
    if pin is not None and os.environ.get(ENV) != pin:
        _refuse_if_cuda_started(str(workerinput["workerid"]), pin)
        os.environ[ENV] = pin
    lock = None
    shared = int(workerinput.get("workercount", 1)) > 1
    if shared and fcntl is not None:
        # A pin may be a UUID or a MIG path ("MIG-GPU-.../1/0"): keep the file name plain.
        domain = (
            "host"
            if pin is None or get_config(config).device == "cpu"
            else "gpu-" + re.sub(r"[^\w.-]", "_", pin)
        )
        lock = DomainLock(lock_dir(str(workerinput["testrunuid"])), domain)
        config.pluginmanager.register(XdistWorkerHooks(lock), "convperf-xdist-worker")
    config.stash[WORKER_KEY] = WorkerState(
        str(workerinput["workerid"]), pin, lock, refuse_timing=shared and fcntl is None
    )


def _refuse_if_cuda_started(workerid: str, pin: str) -> None:
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    if cuda is not None and cuda.is_initialized():
        raise pytest.UsageError(
            f"convperf: xdist worker {workerid} must be pinned to GPU {ENV}={pin}, but CUDA is already "
            "initialised in it (a conftest or plugin used torch.cuda at import); move that call into "
            "a fixture or test"
        )
