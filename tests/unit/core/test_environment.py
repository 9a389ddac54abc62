"""Every environment variable convperf reads goes through ``ConvperfConfig`` (core/environment.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import pytest_convperf
from pytest_convperf.core.config import ConvperfConfig
from pytest_convperf.core.environment import ENVIRONMENT, env_value
from pytest_convperf.core.options import CLI_ONLY, OPTIONS

PACKAGE = Path(pytest_convperf.__file__).parent


def test_the_environment_becomes_typed_fields() -> None:
    cfg = ConvperfConfig().with_environment(
        {"CONVPERF_CPU_THREADS": " 3 ", "CONVPERF_L2_FLUSH": "write", "CONVPERF_FAKE_TIMER": "/r.json"}
    )
    assert (cfg.cpu_threads, cfg.l2_flush, cfg.fake_timer, cfg.fake) == (3, "write", Path("/r.json"), True)
    unset = ConvperfConfig().with_environment({})
    assert (unset.cpu_threads, unset.l2_flush, unset.fake_timer, unset.fake) == (1, "read", None, False)


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("CONVPERF_CPU_THREADS", "zero", "CONVPERF_CPU_THREADS='zero' must be a positive integer"),
        ("CONVPERF_L2_FLUSH", "evict", r"\$CONVPERF_L2_FLUSH='evict' is not an L2 flush kind"),
    ],
)
def test_a_bad_value_is_one_usage_error_naming_the_variable(name: str, value: str, message: str) -> None:
    with pytest.raises(pytest.UsageError, match=message):
        ConvperfConfig().with_environment({name: value})


def test_only_the_config_reads_convperf_variables() -> None:
    assert {spec.name for spec in ENVIRONMENT} == {
        "CONVPERF_FAKE_TIMER",
        "CONVPERF_CPU_THREADS",
        "CONVPERF_L2_FLUSH",
    }
    with pytest.raises(KeyError, match="not one of convperf's environment variables"):
        env_value("CONVPERF_SOMETHING_NEW")
    # A direct read of a CONVPERF_ variable (by name or by an *_ENV constant) outside core/environment.py.
    direct = re.compile(r"environ(?:\.get)?\s*[\[(]\s*(?:\"CONVPERF_|'CONVPERF_|[A-Z_]+_ENV\b)")
    found = [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if path != PACKAGE / "core" / "environment.py" and direct.search(path.read_text(encoding="utf-8"))
    ]
    assert found == []
    # Negative control: the pattern sees the reads this replaced.
    assert direct.search("path = os.environ.get(FAKE_TIMER_ENV)")
    assert direct.search('os.environ.get("CONVPERF_L2_FLUSH", "")')


def test_the_options_of_ab_and_the_fresh_confirm_are_in_the_one_table() -> None:
    names = {spec.name for spec in OPTIONS}
    assert {"convperf-against", "convperf-confirm-run"} <= names
    assert {"convperf-against", "convperf-confirm-run"} == CLI_ONLY  # per run, never an ini key
