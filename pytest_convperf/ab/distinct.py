"""Proof that the A/B's two sides are two implementations, or a refusal that names why not.

An A/B that times one implementation against itself answers SAME, which reads as "no change": the
worst wrong answer it can give (issue 37 item 1: REF with 2x the work read SAME 1.006 because REF's
``torch.library.custom_op`` took over the working tree's op name, process-wide). So before an A/B
answers, the REF side must be shown to be REF's own code:

* **The callable**: REF's candidate is not A's object, does not share A's code object, and comes
  from a module file inside REF's tree (:func:`same_callable`).
* **The ops both sides reach through torch's registries** (a custom op's body, its fake, autograd
  and backend rules): every Python registration is attributed to the checkout its code lives in
  (:func:`op_sides`). An op name that code from *both* checkouts registered (one replacing the
  other, in either order) is a collision: whichever registered last runs for both sides, and for
  every later check of the process too (:class:`OpLedger`). C++ ``TORCH_LIBRARY`` namespaces cannot
  be registered twice (torch refuses the second load), which :func:`library_collision` recognises.

The cure is on the suite's side: name process-global registrations per checkout (``kernels/_build.py``
derives op namespaces from the module's name, which :mod:`pytest_convperf.ab.refimport` makes
distinct for REF before REF's code runs).
"""

from __future__ import annotations

import contextlib
import inspect
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

A_SIDE, REF_SIDE = "the working tree", "REF"
_LIBRARY_TWICE = re.compile(r"Only a single TORCH_LIBRARY can be used to register the namespace (\w+)")
_REFUSED = "the A/B refuses to answer (it would time one implementation against itself)"
_CURE = "name such registrations per checkout (e.g. through kernels._build.namespace) at both revisions"


class NotDistinct(RuntimeError):
    """The two sides of an A/B are not two implementations; the message names the shared part."""


def _code_of(obj: Any) -> Any:
    """The code object a callable runs (through ``functools.wraps``/partial/bound methods/``__call__``)."""
    seen = 0
    while seen < 8:  # bounded: a hostile ``__wrapped__`` cycle ends here
        seen += 1
        code = getattr(obj, "__code__", None)
        if code is not None:
            return code
        for attr in ("__wrapped__", "func", "__func__"):
            inner = getattr(obj, attr, None)
            if inner is not None and inner is not obj:
                obj = inner
                break
        else:
            call = inspect.getattr_static(type(obj), "__call__", None)  # an instance's class's method
            return getattr(call, "__code__", None)
    return None


def _inside(path: str | None, root: Path) -> bool:
    if not path:
        return False
    try:
        Path(path).resolve().relative_to(root.resolve())
    except (ValueError, OSError):
        return False
    return True


def same_callable(a: Callable[..., Any], ref: Callable[..., Any], repo: Path, tree: Path) -> str | None:
    """Why ``ref`` is not REF's own implementation of ``a``, as a refusal (None: it is)."""
    why = _shared_part(a, ref, repo, tree)
    return None if why is None else f"{why}: {_REFUSED}"


def _shared_part(a: Callable[..., Any], ref: Callable[..., Any], repo: Path, tree: Path) -> str | None:
    if ref is a:
        return "REF's candidate is the working tree's object"
    code_a, code_ref = _code_of(a), _code_of(ref)
    # A library's code (a torch CustomOpDef's __call__) is the same at both revisions: not evidence.
    if code_ref is not None and code_ref is code_a and _inside(code_a.co_filename, repo):
        return f"REF's candidate runs the working tree's code object ({code_a.co_filename})"
    module = sys.modules.get(getattr(ref, "__module__", "") or "")
    file = getattr(module, "__file__", None)
    if not _inside(file, tree):
        return f"REF's candidate comes from {file or 'a module without a file'}, not from REF's tree {tree}"
    return None


def _functions_of_op(opdef: Any, entry: Any) -> Iterator[Any]:
    """The Python functions registered for one op: a custom op's body, rules, and fake kernels."""
    if opdef is not None:
        for attr in ("_init_fn", "_abstract_fn", "_backward_fn", "_setup_context_fn"):
            fn = getattr(opdef, attr, None)
            if fn is not None:
                yield fn
        yield from dict(getattr(opdef, "_backend_fns", {}) or {}).values()
    if entry is not None:
        holder = getattr(entry, "fake_impl", None)
        for kernel in list(getattr(holder, "kernels", []) or []):  # every registration, oldest first
            yield getattr(kernel, "func", None)


