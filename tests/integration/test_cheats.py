"""Four cheats (five candidates) recorded as IMPROVED (confirmed) on the CPU path (issue 37 item 2)
are refused as failed checks naming the cheat, recorded in rows.json, never written as a baseline.

Each returns correct values whenever they are read: a lazy ``torch.Tensor`` subclass computed on
first use; the same, only when a frame of the plugin's ``measure`` package is on the stack; a clock
patch that finds the CPU timer's clocks through ``gc`` (instance attributes, module globals, closure
cells) and hides the candidate's own time; and the conv done by a worker process over shared
memory, the candidate's thread waiting (waiting costs no thread CPU time).

Real CPU timer, fresh processes: an honest candidate records the baseline, then each cheat runs on
its key with ``--convperf-update-baselines=all``. Before the fix all four read IMPROVED (confirmed),
-80 to -92 %, and were written as the new baseline.
"""

from __future__ import annotations

import json

import pytest
import yaml

SUITE = '''
import gc
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.utils._pytree import tree_map

from pytest_convperf.core.problem import Conv2dProblem

# ~1 ms a call: the conv, not Python's call overhead, is a call's time.
BIG = Conv2dProblem(n=1, c_in=32, h=56, w=56, c_out=32, kernel=3, padding=1)
CHEATING = os.environ.get("CHEAT") == "1"


def honest(x, w, b, *args):
    return F.conv2d(x, w, b, *args)


class Lazy(torch.Tensor):
    """A tensor whose values are computed on first use (any op on it runs the conv first)."""

    @staticmethod
    def __new__(cls, thunk, like, device):
        t = torch.Tensor._make_wrapper_subclass(cls, like.shape, dtype=like.dtype, device=device)
        t.thunk, t.value = thunk, None
        return t

    def get(self):
        if self.value is None:
            self.value = self.thunk()
        return self.value

    def untyped_storage(self):  # what a storage check reads: the computed value's
        return self.get().untyped_storage()

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        unwrap = lambda a: a.get() if isinstance(a, Lazy) else a
        return func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs or {}))


def lazy(x, w, b, *args):
    x = x.clone()  # the values of this call (each timed round writes fresh ones)
    like = torch.empty((x.shape[0], w.shape[0], x.shape[2], x.shape[3]), device="meta")
    return Lazy(lambda: F.conv2d(x, w, b, *args), like, x.device)


def measuring():
    f = sys._getframe(1)
    while f is not None:
        name = f.f_code.co_filename.replace(os.sep, "/")
        if "pytest_convperf/measure/" in name:
            return True
        f = f.f_back
    return False


def stack(x, w, b, *args):
    return lazy(x, w, b, *args) if measuring() else F.conv2d(x, w, b, *args)


REAL_THREAD, REAL_PROCESS, REAL_GETTIME = time.thread_time_ns, time.process_time_ns, time.clock_gettime_ns
HIDDEN = [0]


def fake_thread():
    return REAL_THREAD() - HIDDEN[0]


def fake_process():
    return REAL_PROCESS() - HIDDEN[0]


def fake_gettime(clock):
    return REAL_GETTIME(clock) - (HIDDEN[0] if clock == time.CLOCK_THREAD_CPUTIME_ID else 0)


def _patch(obj, fakes, depth=0):
    """Replace every reference to a real clock reachable from ``obj`` (attributes, dicts, tuples
    and lists in them, closure cells and defaults of its functions)."""
    if depth > 3:
        return obj
    for real, fake in fakes:
        if obj is real:
            return fake
    if isinstance(obj, dict):
        for k, v in list(obj.items()):
            obj[k] = _patch(v, fakes, depth + 1)
    elif isinstance(obj, tuple):
        return tuple(_patch(v, fakes, depth + 1) for v in obj)
    elif isinstance(obj, list):
        obj[:] = [_patch(v, fakes, depth + 1) for v in obj]
    elif callable(obj):
        for cell in getattr(obj, "__closure__", None) or ():
            try:
                cell.cell_contents = _patch(cell.cell_contents, fakes, depth + 1)
            except ValueError:
                pass
        if getattr(obj, "__defaults__", None):
            obj.__defaults__ = _patch(obj.__defaults__, fakes, depth + 1)
    return obj


def patch_clocks(fakes):
    """Through gc and sys.modules: the timer objects, their classes, the measure modules (their
    globals and closures), and the time module itself."""
    for real, fake in fakes:
        setattr(time, real.__name__, fake)
    for o in gc.get_objects():
        module = getattr(type(o), "__module__", None)
        ours = isinstance(module, str) and module.startswith("pytest_convperf.measure")
        if ours and hasattr(o, "__dict__"):
            _patch(vars(o), fakes)
    for name, mod in list(sys.modules.items()):
        if name.startswith("pytest_convperf.measure"):
            _patch(vars(mod), fakes)
            for v in list(vars(mod).values()):
                if isinstance(v, type):
                    for attr in vars(v).values():
                        _patch(attr, fakes)


def hiding(fakes):
    done = []

    def patched(x, w, b, *args):
        if not done:  # once per cheat
            patch_clocks(fakes)
            done.append(True)
        t0 = REAL_THREAD()
        out = F.conv2d(x, w, b, *args)
        HIDDEN[0] += (REAL_THREAD() - t0) * 9 // 10  # the timer sees a tenth of this call
        return out

    return patched


# The CPU clocks the timer reads (the issue's cheat), and every CPU clock, their twin included.
patched = hiding([(REAL_THREAD, fake_thread), (REAL_PROCESS, fake_process)])
patched_all = hiding([(REAL_THREAD, fake_thread), (REAL_PROCESS, fake_process), (REAL_GETTIME, fake_gettime)])


WORKER = """
import sys, torch, torch.nn.functional as F
torch.set_num_threads(1)
x, w, b, y = (torch.from_file(sys.argv[1] + s, shared=True, size=int(n)) for s, n in
              zip("xwby", sys.argv[2:6]))
x, w, y = x.view(1, 32, 56, 56), w.view(32, 32, 3, 3), y.view(1, 32, 56, 56)
for line in sys.stdin:
    y.copy_(F.conv2d(x, w, b, 1, 1))
    sys.stdout.write("1\\\\n")
    sys.stdout.flush()
"""
SHARED = {}


def worker(x, w, b, *args):
    if not SHARED:
        base = str(Path(os.environ["CHEAT_SHM"]) / "t")
        sizes = [x.numel(), w.numel(), b.numel(), x.shape[0] * w.shape[0] * x.shape[2] * x.shape[3]]
        for s, n in zip("xwby", sizes):
            SHARED[s] = torch.from_file(base + s, shared=True, size=n)
        SHARED["p"] = subprocess.Popen([sys.executable, "-c", WORKER, base, *map(str, sizes)],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    SHARED["x"].copy_(x.reshape(-1))
    SHARED["w"].copy_(w.reshape(-1))
    SHARED["b"].copy_(b)
    p = SHARED["p"]
    p.stdin.write("go\\n")
    p.stdin.flush()
    p.stdout.readline()  # blocks: no CPU time on this thread
    return SHARED["y"].view(x.shape[0], w.shape[0], x.shape[2], x.shape[3]).clone()


CHEATS = {"lazy": lazy, "stack": stack, "patched": patched, "patched_all": patched_all, "worker": worker}


@pytest.mark.convperf
@pytest.mark.parametrize("cheat", sorted(CHEATS))
def test_conv(convperf, cheat):
    convperf.check(CHEATS[cheat] if CHEATING else honest, BIG)
'''

