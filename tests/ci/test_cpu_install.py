"""README's "CPU only, or torch already installed" command works with the torch the machine has,
offline (issue 24.4: the documented CPU path failed offline after 2 min of pip retries).

The command is taken from README's bash block and run, with no package index at all
(``PIP_NO_INDEX``: any download fails at once), in a fresh virtual environment that sees this
environment's packages (torch among them) through a ``.pth`` file, on a copy of the plugin's
sources. It must install the plugin from what is installed, and the plugin must import there.
"""

from __future__ import annotations

import os
import shlex
import shutil
import site
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SECTION = "### CPU only"


def readme_commands() -> list[str]:
    """The commands of the bash block in README's CPU-only section, comments and blank lines left out."""
    section = (REPO / "README.md").read_text(encoding="utf-8").split(SECTION, 1)[1].split("\n## ", 1)[0]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.split("#", 1)[0].strip()]


def test_the_cpu_command_installs_offline_with_the_torch_there(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(
        REPO / "pytest_convperf", src / "pytest_convperf", ignore=shutil.ignore_patterns("__pycache__")
    )
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True, timeout=60,
    ).stdout.strip()  # fmt: skip
    # "A machine that has torch": this environment's packages (torch, pip, setuptools), seen from the new one.
    Path(purelib, "machine-packages.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("PYTHONPATH", None)
    commands = readme_commands()
    assert commands, "README's CPU-only section has no bash block with a command"
    for command in commands:
        argv = shlex.split(command)
        assert argv[0] == "pip", f"README's CPU-only command is not a pip command: {command}"
        done = subprocess.run(
            [str(python), "-m", "pip", *argv[1:]],
            cwd=src,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, (
            f"{command!r} failed offline:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        )
    where = subprocess.run(
        [str(python), "-c", "import pytest_convperf, torch; print(pytest_convperf.__file__)"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert where.returncode == 0, where.stderr[-2000:]
    assert Path(where.stdout.strip()).is_relative_to(src)  # the installed plugin is the copy just installed
