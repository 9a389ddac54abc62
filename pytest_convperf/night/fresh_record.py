"""A recorded entry measured in K pytest processes, not one (issue 36 item 1).

A session's time ratio carries the offset of the process it ran in (allocation, code placement,
what the machine was doing), and on a shared CPU box that offset moves between sessions by more
than the CPU floor: a recording that caught the reference fast stores a ratio every later session
reads as a slowdown, and one that caught it slow hides a real one. Measured on the 2-core box
(stop 35): in 6 of the 7 runs of ``test_control_slowed`` whose 25 % slower candidate was not
caught, the one-process recording had timed the reference at 205-241 us, against 254-280 us in
the sessions that judged it.

So while updating, the checks whose entries will be written are measured again in K - 1 fresh
pytest processes (``--convperf-record-runs=K``; by default 3 where the timing is the CPU's, 1
elsewhere: a CUDA session's offset is not measured yet, and the fake timer has none), each the
way a fresh-process confirm measures (``fresh_confirm.run_subprocess``, the check's own rounds),
and the entry stores the **median** of the K processes' ratios, with ``ref_runs`` K: the
decision rule then charges the stored ratio ``noise^2 / K`` (``judge.decision``), and one lucky
process out of three cannot set the baseline. The K ratios and their spread go into the update's
reason, so a reviewer sees how far apart the processes were.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections.abc import Sequence

import pytest

from pytest_convperf.core.config import ConvperfConfig
from pytest_convperf.core.results import Comparison
from pytest_convperf.judge.check_row import CheckRow
from pytest_convperf.measure.witness import every_witness
from pytest_convperf.night.fresh_confirm import FreshProcesses, run_processes
from pytest_convperf.night.multiplicity import check_id

# Processes per recording where no --convperf-record-runs is given, per timing mode: CPU timing
# drifts between processes (above); three is the fewest whose median out-votes one lucky process.
DEFAULT_RUNS = {"cpu": 3, "cpu-thread": 3}


def runs_for(cfg: ConvperfConfig, comparison: Comparison) -> int:
    """How many processes this check's recording is the median of."""
    if cfg.record_runs is not None:
        return cfg.record_runs
    return DEFAULT_RUNS.get(str(comparison.candidate.mode), 1)


def applies(cfg: ConvperfConfig) -> bool:
    """Recording in fresh processes: only while updating, never in a fresh process itself."""
    return bool(cfg.enabled and cfg.updating and cfg.confirm_run is None and cfg.record_runs != 1)


def to_record(cfg: ConvperfConfig, rows: Sequence[CheckRow]) -> list[CheckRow]:
    """The rows whose planned write is a timed entry that more than one process should measure."""
    return [
        row
        for row in rows
        if row.update is not None
        and row.update.action == "write"
        and row.update.entry is not None
        and row.comparison is not None
        and not row.comparison.inconclusive
        and runs_for(cfg, row.comparison) > 1
    ]


def pooled_witness(sides: Sequence[Comparison]) -> float | None:
    """The median of the processes' witnesses (``measure.witness``), None unless every one has one:
    a median of some would stand for the processes that had none."""
    looks = every_witness(sides)
    return statistics.median(looks) if looks is not None else None


def pooled(row: CheckRow, fresh: Sequence[Comparison]) -> CheckRow:
    """The row with its planned entry the median of this process and the ``fresh`` ones: ratio and
    both sides' times, ``ref_runs`` the number of processes, the ratios in the plan's reason."""
    assert row.update is not None and row.update.entry is not None and row.comparison is not None
    sides = [row.comparison, *fresh]
    ratios = [c.time_ratio for c in sides]
    ln = [math.log(r) for r in ratios]
    spread = statistics.stdev(ln) if len(ln) > 1 else 0.0
    entry = dataclasses.replace(
        row.update.entry,
        time_ratio=math.exp(statistics.median(ln)),
        us_candidate=statistics.median(c.candidate.median_us for c in sides),
        us_reference=statistics.median(c.reference.median_us for c in sides),
        us_witness=pooled_witness(sides),
        ref_runs=len(sides),
    )
    listed = ", ".join(f"{r:.4g}" for r in ratios)
    why = (
        f"{row.update.why}; the median of {len(sides)} pytest processes (ratios {listed}; "
        f"between-process SD {spread:.1%})"
    )
    return dataclasses.replace(row, update=dataclasses.replace(row.update, entry=entry, why=why))


def record_fresh(
    config: pytest.Config, cfg: ConvperfConfig, rows: Sequence[CheckRow]
) -> tuple[list[CheckRow], list[str]]:
    """The rows with each recorded entry pooled over fresh processes; terminal lines saying what ran.

    A check no fresh process measured keeps its one-process entry, and says why (an exception
    keeps them all: :class:`FreshProcesses` catches it).
    """
    todo = to_record(cfg, rows)
    if not todo:
        return list(rows), []
    start = time.monotonic()
    wanted = {id(row): runs_for(cfg, row.comparison) - 1 for row in todo if row.comparison is not None}
    fresh = run_processes(config, rows, todo, max(wanted.values()), factor=1)
    failed = fresh.failed
    redone: dict[int, CheckRow] = {}
    short = 0
    for row in todo:
        assert row.update is not None
        want = wanted[id(row)]
        usable = [c for c in fresh.of(check_id(row), want) if not c.inconclusive]
        if len(usable) < want:
            short += 1
        if usable:
            redone[id(row)] = pooled(row, usable)
        else:
            why = failed or "the test did not reach this check"
            note = f"; not measured again in a fresh process ({why}): one process's ratio"
            plan = dataclasses.replace(row.update, why=row.update.why + note)
            redone[id(row)] = dataclasses.replace(row, update=plan)
    entries = f"{len(todo)} recorded entr{'y' if len(todo) == 1 else 'ies'}"
    lines = [
        f"{entries} measured again in {len(fresh.measured)} fresh pytest process(es) and stored as the median"
        + (f"; {short} with fewer processes than asked" if short else "")
        + (f" ({failed})" if failed else "")
        + f" in {time.monotonic() - start:.1f} s"
    ]
    return [redone.get(id(r), r) for r in rows], lines


# The name this plugin object is registered under (``-p no:convperf-fresh-record`` leaves it out).
PLUGIN_NAME = "convperf-fresh-record"


class FreshRecord(FreshProcesses):
    """Recording in fresh processes as a plugin: registered on the controller when :func:`applies`."""

    not_done = "recorded entries not measured again in fresh processes"

    def redo(self, rows: Sequence[CheckRow]) -> tuple[list[CheckRow], list[str]]:
        return record_fresh(self.config, self.cfg, rows)
