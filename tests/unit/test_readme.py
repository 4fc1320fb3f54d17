"""The README is a short user's manual: its commands are the ones CI and users run, its links
resolve, and its generated tables (and those of the docs/ pages) are current."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from conftest import REPO

README = (REPO / "README.md").read_text()
MAIN_LINE = "bash setup.sh && bash run_qwen2_5_1_5b.sh"
TEST_LINE = ('bash setup.sh --device cpu --stack both --with-opencompass --with-swanlab && '
             '.venv-current/bin/python -m pytest -n 2 --dist loadfile -m ""')
MAX_LINES = 300
#: the README and the pages it sends readers to
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK_RE = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


def test_readme_is_short():
    assert len(README.splitlines()) <= MAX_LINES


def test_quick_start_lines_are_in_the_first_30_lines():
    head = README.splitlines()[:30]
    assert f"    {MAIN_LINE}" in head and f"    {TEST_LINE}" in head
    quick = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    assert f"    {MAIN_LINE}\n" in quick and f"    {TEST_LINE}\n" in quick


def anchors(page) -> set[str]:
    """GitHub's heading anchors of a markdown page: lower case, punctuation dropped, spaces to '-'."""
    found = set()
    in_code = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        match = None if in_code else re.match(r"#{1,6} (.+)", line)
        if match:
            slug = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower()).replace(" ", "-")
            found.add(slug)
    return found


def links(page) -> list[str]:
    text = re.sub(r"^    .*$", "", page.read_text(), flags=re.M)  # indented code blocks
    text = re.sub(r"`[^`\n]*`", "", text)
    return [a or b for a, b in LINK_RE.findall(text)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_and_anchors_resolve(page):
    checked = 0
    for target in links(page):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        assert dest.exists(), f"{page.name}: link {target} -> {dest} does not exist"
        if anchor:
            assert dest.suffix == ".md" and anchor in anchors(dest), f"{page.name}: link {target}: no heading #{anchor}"
        checked += 1
    if page.name == "README.md":
        assert checked >= 5  # the README sends readers to the docs pages


def test_anchor_rule_matches_github():
    page = REPO / "README.md"
    assert {"quick-start", "the-pipeline", "3-merge", "the-answer-contract-and-the-reward"} <= anchors(page)


def test_every_docs_page_is_linked_from_the_readme():
    for page in PAGES[1:]:
        assert f"docs/{page.name}" in README, page.name


def test_ci_runs_the_readme_test_line_verbatim():
    assert TEST_LINE in (REPO / ".ci" / "run").read_text().splitlines()


def test_generated_tables_are_in_sync():
    proc = subprocess.run([sys.executable, "-m", "maintenance.sync_readme", "--check"], cwd=REPO,
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

    import grpo_math.knobs
    from grpo_math.health import rules
    from maintenance import sync_readme

    rules_doc = (REPO / "docs" / "health_rules.md").read_text()
    knobs_doc = (REPO / "docs" / "knobs.md").read_text()
    assert sync_readme.synced(rules_doc) == rules_doc and sync_readme.synced(knobs_doc) == knobs_doc
    monkeypatch.setattr(rules, "DEFAULT_THRESHOLDS", dataclasses.replace(rules.DEFAULT_THRESHOLDS, entropy_high=3.0))
    assert sync_readme.synced(rules_doc) != rules_doc
    monkeypatch.setattr(grpo_math.knobs, "read_knobs", lambda path: [("DEVICE", "npu", "changed")])
    assert sync_readme.synced(knobs_doc) != knobs_doc


def test_every_generated_table_is_synced_somewhere():
    """Each benchmarks/results/*.md is shown in exactly one page (one home for every figure),
    except the blind set's first score, which the reward table quotes."""
    from maintenance import sync_readme

    blocks = [m.group("file") for page in sync_readme.documents() for m in sync_readme.BLOCK_RE.finditer(page.read_text())]
    assert len(blocks) == len(set(blocks)), blocks
    results = {f"benchmarks/results/{p.name}" for p in (REPO / "benchmarks" / "results").glob("*.md")}
    assert results - set(blocks) == {"benchmarks/results/blind_v2_first_score.md"}
    assert "grpo_math/knobs.py:knobs_markdown" in blocks


def test_a_stale_block_fails_the_check(tmp_path, monkeypatch):
    from maintenance import sync_readme

    page = tmp_path / "page.md"
    page.write_text("<!-- BEGIN grpo_math/knobs.py:knobs_markdown -->\nold\n<!-- END grpo_math/knobs.py:knobs_markdown -->\n")
    monkeypatch.setattr(sync_readme, "documents", lambda: [page])
    assert sync_readme.main(["--check"]) == 1 and "old" in page.read_text()
    assert sync_readme.main([]) == 0 and "| `DEVICE` |" in page.read_text()


def test_no_bug_tracker_numbers_instead_of_reasons():
    """Code, tests and docs cite the source file and function or the reason, not a tracker number."""
    import re

    tracked = subprocess.run(["git", "ls-files", "*.py", "*.sh", "*.md", "Dockerfile*", ".ci/*"], cwd=REPO,
                             capture_output=True, text=True, check=True).stdout.split()
    assert tracked
    for name in tracked:
        if (REPO / name).is_file():
            assert not re.search(r"\b(issue|PR)\s*#?\d+", (REPO / name).read_text(errors="replace"), re.I), name


#: a README cell "[ACC %, FPR %](benchmarks/results/FILE.txt)" and the OVERALL line of that
#: verifier_bench.py output: n, positives, negatives, accuracy %, FP, FN, FPR %, ...
SCORE_LINK_RE = re.compile(r"\[([\d.]+) %, ([\d.]+) %\]\((benchmarks/results/[^)]+\.txt)\)")


#: the blind-set table's columns whose cells cite the cases whose question demands no form: the OVERALL line after
#: the result file's header naming them (the other columns cite the file's first OVERALL line, all cases)
NO_FORM_COLUMNS, NO_FORM_HEADER = ("first, no form demanded", "after, no form demanded"), "whose question demands no form"


def overall_line(path: str, after: str = "") -> str:
    lines = (REPO / path).read_text().splitlines()
    start = 0
    if after:
        start = next(i for i, line in enumerate(lines) if line.startswith("# the same reward") and after in line)
    return next(line for line in lines[start:] if line.startswith("OVERALL"))


def test_blind_set_scores_are_the_ones_in_their_result_files():
    rows = [line.split("|")[1:-1] for line in README.splitlines() if SCORE_LINK_RE.search(line)]
    header = next(line for line in README.splitlines() if NO_FORM_COLUMNS[0] in line).split("|")[1:-1]
    no_form = {[h.strip() for h in header].index(name) for name in NO_FORM_COLUMNS}
    assert len(rows) >= 4
    checked = 0
    for row in rows:
        for column, cell in enumerate(row):
            for acc, fpr, path in SCORE_LINK_RE.findall(cell):
                overall = overall_line(path, NO_FORM_HEADER if column in no_form else "")
                fields = overall.split()
                assert (fields[4], fields[7]) == (acc, fpr), f"README cites {acc} %, {fpr} % for {path}: {overall}"
                checked += 1
    assert checked >= 2 * len(rows)
