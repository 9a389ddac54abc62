"""``pid_alive``: the one process check behind crash records and A/B worktree owners."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pytest_convperf.core import pids


def test_this_process_is_alive() -> None:
    assert pids.pid_alive(os.getpid())


def test_a_reaped_child_is_gone() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # reaped: its pid names no process until the kernel reuses it
    assert not pids.pid_alive(child.pid)


def test_another_users_process_counts_as_alive(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(pid: int, sig: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(pids.os, "kill", refused)
    assert pids.pid_alive(1)
