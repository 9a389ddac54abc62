"""The JIT loader: hashing, the on-disk cache, arch selection, error messages, the ptxas report."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernels import _build

CU = "__global__ void k(float* x) { x[threadIdx.x] += 1.f; }\n"


def _family(root: Path, name: str = "fam", cu: str = CU, binding: str = "// no torch needed here\n") -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / f"{name}.cu").write_text(cu)
    (folder / "binding.cpp").write_text(binding)
    return folder


@pytest.fixture
def ext_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    out = tmp_path / "ext"
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(out))
    monkeypatch.setenv(_build.ARCH_ENV, "8.0;9.0")
    monkeypatch.setattr(_build, "_loaded", {})
    return out


def test_importing_kernels_builds_nothing() -> None:
    import subprocess
    import sys

    code = (
        "import sys, kernels, kernels.depthwise.ops, kernels._controls.ops, kernels._controls.cpu; "
        "print('torch.utils.cpp_extension' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_families_are_folders_with_a_binding() -> None:
    names = _build.families()
    assert "depthwise" in names and "_controls" in names
    with pytest.raises(_build.KernelBuildError, match="known families"):
        _build.make_spec("no_such_family")


def test_hash_follows_sources_flags_and_archs(tmp_path: Path, ext_dir: Path) -> None:
    folder = _family(tmp_path)
    base = _build.make_spec("fam", root=tmp_path)
    assert base.name.startswith("convperf_fam_") and len(base.name) == len("convperf_fam_") + 16
    assert _build.make_spec("fam", root=tmp_path).name == base.name  # deterministic
    assert _build.make_spec("fam", root=tmp_path, extra_cuda_flags=("-DFAST",)).name != base.name
    assert _build.make_spec("fam", root=tmp_path, archs=("9.0",)).name != base.name
    (folder / "extra.cuh").write_text("#pragma once\n")
    with_header = _build.make_spec("fam", root=tmp_path)
    assert with_header.name != base.name  # headers count
    (folder / "fam.cu").write_text(CU + "// edit\n")
    assert _build.make_spec("fam", root=tmp_path).name not in (base.name, with_header.name)
    assert base.build_dir == ext_dir / base.name


def test_every_shared_header_is_in_every_family_hash() -> None:
    # The shared headers sit in include/convperf/: a non-recursive listing once left them all unhashed,
    # so an edit there reused every family's stale .so.
    shared = {p for p in _build.SHARED_INCLUDE.rglob("*") if p.suffix in _build.HEADER_SUFFIXES}
    assert {p.name for p in shared} >= {"ns.h", "convert.cuh", "dtype.h"}
    for family in _build.families():
        assert shared <= set(_build.make_spec(family).headers), family


def test_same_hash_loads_from_cache_without_compiling(
    tmp_path: Path, ext_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _family(tmp_path)
    compiled: list[str] = []
    loaded: list[Path] = []

    def fake_compile(spec: _build.BuildSpec, *, verbose: bool = False) -> Path:
        compiled.append(spec.name)
        spec.build_dir.mkdir(parents=True)
        spec.library.write_bytes(b"")
        return spec.library

    monkeypatch.setattr(_build, "compile_library", fake_compile)
    monkeypatch.setattr(_build, "_load_library", loaded.append)
    first = _build.load("fam", root=tmp_path)
    assert compiled == [first.parent.name] and loaded == [first]
    assert _build.load("fam", root=tmp_path) == first  # in-process cache: nothing happens
    assert loaded == [first]
    monkeypatch.setattr(_build, "_loaded", {})  # a new process
    assert _build.load("fam", root=tmp_path) == first
    assert compiled == [first.parent.name], "an existing library for the same hash must not be rebuilt"
    assert loaded == [first, first]


def test_arch_list_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_build.ARCH_ENV, "9.0, 8.0;9.0+PTX")
    assert _build.default_archs() == ("8.0", "9.0", "9.0+PTX")
    spec = _build.BuildSpec("f", Path("."), (), (), ("8.0", "9.0+PTX"), (), (), ())
    assert spec.gencode_flags() == [
        "-gencode=arch=compute_80,code=sm_80",
        "-gencode=arch=compute_90,code=sm_90",
        "-gencode=arch=compute_90,code=compute_90",
    ]
    with pytest.raises(ValueError, match="TORCH_CUDA_ARCH_LIST"):
        _build.parse_archs("sm_90")


@pytest.mark.parametrize(
    ("env", "gpu", "expected"),
    [
        ("9.0", (8, 0), ("9.0",)),  # the variable wins over the GPU
        (None, (9, 0), ("9.0",)),  # a GPU machine builds for itself only
        (None, None, ("8.0", "9.0")),  # CI without a GPU
    ],
)
def test_prebuild_and_load_share_one_arch_policy(
    tmp_path: Path,
    ext_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    env: str | None,
    gpu: tuple[int, int] | None,
    expected: tuple[str, ...],
) -> None:
    """``python -m kernels._build --all`` builds the very library ``load()`` then finds: no rebuild."""
    import torch

    if env is None:
        monkeypatch.delenv(_build.ARCH_ENV, raising=False)
    else:
        monkeypatch.setenv(_build.ARCH_ENV, env)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu is not None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: gpu)
    _family(tmp_path)
    compiled: list[_build.BuildSpec] = []

    def fake_compile(spec: _build.BuildSpec, *, verbose: bool = False) -> Path:
        compiled.append(spec)
        spec.build_dir.mkdir(parents=True, exist_ok=True)
        spec.library.write_bytes(b"")
        return spec.library

    monkeypatch.setattr(_build, "compile_library", fake_compile)
    monkeypatch.setattr(_build, "_load_library", lambda path: None)
    assert _build._main(["--all"], root=tmp_path) == 0
    assert [s.archs for s in compiled] == [expected]
    assert _build.load("fam", root=tmp_path) == compiled[0].library
    assert len(compiled) == 1, "load() rebuilt what the prebuild had built: the arch policies differ"


def test_a_library_without_ready_marker_is_rebuilt_under_the_lock(
    tmp_path: Path, ext_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A half-linked ``.so`` (a build killed or still linking) is never loaded as it is."""
    from filelock import FileLock, Timeout

    _family(tmp_path)
    spec = _build.make_spec("fam", root=tmp_path)
    spec.build_dir.mkdir(parents=True)
    spec.library.write_bytes(b"half")
    lock_held: list[bool] = []

    def fake_compile(spec: _build.BuildSpec, *, verbose: bool = False) -> Path:
        try:
            FileLock(str(spec.lock_path), timeout=0).acquire()
            lock_held.append(False)
        except Timeout:
            lock_held.append(True)
        spec.library.write_bytes(b"whole")
        return spec.library

    monkeypatch.setattr(_build, "compile_library", fake_compile)
    assert _build.ensure_built(spec) == (spec.library, True)
    assert lock_held == [True], "the build must run while the check-and-build lock is held"
    assert spec.library.read_bytes() == b"whole" and spec.ready_marker.is_file()
    assert _build.ensure_built(spec) == (spec.library, False)


