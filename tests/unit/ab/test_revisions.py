"""revisions (git: resolve, worktrees, clean-up) and refimport (REF's candidate by module + qualname)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pytest_convperf.ab.refimport import CandidateLookupError, alias_prefix, candidate_path, ref_candidate
from pytest_convperf.ab.revisions import (
    RevisionError,
    checkouts,
    commits_between,
    repo_root,
    resolve,
    working_tree,
)
from tools.ab_scratch import git

PKG = "abprobe_pkg"


def commit_version(root: Path, value: int, *, extra: str = "") -> str:
    (root / PKG).mkdir(exist_ok=True)
    (root / PKG / "__init__.py").write_text("")
    (root / PKG / "helper.py").write_text(f"VALUE = {value}\n")
    (root / PKG / "mod.py").write_text(
        f"from {PKG}.helper import VALUE\n\n\ndef fn():\n    return VALUE\n\n\n"
        "class Box:\n    @staticmethod\n"
        f"    def get():\n        return VALUE\n{extra}"
    )
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", f"value {value}")
    return git(root, "rev-parse", "HEAD").strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    commit_version(root, 1)
    commit_version(root, 2)
    return root


def test_not_a_git_repository_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(RevisionError, match="not inside a git repository"):
        repo_root(tmp_path)


def test_unknown_revision_names_it_and_the_fix(repo: Path) -> None:
    with pytest.raises(RevisionError, match=r"unknown revision 'no-such-branch'.*git fetch"):
        resolve(repo, "no-such-branch")
    rev = resolve(repo, "HEAD~1")
    assert len(rev.sha) == 40 and rev.subject == "value 1" and "HEAD~1" in rev.label


def test_dirty_tree_is_allowed_and_named(repo: Path) -> None:
    assert "uncommitted" not in working_tree(repo).label
    (repo / PKG / "helper.py").write_text("VALUE = 3\n")
    tree = working_tree(repo)
    assert tree.dirty == (f"{PKG}/helper.py",) and "1 uncommitted" in tree.label and "helper.py" in tree.label


def test_worktrees_are_removed_even_on_ctrl_c_and_the_checkout_is_untouched(repo: Path) -> None:
    (repo / PKG / "helper.py").write_text("VALUE = 3\n")  # a dirty checkout stays as it is
    before = git(repo, "status", "--porcelain")
    with pytest.raises(KeyboardInterrupt), checkouts(repo) as co:
        tree = co.path(resolve(repo, "HEAD~1"))
        assert (tree / PKG / "helper.py").read_text() == "VALUE = 1\n"
        raise KeyboardInterrupt
    assert not tree.exists()
    assert git(repo, "worktree", "list").count("\n") == 1
    assert git(repo, "status", "--porcelain") == before


def test_history(repo: Path) -> None:
    first, second = resolve(repo, "HEAD~1"), resolve(repo, "HEAD")
    assert [r.sha for r in commits_between(repo, first, second)] == [second.sha]
    with pytest.raises(RevisionError, match="not an ancestor"):
        commits_between(repo, second, first)


def test_ref_candidate_is_imported_under_a_distinct_name_with_its_own_imports(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """REF's module binds REF's helper (absolute import), the working tree's modules stay as they were."""
    monkeypatch.syspath_prepend(str(repo))
    for name in [m for m in sys.modules if m.startswith(PKG)]:
        monkeypatch.delitem(sys.modules, name)
    from abprobe_pkg import mod  # type: ignore[import-not-found]

    ref = resolve(repo, "HEAD~1")
    with checkouts(repo) as co:
        tree = co.path(ref)
        twin = ref_candidate(mod.fn, repo, tree, ref.sha, ref.label)
        nested = ref_candidate(mod.Box.get, repo, tree, ref.sha, ref.label)
    assert mod.fn() == 2 and twin() == 1 and nested() == 1
    # Named before REF's code ran (issue 37 item 1): its functions carry the prefixed module name too.
    assert twin.__module__ == f"{alias_prefix(ref.sha)}.{PKG}.mod"
    assert sys.modules[f"{alias_prefix(ref.sha)}.{PKG}.mod"].__name__ == f"{alias_prefix(ref.sha)}.{PKG}.mod"
    assert sys.modules[f"{PKG}.mod"] is mod and sys.modules[f"{PKG}.helper"].VALUE == 2
    for name in [m for m in sys.modules if m.startswith(alias_prefix(ref.sha))]:
        monkeypatch.delitem(sys.modules, name)


