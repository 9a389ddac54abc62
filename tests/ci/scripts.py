"""Import a file that is not in a package (``scripts/*.py``, ``.github`` helpers) as a module."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def load_script(path: Path) -> ModuleType:
    """Load ``path`` as the module of its stem; registered in ``sys.modules`` so that its
    dataclasses resolve their own module."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module
