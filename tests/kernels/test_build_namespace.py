"""Op namespaces per build (kernels/_build.py): two builds of one family can live in one process."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

from kernels import _build
from pytest_convperf.ab.refimport import alias_prefix, import_from_tree

SHA = "ab" * 20


@pytest.fixture
def ref_build(tmp_path: Path) -> ModuleType:
    """``kernels._build`` of a copy of the tree, imported as an A/B imports a revision's modules."""
    shutil.copytree(
        _build.KERNELS_ROOT, tmp_path / "tree" / "kernels", ignore=shutil.ignore_patterns("__pycache__")
    )
    module = import_from_tree(tmp_path / "tree", "kernels._build", SHA)
    yield module
    for name in [m for m in sys.modules if m.startswith(alias_prefix(SHA))]:
        del sys.modules[name]


def test_the_working_tree_keeps_its_namespace_and_cache_key() -> None:
    assert _build.namespace("depthwise") == "convperf_depthwise"
    spec = _build.make_spec("depthwise", archs=("9.0",))
    assert spec.namespace == "" and spec.define_flags() == []


def test_a_renamed_loader_builds_a_distinct_namespace_and_library(ref_build: ModuleType) -> None:
    assert ref_build.__name__ == f"{alias_prefix(SHA)}.kernels._build"
    ns = ref_build.namespace("depthwise")
    assert ns.startswith("convperf_depthwise_") and ns != _build.namespace("depthwise")
    spec = ref_build.make_spec("depthwise", archs=("9.0",))
    ours = _build.make_spec("depthwise", archs=("9.0",))
    assert spec.define_flags() == [f"-DCONVPERF_NS={ns}"]
    # Same sources, but another namespace compiled in: another library, never the cached one.
    assert [p.read_bytes() for p in spec.sources] == [p.read_bytes() for p in ours.sources]
    assert spec.name != ours.name


def test_the_namespace_macro_expands_before_torch_library_pastes_it(tmp_path: Path) -> None:
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("needs a C++ preprocessor")
    src = tmp_path / "x.cpp"
    src.write_text(
        "#define TORCH_LIBRARY(ns, m) lib_##ns #ns\n#define TORCH_LIBRARY_IMPL(ns, k, m) impl_##ns##_##k\n"
        '#ifndef CONVPERF_NS\n#define CONVPERF_NS convperf_fam\n#endif\n#include "convperf/ns.h"\n'
        "CONVPERF_TORCH_LIBRARY(m)\nCONVPERF_TORCH_LIBRARY_IMPL(CUDA, m)\n"
    )
    inc = ["-I", str(_build.SHARED_INCLUDE)]
    default = subprocess.run([cxx, "-E", "-P", *inc, str(src)], capture_output=True, text=True, check=True)
    renamed = subprocess.run(
        [cxx, "-E", "-P", *inc, "-DCONVPERF_NS=convperf_fam_1234", str(src)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert 'lib_convperf_fam "convperf_fam"' in default.stdout and "impl_convperf_fam_CUDA" in default.stdout
    assert 'lib_convperf_fam_1234 "convperf_fam_1234"' in renamed.stdout


BINDING = """#include <torch/library.h>
#ifndef CONVPERF_NS
#define CONVPERF_NS convperf_twin
#endif
#include "convperf/ns.h"
CONVPERF_TORCH_LIBRARY(m) { m.def("ident(Tensor x) -> Tensor"); }
"""
CU = "__global__ void twin_kernel(float* x) { x[threadIdx.x] += 1.0f; }\n"


@pytest.mark.skipif(_build.nvcc_path() is None, reason="needs nvcc (CUDA toolkit)")
def test_two_builds_of_one_family_load_side_by_side(
    tmp_path: Path, ref_build: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The A/B's case: today's family and a revision's, both loaded; two registrations of one
    namespace would abort the second load."""
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "ext"))
    monkeypatch.setenv(_build.ARCH_ENV, "9.0")
    for side in ("a", "b"):
        (tmp_path / side / "twin").mkdir(parents=True)
        (tmp_path / side / "twin" / "binding.cpp").write_text(BINDING)
        (tmp_path / side / "twin" / "twin.cu").write_text(CU)
    _build.load("twin", root=tmp_path / "a")
    ref_build.load("twin", root=tmp_path / "b")
    ns = ref_build.namespace("twin")
    for name in ("convperf_twin", ns):
        assert torch._C._jit_get_operation(f"{name}::ident")[0] is not None, name
