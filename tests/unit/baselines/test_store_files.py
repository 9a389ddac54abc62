"""Issue 15, data items: locks, kills, modes, duplicate keys, numbers, encodings, sizes, machine slugs."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pytest_convperf.baselines.store import Store, dump_text, merge_files, read_file
from pytest_convperf.core.slugs import resolve_machine
from tests.rows import check_row
from tests.unit.baselines.test_store import KEY, MACHINE, make_entry, write
from tools.ab_scratch import git

REPO = Path(__file__).resolve().parents[3]


def _python(code: str, **env: str) -> subprocess.Popen[str]:
    full = {**os.environ, "PYTHONPATH": str(REPO), **env}
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=full,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_writers_with_different_tmpdirs_lose_nothing(tmp_path: Path) -> None:
    """Item 5: the lock does not depend on $TMPDIR (it did: 9 of 12 entries were lost)."""
    root = tmp_path / "baselines"
    count, workers = 12, 3
    code = f"""
    import os
    from pathlib import Path
    from pytest_convperf.baselines.store import Store
    from tests.unit.baselines.test_store import MACHINE, make_entry

    store = Store(Path({str(root)!r}), MACHINE)
    for i in range({count}):
        store.write("test_mod", {{f"{{os.environ['WORKER']}}-{{i}}": make_entry(0.5 + i / 100)}})
    """
    procs = []
    for w in range(workers):
        tmp = tmp_path / f"tmp{w}"
        tmp.mkdir()
        procs.append(_python(code, TMPDIR=str(tmp), WORKER=f"w{w}"))
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0] * workers, outs
    entries = Store(root, MACHINE).load("test_mod")
    assert set(entries) == {f"w{w}-{i}" for w in range(workers) for i in range(count)}


def test_kill_between_temp_file_and_replace_leaves_nothing_behind(tmp_path: Path) -> None:
    """Item 8: kill -9 after the temporary file exists but before ``os.replace``; the next write cleans up."""
    root = tmp_path / "baselines"
    Store(root, MACHINE).write("test_mod", {"a": make_entry(0.5)})
    ready = tmp_path / "ready"
    code = f"""
    import os, time
    from pathlib import Path
    from pytest_convperf.baselines.store import Store
    from tests.unit.baselines.test_store import MACHINE, make_entry

    def stop(src, dst):
        Path({str(ready)!r}).write_text(str(src))
        time.sleep(600)

    os.replace = stop
    Store(Path({str(root)!r}), MACHINE).write("test_mod", {{"b": make_entry(0.6)}})
    """
    proc = _python(code)
    deadline = time.monotonic() + 120
    while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ready.exists(), proc.communicate(timeout=10)[0] if proc.poll() is not None else "no temp file"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert Path(ready.read_text()).exists()  # the kill did leave a temporary file
    # The next write (another process, any time later) removes it; the killed write never landed.
    store = Store(root, MACHINE)
    store.write("test_mod", {"c": make_entry(0.7)})
    assert set(store.load("test_mod")) == {"a", "c"}
    leftovers = [p for p in root.rglob("*") if p.name.endswith(".tmp")]
    assert leftovers == []


def test_lock_and_temp_files_stay_out_of_git(tmp_path: Path) -> None:
    """What the lock leaves beside a baseline file is ignored by git (pytest's cache dir does the same)."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    Store(tmp_path / "baselines", MACHINE).write("test_mod", {"a": make_entry()})
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert status == ["??", f"baselines/{MACHINE}/test_mod.yaml"]


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_rewritten_files_respect_the_umask(tmp_path: Path, umask: int) -> None:
    """Item 9: files are written 0666 & ~umask, not mkstemp's 0600 (also when rewritten)."""
    from pytest_convperf.core.files import atomic_write

    old = os.umask(umask)
    try:
        store = Store(tmp_path, MACHINE)
        store.write("test_mod", {"a": make_entry(0.5)})
        store.write("test_mod", {"b": make_entry(0.6)})
        atomic_write(tmp_path / "report.md", "# report\n")
    finally:
        os.umask(old)
    for path in (store.path("test_mod"), tmp_path / "report.md"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask, path


def test_duplicate_keys_are_refused_naming_the_key_and_both_lines(tmp_path: Path) -> None:
    """Item 6: a key written twice is an error naming it and both lines (it was: last one wins)."""
    good = dump_text(MACHINE, {KEY: make_entry(0.5), "test_b": make_entry(0.6)})
    lines = good.splitlines()
    first = next(i for i, line in enumerate(lines) if line.strip().startswith("test_b:"))
    block = [line.replace("time_ratio: 0.6", "time_ratio: 0.9") for line in lines[first : first + 8]]
    at = lines.index(f"machine: {MACHINE}")  # a second test_b block at the end of benchmarks
    dup = "\n".join([*lines[:at], *block, *lines[at:]]) + "\n"
    dup_line = at + 1
    path = write(tmp_path, dup)
    before = path.read_bytes()
    with pytest.raises(pytest.UsageError) as info:
        read_file(path)
    msg = str(info.value)
    assert "duplicate key 'test_b'" in msg and f"line {first + 1}" in msg and f"line {dup_line}" in msg
    assert str(path) in msg and "Fix:" in msg
    with pytest.raises(pytest.UsageError, match="duplicate key 'test_b'"):
        Store(tmp_path, MACHINE).write("test_mod", {"other": make_entry()})
    with pytest.raises(pytest.UsageError, match="duplicate key 'test_b'"):
        merge_files([path])
    assert path.read_bytes() == before
    # A duplicate inside an entry (a field given twice) is refused too.
    twice = good.replace("noise: 0.007", "noise: 0.007\n    noise: 0.5", 1)
    with pytest.raises(pytest.UsageError, match="duplicate key 'noise'"):
        read_file(write(tmp_path, twice, module="test_twice"))


def test_numbers_as_a_person_writes_them(tmp_path: Path) -> None:
    """Item 12: ``1e6`` and ``1E-3`` are numbers (YAML 1.1 reads them as strings)."""
    text = dump_text(MACHINE, {KEY: make_entry()})
    text = text.replace("candidate: 18.9", "candidate: 1e6").replace("noise: 0.007", "noise: 7E-3")
    entry = read_file(write(tmp_path, text)).entries[KEY]
    assert entry.us_candidate == 1e6 and entry.noise == 7e-3
    # A string that looks like a number (a commit hash) round-trips as that string.
    stored = make_entry(updated={"commit": "12e4567", "reason": "1e6"})
    path = write(tmp_path, dump_text(MACHINE, {KEY: stored}), module="test_str")
    assert read_file(path).entries[KEY].updated == {"commit": "12e4567", "reason": "1e6"}


def test_non_utf8_file_is_a_clear_error(tmp_path: Path) -> None:
    """Item 10: bytes that are not UTF-8 give the corrupt-file error (it was an INTERNALERROR)."""
    path = write(tmp_path, dump_text(MACHINE, {KEY: make_entry()}))
    path.write_bytes(path.read_bytes().replace(b"vectorized", b"vector\xe9\xffized"))
    for call in (lambda: read_file(path), lambda: merge_files([path])):
        with pytest.raises(pytest.UsageError) as info:
            call()
        msg = str(info.value)
        assert str(path) in msg and "not UTF-8" in msg and "Fix:" in msg


def test_oversized_file_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    """Item 11: a file over the size limit is a clear error, found from its size alone."""
    from pytest_convperf.baselines.store import MAX_FILE_BYTES

    path = write(tmp_path, dump_text(MACHINE, {KEY: make_entry()}))
    with path.open("a") as fh:
        fh.write("#" * (MAX_FILE_BYTES + 1))
    start = time.perf_counter()
    with pytest.raises(pytest.UsageError) as info:
        read_file(path)
    assert time.perf_counter() - start < 5  # the size, not a parse (generous: a loaded box)
    msg = str(info.value)
    assert str(path) in msg and "limit" in msg and "Fix:" in msg


def test_only_the_files_a_run_uses_are_validated(tmp_path: Path) -> None:
    """Item 11: an unrelated broken file (another machine, another module) is never read."""
    from pytest_convperf.baselines.store import validate_files

    good = write(tmp_path, dump_text(MACHINE, {KEY: make_entry()}))
    write(tmp_path, "not: [valid", machine="other-machine")
    write(tmp_path, "not: [valid", module="test_unrelated")
    assert validate_files([good, tmp_path / MACHINE / "test_missing.yaml"]) == [good]


@pytest.mark.parametrize("override", ["", "...", "  "])
def test_empty_machine_slugs_are_refused(override: str) -> None:
    """Item 7: ``--convperf-machine=`` must not fall back to the detected (real) machine's folder."""
    with pytest.raises(pytest.UsageError, match="--convperf-machine"):
        resolve_machine("cpu-x-1t", override, {})
    with pytest.raises(pytest.UsageError, match="alias"):
        resolve_machine("cpu-x-1t", None, {"cpu-x-1t": ""})


def test_fake_timings_never_reach_the_detected_machines_folder(tmp_path: Path) -> None:
    """Item 7: naming the real machine (or an alias of it) explicitly still keeps fake numbers out."""
    from tests.unit.test_session import _session

    assert _session(tmp_path, machine="amd-epyc-1t").store(fake=True).machine == "amd-epyc-1t-fake"
    assert _session(tmp_path, machine="AMD EPYC 1t").store(fake=True).machine == "amd-epyc-1t-fake"
    assert _session(tmp_path, machine="amd-epyc-1t").store().machine == "amd-epyc-1t"
    assert _session(tmp_path, machine="testbox").store(fake=True).machine == "testbox"  # the tests' opt-in


def _write_cfg(tmp_path: Path, **kw: object):  # type: ignore[no-untyped-def]
    from pytest_convperf.core.config import ConvperfConfig

    base: dict[str, object] = {
        "enabled": True,
        "baselines_dir": tmp_path / "baselines",
        "update": frozenset({"new"}),
        "rootdir": tmp_path,
    }
    base.update(kw)
    return ConvperfConfig(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize("what", ["report_dir", "baselines_dir"])
@pytest.mark.parametrize("how", ["a_file", "under_a_file", "unwritable"])
def test_bad_output_paths_fail_at_session_start(tmp_path: Path, what: str, how: str) -> None:
    """Item 10: checked before any test runs, with a message naming the option, the path and the fix."""
    from pytest_convperf.core.files import check_output_paths

    blocker = tmp_path / "blocker"
    blocker.write_text("I am a file")
    bad = {
        "a_file": blocker,
        "under_a_file": blocker / "sub",
        "unwritable": Path("/proc/convperf-unwritable"),
    }[how]
    if how == "unwritable" and not Path("/proc/self").exists():
        pytest.skip("needs /proc: a folder even root cannot write")
    cfg = _write_cfg(tmp_path, **{what: bad})
    with pytest.raises(pytest.UsageError) as info:
        check_output_paths(cfg)
    msg = str(info.value)
    option = "--convperf-report" if what == "report_dir" else "--convperf-baselines"
    assert option in msg and str(bad) in msg
    # A good configuration passes and creates nothing yet.
    check_output_paths(_write_cfg(tmp_path, report_dir=tmp_path / "new" / "report"))
    assert not (tmp_path / "new").exists()


def test_the_review_record_is_written_before_the_baselines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 10: a failing baseline write still leaves convperf-update.md (it was written after them)."""
    from pytest_convperf.baselines import updates

    cfg = _write_cfg(tmp_path, machine="box")
    row = {
        "key": "test_a",
        "module": "test_mod",
        "machine": "box",
        "verdict": "NEW",
        "update": {"action": "write", "why": "new entry", "entry": make_entry(0.5).to_yaml()},
    }

    def broken(self: Store, module: str, entries: object, remove: object = ()) -> bool:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Store, "write", broken)
    applied = updates.apply_updates(cfg, [check_row(row)], tmp_path)  # named, not raised (issue 25.5)
    assert applied is not None and applied.written == frozenset() and "No space left" in applied.failed[0]
    md = (tmp_path / "convperf-update.md").read_text()
    assert "test_a" in md and "No space left on device" in md


def test_review_reads_baseline_files_like_the_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``review`` shares the loader: a duplicate key or non-UTF-8 bytes are named, not a traceback."""
    from pytest_convperf.reports import review

    path = write(tmp_path / "baselines", dump_text(MACHINE, {KEY: make_entry()}))
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-q", "-m", "base")
    monkeypatch.chdir(tmp_path)
    path.write_text(path.read_text().replace("noise: 0.007", "noise: 0.007\n    noise: 0.5"))
    assert "duplicate key 'noise' (line 6 and line 7)" in review.review("HEAD", None)
    path.write_bytes(path.read_bytes() + b"# caf\xe9\n")
    assert "Could not read it: ` not UTF-8" in review.review("HEAD", None)  # a code span (issue 37.8)


def test_the_writer_writes_a_shared_value_out_in_full() -> None:
    # One env dict shared by two entries would be written as an anchor and an alias, which load()
    # refuses (issue 37.10): the writer must never emit what its reader refuses.
    from pytest_convperf.baselines import baseline_yaml

    env = {"torch": "2.14.1"}
    text = baseline_yaml.dump({"a": {"env": env}, "b": {"env": env}})
    assert "&" not in text and "*" not in text
    assert baseline_yaml.load(text) == {"a": {"env": env}, "b": {"env": env}}
