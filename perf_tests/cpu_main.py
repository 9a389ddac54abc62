"""The main job on a CPU without baselines: a representative selection, recorded, then judged.

``pytest --convperf perf_tests`` on a GPU is the whole suite against the GPU's baselines. On a CPU
machine the repository holds no baselines for (it holds the H100's), the whole suite would time
for many minutes and judge nothing: every check NEW (issue 38.1). There, this session:

1. keeps :data:`SELECTION` (one check per kernel family, and the harness's self-measurement),
   deselecting the rest (pytest counts them "deselected");
2. before its header, records the selection in a fresh ``pytest`` process into a temporary
   baselines folder (``--convperf-update-baselines=new``), its output shown;
3. then measures the selection again, unchanged, in this fresh process and judges it against that
   recording with the usual rule: PASS, ADVISORY (too noisy here to gate), or FAIL (confirmed in
   fresh processes, as any speed FAIL). Nothing is hard-coded: an unchanged rerun is expected to
   pass, and when it does not, this machine's between-process noise is beyond the tolerance.

It applies only to that plain command (the folder ``perf_tests`` alone, no ``-k``/``-m``/``-n``,
not updating, no ``--convperf-against``) on a CPU whose baselines folder does not exist. Naming files
(``pytest --convperf perf_tests/test_*.py``) runs them all; recording baselines for this machine
(``--convperf-update-baselines=new``) makes later main jobs judge the whole suite against them.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from perf_tests.device_kind import collection_device_kind
from pytest_convperf import machine_folder

HERE = Path(__file__).resolve().parent

# One check per kernel family, on shapes the CPU times in seconds, and the harness measuring a conv
# against itself (a biased harness fails it). Node ids relative to perf_tests/; each must match a
# collected test (a rename stops the run with a usage error instead of shrinking the job silently).
SELECTION: tuple[str, ...] = (
    "test_depthwise.py::test_seed_shape[1x144x56-k3-fp32-nchw-forward]",
    "test_depthwise.py::test_seed_shape[1x144x56-k3-fp32-nhwc-weight_grad]",
    "test_im2col_gemm.py::test_seed_lenet[gemm-3-8]",  # a corner of its CPU grid (others skip on a CPU)
    "test_pcilt.py::test_seed_case[4-True]",
    "test_self_measure.py::test_a_conv_against_itself_reads_one",
)
# Judged in step 2 only: it times a conv against itself and records no entry (step 1 would spend a
# minute on it for nothing).
NOT_RECORDED = frozenset({"test_self_measure.py::test_a_conv_against_itself_reads_one"})


@dataclass(frozen=True)
class CpuMainJob:
    """What the CPU main job does: where the repository's baselines would be, and the recording."""

    machine: str
    folder: Path  # this machine's folder in the repository's baselines (absent)
    scratch: Path  # the temporary baselines folder the recording goes to
    node_ids: tuple[str, ...]


def applies(config: pytest.Config) -> Path | None:
    """This machine's baselines folder (absent) when this session is the plain main job on a CPU
    without baselines, else None."""
    opt = config.option
    if any(getattr(opt, name, False) for name in ("help", "version", "collectonly", "showfixtures")):
        return None
    if hasattr(config, "workerinput") or opt.keyword or opt.markexpr:
        return None
    if getattr(opt, "numprocesses", None):  # xdist: the workers collect, and would not deselect
        return None
    if [Path(a).resolve() for a in config.args] != [HERE]:
        return None
    enabled = getattr(opt, "convperf", None) or str(config.getini("convperf")).lower() in (
        "1",
        "true",
        "yes",
        "on",
    )
    if not enabled or any(
        getattr(opt, name, None)
        for name in ("convperf_update_baselines", "convperf_against", "convperf_confirm_run")
    ):
        return None
    if collection_device_kind(config) != "cpu":
        return None
    folder = machine_folder(config, device="cpu")
    return None if folder.is_dir() else folder


def plan(config: pytest.Config) -> CpuMainJob | None:
    folder = applies(config)
    if folder is None:
        return None
    scratch = Path(tempfile.mkdtemp(prefix="convperf-cpu-main-"))
    ids = tuple(f"{HERE / entry.split('::')[0]}::{entry.split('::', 1)[1]}" for entry in SELECTION)
    return CpuMainJob(folder.name, folder, scratch, ids)


def record(job: CpuMainJob, config: pytest.Config) -> int:
    """Record the selection in a fresh pytest process into ``job.scratch``; its exit status. The
    session's own arguments go along (``-p``, ``-c``, convperf options), less the folder it names."""
    here = Path(config.invocation_params.dir)
    extra = [a for a in config.invocation_params.args if (here / a).resolve() != HERE]
    ids = [node_id for node_id in job.node_ids if _relative(node_id) not in NOT_RECORDED]
    cmd = [
        sys.executable, "-m", "pytest", *extra, *ids,
        "--convperf", "--convperf-update-baselines=new", f"--convperf-baselines={job.scratch}",
        # Its report and convperf-update.md go to the temporary folder, not into the checkout.
        f"--convperf-report={job.scratch / 'recording'}",
        "--convperf-device=cpu", "-p", "no:cacheprovider", "-q",
    ]  # fmt: skip
    print(
        f"convperf CPU main job, step 1 of 2: recording {len(ids)} representative checks in a "
        f"fresh process (no baselines for this machine, {job.machine})",
        flush=True,
    )
    return subprocess.run(cmd, cwd=here, check=False).returncode


def header(job: CpuMainJob) -> list[str]:
    """What the judged step does, after the plugin's header (which names the temporary folder)."""
    others = sorted(p.name for p in job.folder.parent.glob("*") if p.is_dir() and any(p.glob("*.yaml")))
    return [
        f"convperf: the baselines in {job.folder.parent} are for {', '.join(others) or 'no machine'}, "
        f"not this machine ({job.machine})",
        f"convperf CPU main job, step 2 of 2: {len(job.node_ids)} representative tests of perf_tests, "
        f"measured again unchanged in this process and judged against step 1's recording, and the "
        f"harness measuring a conv against itself "
        f"({job.scratch}, removed at the end): PASS or ADVISORY is expected, a FAIL is this machine's "
        "noise between processes beyond the tolerance. The whole suite on this CPU: name the files "
        "(pytest --convperf perf_tests/test_*.py)",
    ]


def select(items: list[pytest.Item], job: CpuMainJob) -> tuple[list[pytest.Item], list[pytest.Item]]:
    """(kept, deselected); a selection entry no item matches is a usage error."""
    wanted = {_relative(node_id) for node_id in job.node_ids}
    kept = [item for item in items if _relative(item.nodeid) in wanted]
    missing = wanted - {_relative(item.nodeid) for item in kept}
    if missing:
        raise pytest.UsageError(
            "perf_tests/cpu_main.py SELECTION names tests that were not collected: "
            f"{', '.join(sorted(missing))}; update the selection to the renamed tests"
        )
    return kept, [item for item in items if _relative(item.nodeid) not in wanted]


def _relative(node_id: str) -> str:
    """``test_x.py::name[id]`` of an absolute or rootdir-relative node id."""
    path, _, rest = node_id.partition("::")
    return f"{Path(path).name}::{rest}"


def cleanup(job: CpuMainJob | None) -> None:
    if job is not None:
        shutil.rmtree(job.scratch, ignore_errors=True)


def usable(returncode: int, ok: Sequence[int] = (0, 1)) -> bool:
    """The recording ran (1: some check failed; it is judged again and reported in step 2)."""
    return returncode in ok
