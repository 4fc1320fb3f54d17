"""Python code run in the current stack's environment (.venv-current, made by
``setup.sh --device cpu --stack current``), in a fresh interpreter: how the CPU platform's tests
(tests/unit/test_cpu_platform.py, tests/e2e/test_vllm_weight_sync.py) run, because verl imports
the platform module at its own import time (VERL_USE_EXTERNAL_MODULES). Without that environment
the test skips, naming it (conftest.run_in_stack; on CI it fails)."""

from __future__ import annotations

import subprocess
import textwrap

from conftest import run_in_stack


def run_current(code: str, **env: str) -> subprocess.CompletedProcess:
    return run_in_stack("current", ["-c", textwrap.dedent(code)], env=env)