_RACER = r"""
import sys, time
from pathlib import Path
from kernels import _build

spec = _build.BuildSpec("fam", Path(sys.argv[1]), (), (), ("9.0",), (), (), ())
def slow_link(spec, *, verbose=False):
    spec.build_dir.mkdir(parents=True, exist_ok=True)
    with open(spec.library, "wb") as f:
        f.write(b"x")
        f.flush()
        time.sleep(1.0)  # a long link: the .so exists but is not complete
        f.write(b"y")
    with open(sys.argv[2], "a") as log:
        log.write("built\n")
    return spec.library
_build.compile_library = slow_link
library, _ = _build.ensure_built(spec)
print(library.read_bytes().decode())
"""


def test_concurrent_workers_build_once_and_never_see_a_partial_library(tmp_path: Path) -> None:
    """Two processes (as two xdist workers) race on one cold build: one builds, both load it whole."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}
    log = tmp_path / "builds.log"
    cmd = [sys.executable, "-c", _RACER, str(tmp_path), str(log)]
    root = Path(__file__).resolve().parents[2]  # the repository root: `kernels` is the package there
    procs = [subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert outs == ["xy", "xy"], f"a worker read a partial library: {outs}"
    assert log.read_text().splitlines() == ["built"]


needs_nvcc = pytest.mark.skipif(_build.nvcc_path() is None, reason="needs nvcc (CUDA toolkit)")


@needs_nvcc
def test_build_error_shows_first_compiler_errors_and_repro(tmp_path: Path, ext_dir: Path) -> None:
    broken = "__global__ void k(float* x) {\n  x[threadIdx.x] = undeclared_name;\n}\n"
    _family(tmp_path, "broken", cu=broken)
    with pytest.raises(_build.KernelBuildError) as info:
        _build.load("broken", root=tmp_path)
    text = str(info.value)
    assert "undeclared_name" in text and "error" in text
    assert "ninja -v" in text and str(ext_dir) in text
    first_errors = text.split("First compiler errors:\n", 1)[1]
    assert first_errors.lstrip().startswith(str(tmp_path / "broken" / "broken.cu"))


def test_parse_ptxas_report() -> None:
    report = """ptxas info    : Compiling entry function '_Z1kPf' for 'sm_80'
