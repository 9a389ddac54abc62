"""The confirm of a speed FAIL in a fresh process (docs/design.md §7).

A check's screen and its in-process confirm share the process they run in, and with it the
process's offset of the time ratio (the between-run noise: allocation, code placement, clocks).
When that offset is what made the screen slow, the in-process confirm agrees with it, and the
night's false-alarm control gets a p-value that is not independent of the screen that selected
it. The night simulation measures the cost: with the in-process confirm alone, 30 % of nights of
500 checks had a false FAIL at Holm 0.05 (docs/statistics.md §3).

So, under night-wide control (``--convperf-false-alarms=holm|bh``, where speed FAILs are decided
at session end anyway) and ``--convperf-confirm=fresh`` (the default), the controller re-runs the
tests of the session's speed FAILs in ``FRESH_PROCESSES`` fresh ``pytest`` subprocesses, one
after the other, with
``--convperf-confirm-run=PLAN``. There, :meth:`ConvperfFixture.judge` measures each listed check's
confirm (3x the screen's rounds) and appends it to the plan's output instead of judging it. The
controller then decides each FAIL again by the same rule (``judge.policy.decision_of``), with the mean
of the fresh measurements (:func:`across_processes`) as its confirm: it stays FAIL (and goes to
the night's controller with the fresh p-value) or is cleared. A check no subprocess measured
keeps its in-process verdict, and its message says why.
"""

from __future__ import annotations

import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from pytest_convperf.core.config import CONFIG_KEY, ConvperfConfig
from pytest_convperf.core.rerun import forwarded_args, plugin_args, subprocess_env
from pytest_convperf.core.results import Comparison, Measurement, Verdict
from pytest_convperf.judge.check_row import CheckRow
from pytest_convperf.judge.decision import CONFIRM_FACTOR
from pytest_convperf.measure.witness import WITNESS_FACTS, every_witness
from pytest_convperf.night.multiplicity import check_id, check_name

# Fresh processes per confirm: their offsets average, so the rule charges noise^2 / 2 for the
# confirm instead of noise^2. In the night simulation this lifts night-1 detection of a 10 %
# regression from about 88 % (one process, 100-night runs) to 95.7 % (docs/statistics.md §3).
FRESH_PROCESSES = 2
# Seconds the subprocess may take per check on top of its start (imports, collection, kernel loads).
_START_S = 120.0
_PER_CHECK_S = 300.0


@dataclass(frozen=True)
class ConfirmRun:
    """The subprocess side: which checks to measure with how many rounds, and where to append them."""

    rounds: Mapping[str, int]
    out: Path

    @classmethod
    def from_option(cls, value: str | Path | None) -> ConfirmRun | None:
        """The plan of ``--convperf-confirm-run=PLAN`` (``ConvperfConfig.confirm_run``); None without it."""
        if value is None:
            return None
        plan = json.loads(Path(value).read_text(encoding="utf-8"))
        return cls({str(k): int(v) for k, v in plan["rounds"].items()}, Path(plan["out"]))

    def measure(self, nodeid: str, key: str, confirm: Callable[[int], Comparison]) -> None:
        """Measure the check's confirm if it is listed; one JSON line per check, appended at once."""
        ident = check_name(nodeid, key)
        rounds = self.rounds.get(ident)
        if rounds is None:
            return
        fresh = confirm(rounds)
        with open(self.out, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"check": ident, "comparison": fresh.to_dict()}, default=str) + "\n")


