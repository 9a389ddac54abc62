"""Two separate pytest processes updating the same baseline file at the same time lose nothing."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.integration._lifecycle import MACHINE, Suite, subprocess_env


def test_two_processes_updating_one_file(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, plugin_args: tuple[str, ...]
) -> None:
    suite = Suite(pytester, monkeypatch, plugin_args)
    subprocess_env(monkeypatch)
    base = [
        sys.executable,
        "-m",
        "pytest",
        *plugin_args,
        "--convperf",
        f"--convperf-machine={MACHINE}",
        "--convperf-device=cpu",
        "-p",
        "no:cacheprovider",
        "-q",
        "--convperf-update-baselines",
    ]
    procs = [
        subprocess.Popen(
            [*base, "-k", name],
            cwd=pytester.path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for name in ("test_a", "test_b")
    ]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    entries = suite.entries()
    assert {k.split("[")[0] for k in entries} == {"test_a", "test_b"}
