"""The README's commands are the ones CI and users run, and its generated tables are current."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO

README = (REPO / "README.md").read_text()
MAIN_LINE = "bash setup.sh && bash run_qwen2_5_1_5b.sh"
TEST_LINE = 'bash setup.sh --device cpu --with-opencompass --with-swanlab && .venv/bin/python -m pytest -m "slow or not slow"'


def test_quick_start_lines_are_in_the_readme():
    quick = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    assert f"    {MAIN_LINE}\n" in quick and f"    {TEST_LINE}\n" in quick


def test_ci_runs_the_readme_test_line_verbatim():
    assert TEST_LINE in (REPO / ".ci" / "run").read_text().splitlines()


def test_generated_tables_are_in_sync():
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "sync_readme.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_pipeline_files_named_in_the_readme_exist():
    for name in ("setup.sh", "prepare_math.py", "run_qwen2_5_1_5b.sh", "merge_checkpoint.sh", "evaluate.py",
                 "evaluate_opencompass.sh", "parquet2json.py", "health_report.py", "new_math_reward.py",
                 "tokenizer_config.json"):
        assert f"`{name}`" in README and (REPO / name).is_file(), name
