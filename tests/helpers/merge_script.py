"""merge_checkpoint.sh as the tests run it (tests/unit/test_merge_checkpoint.py,
tests/e2e/test_merge_real_checkpoint.py): in this interpreter's environment unless ``PYTHON`` says
otherwise, and what a merge may leave behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import REPO

SCRIPT = REPO / "merge_checkpoint.sh"
PYTHON = sys.executable


def run_merge(*args: str, **env: str) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHON": PYTHON, **env}
    return subprocess.run(["bash", str(SCRIPT), *args], env=full_env, capture_output=True, text=True, timeout=600)


def leftovers(root: Path) -> list[Path]:
    return [p for p in root.rglob(".*") if ".merging." in p.name or ".old." in p.name]
