"""Tests for parquet2json.py: the OpenCompass math.json built from MATH-lighteval parquet."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import grpo_math.io
import parquet2json
from conftest import REPO
from parquet2json import reference_answer

TEST_PARQUET = REPO / "data" / "math-lighteval" / "data" / "test-00000-of-00001.parquet"
# shared/README.md and data/README.md
TEST_TYPES = {"Algebra": 1187, "Counting & Probability": 474, "Geometry": 479,
              "Intermediate Algebra": 903, "Number Theory": 540, "Prealgebra": 871,
              "Precalculus": 546}
FIELDS = ["problem", "level", "type", "solution"]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "parquet2json.py"), *args],
                          capture_output=True, text=True, cwd=REPO, timeout=120)


def write_parquet(path: Path, rows: list[dict], schema: pa.Schema | None = None) -> Path:
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    return path


def row(type_: str, n: int, solution: str = "$\\boxed{1}$") -> dict:
    return {"problem": f"{type_} problem {n}", "level": "Level 2", "type": type_, "solution": solution}


def assert_one_line_error(proc, *fragments: str, rc: int = 1) -> None:
    assert proc.returncode == rc, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.fixture(scope="module")
def full(tmp_path_factory) -> dict:
    """parquet2json.py on the shipped test split, via the command line with the default --input."""
    out = tmp_path_factory.mktemp("oc") / "data" / "math" / "math.json"
    proc = run_cli("--output", str(out))
    assert proc.returncode == 0, proc.stderr
    return {"path": out, "stdout": proc.stdout, "text": out.read_text(encoding="utf-8")}


def test_full_test_split_records_and_keys(full):
    data = json.loads(full["text"])
    assert isinstance(data, dict)
    assert len(data) == 5000
    per_type = Counter(v["type"] for v in data.values())
    assert dict(per_type) == TEST_TYPES
    expected_keys = {f"{t}_{n}" for t, count in TEST_TYPES.items() for n in range(1, count + 1)}
    assert set(data) == expected_keys
    assert "5000 records" in full["stdout"] and "Precalculus: 546" in full["stdout"]
    assert "note:" not in full["stdout"]  # every test solution ends in \boxed{...}


def test_full_values_identical_to_input_rows_in_order(full):
    data = json.loads(full["text"])
    src = pd.read_parquet(TEST_PARQUET)
    assert [list(v) for v in data.values()] == [FIELDS] * len(src)
    assert list(data.values()) == src[FIELDS].to_dict(orient="records")
    counters: Counter = Counter()
    for key, t in zip(data, src["type"]):  # keys follow row order, one counter per type
        counters[t] += 1
        assert key == f"{t}_{counters[t]}"


def test_full_file_is_indented_utf8_and_loads_like_opencompass(full):
    raw = full["path"].read_bytes()
    assert raw.startswith(b'{\n  "Algebra_1": {\n    "problem": ')
    assert "\u2019".encode("utf-8") in raw  # row 2777's apostrophe, not escaped
    assert b"\\u2019" not in raw
    # OpenCompass's MATHDataset.load: json.load, iterate keys, read problem and solution
    with open(full["path"], encoding="utf-8") as f:
        data = json.load(f)
    for key in data.keys():
        assert isinstance(data[key]["problem"], str) and data[key]["problem"]
        assert reference_answer(data[key]["solution"]) is not None


def test_default_input_is_shipped_test_split(full, tmp_path):
    out = tmp_path / "math.json"
    assert parquet2json.main(["--input", str(TEST_PARQUET), "--output", str(out)]) == 0
    assert out.read_bytes() == full["path"].read_bytes()
    assert parquet2json.DEFAULT_INPUT == TEST_PARQUET


def test_per_type_counters_with_interleaved_types(tmp_path, capsys):
    rows = [row("Algebra", 1), row("Geometry", 1), row("Algebra", 2),
            row("Counting & Probability", 1), row("Geometry", 2, solution="$\\boxed 5$")]
    src = write_parquet(tmp_path / "in.parquet", rows)
    out = tmp_path / "nested" / "dir" / "math.json"
    assert parquet2json.main(["--input", str(src), "--output", str(out)]) == 0
    data = json.loads(out.read_text(encoding="utf-8"))
    assert list(data) == ["Algebra_1", "Geometry_1", "Algebra_2", "Counting & Probability_1",
                          "Geometry_2"]
    assert list(data.values()) == rows
    stdout = capsys.readouterr().out
    assert "note: 1 solution(s)" in stdout and "Geometry_2" in stdout


@pytest.mark.parametrize("solution, expected", [
    ("$\\boxed{\\frac{1}{2}}$", "\\frac{1}{2}"),
    ("so $\\boxed{1}$, then $\\boxed{\\frac{1}{2}}$.", "\\frac{1}{2}"),  # the last box
    ("$\\boxed{\\{1, 2\\}}$", "\\{1, 2\\}"),                          # braces balanced
    ("\\boxed {3} then $\\boxed{17}$", "17"),
    ("\\fbox{1} and \\boxed{2}", "2"),                                # \boxed wins over a later \fbox
    ("$\\boxed 5$", None),                                            # no brace right after \boxed
    ("so \\fbox{4}", None),                                           # \fbox is found but is not \boxed{
    ("\\boxed{3", None),                                              # never closed
    ("no answer", None),
])
def test_opencompass_answer_forms(solution, expected):
    """The note names the solutions OpenCompass's loader reads no reference from."""
    assert reference_answer(solution) == expected


