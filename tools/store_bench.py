"""The results store's figures (docs/results-store.md, docs/dashboard.md): rows per second into
each engine, 8 concurrent writers, and the dashboard's build time for a simulated history.

    python tools/store_bench.py --url sqlite:///tmp/b.sqlite [--url postgresql://...]
        [--nights 1000 --checks 500]

Each URL should name an empty store (the tables are written to). Times are wall clock of this
process; the numbers in the docs say on which machine they were taken.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import random
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from pytest_convperf.reports.dashboard import build
from pytest_convperf.resultsdb import db


def records(nights: int, checks: int, *, seed: int = 0) -> list[dict[str, Any]]:
    """A simulated history: ``checks`` checks x ``nights`` nights, 1 % night-to-night noise, a 5 %
    step in one check of 20 at a random night, a kernel table per check."""
    rng = random.Random(seed)
    steps = {c: rng.randrange(nights // 4, nights) for c in range(0, checks, 20)}
    out = []
    for night in range(nights):
        when = f"2024-01-01T02:00:00+00:00#{night:05d}"
        for c in range(checks):
            ratio = 0.5 * (1.05 if c in steps and night >= steps[c] else 1.0) * math.exp(rng.gauss(0, 0.01))
            out.append(
                {"schema": "convperf-history/1", "when": when, "commit": f"{night:07x}", "machine": "h100",
                 "module": f"test_family{c % 7}", "key": f"test_check_{c}", "verdict": "PASS",
                 "time_ratio": ratio, "ln_ratio": math.log(ratio), "ratio_ci": [ratio * 0.99, ratio * 1.01],
                 "noise": 0.01, "timing": {"mode": "graph"},
                 "kernels": [{"name": f"kernel_{c}_v{1 + (c in steps and night >= steps[c])}", "calls": 1.0,
                              "share": 0.95}]}
            )  # fmt: skip
    return out


def rows_per_second(url: str, n: int = 5000, per_session: int = 500) -> float:
    engine, _ = db.open_store(url)
    data = records(n // 100, 100, seed=1)
    for r in data:
        r["when"] += "-rate"
    start = time.perf_counter()
    for i in range(0, n, per_session):
        db.write(engine, data[i : i + per_session], source="bench", session_id=uuid.uuid4().hex)
    elapsed = time.perf_counter() - start
    engine.dispose()
    return n / elapsed


def _writer(url: str, n: int) -> None:
    engine, _ = db.open_store(url)
    for i in range(50):
        rec = records(1, 1)[0]
        rec.update(key=f"w{n}", when=f"conc-{n}-{i}")
        db.write(engine, [rec], source=f"w{n}", session_id=uuid.uuid4().hex)
    engine.dispose()


def concurrent(url: str) -> float:
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(url, n)) for n in range(8)]
    start = time.perf_counter()
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    assert all(p.exitcode == 0 for p in procs)
    return time.perf_counter() - start


def dashboard(nights: int, checks: int) -> tuple[float, float, int]:
    """(seconds to load the store, seconds for the whole build, page bytes)."""
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'sim.sqlite'}"
        engine, _ = db.open_store(url)
        data = records(nights, checks)
        t0 = time.perf_counter()
        for i in range(0, len(data), 20000):
            db.write(engine, data[i : i + 20000], source="sim")
        load = time.perf_counter() - t0
        engine.dispose()
        t0 = time.perf_counter()
        lines, code = build(url, Path(tmp) / "site")
        assert code == 0, lines
        return load, time.perf_counter() - t0, (Path(tmp) / "site" / "index.html").stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", action="append", default=[])
    parser.add_argument("--nights", type=int, default=1000)
    parser.add_argument("--checks", type=int, default=500)
    args = parser.parse_args()
    for url in args.url:
        print(f"{db.shown(url)}: {rows_per_second(url):.0f} rows/s (sessions of 500 rows)")
        print(f"{db.shown(url)}: 8 writers x 50 one-row sessions in {concurrent(url):.1f} s")
    load, took, size = dashboard(args.nights, args.checks)
    print(
        f"dashboard: {args.nights} nights x {args.checks} checks: stored in {load:.0f} s, "
        f"built in {took:.1f} s, index.html {size / 1e6:.1f} MB"
    )


if __name__ == "__main__":
    main()
