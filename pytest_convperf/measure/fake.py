"""Fake timer: replays given durations (and clock readings) so tests are exact.

It replaces the clock only: jobs are still called (``call_jobs=False`` skips that), so a
test exercises the same code as a real run. Durations are looked up by job name
(``candidate``, ``reference`` in paired comparisons; ``timed`` for ``convperf_measure_one``) and a
``"*"`` entry serves any other name. A sequence is consumed one value per sample and cycles.
The simulated clock (``now()``) advances by every returned duration, so time caps are
deterministic too.

From a JSON file (``$CONVPERF_FAKE_TIMER``)::

    {"times": {"candidate": [0.0005], "reference": [0.001, 0.00101]},
     "clocks": [{"sm_mhz": 1980}, {"sm_mhz": 1500, "reasons": 8}],
     "slot_clocks": {"candidate": [1500], "reference": [1980]}}

``slot_clocks`` gives each job's SM clock (MHz) read right before its slot, one value per round
of that job (cycling): a fake NVML reader for clock-normalised judging (``judge.cycles``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from pytest_convperf.core.clocks import ClockSample
from pytest_convperf.measure.protocol import Job, Unwatched

Times = Mapping[str, "float | Sequence[float]"] | Callable[[str, int], float]


class FakeTimer(Unwatched):
    """Timer whose samples come from ``times``; ``clocks`` gives one reading per round (cycling).

    ``times`` maps a job name to a duration or a sequence of durations (seconds), or is a
    function ``(name, index) -> seconds`` where ``index`` counts that name's samples from 0.
    ``counts`` holds how many samples each name produced (warm-up included); ``rounds`` how
    many rounds ran. ``supports_graphs`` is False, so mode ``auto`` never tries graphs.
    """

    kind = "fake"
    supports_graphs = False

    def __init__(
        self,
        times: Times,
        *,
        clocks: Sequence[ClockSample | None] | Callable[[int], ClockSample | None] | None = None,
        call_jobs: bool = True,
        l2_bytes: int = 0,
        slot_clocks: Mapping[str, Sequence[float | None]] | None = None,
    ) -> None:
        self._times = times
        self._clocks = clocks
        self._slot_clocks = slot_clocks
        self._last_slots: list[float | None] = []
        self.call_jobs = call_jobs
        self.l2_bytes = l2_bytes
        self.counts: dict[str, int] = {}
        self.rounds = 0
        self.elapsed = 0.0

    @classmethod
    def from_file(cls, path: str | Path) -> FakeTimer:
        """Load ``{"times": {...}, "clocks": [...], "call_jobs": true}`` (see the module docstring)."""
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise ValueError(f"fake timer file {path}: cannot read it as JSON ({exc})") from None
        if not isinstance(data, dict) or not isinstance(data.get("times"), dict):
            raise ValueError(
                f'fake timer file {path}: expected {{"times": {{"candidate": [...], "reference": [...]}}}}'
            )
        clocks = None
        if data.get("clocks") is not None:
            clocks = [
                None
                if c is None
                else ClockSample(
                    sm_mhz=c.get("sm_mhz"),
                    reasons=int(c.get("reasons", 0)),
                    temp_c=c.get("temp_c"),
                    power_w=c.get("power_w"),
                )
                for c in data["clocks"]
            ]
        slots = data.get("slot_clocks")
        if slots is not None and not isinstance(slots, dict):
            want = '"slot_clocks": {"candidate": [MHz, ...], "reference": [MHz, ...]}'
            raise ValueError(f"fake timer file {path}: expected {want}")
        return cls(
            data["times"], clocks=clocks, call_jobs=bool(data.get("call_jobs", True)), slot_clocks=slots
        )

    def now(self) -> float:
        return self.elapsed

    def _duration(self, name: str) -> float:
        index = self.counts.get(name, 0)
        self.counts[name] = index + 1
        if callable(self._times):
            return float(self._times(name, index))
        value = self._times.get(name, self._times.get("*"))
        if value is None:
            raise KeyError(f"fake timer has no durations for job {name!r} and no '*' entry")
        if isinstance(value, (int, float)):
            return float(value)
        if not value:
            raise ValueError(f"fake timer: empty duration list for job {name!r}")
        return float(value[index % len(value)])

    def job(self, name: str, call: Callable[[], object], mode: str) -> Job:
        return Job(name, call, flush=False, mode="fake", l2="n/a")

    def graph_job(self, name: str, calls: Sequence[Callable[[], object]], per_replay: int, l2: str) -> Job:
        raise NotImplementedError("the fake timer has no CUDA graphs")

    def run_round(self, jobs: Sequence[Job]) -> list[float]:
        out = []
        self._last_slots = [self._slot_mhz(job.name) for job in jobs]
        for job in jobs:
            if self.call_jobs:
                job.call()
            t = self._duration(job.name)
            self.elapsed += t * job.calls_per_sample
            out.append(t)
        self.rounds += 1
        return out

    def clocks(self) -> ClockSample | None:
        if self._clocks is None:
            return None
        index = self.rounds - 1
        if callable(self._clocks):
            return self._clocks(index)
        return self._clocks[index % len(self._clocks)] if self._clocks else None

    def _slot_mhz(self, name: str) -> float | None:
        if self._slot_clocks is None or not self._slot_clocks.get(name):
            return None
        values = self._slot_clocks[name]
        return values[self.rounds % len(values)]

    def slot_clocks(self) -> Sequence[float | None] | None:
        """Each job's SM clock before its slot in the last round (``protocol.slot_clocks``)."""
        return list(self._last_slots) if self._slot_clocks is not None else None

    def warmed_up(self) -> None:
        """Nothing depends on the clock rate here."""

    @contextmanager
    def pinned(self) -> Iterator[None]:
        yield

    def facts(self) -> dict[str, str]:
        return {"timer": "fake (replayed durations)"}
