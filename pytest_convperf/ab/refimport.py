"""Find a check's candidate in another revision's source tree (the contract of the A/B's REF side).

The contract, for any suite (the plugin knows nothing of any kernel):

1. The candidate passed to ``convperf.check`` is a module-level callable (function, or an object
   reachable by attributes from a module): ``candidate.__module__`` and ``candidate.__qualname__``
   name it. Lambdas, closures and ``functools.partial`` objects have no such name at REF, so they
   are refused with an error saying so.
2. The module's file, relative to the repository root (``kernels/depthwise/reference.py``), is
   looked up in REF's worktree. Missing file or attribute: an error naming REF and the path.
3. REF's module is imported from REF's worktree with the module's *top-level package* taken fresh
   from that worktree (the working tree's modules of that package are set aside during the import
   and put back after), so its absolute imports (``from kernels.x import y``) bind REF's code.
4. REF's modules of that package are named ``_convperf_ref_<sha>.<name>`` (``__name__`` and a
   ``sys.modules`` key) *before their code runs*, so code that derives process-global names from
   ``__name__`` gets distinct names for REF at import time too: a kernel loader's op namespace
   (``kernels/_build.py``), ``torch.library.custom_op`` names built from it at decoration time, class
   ``__module__``. The working tree's modules keep their names. After the import REF's modules
   are reachable under the prefixed names only; imports REF's code runs later, inside functions,
   resolve to the working tree's modules: keep such imports at module level.

Whether the two sides really are two implementations (no shared callable or code object, no op
that both checkouts registered) is proven by :mod:`pytest_convperf.ab.distinct`.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_convperf.ab.distinct import NotDistinct, no_op_takeover


class CandidateLookupError(RuntimeError):
    """The REF side of a check's candidate cannot be found or imported."""


def alias_prefix(sha: str) -> str:
    """The module-name prefix of REF's modules: ``_convperf_ref_<first 12 of the hash>``."""
    return f"_convperf_ref_{sha[:12]}"


def candidate_path(candidate: Callable[..., Any], repo: Path) -> tuple[str, str, str]:
    """(module name, qualified name, file relative to ``repo``) of a candidate; errors for lambdas."""
    module_name = getattr(candidate, "__module__", None)
    qualname = getattr(candidate, "__qualname__", None)
    if not module_name or not qualname or "<" in qualname:
        raise CandidateLookupError(
            f"candidate {candidate!r} has no module-level name (a lambda, closure or partial?): the A/B "
            "finds REF's candidate by module path + qualified name; pass a module-level function"
        )
    module = sys.modules.get(module_name)
    file = getattr(module, "__file__", None)
    if file is None:
        raise CandidateLookupError(f"candidate {qualname} comes from {module_name}, which has no source file")
    try:
        rel = Path(file).resolve().relative_to(repo.resolve())
    except ValueError:
        raise CandidateLookupError(
            f"candidate {module_name}.{qualname} lives in {file}, outside the repository {repo}: "
            "an installed "
            "package is the same at every revision, so there is nothing to compare"
        ) from None
    return module_name, qualname, rel.as_posix()


def _package_modules(top: str) -> dict[str, types.ModuleType]:
    return {k: m for k, m in sys.modules.items() if k == top or k.startswith(top + ".")}


class _NamedFirst(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """While REF's package is imported: find its modules in REF's tree only, and give each module
    its final name (``<prefix>.<name>``, also a ``sys.modules`` key) before its code runs."""

    def __init__(self, tree: Path, top: str, prefix: str) -> None:
        self.tree, self.top, self.prefix = tree, top, prefix
        self._inner: dict[str, importlib.machinery.SourceFileLoader] = {}

    def find_spec(
        self, fullname: str, path: Any = None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.top and not fullname.startswith(self.top + "."):
            return None
        search = [str(self.tree)] if fullname == self.top else path
        spec = importlib.machinery.PathFinder.find_spec(fullname, search)
        if spec is None or not isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            return spec  # not found, a namespace package or a compiled module: renamed after the import
        self._inner[fullname] = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return None  # the default module object

    def exec_module(self, module: types.ModuleType) -> None:
        name = module.__name__  # the name it is imported by (``__spec__.name``, ``__package__`` keep it)
        code = self._inner[name].get_code(name)
        if code is None:  # a source loader always has code; typeshed allows None
            raise ImportError(f"no code for {name} in {self.tree}")
        final = f"{self.prefix}.{name}"
        module.__name__ = final
        sys.modules[final] = module
        try:
            exec(code, module.__dict__)
        except BaseException:
            del sys.modules[final]  # as the import system drops ``name``: no half-run module is cached
            raise


def import_from_tree(tree: Path, module_name: str, sha: str) -> types.ModuleType:
    """Import ``module_name`` from ``tree`` under the contract above; return REF's module."""
    prefix = alias_prefix(sha)
    cached = sys.modules.get(f"{prefix}.{module_name}")
    if cached is not None:
        return cached
    top = module_name.split(".")[0]
    saved = _package_modules(top)
    for key in saved:
        del sys.modules[key]
    if prefix not in sys.modules:
        sys.modules[prefix] = types.ModuleType(prefix, f"modules of revision {sha} (convperf A/B)")
    finder = _NamedFirst(tree, top, prefix)
    sys.meta_path.insert(0, finder)
    importlib.invalidate_caches()
    try:
        with no_op_takeover():  # before REF's code could free the working tree's ops
            module = importlib.import_module(module_name)
    finally:
        sys.meta_path.remove(finder)
        fresh = _package_modules(top)
        for key in fresh:
            del sys.modules[key]
        sys.modules.update(saved)
        for key, mod in fresh.items():
            if not mod.__name__.startswith(prefix + "."):  # not loaded by the finder: renamed now
                mod.__name__ = f"{prefix}.{key}"
            sys.modules[f"{prefix}.{key}"] = mod
    return module


def ref_candidate(
    candidate: Callable[..., Any], repo: Path, tree: Path, sha: str, label: str
) -> Callable[..., Any]:
    """REF's twin of ``candidate``: same module path and qualified name, imported from ``tree``."""
    module_name, qualname, rel = candidate_path(candidate, repo)
    if not (tree / rel).is_file():
        raise CandidateLookupError(
            f"revision {label} has no {rel} (the module of the candidate {module_name}.{qualname}): the "
            "kernel does not exist there, so there is nothing to compare; pick a REF that has it"
        )
    try:
        module = import_from_tree(tree, module_name, sha)
    except NotDistinct:
        raise  # the A/B's refusal, worded by distinct.py
    except Exception as exc:
        raise CandidateLookupError(
            f"importing {module_name} from revision {label} ({tree / rel}) failed: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    obj: Any = module
    for part in qualname.split("."):
        if not hasattr(obj, part):
            raise CandidateLookupError(
                f"revision {label}'s {rel} has no {qualname} (the candidate of this check): it was added or "
                "renamed after REF; pick a REF that has it"
            )
        obj = getattr(obj, part)
    if not callable(obj):
        raise CandidateLookupError(f"revision {label}'s {module_name}.{qualname} is not callable")
    return obj  # type: ignore[no-any-return]