# ---------------------------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------------------------
def test_error_missing_column(tmp_path):
    schema = pa.schema([(f, pa.string()) for f in ("problem", "type", "solution")])
    src = write_parquet(tmp_path / "in.parquet", [{"problem": "p", "type": "Algebra", "solution": "s"}],
                        schema)
    out = tmp_path / "math.json"
    proc = run_cli("--input", str(src), "--output", str(out))
    assert_one_line_error(proc, str(src), "field 'level'", "column missing",
                          "expected columns problem, level, type, solution")
    assert not out.exists()


def test_error_empty_input_keeps_existing_output(tmp_path):
    schema = pa.schema([(f, pa.string()) for f in FIELDS])
    src = write_parquet(tmp_path / "empty.parquet", [], schema)
    out = tmp_path / "math.json"
    out.write_text("previous", encoding="utf-8")
    proc = run_cli("--input", str(src), "--output", str(out))
    assert_one_line_error(proc, f"{src}: no rows (empty file)")
    assert out.read_text(encoding="utf-8") == "previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.parquet", "math.json"]


def test_error_missing_or_unreadable_input(tmp_path):
    out = tmp_path / "out" / "math.json"
    proc = run_cli("--input", str(tmp_path / "none.parquet"), "--output", str(out))
    assert_one_line_error(proc, "none.parquet", "file not found")
    bad = tmp_path / "bad.parquet"
    bad.write_text("id,problem\n1,x\n", encoding="utf-8")
    proc = run_cli("--input", str(bad), "--output", str(out))
    assert_one_line_error(proc, "bad.parquet", "not a readable parquet file")
    assert not (tmp_path / "out").exists()


def test_error_null_type(tmp_path):
    rows = [row("Algebra", 1), {"problem": "p", "level": "Level 1", "type": None, "solution": "s"}]
    src = write_parquet(tmp_path / "in.parquet", rows, pa.schema([(f, pa.string()) for f in FIELDS]))
    proc = run_cli("--input", str(src), "--output", str(tmp_path / "math.json"))
    assert_one_line_error(proc, "field 'type'", "1 of 2 rows", "first at row 1")


def test_failed_write_keeps_old_file_and_leaves_no_temp(tmp_path, monkeypatch):
    src = write_parquet(tmp_path / "in.parquet", [row("Algebra", 1)])
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / "math.json"
    out.write_text("previous", encoding="utf-8")

    def failing_fsync(fd):  # the temp file is written, then the disk "fails"
        raise OSError("disk full")

    monkeypatch.setattr(grpo_math.io.os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="disk full"):
        parquet2json.main(["--input", str(src), "--output", str(out)])
    assert out.read_text(encoding="utf-8") == "previous"
    assert [p.name for p in out_dir.iterdir()] == ["math.json"]


def test_error_untyped_empty_input_says_no_rows(tmp_path):
    src = tmp_path / "empty.parquet"
    pd.DataFrame({f: [] for f in FIELDS}).to_parquet(src)  # 0 rows, columns of type null
    proc = run_cli("--input", str(src), "--output", str(tmp_path / "math.json"))
    assert_one_line_error(proc, f"{src}: no rows (empty file)")
    assert not (tmp_path / "math.json").exists()


def test_error_output_folder_cannot_be_created(tmp_path):
    src = write_parquet(tmp_path / "in.parquet", [row("Algebra", 1)])
    proc = run_cli("--input", str(src), "--output", "/proc/nope/x.json")
    assert_one_line_error(proc, "--output /proc/nope: output folder missing and cannot be created",
                          "expected a writable folder")


def test_error_output_folder_not_writable(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root writes anywhere")
    src = write_parquet(tmp_path / "in.parquet", [row("Algebra", 1)])
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        proc = run_cli("--input", str(src), "--output", str(locked / "math.json"))
    finally:
        locked.chmod(0o755)
    assert_one_line_error(proc, f"--output {locked}: output folder not writable")
    assert list(locked.iterdir()) == []
