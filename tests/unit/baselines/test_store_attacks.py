"""Hostile baseline files (issue 37.10-12): an alias bomb, a symlinked machine folder or root, a FIFO
or a folder where a file should be. Each is one line naming the path, in bounded time and memory."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pytest_convperf.baselines import baseline_yaml
from pytest_convperf.baselines.store import Store, dump_text, parse_text, read_file
from tests.unit.baselines.test_store import KEY, MACHINE, make_entry

ROOT = Path(__file__).resolve().parents[3]


def bomb(levels: int = 10) -> str:
    """A "billion laughs" in an entry's field: each level a list of ten aliases of the one before
    (10**levels leaves once expanded)."""
    lol = "[" + ", ".join(["lol"] * 10) + "]"
    levels_text = [f"&a0 {lol}"] + [
        f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, levels)
    ]
    valid = dump_text(MACHINE, {"test_x": make_entry()})
    return valid.replace("time_ratio: 0.61", "time_ratio: [" + ", ".join(levels_text) + "]")


def test_an_alias_bomb_is_refused_before_it_expands() -> None:
    # In a child with 1.5 GB of address space: before the fix the entry's message repr()'d the
    # expanded value and grew past 6 GB (here: MemoryError, a non-zero exit).
    text = bomb()
    assert len(text.encode()) < 1500
    code = textwrap.dedent(
        f"""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_AS, (1500 * 2**20, 1500 * 2**20))
        from pathlib import Path
        import pytest
        from pytest_convperf.baselines.store import parse_text
        try:
            parse_text({text!r}, Path("baselines/{MACHINE}/test_m.yaml"))
        except pytest.UsageError as exc:
            print(exc)
        """
    )
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (line,) = done.stdout.splitlines()
    assert "test_m.yaml" in line and "anchor (&a0) at line 8" in line and "no anchors or aliases" in line
    assert len(line) < 800 and time.perf_counter() - started < 60


def test_any_alias_is_refused_and_an_ampersand_in_a_string_is_not() -> None:
    good = dump_text(MACHINE, {KEY: make_entry(updated={"reason": "a & b *c"})})
    assert parse_text(good, Path(f"baselines/{MACHINE}/m.yaml")).entries[KEY].updated == {
        "reason": "a & b *c"
    }
    aliased = good.replace("reason: a & b *c", "reason: &r x, code: *r")
    assert aliased != good
    with pytest.raises(pytest.UsageError, match=r"anchor \(&r\) at line \d+"):
        parse_text(aliased, Path(f"baselines/{MACHINE}/m.yaml"))
    with pytest.raises(baseline_yaml.AliasRefused):
        baseline_yaml.load("a: &x 1\nb: *x\n")


def test_a_message_naming_a_huge_value_is_bounded() -> None:
    text = dump_text(MACHINE, {KEY: make_entry()}).replace(
        "time_ratio: 0.61", "time_ratio: " + "x" * 1_000_000
    )
    with pytest.raises(pytest.UsageError) as caught:
        parse_text(text, Path(f"baselines/{MACHINE}/m.yaml"))
    assert len(str(caught.value)) < 1500 and "more characters" in str(caught.value)


@pytest.mark.parametrize("linked", ["root", "machine"])
def test_a_baselines_folder_linked_outside_the_repository_is_refused(linked: str, tmp_path: Path) -> None:
    # Issue 37.11: entries and a lock folder were written at the link's target.
    repo, outside = tmp_path / "repo", tmp_path / "outside"
    repo.mkdir()
    outside.mkdir()
    root = repo / "baselines"
    if linked == "root":
        root.symlink_to(outside)
        link = root
    else:
        root.mkdir()
        link = root / MACHINE
        link.symlink_to(outside)
    store = Store(root, MACHINE, rootdir=repo)
    with pytest.raises(OSError, match=rf"{link} is a symbolic link to {outside}, outside the repository"):
        store.write("test_m", {KEY: make_entry()})
    assert list(outside.iterdir()) == []  # no entry, no lock folder


def test_a_link_inside_the_repository_is_followed(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "real").mkdir(parents=True)
    (repo / "baselines").symlink_to(repo / "real")
    assert Store(repo / "baselines", MACHINE, rootdir=repo).write("test_m", {KEY: make_entry()})
    assert (repo / "real" / MACHINE / "test_m.yaml").is_file()


def test_a_fifo_or_a_folder_for_a_baseline_file_is_one_line(tmp_path: Path) -> None:
    # Issue 37.12: a FIFO blocked the session for minutes; a folder gave an IsADirectoryError traceback.
    folder = tmp_path / MACHINE
    folder.mkdir()
    fifo = folder / "test_fifo.yaml"
    os.mkfifo(fifo)
    (folder / "test_dir.yaml").mkdir()
    started = time.perf_counter()
    with pytest.raises(
        pytest.UsageError, match=r"test_fifo\.yaml: is a named pipe \(FIFO\), not a baseline file"
    ):
        read_file(fifo)
    assert time.perf_counter() - started < 5
    with pytest.raises(pytest.UsageError, match=r"test_dir\.yaml: is a folder, not a baseline file"):
        Store(tmp_path, MACHINE).load("test_dir")