# What each cheat is refused as: the words that open the failure (the row's ``integrity`` tag).
REFUSED = {
    "lazy": "LAZY OUTPUT",
    "stack": "LAZY OUTPUT",
    "patched": "CLOCK CHANGED",
    "patched_all": "WORK ELSEWHERE",  # its twin patched too: the time hidden shows as waiting
    "worker": "WORK ELSEWHERE",
}


def test_four_cheats_are_refused_named_recorded_and_never_a_baseline(
    pytester: pytest.Pytester, cpu_plugin_args: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_cheats=SUITE)
    monkeypatch.setenv("CHEAT_SHM", str(pytester.mkdir("shm")))
    args = (
        *cpu_plugin_args,
        "--convperf",
        "--convperf-machine=cheatbox",
        "-p",
        "no:xdist",
    )
    honest = pytester.runpytest_subprocess(*args, "--convperf-update-baselines")
    honest.assert_outcomes(passed=5)
    path = pytester.path / "baselines" / "cheatbox" / "test_cheats.yaml"
    recorded = yaml.safe_load(path.read_text())["benchmarks"]
    assert len(recorded) == 5

    monkeypatch.setenv("CHEAT", "1")
    # --convperf-reason: a ratio over 2x faster is written only with a word for reviewers
    update = ("--convperf-update-baselines=all", "--convperf-reason=faster")
    result = pytester.runpytest_subprocess(*args, *update, "--convperf-report=report")
    out = result.stdout.str()
    result.assert_outcomes(failed=5)
    assert "IMPROVED" not in out, out
    report = pytester.path / "report"
    rows = {r["nodeid"].split("[")[-1].rstrip("]"): r for r in json.loads((report / "rows.json").read_text())}
    assert sorted(rows) == sorted(REFUSED), rows
    for cheat, tag in REFUSED.items():
        row = rows[cheat]
        assert row["verdict"] == "CORRECTNESS_FAIL", (cheat, row["verdict"], row["message"])
        assert row["facts"]["integrity"] == tag and row["message"].startswith(tag + ":"), (
            cheat,
            row["message"],
        )
        result.stdout.fnmatch_lines([f"*{tag}:*"])
    assert yaml.safe_load(path.read_text())["benchmarks"] == recorded  # nothing written
    summary = (report / "report.md").read_text()
    assert all(f"test_conv[{cheat}]" in summary for cheat in REFUSED), summary
