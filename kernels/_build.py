"""The one JIT loader for every kernel family: ``load("depthwise")`` builds and loads once.

A family is a folder ``kernels/<family>/`` holding ``*.cu`` files (plain CUDA), a ``binding.cpp``
(``TORCH_LIBRARY(convperf_<family>, m)``, see :func:`namespace`) and optional ``*.cuh``/``*.h`` headers;
its ``ops.py`` reaches the ops through one :class:`LazyOps`. ``load`` builds
it with ``torch.utils.cpp_extension`` (ninja) into ``$TORCH_EXTENSIONS_DIR/<name>`` where ``<name>``
carries a hash of the sources, headers, flags, arch list and toolchain; a library already built for
that hash is loaded without running the compiler (so a machine without nvcc can reuse a cache).
Nothing is built at import time.

Op namespaces: a family's ``binding.cpp`` registers ``TORCH_LIBRARY(CONVPERF_NS, m)`` through
``kernels/include/convperf/ns.h``, where ``CONVPERF_NS`` defaults to ``convperf_<family>``. Two
builds of one family in one process (the A/B of ``--convperf-against``: today's tree and a
revision's) need distinct namespaces, so :func:`namespace` derives it from this module's
``__name__``: ``kernels._build`` (the working tree) keeps ``convperf_<family>``; a copy imported
under another name (a revision's tree, renamed ``_convperf_ref_<sha>.kernels._build`` by
``pytest_convperf.ab.refimport``) gets ``convperf_<family>_<hash8 of its name>``, passed as
``-DCONVPERF_NS=...`` and made part of the build hash. ``ops.py`` asks :func:`namespace` instead of
spelling the name, for every process-wide registration (CUDA ops, Python custom ops, fake and
autograd rules); the A/B names REF's modules before their code runs, so a name computed at import
time is REF's own too. A name spelled out in ``ops.py`` is one both checkouts share: the A/B
refuses such a pair (``pytest_convperf/ab/distinct.py``) rather than time one side twice.

CLI (used by CI and as the prebuild before a GPU run)::

    python -m kernels._build --all [--check-spills] [--archs "8.0;9.0"]

builds every family for the archs of :func:`default_archs` (the same policy ``load`` uses, so the
prebuilt library is the one ``load`` finds) and, with ``--check-spills``, compiles each ``.cu`` with
``nvcc -Xptxas -v`` and fails on any register spill.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KERNELS_ROOT = Path(__file__).resolve().parent
SHARED_INCLUDE = KERNELS_ROOT / "include"
# PyTorch's own variable for extension builds, so one setting steers every build on a machine.
ARCH_ENV = "TORCH_CUDA_ARCH_LIST"
# Without a GPU (CI) we build for the GPUs we run on: A100 (sm_80) and H100/H200 (sm_90).
DEFAULT_ARCHS: tuple[str, ...] = ("8.0", "9.0")
READY_SUFFIX = ".ready"
# No -std here: torch picks the C++ standard its headers need (C++17 up to 2.10, C++20 after).
CUDA_FLAGS: tuple[str, ...] = ("-O3", "-lineinfo", "--expt-relaxed-constexpr")
CXX_FLAGS: tuple[str, ...] = ("-O3",)
SOURCE_SUFFIXES = (".cu", ".cpp")
HEADER_SUFFIXES = (".cuh", ".h", ".hpp")
ERROR_LINES = 12

_lock = threading.Lock()
_loaded: dict[tuple[str, str], Path] = {}


class KernelBuildError(RuntimeError):
    """A kernel family failed to build; the message holds the first compiler errors and a repro."""


@dataclass(frozen=True)
class BuildSpec:
    """Everything that determines one build of a family; ``name`` embeds their hash."""

    family: str
    folder: Path
    sources: tuple[Path, ...]
    headers: tuple[Path, ...]
    archs: tuple[str, ...]
    cuda_flags: tuple[str, ...]
    cxx_flags: tuple[str, ...]
    include_paths: tuple[Path, ...]
    toolchain: str = field(default="")
    # The op namespace compiled in; "" keeps binding.cpp's default (convperf_<family>).
    namespace: str = field(default="")
    content_hash: str = field(default="", init=False)

    def __post_init__(self) -> None:
        # Hash at creation: the spec describes the files as they were when it was made.
        object.__setattr__(self, "content_hash", self._digest())

    def _digest(self) -> str:
        """Hash of file contents, flags, archs and toolchain (not of paths or mtimes)."""
        h = hashlib.sha256()
        for path in (*self.sources, *self.headers):
            h.update(path.name.encode())
            h.update(b"\0")
            h.update(path.read_bytes())
            h.update(b"\0")
        for part in (*self.archs, "|", *self.cuda_flags, "|", *self.cxx_flags, "|", self.toolchain):
            h.update(part.encode())
            h.update(b"\0")
        if self.namespace:  # only a renamed build hashes it: the default build keeps its cache key
            h.update(f"ns={self.namespace}".encode())
        return h.hexdigest()

    def define_flags(self) -> list[str]:
        """``-DCONVPERF_NS=<namespace>`` for a renamed build (none for the default namespace)."""
        return [f"-DCONVPERF_NS={self.namespace}"] if self.namespace else []

    @property
    def name(self) -> str:
        """Extension name ``convperf_<family>_<hash16>``; a new hash gets a fresh build folder."""
        return f"convperf_{self.family}_{self.content_hash[:16]}"

    @property
    def build_dir(self) -> Path:
        """``$TORCH_EXTENSIONS_DIR/<name>`` (torch's default root when the variable is unset)."""
        return extensions_root() / self.name

    @property
    def library(self) -> Path:
        return self.build_dir / f"{self.name}.so"

    @property
    def ready_marker(self) -> Path:
        """Written after a build completed: a ``.so`` without it may be half-linked or left by a crash."""
        return self.build_dir / f"{self.name}{READY_SUFFIX}"

    @property
    def lock_path(self) -> Path:
        """Our lock around check-then-build (cpp_extension holds its own ``lock`` inside the build)."""
        return self.build_dir.parent / f"{self.name}.convperf.lock"

    def gencode_flags(self) -> list[str]:
        """``-gencode`` flags for every arch (passing them stops torch from adding its own)."""
        flags = []
        for arch in self.archs:
            num = arch.replace(".", "").removesuffix("+PTX")
            flags.append(f"-gencode=arch=compute_{num},code=sm_{num}")
            if arch.endswith("+PTX"):
                flags.append(f"-gencode=arch=compute_{num},code=compute_{num}")
        return flags


DEFAULT_MODULE = "kernels._build"


def extensions_root() -> Path:
    """Root of the build cache: ``$TORCH_EXTENSIONS_DIR`` or torch's default."""
    env = os.environ.get("TORCH_EXTENSIONS_DIR")
    if env:
        return Path(env)
    from torch.utils.cpp_extension import _get_build_directory

    return Path(_get_build_directory("convperf_probe", verbose=False)).parent


def families(root: Path = KERNELS_ROOT) -> list[str]:
    """Every folder under ``root`` with a ``binding.cpp``, sorted."""
    return sorted(p.parent.name for p in root.glob("*/binding.cpp"))


def cuda_home() -> Path | None:
    """``$CUDA_HOME``, else /usr/local/cuda when it has nvcc (exported so torch sees it too)."""
    env = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if env:
        return Path(env)
    default = Path("/usr/local/cuda")
    if (default / "bin" / "nvcc").exists():
        os.environ["CUDA_HOME"] = str(default)
        return default
    which = shutil.which("nvcc")
    return Path(which).resolve().parent.parent if which else None


def nvcc_path() -> Path | None:
    home = cuda_home()
    if home is not None and (home / "bin" / "nvcc").exists():
        return home / "bin" / "nvcc"
    which = shutil.which("nvcc")
    return Path(which) if which else None


def default_archs() -> tuple[str, ...]:
    """The one arch policy of ``load`` and the CLI prebuild, so both hash to the same library.

    ``$TORCH_CUDA_ARCH_LIST`` (``"8.0;9.0"``) when set, else the visible GPU's capability (a GPU
    machine builds for itself only), else sm_80 + sm_90 (CI without a GPU).
    """
    env = os.environ.get(ARCH_ENV, "").strip()
    if env:
        return parse_archs(env)
    import torch

    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        return (f"{major}.{minor}",)
    return DEFAULT_ARCHS


def parse_archs(text: str) -> tuple[str, ...]:
    """Parse ``"8.0;9.0"`` (also commas/spaces; ``+PTX`` allowed) into a sorted, unique tuple."""
    archs = [a for a in re.split(r"[;, ]+", text.strip()) if a]
    for arch in archs:
        if not re.fullmatch(r"\d+\.\d+[af]?(\+PTX)?", arch):
            raise ValueError(
                f"CUDA arch {arch!r} in {text!r} is not of the form '9.0' or '8.0+PTX' (names such as "
                f"'Hopper' are not accepted); set {ARCH_ENV} like '8.0;9.0'"
            )
    return tuple(sorted(set(archs)))


@functools.lru_cache(maxsize=1)
def _toolchain() -> str:
    import torch

    nvcc = nvcc_path()
    version = ""
    if nvcc is not None:
        out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, check=False)
        version = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""
    return f"torch={torch.__version__};cuda={torch.version.cuda};nvcc={version}"


