"""``--convperf-against`` and ``bisect`` end to end, on scratch git repositories (tools/ab_scratch.py).

The candidates log their revision's cost and a conftest's fake timer replays it, so the A/B and
the bisect logic run whole (worktrees, REF import, paired rounds, decision, reports) in seconds.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_convperf.ab.bisect import pytest_command
from tools.ab_scratch import git, make_repo


def run(repo: Path, *args: str, report: Path | None = None) -> subprocess.CompletedProcess[str]:
    extra = [f"--convperf-report={report}"] if report is not None else []
    cmd = pytest_command("--convperf-machine=scratch", *extra, *args)
    return subprocess.run(cmd, cwd=repo, capture_output=True, text=True, check=False)


def ab_row(report: Path) -> dict[str, Any]:
    rows = json.loads((report / "rows.json").read_text())
    assert len(rows) == 1
    ab = rows[0]["facts"]["ab"]
    assert isinstance(ab, dict)
    return ab


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two commits; the second makes the candidate 1.5x slower."""
    path = tmp_path_factory.mktemp("ab") / "repo"
    make_repo(path, slow_from=2, n_commits=2, kind="fake")
    return path


@pytest.fixture(scope="module")
def slower(
    repo: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[subprocess.CompletedProcess[str], Path, str]:
    """One A/B of the slow commit against its parent: (pytest's result, report dir, git status before)."""
    report = tmp_path_factory.mktemp("report")
    before = git(repo, "status", "--porcelain")
    return run(repo, "--convperf-against=HEAD~1", report=report), report, before


def test_slower_against_the_parent_with_both_sides_in_the_reports(
    repo: Path, slower: tuple[subprocess.CompletedProcess[str], Path, str]
) -> None:
    res, tmp_path, before = slower
    assert res.returncode == 0, res.stdout + res.stderr
    ab = ab_row(tmp_path)
    assert ab["result"]["verdict"] == "SLOWER" and ab["result"]["ratio"] == pytest.approx(1.5, rel=0.02)
    assert ab["ref"].startswith("HEAD~1") and ab["a"].startswith("working tree")
    assert ab["ref_speedup"] == pytest.approx(1.5 * ab["a_speedup"], rel=0.03)
    assert "convperf A/B" in res.stdout and "SLOWER" in res.stdout
    table = (tmp_path / "ab.md").read_text()
    assert "| SLOWER | 1.50" in table and "speedup REF" in table
    results = json.loads((tmp_path / "results.json").read_text())
    names = sorted(b["name"] for b in results["benchmarks"])
    assert any(n.endswith("[candidate@ref]") for n in names) and any(n.endswith("[candidate]") for n in names)
    assert all("ab" in b["extra_info"] for b in results["benchmarks"] if "candidate" in b["name"])
    # The user's checkout is as it was; no worktree is left behind.
    assert git(repo, "status", "--porcelain") == before
    assert git(repo, "worktree", "list").count("\n") == 1


def test_results_json_stays_readable_by_pytest_benchmark_compare(
    slower: tuple[subprocess.CompletedProcess[str], Path, str],
) -> None:
    report = slower[1] / "results.json"
    code = (
        "import sys; from pytest_benchmark.cli import main; "
        f"sys.argv = ['pytest-benchmark', 'compare', {str(report)!r}]; main()"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    assert "candidate@ref" in res.stdout


def test_a_dirty_tree_is_the_a_side_and_named_against_its_own_head(repo: Path, tmp_path: Path) -> None:
    """Against HEAD itself (REF is the commit checked out): the uncommitted change is what A runs.
    Each pytest session here costs a minute on a loaded CI box, so this one run also stands for
    "the same revision": SAME between identical code is the bisect test's midpoint verdict."""
    ref_py = repo / "kernels" / "depthwise" / "reference.py"
    original = ref_py.read_text()
    ref_py.write_text(original.replace("DELAY = 0.003", "DELAY = 0.002"))
    try:
        res = run(repo, "--convperf-against=HEAD", report=tmp_path)
    finally:
        ref_py.write_text(original)
    assert res.returncode == 0, res.stdout + res.stderr
    ab = ab_row(tmp_path)
    assert "1 uncommitted: kernels/depthwise/reference.py" in ab["a"], ab["a"]
    assert ab["ref"].startswith("HEAD"), ab["ref"]
    # A (dirty, 2 ms) against HEAD (committed, 3 ms): the dirty code was measured, not HEAD's.
    assert ab["result"]["verdict"] == "FASTER", res.stdout
    assert ab["result"]["ratio"] == pytest.approx(2 / 3, rel=0.02)


def test_unknown_revision_is_a_usage_error(repo: Path) -> None:
    res = run(repo, "--convperf-against=no-such-branch")
    assert res.returncode == 4
    assert "unknown revision 'no-such-branch'" in res.stderr


def test_not_a_git_repository(tmp_path: Path) -> None:
    (tmp_path / "test_x.py").write_text("def test_x():\n    pass\n")
    res = run(tmp_path, "--convperf-against=HEAD")
    assert res.returncode == 4 and "not inside a git repository" in res.stderr


def test_a_revision_without_the_kernel_or_the_test_fails_the_check_by_name(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    make_repo(repo, slow_from=None, n_commits=1, kind="fake")
    (repo / "empty.txt").write_text("")
    git(repo, "checkout", "-q", "--orphan", "bare")
    git(repo, "rm", "-rq", "--cached", ".")
    git(repo, "add", "empty.txt")
    git(repo, "commit", "-qm", "bare")
    git(repo, "checkout", "-q", "-f", "main")
    res = run(repo, "--convperf-against=bare")
    assert res.returncode == 1 and "revision bare" in res.stdout and "has no test_dw.py" in res.stdout
    (repo / "test_dw.py").rename(repo / "test_dw2.py")  # the test exists at REF, the kernel does not
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "mv")
    git(repo, "checkout", "-q", "bare")
    (repo / "test_dw2.py").write_text("")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "t")
    git(repo, "checkout", "-q", "-f", "main")
    res = run(repo, "--convperf-against=bare")
    assert res.returncode == 1 and "has no kernels/depthwise/reference.py" in res.stdout, res.stdout


def test_a_ref_whose_kernel_does_not_build_is_named_with_the_compiler_lines(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    make_repo(repo, slow_from=None, n_commits=1, kind="fake")
    ref_py = repo / "kernels" / "depthwise" / "reference.py"
    good = ref_py.read_text()
    ref_py.write_text(
        good.replace(
            "    costlog.COSTS.append(DELAY)",
            "    raise RuntimeError('building kernel family failed.\\nFirst compiler errors:\\n"
            'depthwise.cu(12): error: identifier "bad" is undefined\')',
        )
    )
    git(repo, "commit", "-qam", "broken build")
    ref_py.write_text(good)
    git(repo, "commit", "-qam", "fixed")
    res = run(repo, "--convperf-against=HEAD~1")
    assert res.returncode == 1
    assert (
        "REF's candidate failed" in res.stdout and 'depthwise.cu(12): error: identifier "bad"' in res.stdout
    )
    assert git(repo, "worktree", "list").count("\n") == 1


FIXED_NAME_OP = """
import torch


@torch.library.custom_op("convperf_scratch::touch", mutates_args=())
def touch(x: torch.Tensor) -> torch.Tensor:
    return x.clone()
"""


def test_a_ref_whose_op_takes_over_the_working_trees_is_refused_not_answered(tmp_path: Path) -> None:
    """Issue 37 item 1 end to end: a candidate that reaches a torch op registered under one fixed name at
    both revisions (REF 1.5x slower) would be timed against itself; the A/B fails the check by name."""
    repo = tmp_path / "repo"
    make_repo(repo, slow_from=2, n_commits=2, kind="fake")
    ref_py = repo / "kernels" / "depthwise" / "reference.py"
    text = ref_py.read_text() + FIXED_NAME_OP
    ref_py.write_text(
        text.replace("    return F.conv2d(input,", "    touch(input)\n    return F.conv2d(input,")
    )
    git(repo, "commit", "-qam", "both revisions: the op")
    git(repo, "checkout", "-q", "HEAD~1", "--", str(ref_py))  # A: the fast revision, with the same op
    ref_py.write_text(ref_py.read_text() + FIXED_NAME_OP)
    ref_py.write_text(
        ref_py.read_text().replace(
            "    return F.conv2d(input,", "    touch(input)\n    return F.conv2d(input,"
        )
    )
    res = run(repo, "--convperf-against=HEAD", report=tmp_path / "report")
    assert res.returncode == 1, res.stdout + res.stderr
    # Refused at REF's import, before torch could free the working tree's op (distinct.no_op_takeover).
    assert "convperf_scratch::touch, which this process already holds" in res.stdout, res.stdout
    assert "refuses to answer" in res.stdout and "SAME" not in res.stdout
    assert git(repo, "worktree", "list").count("\n") == 1


def test_bisect_names_the_first_slow_commit_on_a_scratch_repository(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    # Three commits: BAD vs GOOD, one midpoint against both ends (SAME, then FASTER: the good side),
    # then the step: four sessions. walk()'s other branches are tests/unit/ab/test_rule.py's.
    shas = make_repo(repo, slow_from=3, n_commits=3, kind="fake")
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest_convperf",
            "bisect",
            shas[0],
            shas[-1],
            "--",
            "test_dw.py",
            "--convperf-machine=scratch",
        ],
        cwd=repo,
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    last = res.stdout.strip().splitlines()[-1]
    assert last.startswith(f"first bad commit: {shas[2][:10]}") and "commit 3 (slow)" in last
    assert "SLOWER t/t_ref 1.500" in last
    (midpoint,) = [line for line in res.stdout.splitlines() if line.endswith("-> good")]
    assert "SAME" in midpoint and "FASTER" in midpoint, res.stdout  # commit 2 = GOOD, faster than BAD
    assert git(repo, "worktree", "list").count("\n") == 1


def test_bisect_errors_are_clear(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    make_repo(repo, slow_from=None, n_commits=2, kind="fake")
    res = subprocess.run(
        [sys.executable, "-m", "pytest_convperf", "bisect", "HEAD", "HEAD~1", "--", "test_dw.py"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 1 and "not an ancestor" in res.stderr
