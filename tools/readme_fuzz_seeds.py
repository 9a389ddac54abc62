"""Does the README example's fuzz test survive many Hypothesis seeds? (issue 24.3)

Each seed runs the README's "Using the plugin" block as a user would (``pytest test_my_conv.py``
in a fresh temporary folder, the plugin from this checkout), with ``--hypothesis-seed=SEED`` and
no example database, in its own process: a crash (segfault, abort) ends only that seed's run and
is reported with its return code and the plugin's crash record line. Before the fix of PyTorch's
strided 1x1 NHWC weight gradient (``pytest_convperf.correctness.known_defects``) some seeds died with rc -11
or -6.

Usage: ``python -m tools.readme_fuzz_seeds [--seeds 50] [--first 0] [--jobs 1]``; exit status 1
when any seed did not pass.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEST = "test_my_conv.py::test_my_conv_matches_the_oracle"


def readme_example(readme: Path = ROOT / "README.md") -> str:
    """The first python block of README's "Using the plugin" section (as the CI test reads it)."""
    sys.path.insert(0, str(ROOT))
    from tests.ci.test_readme_example import readme_example as extract

    return extract(readme)


def run_seed(seed: int, code: str) -> tuple[int, int, str, float]:
    """(seed, return code, last lines of output, seconds) of one seed's pytest run."""
    with tempfile.TemporaryDirectory(prefix=f"readme-seed{seed}-") as tmp:
        (Path(tmp) / "test_my_conv.py").write_text(code)
        env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
        env["PYTHONPATH"] = str(ROOT)
        start = time.monotonic()
        res = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-q",
             f"--hypothesis-seed={seed}", "-p", "no:randomly", TEST],
            cwd=tmp, env=env, capture_output=True, text=True, timeout=900, check=False,
        )  # fmt: skip
        tail = "\n".join((res.stdout + res.stderr).strip().splitlines()[-6:])
        return seed, res.returncode, tail, time.monotonic() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args(argv)
    code = readme_example()
    seeds = range(args.first, args.first + args.seeds)
    bad = 0
    with ThreadPoolExecutor(args.jobs) as pool:
        for seed, rc, tail, seconds in pool.map(lambda s: run_seed(s, code), seeds):
            status = "passed" if rc == 0 else f"rc {rc}"
            print(f"seed {seed:4d}: {status} ({seconds:.0f} s)", flush=True)
            if rc != 0:
                bad += 1
                print("    " + tail.replace("\n", "\n    "), flush=True)
    print(f"{len(seeds) - bad} of {len(seeds)} seeds passed")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