def test_lookup_errors_name_the_revision_and_the_path(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(repo))
    for name in [m for m in sys.modules if m.startswith(PKG)]:
        monkeypatch.delitem(sys.modules, name)
    commit_version(repo, 3, extra="\n\ndef added_later():\n    return 0\n")
    from abprobe_pkg import mod

    ref = resolve(repo, "HEAD~2")
    with checkouts(repo) as co:
        tree = co.path(ref)
        with pytest.raises(CandidateLookupError, match=r"HEAD~2.*has no added_later.*pick a REF"):
            ref_candidate(mod.added_later, repo, tree, ref.sha, ref.label)
        (repo / PKG / "new.py").write_text("def g():\n    return 1\n")
        from abprobe_pkg import new  # type: ignore[import-not-found]

        with pytest.raises(CandidateLookupError, match=rf"has no {PKG}/new.py.*kernel does not exist"):
            ref_candidate(new.g, repo, tree, ref.sha, ref.label)
    with pytest.raises(CandidateLookupError, match="lambda"):
        candidate_path(lambda x: x, repo)
    with pytest.raises(CandidateLookupError, match="outside the repository"):
        candidate_path(pytest.approx, repo)
    for name in [m for m in sys.modules if m.startswith(alias_prefix(ref.sha))]:
        monkeypatch.delitem(sys.modules, name)


def test_worktrees_of_a_killed_run_are_removed_by_the_next_and_a_live_runs_are_kept(repo: Path) -> None:
    import atexit
    import os
    import subprocess

    from pytest_convperf.ab.revisions import Checkouts

    killed, live = Checkouts(repo), Checkouts(repo)
    stale = killed.path(resolve(repo, "HEAD~1"))
    kept = live.path(resolve(repo, "HEAD~1"))
    atexit.unregister(killed.close)  # kill -9: no clean-up of any kind runs
    dead = subprocess.Popen(["true"])
    dead.wait()
    owner = stale.parent / "convperf-owner"
    owner.write_text(owner.read_text().replace(str(os.getpid()), str(dead.pid)))
    try:
        nxt = Checkouts(repo)
        listed = git(repo, "worktree", "list")
        assert nxt.pruned == [stale] and not stale.parent.exists() and str(stale) not in listed
        assert kept.is_dir() and str(kept) in listed
    finally:
        live.close()
    assert git(repo, "worktree", "list").count("\n") == 1


def test_auto_is_the_merge_base_with_the_pull_requests_target_else_origin_head(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--convperf-against=auto`` (issue 36 item 3): $GITHUB_BASE_REF's branch, else origin/HEAD."""
    monkeypatch.delenv("GITHUB_BASE_REF", raising=False)
    with pytest.raises(
        RevisionError, match=r"\$GITHUB_BASE_REF is unset and origin/HEAD does not exist.*set-head"
    ):
        resolve(repo, "auto")
    base = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "update-ref", "refs/remotes/origin/main", base)
    git(repo, "update-ref", "refs/remotes/origin/release", "HEAD~1")
    git(repo, "symbolic-ref", "refs/remotes/origin/HEAD", "refs/remotes/origin/main")
    git(repo, "checkout", "-q", "-b", "feature", "HEAD~1")
    commit_version(repo, 3)  # the pull request's commit, on top of value 1
    rev = resolve(repo, "auto")  # origin/HEAD = origin/main: merge base is value 1's commit
    assert rev.subject == "value 1" and rev.label.startswith("merge base with origin/HEAD")
    git(repo, "update-ref", "refs/remotes/origin/main", git(repo, "rev-parse", "HEAD").strip())
    assert resolve(repo, "auto").subject == "value 3"  # merged: the base is the pull request's head
    monkeypatch.setenv("GITHUB_BASE_REF", "release")
    assert resolve(repo, "auto").subject == "value 1"
    monkeypatch.setenv("GITHUB_BASE_REF", "gone")
    with pytest.raises(
        RevisionError, match=r"GITHUB_BASE_REF=gone and origin/gone does not exist.*git fetch"
    ):
        resolve(repo, "auto")


def test_auto_outside_git_is_a_one_line_usage_error(tmp_path: Path, pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess("--convperf", "--convperf-against=auto", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    line = [ln for ln in result.errlines if "--convperf-against=auto" in ln]
    assert line and "not inside a git repository" in line[0] and "drop --convperf-against" in line[0], (
        result.errlines
    )