ptxas info    : Function properties for _Z1kPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, used 0 barriers, 360 bytes cmem[0]
ptxas info    : Compiling entry function '_Z1gPf' for 'sm_90'
ptxas info    : Function properties for _Z1gPf
    48 bytes stack frame, 16 bytes spill stores, 24 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 360 bytes cmem[0]
"""
    rows = _build.parse_ptxas(report, "x.cu")
    assert [(r.kernel, r.arch, r.registers, r.spill_stores, r.spill_loads) for r in rows] == [
        ("_Z1kPf", "sm_80", 12, 0, 0),
        ("_Z1gPf", "sm_90", 255, 16, 24),
    ]


@needs_nvcc
def test_ptxas_gate_on_the_controls() -> None:
    """The ptxas report path of CI's ``--check-spills`` on the small controls family (sm_80 and sm_90).

    The depthwise family takes ~1 min of nvcc here; CI's ``python -m kernels._build --all
    --check-spills`` covers it.
    """
    for family in ("_controls",):
        spec = _build.make_spec(family, archs=("8.0", "9.0"))
        for cu in (s for s in spec.sources if s.suffix == ".cu"):
            rows = _build.ptxas_report(cu, ("8.0", "9.0"))
            assert rows, f"no kernels reported for {cu}"
            spills = [r for r in rows if r.spill_stores or r.spill_loads]
            assert not spills, spills
            assert {r.arch for r in rows} == {"sm_80", "sm_90"}


def test_missing_nvcc_is_a_clear_error(
    tmp_path: Path, ext_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _family(tmp_path)
    monkeypatch.setattr(_build, "nvcc_path", lambda: None)
    with pytest.raises(_build.KernelBuildError, match="nvcc not found"):
        _build.load("fam", root=tmp_path)


def test_spill_check_fails_on_zero_parsed_kernels(
    tmp_path: Path, ext_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A .cu with __global__ kernels but no parsed ptxas rows must not pass as "0 spills"."""
    _family(tmp_path)
    spec = _build.make_spec("fam", root=tmp_path)
    monkeypatch.setattr(_build, "ptxas_report", lambda cu, archs: [])
    assert _build._check_spills(spec, ("8.0",)) is True
    assert "no ptxas rows were parsed" in capsys.readouterr().err
    _family(tmp_path, "plain", cu="// host helpers only\n")
    assert _build._check_spills(_build.make_spec("plain", root=tmp_path), ("8.0",)) is False


def test_running_as_a_script_builds_what_the_import_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    """``python -m kernels._build`` must run the imported module, not a renamed ``__main__`` copy."""
    import runpy
    import warnings

    from kernels import _build

    calls: list[object] = []
    monkeypatch.setattr(_build, "_main", lambda argv=None: calls.append(argv) or 0)
    with warnings.catch_warnings(), pytest.raises(SystemExit) as stop:
        warnings.simplefilter("ignore", RuntimeWarning)  # runpy: the module is already imported
        runpy.run_module("kernels._build", run_name="__main__")
    assert calls == [None] and stop.value.code == 0
