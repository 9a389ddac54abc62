"""Git revisions for the A/B (``--convperf-against``) and bisect: resolve, check out, clean up.

The user's checkout is never touched: a revision's sources come from ``git worktree add --detach``
into a fresh temporary folder, removed (and ``git worktree prune``d) when the session ends, on an
exception, on Ctrl-C and, as a last resort, at interpreter exit. A process killed outright
(``kill -9``) runs none of these: its folder holds an owner file (pid and host), and the next
:class:`Checkouts` of the repository removes the worktrees whose owner on this host is gone
(:func:`prune_stale`). Every failure is a :class:`RevisionError` naming the problem and the fix.
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pytest_convperf.core.pids import pid_alive


class RevisionError(RuntimeError):
    """A revision cannot be used for an A/B: unknown, missing a file, not a repository, ..."""


@dataclass(frozen=True)
class Revision:
    """A resolved commit: what the user typed, the full hash, a short hash and the subject line."""

    spec: str
    sha: str
    subject: str

    @property
    def short(self) -> str:
        return self.sha[:10]

    @property
    def label(self) -> str:
        return self.spec if self.spec.startswith(self.short[:7]) else f"{self.spec} ({self.short})"


@dataclass(frozen=True)
class WorkingTree:
    """The A side: the checkout as it is, named by HEAD and, when dirty, the files changed."""

    root: Path
    head: str
    dirty: tuple[str, ...]

    @property
    def label(self) -> str:
        if not self.dirty:
            return f"working tree ({self.head[:10]})"
        shown = ", ".join(self.dirty[:3]) + (", ..." if len(self.dirty) > 3 else "")
        return f"working tree ({self.head[:10]} + {len(self.dirty)} uncommitted: {shown})"


def _git(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        res = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)
    except FileNotFoundError as exc:
        raise RevisionError("git is not installed (or not on PATH); the A/B needs git") from exc
    if check and res.returncode != 0:
        raise RevisionError(f"git {' '.join(args)} failed in {root}: {res.stderr.strip()}")
    return res


AB_WAY_OUT = "run from a git checkout (git init / git clone) or drop --convperf-against"


def repo_root(path: Path, way_out: str = AB_WAY_OUT) -> Path:
    """The top folder of the git repository holding ``path``; :class:`RevisionError` outside one,
    ending in ``way_out`` (what the caller's user can do: the A/B's option, bisect's clone)."""
    res = _git(path, "rev-parse", "--show-toplevel", check=False)
    if res.returncode != 0:
        raise RevisionError(
            f"{path} is not inside a git repository, so there is no revision to compare against; {way_out}"
        )
    return Path(res.stdout.strip())


AUTO = "auto"
# GitHub Actions sets it on pull_request events (the target branch); not a convperf variable, so
# core/environment.py does not own it.
BASE_REF_VARIABLE = "GITHUB_BASE_REF"


def merge_base(root: Path) -> Revision:
    """``--convperf-against=auto``: the merge base of HEAD with the pull request's target branch
    (``origin/$GITHUB_BASE_REF``), else with the remote's default branch (``origin/HEAD``): what a pull
    request changes, measured against where it started, whatever the target moved to since."""
    base_ref = os.environ.get(BASE_REF_VARIABLE, "").strip()
    if base_ref:
        base, why = f"origin/{base_ref}", f"${BASE_REF_VARIABLE}={base_ref}"
        fix = f"fetch it (`git fetch origin {base_ref}`; actions/checkout with fetch-depth: 0)"
    else:
        base, why = "origin/HEAD", f"${BASE_REF_VARIABLE} is unset"
        fix = "run `git remote set-head origin --auto`, set $GITHUB_BASE_REF or pass --convperf-against=REF"
    if _git(root, "rev-parse", "--verify", "--quiet", f"{base}^{{commit}}", check=False).returncode != 0:
        raise RevisionError(f"{why} and {base} does not exist in {root}; {fix}")
    res = _git(root, "merge-base", "HEAD", base, check=False)
    if res.returncode != 0 or not res.stdout.strip():
        raise RevisionError(
            f"HEAD and {base} have no common commit (a shallow clone?); fetch the history "
            "(actions/checkout with fetch-depth: 0) or pass --convperf-against=REF"
        )
    rev = resolve(root, res.stdout.strip())
    return Revision(f"merge base with {base}", rev.sha, rev.subject)


def resolve(root: Path, spec: str) -> Revision:
    """``spec`` (branch, tag, ``HEAD~1``, ``origin/main``, a hash, or ``auto``: :func:`merge_base`) as a
    commit of ``root``'s repository."""
    if spec == AUTO:
        return merge_base(root)
    if not spec or spec.startswith("-"):
        raise RevisionError(f"revision {spec!r} is not a revision name; give a branch, tag, hash or HEAD~1")
    res = _git(root, "rev-parse", "--verify", "--quiet", f"{spec}^{{commit}}", check=False)
    if res.returncode != 0:
        raise RevisionError(
            f"unknown revision {spec!r}: git rev-parse finds no commit of that name in {root}; "
            "check the spelling, `git fetch` a remote branch first, or give a hash, tag or HEAD~N"
        )
    sha = res.stdout.strip()
    subject = _git(root, "log", "-1", "--format=%s", sha).stdout.strip()
    return Revision(spec, sha, subject)


def working_tree(root: Path) -> WorkingTree:
    """The A side: HEAD's hash and the paths with uncommitted changes (allowed, and named)."""
    head = _git(root, "rev-parse", "HEAD", check=False).stdout.strip() or "(no commit)"
    status = _git(root, "status", "--porcelain", "--untracked-files=no").stdout
    dirty = tuple(sorted(line[3:] for line in status.splitlines() if line.strip()))
    return WorkingTree(root, head, dirty)


def commits_between(root: Path, good: Revision, bad: Revision) -> list[Revision]:
    """The first-parent commits after ``good`` up to ``bad``, oldest first (``bad`` last)."""
    if _git(root, "merge-base", "--is-ancestor", good.sha, bad.sha, check=False).returncode != 0:
        raise RevisionError(
            f"{good.label} is not an ancestor of {bad.label}: bisect needs GOOD older than BAD on one line "
            "of history; swap them or pick a GOOD from BAD's history"
        )
    out = _git(root, "rev-list", "--first-parent", "--reverse", f"{good.sha}..{bad.sha}").stdout
    revs = []
    for sha in out.split():
        subject = _git(root, "log", "-1", "--format=%s", sha).stdout.strip()
        revs.append(Revision(sha[:10], sha, subject))
    return revs


TEMP_PREFIX = "convperf-ab-"
OWNER_FILE = "convperf-owner"  # "<pid> <host>" of the process whose worktrees the folder holds


def _owner_alive(folder: Path) -> bool:
    """Whether the process that made ``folder`` may still use it (unknown hosts count as alive)."""
    try:
        pid_text, host = (folder / OWNER_FILE).read_text(encoding="utf-8").split()
        pid = int(pid_text)
    except FileNotFoundError:
        return False  # versions before the owner file: their run is long over
    except (OSError, ValueError):
        return True  # unreadable: leave it to its owner
    if host != socket.gethostname():
        return True  # a pid of another machine (a shared repository) cannot be checked here
    return pid_alive(pid)


def prune_stale(root: Path) -> list[Path]:
    """Remove the registered A/B worktrees of ``root`` whose process was killed; returns them.

    Only worktrees in a ``convperf-ab-*`` folder are considered, and only when its owner (a
    process on this host) is gone: a concurrent run's worktrees are left alone.
    """
    listing = _git(root, "worktree", "list", "--porcelain", check=False).stdout
    removed = []
    for line in listing.splitlines():
        if not line.startswith("worktree "):
            continue
        tree = Path(line.removeprefix("worktree "))
        if not tree.parent.name.startswith(TEMP_PREFIX) or _owner_alive(tree.parent):
            continue
        _git(root, "worktree", "remove", "--force", str(tree), check=False)
        shutil.rmtree(tree.parent, ignore_errors=True)
        removed.append(tree)
    _git(root, "worktree", "prune", check=False)  # entries whose folder was deleted by hand
    return removed


class Checkouts:
    """Detached worktrees of revisions in temporary folders; :meth:`close` removes every one.

    ``close`` runs from the session's end, from ``with`` blocks and (once) at interpreter exit, so a
    Ctrl-C (``KeyboardInterrupt`` unwinds through pytest's unconfigure) leaves nothing behind.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self._trees: dict[str, Path] = {}
        self._temp: Path | None = None
        self.pruned = prune_stale(root)
        atexit.register(self.close)

    def path(self, rev: Revision) -> Path:
        """A worktree of ``rev`` (created once per commit)."""
        tree = self._trees.get(rev.sha)
        if tree is not None:
            return tree
        if self._temp is None:
            self._temp = Path(tempfile.mkdtemp(prefix=TEMP_PREFIX))
            # Written before any worktree is registered: a run killed later is known to be gone.
            (self._temp / OWNER_FILE).write_text(f"{os.getpid()} {socket.gethostname()}\n", encoding="utf-8")
        tree = self._temp / rev.sha[:12]
        # Registered before git runs, so an interrupt during the checkout still cleans it up.
        self._trees[rev.sha] = tree
        _git(self.root, "worktree", "add", "--detach", "--force", str(tree), rev.sha)
        return tree

    def close(self) -> None:
        """Remove every worktree (and its folder); never raises."""
        for tree in list(self._trees.values()):
            _git(self.root, "worktree", "remove", "--force", str(tree), check=False)
        self._trees.clear()
        if self._temp is not None:
            shutil.rmtree(self._temp, ignore_errors=True)
            self._temp = None
            _git(self.root, "worktree", "prune", check=False)


@contextmanager
def checkouts(root: Path) -> Iterator[Checkouts]:
    """``with checkouts(root) as co: co.path(rev)``: worktrees removed on any exit, Ctrl-C included."""
    co = Checkouts(root)
    try:
        yield co
    finally:
        co.close()