def _include_paths() -> tuple[Path, ...]:
    paths = []
    if SHARED_INCLUDE.is_dir():
        paths.append(SHARED_INCLUDE)
    # Torch's CUDA 13 headers include CCCL/driver headers that ship in the nvidia-*-cu13 wheels.
    import torch

    cu13 = Path(torch.__file__).resolve().parent.parent / "nvidia" / "cu13" / "include"
    if cu13.is_dir():
        paths.append(cu13)
    return tuple(paths)


def make_spec(
    family: str,
    *,
    root: Path = KERNELS_ROOT,
    archs: Sequence[str] | None = None,
    extra_cuda_flags: Sequence[str] = (),
) -> BuildSpec:
    """Describe the build of ``root/<family>`` (raises ``KernelBuildError`` when it is not a family)."""
    folder = root / family
    if not (folder / "binding.cpp").is_file():
        known = ", ".join(families(root)) or "none"
        raise KernelBuildError(
            f"kernel family {family!r} not found: {folder / 'binding.cpp'} does not exist "
            f"(known families: {known})"
        )
    sources = tuple(sorted(p for p in folder.iterdir() if p.suffix in SOURCE_SUFFIXES))
    headers = [p for p in folder.iterdir() if p.suffix in HEADER_SUFFIXES]
    # Recursive: the shared headers live in include/convperf/, and every one is part of the hash.
    if SHARED_INCLUDE.is_dir():
        headers += [p for p in SHARED_INCLUDE.rglob("*") if p.suffix in HEADER_SUFFIXES]
    return BuildSpec(
        family=family,
        folder=folder,
        sources=sources,
        headers=tuple(sorted(headers)),
        archs=tuple(archs) if archs is not None else default_archs(),
        cuda_flags=(*CUDA_FLAGS, *extra_cuda_flags),
        cxx_flags=CXX_FLAGS,
        include_paths=(folder, *_include_paths()),
        toolchain=_toolchain(),
        namespace="" if __name__ == DEFAULT_MODULE else namespace(family),
    )