def across_processes(comparisons: Sequence[Comparison]) -> Comparison:
    """The confirms of k fresh processes as one: the mean of their median log ratios (each
    process's offset counts once, so ``verdict`` charges ``noise^2 / k``), their rounds together."""
    if len(comparisons) == 1:
        return comparisons[0]
    k = len(comparisons)
    mean_ln = sum(c.median_log_ratio for c in comparisons) / k
    se = math.sqrt(sum(c.se * c.se for c in comparisons)) / k

    def joined(side: Sequence[Measurement]) -> Measurement:
        samples = tuple(x for m in side for x in m.samples)
        medians = [m.median for m in side]
        # ci: the spread of the processes' medians (each process's own ci is in its comparison).
        return replace(side[0], samples=samples, median=statistics.median(samples), n=len(samples),
                       ci=(min(medians), max(medians)), dropped=sum(m.dropped for m in side))  # fmt: skip

    first = comparisons[0]
    # The machine's witness (measure.witness) of the k processes as one, like their ratios: the
    # mean of their logs; none unless every process timed one (the judge then reads the reference).
    looks = every_witness(comparisons)
    facts = {k: v for k, v in first.facts.items() if k not in WITNESS_FACTS}
    if looks is not None:
        facts["witness_us"] = math.exp(sum(math.log(w) for w in looks) / k)
    return replace(
        first,
        candidate=joined([c.candidate for c in comparisons]),
        reference=joined([c.reference for c in comparisons]),
        log_ratios=tuple(x for c in comparisons for x in c.log_ratios),
        time_ratio=math.exp(mean_ln),
        time_ratio_ci=(math.exp(mean_ln - 1.96 * se), math.exp(mean_ln + 1.96 * se)),
        se=se,
        n_rounds=sum(c.n_rounds for c in comparisons),
        dropped_rounds=sum(c.dropped_rounds for c in comparisons),
        noisy=any(c.noisy for c in comparisons),
        facts={**facts, "processes": k, "process_ratios": [c.time_ratio for c in comparisons]},
    )


def applies(cfg: ConvperfConfig) -> bool:
    """Fresh confirms run at session end under night-wide control, unless baselines are being written."""
    return bool(cfg.enabled and cfg.confirm == "fresh" and cfg.false_alarms != "none" and not cfg.updating)


def suspects(rows: Sequence[CheckRow]) -> list[CheckRow]:
    """The session's speed FAILs (decided by a timing stage, with a comparison to confirm)."""
    return [
        row
        for row in rows
        if row.verdict is Verdict.FAIL
        and row.comparison is not None
        and row.stage in ("screen", "confirm")
        and row.baseline is not None
    ]


def run_subprocess(
    config: pytest.Config, rows: Sequence[CheckRow], *, checks: int = 0, factor: int = CONFIRM_FACTOR
) -> tuple[dict[str, Comparison], str | None]:
    """Measure ``rows``' confirms (``factor`` x their rounds) in one fresh pytest process:
    {check: comparison}, and a note on failure."""
    nodeids = list(dict.fromkeys(row.nodeid for row in rows))
    rounds = {check_id(row): factor * row.comparison.n_rounds for row in rows if row.comparison is not None}
    with tempfile.TemporaryDirectory(prefix="convperf-confirm-") as tmp:
        out = Path(tmp) / "confirm.jsonl"
        plan = Path(tmp) / "plan.json"
        plan.write_text(json.dumps({"rounds": rounds, "out": str(out)}), encoding="utf-8")
        forwarded = forwarded_args(config)
        xdist_off = ["-n", "0"] if config.pluginmanager.hasplugin("xdist") else []
        # The ini may name a report folder or updates: the fresh process writes none of them.
        quiet = ["-o", "convperf_report=", "-o", "convperf_update_baselines=", "-o", "convperf_trace=false"]
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            *plugin_args(forwarded),
            *nodeids,
            *forwarded,
            *quiet,
            *xdist_off,
            "-p",
            "no:cacheprovider",
            "-q",
            f"--convperf-confirm-run={plan}",
        ]
        timeout = _START_S + _PER_CHECK_S * max(checks, len(rounds))
        failed = _run(cmd, config.rootpath, timeout, Path(tmp) / "output.txt")
        got: dict[str, Comparison] = {}
        if out.exists():
            for line in out.read_text(encoding="utf-8").splitlines():
                try:  # a line cut short by a stopped process is skipped, not fatal
                    record = json.loads(line)
                    got[str(record["check"])] = Comparison.from_dict(record["comparison"])
                except (ValueError, KeyError, TypeError):
                    continue
    return got, failed