def op_sides(repo: Path, tree: Path) -> dict[str, frozenset[str]]:
    """``{op name: the checkouts whose code registered for it now}``, for ops registered from Python.

    Reads torch's private registries (``torch._library``); a torch without them yields ``{}`` and
    the callable check alone stands. Code outside both checkouts (torch's own) is not attributed.
    """
    if "torch" not in sys.modules:
        return {}
    try:
        from torch._library import custom_ops, simple_registry
    except ImportError:
        return {}
    opdefs = dict(getattr(custom_ops, "OPDEFS", {}).items())
    entries = dict(getattr(getattr(simple_registry, "singleton", None), "_data", {}) or {})
    side_of: dict[str, str | None] = {}  # per file: torch registers hundreds of ops from a few files

    def side(file: str) -> str | None:
        if file not in side_of:  # REF's tree first: it may sit inside the repository
            side_of[file] = REF_SIDE if _inside(file, tree) else A_SIDE if _inside(file, repo) else None
        return side_of[file]

    sides: dict[str, frozenset[str]] = {}
    for name in set(opdefs) | set(entries):
        found = set()
        for fn in _functions_of_op(opdefs.get(name), entries.get(name)):
            file = getattr(_code_of(fn), "co_filename", None)
            where = side(file) if isinstance(file, str) else None
            if where is not None:
                found.add(where)
        if found:
            sides[name] = frozenset(found)
    return sides


class OpLedger:
    """Which checkout's code has registered each op, over the whole session (:meth:`note` unions).

    One snapshot is not enough: a ``custom_op`` registered again under the same name drops the first
    definition from torch's registry, so only the union of snapshots taken before REF's import, after
    REF's first call and at every later check shows that both checkouts registered it."""

    def __init__(self, repo: Path, tree: Path) -> None:
        self.repo, self.tree = repo, tree
        self.sides: dict[str, set[str]] = {}
        self.refusal: str | None = None

    def note(self, when: str) -> None:
        """Take a snapshot; raise :class:`NotDistinct` (and keep refusing) once an op has both sides."""
        if self.refusal is None:
            for name, now in op_sides(self.repo, self.tree).items():
                self.sides.setdefault(name, set()).update(now)
            shared = sorted(name for name, sides in self.sides.items() if len(sides) > 1)
            if shared:
                self.refusal = (
                    f"torch op {', '.join(shared[:3])}{' ...' if len(shared) > 3 else ''} was registered by "
                    f"both the working tree's and REF's code (seen {when}): the one registered last runs for "
                    f"both sides, and for every later check of this process, so {_REFUSED}; {_CURE}"
                )
        if self.refusal is not None:
            raise NotDistinct(self.refusal)


@contextlib.contextmanager
def no_op_takeover() -> Iterator[None]:
    """While REF's code is imported: a ``torch.library.custom_op`` whose name this process already
    holds raises :class:`NotDistinct` before torch replaces it.

    Torch frees the operator the earlier registration's op objects point at; calling the working
    tree's op after that is a use-after-free (a segfault, or REF's body run for both sides). Refused
    here, the working tree's op stays whole for every later check of the session. Where torch lacks
    the private hook (``custom_ops.get_library_allowing_overwrite``), :class:`OpLedger` alone stands.
    """
    try:
        from torch._library import custom_ops
    except ImportError:
        yield
        return
    allowing_overwrite = getattr(custom_ops, "get_library_allowing_overwrite", None)
    held = getattr(custom_ops, "OPDEF_TO_LIB", None)
    if allowing_overwrite is None or not isinstance(held, dict):
        yield
        return

    def refuse_overwrite(namespace: str, name: str) -> Any:
        qualname = f"{namespace}::{name}"
        if qualname in held:
            raise NotDistinct(
                f"REF's code registers the torch op {qualname[:200]}, which this process already holds "
                f"(the working tree's code registered it): {_REFUSED}; {_CURE}"
            )
        return allowing_overwrite(namespace, name)

    custom_ops.get_library_allowing_overwrite = refuse_overwrite
    try:
        yield
    finally:
        custom_ops.get_library_allowing_overwrite = allowing_overwrite


def library_collision(message: str) -> str | None:
    """A refusal for torch's "one TORCH_LIBRARY per namespace" load error (None: another error)."""
    match = _LIBRARY_TWICE.search(message)
    if match is None:
        return None
    return (
        f"REF's kernel library registers the op namespace {match.group(1)}, which the working tree's "
        f"already holds: {_REFUSED}; compile REF's namespace per checkout (kernels/include/convperf/ns.h "
        "and kernels._build.namespace)"
    )