def _first_errors(output: str, limit: int = ERROR_LINES) -> str:
    lines = output.splitlines()
    for pattern in (r"error:|error\s*#|\(\d+\): error", r"fatal|FAILED|undefined reference"):
        for i, line in enumerate(lines):
            if re.search(pattern, line, re.IGNORECASE):
                return "\n".join(lines[i : i + limit])
    return "\n".join(lines[-limit:])


def compile_library(spec: BuildSpec, *, verbose: bool = False) -> Path:
    """Compile and link ``spec`` with ninja (and load it, as cpp_extension does); return the .so."""
    if nvcc_path() is None:
        raise KernelBuildError(
            f"cannot build kernel family {spec.family!r}: nvcc not found; set CUDA_HOME to a CUDA "
            f"toolkit (or put nvcc on PATH), or copy a built {spec.name} into {extensions_root()}"
        )
    from torch.utils import cpp_extension

    spec.build_dir.mkdir(parents=True, exist_ok=True)
    try:
        cpp_extension.load(
            name=spec.name,
            sources=[str(s) for s in spec.sources],
            extra_cflags=[*spec.cxx_flags, *spec.define_flags()],
            extra_cuda_cflags=[*spec.cuda_flags, *spec.define_flags(), *spec.gencode_flags()],
            extra_include_paths=[str(p) for p in spec.include_paths],
            build_directory=str(spec.build_dir),
            with_cuda=True,
            is_python_module=False,
            verbose=verbose,
        )
    except (RuntimeError, OSError) as exc:
        raise KernelBuildError(
            f"building kernel family {spec.family!r} ({spec.name}) failed.\n"
            f"First compiler errors:\n{_first_errors(str(exc))}\n"
            f"Reproduce with: cd {spec.build_dir} && ninja -v\n"
            f"(or: python -m kernels._build {spec.family})"
        ) from exc
    if not spec.library.exists():
        raise KernelBuildError(f"build of {spec.family!r} reported success but {spec.library} is missing")
    return spec.library


def _load_library(path: Path) -> None:
    import torch

    torch.ops.load_library(str(path))  # type: ignore[no-untyped-call]


