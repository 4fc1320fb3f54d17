"""``--help`` is each script's manual: every entry point of the repository answers it with a
usage text on stdout and exit status 0, without touching anything else.

The scripts are discovered from the repository's file list, so a new one is covered without
editing this test: every tracked ``*.py`` outside ``tests/`` with a ``__main__`` guard (run as
a module when its folder is a package, e.g. ``python -m benchmarks.bench_reward``), and every
tracked ``*.sh`` at the top level and in ``tools/``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

MAIN_GUARD = ("if __name__ == \"__main__\"", "if __name__ == '__main__'")


def tracked() -> list[str]:
    return subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()


def entry_points() -> list[tuple[str, list[str]]]:
    """(name, command) of every script a user may run."""
    found = []
    for name in tracked():
        path = REPO / name
        if not path.is_file():
            continue
        parts = Path(name).parts
        if name.endswith(".py") and parts[0] != "tests" and any(g in path.read_text() for g in MAIN_GUARD):
            if len(parts) > 1 and (path.parent / "__init__.py").is_file():
                module = ".".join([*parts[:-1], Path(name).stem])
                found.append((name, [sys.executable, "-m", module, "--help"]))
            else:
                found.append((name, [sys.executable, name, "--help"]))
        elif name.endswith(".sh") and (len(parts) == 1 or parts[0] == "tools"):
            found.append((name, ["bash", name, "--help"]))
    return found


ENTRY_POINTS = entry_points()


def test_discovery_finds_the_pipeline_and_support_scripts():
    names = {name for name, _ in ENTRY_POINTS}
    assert {"setup.sh", "run_qwen2_5_1_5b.sh", "merge_checkpoint.sh", "evaluate_opencompass.sh",
            "prepare_math.py", "evaluate.py", "health_report.py", "parquet2json.py", "preflight.py",
            "maintenance/sync_readme.py", "tools/devices.sh", "benchmarks/bench_reward.py",
            "cpu_support/prepare_smollm2.py"} <= names
    assert not any(name.startswith("tests/") for name in names)


@pytest.mark.parametrize("name,command", ENTRY_POINTS, ids=[name for name, _ in ENTRY_POINTS])
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_script_answers_help(name, command, flag, tmp_path):
    before = sorted(p.name for p in REPO.iterdir())
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([*command[:-1], flag], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{name} {flag}: exit {proc.returncode}\n{proc.stderr[-2000:]}"
    assert "usage" in proc.stdout.lower() and len(proc.stdout.strip().splitlines()) >= 2, \
        f"{name} {flag}: no usage text on stdout:\n{proc.stdout[:500]}"
    assert sorted(p.name for p in REPO.iterdir()) == before, f"{name} {flag} created files"
