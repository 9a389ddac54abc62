"""Options, ini keys, the convperf marker and usage errors, through inner pytest sessions."""

from __future__ import annotations

import pytest

from pytest_convperf.core.config import ConvperfConfig
from pytest_convperf.core.options import parse_aliases, parse_gpus, parse_update

SHOW_CONFIG = """
import pytest
from pytest_convperf.core.config import get_config

def test_show(request):
    cfg = get_config(request.config)
    print("CFG", cfg.enabled, cfg.device, sorted(cfg.update), cfg.tolerance, cfg.strict,
          cfg.baselines_dir.name, cfg.machine, dict(cfg.machine_aliases), cfg.gpus)
"""

MARKED = """
import pytest

@pytest.mark.convperf
def test_timed():
    pass

def test_plain():
    pass
"""


def test_marked_tests_skip_without_convperf(pytester: pytest.Pytester, plugin_args: tuple[str, ...]) -> None:
    pytester.makepyfile(MARKED)
    result = pytester.runpytest(*plugin_args, "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*convperf check: timing and baselines run only with --convperf*"])


def test_marked_tests_run_with_convperf(pytester: pytest.Pytester, plugin_args: tuple[str, ...]) -> None:
    pytester.makepyfile(MARKED)
    pytester.runpytest(*plugin_args, "--convperf").assert_outcomes(passed=2)


def test_ini_enables_convperf(pytester: pytest.Pytester, plugin_args: tuple[str, ...]) -> None:
    pytester.makeini("[pytest]\nconvperf = true\n")
    pytester.makepyfile(MARKED)
    pytester.runpytest(*plugin_args).assert_outcomes(passed=2)


def test_marker_is_registered(pytester: pytest.Pytester, plugin_args: tuple[str, ...]) -> None:
    result = pytester.runpytest(*plugin_args, "--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.convperf: *skipped unless --convperf*"])


def test_options_parse_into_frozen_config(pytester: pytest.Pytester, plugin_args: tuple[str, ...]) -> None:
    pytester.makepyfile(SHOW_CONFIG)
    result = pytester.runpytest(
        *plugin_args,
        "-s",
        "--convperf",
        "--convperf-device=cpu",
        "--convperf-update-baselines",
        "--convperf-tolerance=0.03",
        "--convperf-strict",
        "--convperf-baselines=bl",
        "--convperf-machine=box",
        "--convperf-gpus=0,2",
    )
    result.assert_outcomes(passed=1)
    assert "CFG True cpu ['failed', 'new'] 0.03 True bl box {} (0, 2)" in result.stdout.str()


def test_ini_keys_and_command_line_precedence(
    pytester: pytest.Pytester, plugin_args: tuple[str, ...]
) -> None:
    pytester.makeini(
        "[pytest]\n"
        "convperf_device = cpu\n"
        "convperf_update_baselines = improved\n"
        "convperf_machine_aliases =\n"
        "    nvidia-h100-80gb-hbm3 = h100\n"
        "    nvidia-h100-pcie = h100\n"
    )
    pytester.makepyfile(SHOW_CONFIG)
    result = pytester.runpytest(*plugin_args, "-s", "--convperf-device=auto")
    result.assert_outcomes(passed=1)
    expected = (
        "CFG False auto ['improved'] None False baselines None "
        "{'nvidia-h100-80gb-hbm3': 'h100', 'nvidia-h100-pcie': 'h100'} None"
    )
    assert expected in result.stdout.str()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--convperf-device=tpu"], "*--convperf-device='tpu' is not allowed; use one of: auto, cuda, cpu*"),
        (["--convperf-update-baselines=sometimes"], "*unknown sometimes; use a comma list of failed, new*"),
        (["--convperf-tolerance=lots"], "*--convperf-tolerance='lots' is not a number*"),
        (["--convperf-tolerance=2"], "*must be a fraction between 0 and 1*"),
        (["--convperf-gpus=0,0"], "*without repeats*"),
        (["--convperf-update-baselines"], "*--convperf-update-baselines given without --convperf*"),
        (["--convperf-reason=x"], "*--convperf-reason given without --convperf*"),
        (["--convperf-strict"], "*--convperf-strict given without --convperf*"),
    ],
)
def test_bad_values_are_usage_errors(
    pytester: pytest.Pytester, plugin_args: tuple[str, ...], args: list[str], message: str
) -> None:
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest(*plugin_args, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_bad_ini_value_is_a_usage_error(pytester: pytest.Pytester, plugin_args: tuple[str, ...]) -> None:
    pytester.makeini("[pytest]\nconvperf = maybe\n")
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest(*plugin_args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*convperf='maybe': use true or false*"])


def test_parsers_directly() -> None:
    assert parse_update(None) == frozenset()
    assert parse_update("all") == frozenset({"all"})
    assert parse_gpus("3") == (0, 1, 2)
    assert parse_gpus("auto") == "auto"
    assert parse_aliases("a = b\n# comment\n") == {"a": "b"}
    # Keys and targets are slugified like the detected slug they are looked up with.
    assert parse_aliases("NVIDIA H100 80GB HBM3 = Lab H100") == {"nvidia-h100-80gb-hbm3": "lab-h100"}
    with pytest.raises(pytest.UsageError, match="bad line"):
        parse_aliases("just-a-slug")
    assert ConvperfConfig().updating is False