def load(family: str, *, root: Path = KERNELS_ROOT) -> Path:
    """Build (once per hash) and load ``kernels/<family>`` into this process; return the .so path.

    Later calls in the same process return at once (edits to the sources need a new process). The
    ops are then ``torch.ops.convperf_<family>``.
    Raises ``KernelBuildError`` with the first compiler errors and a repro command on failure.
    """
    key = (str(root), family)
    cached = _loaded.get(key)
    if cached is not None:
        return cached
    with _lock:
        if key in _loaded:
            return _loaded[key]
        spec = make_spec(family, root=root)
        library, _ = ensure_built(spec)
        # cpp_extension.load already loaded a fresh build; loading twice is a no-op for dlopen.
        _load_library(library)
        _loaded[key] = library
        return library


def namespace(family: str) -> str:
    """``torch.ops`` (and ``TORCH_LIBRARY``) namespace of a family: ``convperf_<family>``.

    A leading underscore marks a family that is not a candidate (``_controls``, the planted defects);
    it is not part of the namespace, so the controls' ops are ``torch.ops.convperf_controls``.
    A copy of this loader imported under another name (a revision's tree in an A/B, see the module
    docstring) adds a hash of that name, so two builds of one family can live in one process.
    """
    base = f"convperf_{family.lstrip('_')}"
    if __name__ == DEFAULT_MODULE:
        return base
    return f"{base}_{hashlib.sha256(__name__.encode()).hexdigest()[:8]}"


class LazyOps:
    """The one lazy loader of a family's ops: ``LazyOps(family, register)()`` builds/loads ``family``
    through :func:`load` on the first call (once per process, thread-safe), then runs ``register``
    (the ops' fake and autograd rules, which need the ops to exist) once, and returns
    ``torch.ops.<namespace(family)>``. Importing a module that holds one builds nothing."""

    def __init__(self, family: str, register: Callable[[], None] | None = None) -> None:
        self.family = family
        self._register = register
        self._lock = threading.Lock()
        self._ready = False

    def __call__(self) -> Any:
        if not self._ready:
            with self._lock:
                if not self._ready:
                    load(self.family)
                    if self._register is not None:
                        self._register()
                    self._ready = True
        import torch

        return getattr(torch.ops, namespace(self.family))


def ensure_built(spec: BuildSpec) -> tuple[Path, bool]:
    """Return ``(library, built_now)``, building ``spec`` unless a completed build is on disk.

    The check and the build happen under one file lock per build, across processes: a pytest-xdist
    worker never sees the ``.so`` that another worker is still linking, and a build killed halfway
    (no ready marker) is built again rather than loaded.
    """
    from filelock import FileLock

    spec.build_dir.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(spec.lock_path)):
        if spec.ready_marker.is_file() and spec.library.is_file():
            return spec.library, False
        library = compile_library(spec)
        spec.ready_marker.write_text(f"{spec.name}\n")
        return library, True


# ---- ptxas report (CLI) -----------------------------------------------------------------------


@dataclass(frozen=True)
class KernelResources:
    """One kernel's line of the ptxas report for one arch."""

    source: str
    arch: str
    kernel: str
    registers: int
    spill_stores: int
    spill_loads: int
    stack: int


_ENTRY_RE = re.compile(r"Compiling entry function '([^']+)' for '(sm_\d+\w*)'")
_STACK_RE = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_REGS_RE = re.compile(r"Used (\d+) registers")


def parse_ptxas(report: str, source: str) -> list[KernelResources]:
    """Parse ``nvcc -Xptxas -v`` output into one ``KernelResources`` per (kernel, arch)."""
    out: list[KernelResources] = []
    kernel = arch = ""
    stack = stores = loads = 0
    for line in report.splitlines():
        if m := _ENTRY_RE.search(line):
            kernel, arch = m.group(1), m.group(2)
            stack = stores = loads = 0
        elif (m := _STACK_RE.search(line)) and kernel:
            stack, stores, loads = int(m.group(1)), int(m.group(2)), int(m.group(3))
        elif (m := _REGS_RE.search(line)) and kernel:
            out.append(KernelResources(source, arch, kernel, int(m.group(1)), stores, loads, stack))
            kernel = ""
    return out


def _demangle(names: list[str]) -> dict[str, str]:
    home = cuda_home()
    tool: Path | str | None = home / "bin" / "cu++filt" if home is not None else None
    if tool is None or not Path(tool).exists():
        tool = shutil.which("c++filt")
    if tool is None or not names:
        return {n: n for n in names}
    res = subprocess.run([str(tool)], input="\n".join(names), capture_output=True, text=True, check=False)
    pretty = res.stdout.splitlines()
    return dict(zip(names, pretty)) if len(pretty) == len(names) else {n: n for n in names}