@dataclass(frozen=True)
class FreshRuns:
    """What up to k fresh pytest processes measured, one ``{check: comparison}`` per process in
    order, and why any of them fell short (None: none did)."""

    measured: tuple[Mapping[str, Comparison], ...]
    failed: str | None

    def of(self, ident: str, most: int | None = None) -> list[Comparison]:
        """The check's measurements in the first ``most`` processes (None: all of them)."""
        return [got[ident] for got in self.measured[:most] if ident in got]


def run_processes(
    config: pytest.Config,
    rows: Sequence[CheckRow],
    todo: Sequence[CheckRow],
    k: int,
    *,
    factor: int = CONFIRM_FACTOR,
) -> FreshRuns:
    """``todo``'s checks measured in up to ``k`` fresh pytest processes, one after the other."""
    # A fresh process runs the todo rows' whole tests: its time limit counts all their checks.
    tests = {row.nodeid for row in todo}
    checks = sum(row.nodeid in tests for row in rows)
    runs: list[tuple[dict[str, Comparison], str | None]] = []
    for _ in range(k):
        runs.append(run_subprocess(config, todo, checks=checks, factor=factor))
        if (runs[-1][1] or "").startswith(TIMED_OUT):  # another one would hang as long
            break
    failed = "; ".join(dict.fromkeys(note for _, note in runs if note)) or None
    return FreshRuns(tuple(got for got, _ in runs), failed)


