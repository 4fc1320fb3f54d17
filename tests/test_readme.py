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
    proc = subprocess.run([sys.executable, "-m", "tools.sync_readme", "--check"], cwd=REPO,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_pipeline_files_named_in_the_readme_exist():
    for name in ("setup.sh", "prepare_math.py", "run_qwen2_5_1_5b.sh", "merge_checkpoint.sh", "evaluate.py",
                 "evaluate_opencompass.sh", "parquet2json.py", "health_report.py", "new_math_reward.py",
                 "tokenizer_config.json"):
        assert f"`{name}`" in README and (REPO / name).is_file(), name


def test_a_changed_threshold_or_knob_makes_the_docs_stale(monkeypatch):
    """The rules table and the knobs table come from the code: changing it without
    regenerating fails test_generated_tables_are_in_sync."""
    import dataclasses

    import health_report
    from tools import sync_readme

    rules_doc = (REPO / "docs" / "health_rules.md").read_text()
    assert sync_readme.synced(rules_doc) == rules_doc
    monkeypatch.setattr(health_report, "DEFAULT_THRESHOLDS",
                        dataclasses.replace(health_report.DEFAULT_THRESHOLDS, entropy_high=3.0))
    assert sync_readme.synced(rules_doc) != rules_doc
    monkeypatch.setattr(sync_readme, "knobs", lambda path: [("DEVICE", "npu", "changed")])
    assert sync_readme.synced(README) != README


def test_no_bug_tracker_numbers_instead_of_reasons():
    """Code, tests and docs cite the source file and function or the reason, not a tracker number."""
    import re

    tracked = subprocess.run(["git", "ls-files", "*.py", "*.sh", "*.md", "Dockerfile*", ".ci/*"], cwd=REPO,
                             capture_output=True, text=True, check=True).stdout.split()
    assert tracked
    for name in tracked:
        if (REPO / name).is_file():
            assert not re.search(r"\b(issue|PR)\s*#?\d+", (REPO / name).read_text(errors="replace"), re.I), name