def ptxas_report(cu_file: Path, archs: Sequence[str]) -> list[KernelResources]:
    """Compile one plain ``.cu`` (no torch headers) with ``-Xptxas -v`` and parse the report."""
    nvcc = nvcc_path()
    if nvcc is None:
        raise KernelBuildError("nvcc not found: set CUDA_HOME to check the ptxas report")
    spec_flags = BuildSpec("", cu_file.parent, (), (), tuple(archs), (), (), ()).gencode_flags()
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            str(nvcc), "-c", str(cu_file), "-o", str(Path(tmp) / "out.o"), "-std=c++17", *CUDA_FLAGS,
            "-Xptxas", "-v", *spec_flags, "-I", str(cu_file.parent),
        ]  # fmt: skip
        if SHARED_INCLUDE.is_dir():
            cmd += ["-I", str(SHARED_INCLUDE)]
        res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise KernelBuildError(
            f"nvcc failed on {cu_file}:\n{_first_errors(res.stderr + res.stdout)}\n"
            f"Reproduce with: {' '.join(cmd)}"
        )
    return parse_ptxas(res.stderr + res.stdout, cu_file.name)


def _main(argv: Sequence[str] | None = None, *, root: Path = KERNELS_ROOT) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernels._build", description=__doc__.split("\n")[0])
    parser.add_argument("families", nargs="*", help="families to build (default with --all: every one)")
    parser.add_argument("--all", action="store_true", help="build every folder with a binding.cpp")
    parser.add_argument("--check-spills", action="store_true", help="fail on any ptxas register spill")
    parser.add_argument(
        "--archs", default=None, help=f"e.g. '8.0;9.0' (default: ${ARCH_ENV}, else the GPU, else 8.0;9.0)"
    )
    args = parser.parse_args(argv)
    names = families(root) if args.all else list(args.families)
    if not names:
        parser.error("name a family or pass --all")
    archs = parse_archs(args.archs) if args.archs else default_archs()
    failed = False
    for family in names:
        spec = make_spec(family, root=root, archs=archs)
        start = time.perf_counter()
        try:
            library, built = ensure_built(spec)
            _load_library(library)
        except KernelBuildError as exc:
            print(f"FAILED {family}: {exc}", file=sys.stderr)
            failed = True
            continue
        how = "built" if built else "cached"
        print(f"{family}: {how} for sm {','.join(archs)} in {time.perf_counter() - start:.1f} s -> {library}")
        if args.check_spills:
            failed |= _check_spills(spec, archs)
    return 1 if failed else 0


def _check_spills(spec: BuildSpec, archs: Sequence[str]) -> bool:
    failed = False
    for cu in (s for s in spec.sources if s.suffix == ".cu"):
        start = time.perf_counter()
        try:
            rows = ptxas_report(cu, archs)
        except KernelBuildError as exc:
            print(f"FAILED {spec.family}: {exc}", file=sys.stderr)
            return True
        names = _demangle(sorted({r.kernel for r in rows}))
        print(f"  ptxas {cu.name} ({time.perf_counter() - start:.1f} s):")
        for r in rows:
            spill = r.spill_stores + r.spill_loads
            flag = "  SPILL" if spill else ""
            print(
                f"    {r.arch:6} regs {r.registers:3d}  spill st/ld {r.spill_stores}/{r.spill_loads}  "
                f"stack {r.stack:4d}  {names[r.kernel][:110]}{flag}"
            )
            failed |= spill > 0
        if not rows:
            if "__global__" in cu.read_text(errors="replace"):
                print(
                    f"FAILED {spec.family}: {cu.name} defines __global__ kernels but no ptxas rows "
                    "were parsed (the report format changed or ptxas printed nothing): the spill "
                    "check cannot pass on zero kernels",
                    file=sys.stderr,
                )
                failed = True
            else:
                print("    (no kernels)")
    if failed:
        print(f"FAILED {spec.family}: ptxas reports register spills (see SPILL above)", file=sys.stderr)
    return failed


if __name__ == "__main__":
    # `python -m kernels._build` runs this file as a second module, `__main__`, whose namespace()
    # would rename every op (convperf_<family>_<hash of "__main__">) and so build under another
    # cache key than the one `import kernels._build` loads: a prebuild nobody used (seen on the
    # first H100 run). Run the importable module's entry point instead.
    from kernels import _build as _imported

    sys.exit(_imported._main())