def _run(cmd: Sequence[str], cwd: Path, timeout: float, log: Path) -> str | None:
    """Run ``cmd`` in its own process group (node ids are relative to the rootdir ``cwd``); None
    when it ran to an end pytest reports, else why not. Output goes to a file, not a pipe. A
    timeout, or Ctrl-C here, stops the whole group; so does a normal exit: a grandchild holding the
    GPU or a file cannot outlive the session end."""
    with open(log, "w+", encoding="utf-8", errors="replace") as fh:
        proc = subprocess.Popen(
            cmd,
            cwd=str(cwd),
            env=subprocess_env(),
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop(proc)
            return f"{TIMED_OUT} {timeout:.0f} s and was stopped"
        except BaseException:
            _stop(proc)
            raise
        _stop(proc)  # the process is done; what it started (its group) is not left running
        if code in (0, 1):  # tests passed or failed: the measurements are what counts
            return None
        fh.seek(0)
        tail = fh.read()[-1500:].strip()
    return f"the fresh pytest process exited {code}" + (f": {tail}" if tail else "")


TIMED_OUT = "the fresh pytest process ran over"


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Kill the process and its group (its own session); only the process where groups do not exist."""
    killpg = getattr(os, "killpg", None)
    try:
        if killpg is not None:
            killpg(proc.pid, getattr(signal, "SIGKILL", signal.SIGTERM))
        else:
            proc.kill()
    except ProcessLookupError:  # it ended on its own meanwhile
        pass
    proc.wait()


def rejudge(row: CheckRow, fresh: Comparison, cfg: ConvperfConfig) -> CheckRow:
    """The row decided again by the same rule, with the fresh-process measurement as its confirm."""
    from pytest_convperf.baselines.updates import quality_of
    from pytest_convperf.judge.policy import decision_of, policy_for
    from pytest_convperf.night.machine_noise import machine_noise

    assert row.comparison is not None and row.baseline is not None
    old = row.baseline
    kind = row.device_kind or "cpu"
    decision = decision_of(
        row.comparison,
        old,
        policy_for(cfg, kind, old, machine_noise(cfg.report_dir, row.machine or "unknown", kind)),
        confirm=lambda _n: fresh,
        errors=row.errors,
        env=row.env or {},
        backend=row.comparison.facts.get("reference_backend"),
        quality=quality_of(row.extra_metrics or {}),
    )
    here = row.message.splitlines()[0] if row.message else ""
    k = int(fresh.facts.get("processes", 1))
    if decision.verdict is Verdict.FAIL:
        message = (
            f"{decision.message}\n(confirmed again in {k} fresh pytest process(es); in this process: {here})"
        )
    else:
        message = (
            f"{decision.message}\n(cleared by {k} fresh pytest process(es); this process's own confirm "
            f"had said: {here})"
        )
    return replace(row, verdict=decision.verdict, message=message, decision=decision)


def confirm_fails(
    config: pytest.Config, cfg: ConvperfConfig, rows: Sequence[CheckRow]
) -> tuple[list[CheckRow], list[str]]:
    """The rows with every speed FAIL confirmed in fresh processes; terminal lines saying what ran.

    A confirm that could not run leaves the in-process verdicts standing, and says so (an exception
    too: :class:`FreshProcesses` catches it).
    """
    todo = suspects(rows)
    if not todo:
        return list(rows), []
    start = time.monotonic()  # the confirm's cost, in its line (scripts/night_summary.py reads it)
    fresh = run_processes(config, rows, todo, FRESH_PROCESSES)
    failed = fresh.failed
    redone: dict[int, CheckRow] = {}
    for row in todo:
        measured = fresh.of(check_id(row))
        usable = [c for c in measured if not c.inconclusive]
        if usable:
            redone[id(row)] = rejudge(row, across_processes(usable), cfg)
            continue
        why = failed or (
            f"unusable ({measured[0].inconclusive})" if measured else "the test did not reach this check"
        )
        note = f"\n(not confirmed in a fresh process: {why}; this process's confirm stands)"
        redone[id(row)] = replace(row, message=f"{row.message}{note}")
    cleared = sum(r.verdict is not Verdict.FAIL for r in redone.values())
    lines = [
        f"{len(todo)} speed FAIL(s) confirmed again in up to {FRESH_PROCESSES} fresh pytest processes: "
        f"{len(todo) - cleared} still FAIL, {cleared} cleared"
        + (f" ({failed})" if failed else "")
        + f" in {time.monotonic() - start:.1f} s"
    ]
    return [redone.get(id(r), r) for r in rows], lines


# The name this plugin object is registered under (``-p no:convperf-fresh-confirm`` leaves it out).
PLUGIN_NAME = "convperf-fresh-confirm"


class FreshProcesses:
    """A session-end plugin that measures the session's rows again in fresh pytest processes
    (:meth:`redo`): the fresh-process confirm here, the recording of ``night.fresh_record``. Runs
    before the false-alarm control, which decides on the rows these return."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @property
    def cfg(self) -> ConvperfConfig:
        """The session's config (``CONFIG_KEY``), not a copy: session start reads the environment again."""
        return self.config.stash[CONFIG_KEY]

    # What the terminal line says when :meth:`redo` raised: the rows stay as this process made them.
    not_done = "rows not measured again in fresh processes"

    def redo(self, rows: Sequence[CheckRow]) -> tuple[list[CheckRow], list[str]]:
        """The rows after the fresh processes, and terminal lines saying what ran."""
        raise NotImplementedError

    @pytest.hookimpl(tryfirst=True)  # before the false-alarm control, which decides on these rows
    def pytest_convperf_modify_rows(self, session: pytest.Session, rows: list[CheckRow]) -> list[str] | None:
        if session.exitstatus == pytest.ExitCode.INTERRUPTED:  # Ctrl-C: no new pytest processes
            return None
        try:
            rows[:], lines = self.redo(rows)
        except KeyboardInterrupt:  # Ctrl-C at session end: the night is still judged and reported
            return [f"{self.not_done} (interrupted)"]
        except Exception as exc:  # the session end must still judge, update and write its reports
            return [f"{self.not_done} ({type(exc).__name__}: {exc})"]
        return lines


class FreshConfirm(FreshProcesses):
    """The fresh-process confirm as a plugin: registered on the controller when :func:`applies`."""

    not_done = "speed FAILs not confirmed in a fresh process"

    def redo(self, rows: Sequence[CheckRow]) -> tuple[list[CheckRow], list[str]]:
        return confirm_fails(self.config, self.cfg, rows)
