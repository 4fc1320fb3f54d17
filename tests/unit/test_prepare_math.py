"""Tests for prepare_math.py: verl layout on the shipped MATH rows, subsetting, errors, atomic writes.

Real-row facts used below come from the shipped MATH-lighteval files (data/README.md): train rows
1655 and 1707 end in the brace-less ``\\boxed 2`` / ``\\boxed 9``; train rows 5529 and 5531 end in an
empty ``\\boxed{}``; no shipped solution uses ``\\fbox`` (covered with synthetic files instead).
"""

from __future__ import annotations

import filecmp
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import prepare_math
from new_math_reward import INSTRUCTION, extract_last_boxed
from grpo_math.io import DataError
from conftest import REPO, json_from_stack

SRC = REPO / "data" / "math-lighteval" / "data"
SHARED = REPO.parent / "shared" / "data"
TOKENIZER = SHARED / "qwen2_5_tokenizer"
COLUMNS = ["data_source", "prompt", "ability", "reward_model", "extra_info"]
# shared/README.md and data/README.md
TRAIN_TYPES = {"Algebra": 1744, "Counting & Probability": 771, "Geometry": 870,
               "Intermediate Algebra": 1295, "Number Theory": 869, "Prealgebra": 1205,
               "Precalculus": 746}
TEST_TYPES = {"Algebra": 1187, "Counting & Probability": 474, "Geometry": 479,
              "Intermediate Algebra": 903, "Number Theory": 540, "Prealgebra": 871,
              "Precalculus": 546}


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "prepare_math.py"), *args],
                          capture_output=True, text=True, cwd=REPO, timeout=120)


def source(split: str) -> pd.DataFrame:
    return pd.read_parquet(SRC / f"{split}-00000-of-00001.parquet")


def write_source(root: Path, split: str, rows: list[dict], schema: pa.Schema | None = None) -> Path:
    """A tiny MATH-lighteval directory: root/data/{split}-00000-of-00001.parquet."""
    (root / "data").mkdir(parents=True, exist_ok=True)
    path = root / "data" / f"{split}-00000-of-00001.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    return path


def row(solution: str, level: str = "Level 1", type_: str = "Algebra", problem: str = "P?") -> dict:
    return {"problem": problem, "level": level, "type": type_, "solution": solution}


@pytest.fixture(scope="module")
def full(tmp_path_factory) -> dict:
    """prepare_math.py on the full shipped data (about a second)."""
    out = tmp_path_factory.mktemp("verl_math")
    proc = run_cli("--output-dir", str(out))
    assert proc.returncode == 0, proc.stderr
    return {"out": out, "stdout": proc.stdout,
            "train": pq.read_table(out / "train.parquet"), "test": pq.read_table(out / "test.parquet")}


# ---------------------------------------------------------------------------------------------
# shipped data
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("split,n,types", [("train", 7500, TRAIN_TYPES), ("test", 5000, TEST_TYPES)])
def test_shipped_source_rows_and_types(split, n, types):
    df = source(split)
    assert list(df.columns) == ["problem", "level", "type", "solution"]
    assert len(df) == n
    assert dict(Counter(df["type"])) == types


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared not present")
@pytest.mark.parametrize("split", ["train", "test"])
def test_shipped_copies_are_byte_identical(split):
    name = f"{split}-00000-of-00001.parquet"
    assert filecmp.cmp(SRC / name, SHARED / "math-lighteval" / "data" / name, shallow=False)


# ---------------------------------------------------------------------------------------------
# output layout on the full data
# ---------------------------------------------------------------------------------------------
def test_schema_is_verl_math_layout(full):
    for split in ("train", "test"):
        schema = full[split].schema
        assert schema.names == COLUMNS
        assert schema.field("data_source").type == pa.string()
        assert schema.field("ability").type == pa.string()
        assert str(schema.field("prompt").type) == "list<element: struct<role: string, content: string>>"
        assert str(schema.field("reward_model").type) == "struct<style: string, ground_truth: string>"
        assert str(schema.field("extra_info").type) == (
            "struct<split: string, index: int64, level: string, type: string, question: string>")


def test_full_row_counts_and_summary(full):
    assert full["train"].num_rows == 7498  # 7500 minus the two empty boxes
    assert full["test"].num_rows == 5000
    assert "train: 7498 rows" in full["stdout"]
    assert "test: 5000 rows" in full["stdout"]
    assert "Level 5: 1324" in full["stdout"]
    assert "dropped 2 row(s) whose last box is empty: 5529, 5531" in full["stdout"]


@pytest.mark.parametrize("split", ["train", "test"])
def test_rows_match_source(full, split):
    src = source(split)
    out = full[split].to_pylist()
    indices = [r["extra_info"]["index"] for r in out]
    assert indices == sorted(indices)
    expected = [i for i in range(len(src)) if not (split == "train" and i in (5529, 5531))]
    assert indices == expected
    for r in out:
        i = r["extra_info"]["index"]
        assert r["data_source"] == "DigitalLearningGmbH/MATH-lighteval"
        assert r["ability"] == "math"
        assert r["prompt"] == [{"role": "user", "content": src.problem[i] + " " + INSTRUCTION}]
        assert r["reward_model"] == {"style": "rule",
                                     "ground_truth": extract_last_boxed(src.solution[i])}
        assert r["extra_info"] == {"split": split, "index": i, "level": src.level[i],
                                   "type": src.type[i], "question": src.problem[i]}


def _gt(full, split: str, index: int) -> str:
    """Ground truth of the output row that came from source row ``index``."""
    key = f"gt_{split}"
    if key not in full:
        info = full[split].column("extra_info").combine_chunks().field("index").to_pylist()
        gts = full[split].column("reward_model").combine_chunks().field("ground_truth").to_pylist()
        full[key] = dict(zip(info, gts))
    return full[key][index]


def test_ground_truths_of_real_rows(full):
    # brace-less \boxed 2 / \boxed 9 (train rows 1655, 1707)
    assert _gt(full, "train", 1655) == "2"
    assert _gt(full, "train", 1707) == "9"
    # nested braces kept intact
    assert _gt(full, "train", 386) == "\\frac{\\sqrt{3}}{12}"
    assert _gt(full, "test", 4843) == (
        "\\begin{pmatrix} 1 & 0 & 0 \\\\ 0 & 1 & 0 \\\\ 0 & 0 & -1 \\end{pmatrix}")
    # two boxes, "\boxed {17}" then "\boxed{17}": the last one, without the brace or the dot
    # (verl's own last_boxed_only_string prefers "\boxed " and yields "{17}." here)
    assert _gt(full, "train", 825) == "17"
    # several boxes: the last one is the ground truth (MATH's convention)
    assert _gt(full, "test", 762) == "1"


def test_every_ground_truth_nonempty(full):
    for split in ("train", "test"):
        gts = full[split].column("reward_model").combine_chunks().field("ground_truth").to_pylist()
        assert all(g.strip() for g in gts)


# ---------------------------------------------------------------------------------------------
# synthetic sources: \fbox, nested braces, brace-less box, empty box
# ---------------------------------------------------------------------------------------------
def test_synthetic_box_forms(tmp_path, capsys):
    rows = [
        row("So $x=\\fbox{42}$."),
        row("Thus $\\boxed{\\frac{1}{\\sqrt{2}}}$."),
        row("Hence $y = \\boxed 5$."),
        row("First $\\boxed{1}$, finally $\\boxed{\\{1,2\\}}$."),
        row("Therefore there are $\\boxed{}$ primes."),
        row("$\\boxed{a}$ then \\fbox{b}"),
    ]
    write_source(tmp_path / "src", "test", rows)
    out = tmp_path / "out"
    assert prepare_math.main(["--input-dir", str(tmp_path / "src"), "--splits", "test",
                              "--output-dir", str(out)]) == 0
    got = pq.read_table(out / "test.parquet").to_pylist()
    assert [r["reward_model"]["ground_truth"] for r in got] == [
        "42", "\\frac{1}{\\sqrt{2}}", "5", "\\{1,2\\}", "b"]
    assert [r["extra_info"]["index"] for r in got] == [0, 1, 2, 3, 5]
    assert "dropped 1 row(s) whose last box is empty: 4" in capsys.readouterr().out
    assert not (out / "train.parquet").exists()


# ---------------------------------------------------------------------------------------------
# subsetting
# ---------------------------------------------------------------------------------------------
def test_levels_and_types_filter(tmp_path):
    out = tmp_path / "out"
    assert prepare_math.main(["--levels", "1,2", "--types", "algebra,Prealgebra",
                              "--output-dir", str(out)]) == 0
    for split in ("train", "test"):
        src = source(split)
        want = src[src.level.isin(["Level 1", "Level 2"]) & src.type.isin(["Algebra", "Prealgebra"])]
        got = pq.read_table(out / f"{split}.parquet").to_pylist()
        assert [r["extra_info"]["index"] for r in got] == list(want.index)
        assert {r["extra_info"]["level"] for r in got} == {"Level 1", "Level 2"}
        assert {r["extra_info"]["type"] for r in got} == {"Algebra", "Prealgebra"}


def test_unknown_level_rows_only_without_level_filter(tmp_path):
    out = tmp_path / "out"
    assert prepare_math.main(["--levels", "?", "--splits", "train", "--output-dir", str(out)]) == 0
    got = pq.read_table(out / "train.parquet").to_pylist()
    assert [r["extra_info"]["index"] for r in got] == [2720, 2773]
    assert [r["reward_model"]["ground_truth"] for r in got] == ["52", "24"]


def test_max_rows_first_n_and_seeded_sample(tmp_path):
    def indices(*extra: str) -> dict:
        out = tmp_path / f"out{len(list(tmp_path.iterdir()))}"
        assert prepare_math.main(["--types", "Geometry", "--output-dir", str(out), *extra]) == 0
        return {s: [r["extra_info"]["index"] for r in pq.read_table(out / f"{s}.parquet").to_pylist()]
                for s in ("train", "test")}

    geo = {s: list(source(s).index[source(s).type == "Geometry"]) for s in ("train", "test")}
    first = indices("--max-train-rows", "7", "--max-test-rows", "3")
    assert first == {"train": geo["train"][:7], "test": geo["test"][:3]}
    a = indices("--max-train-rows", "7", "--max-test-rows", "3", "--seed", "1")
    b = indices("--max-train-rows", "7", "--max-test-rows", "3", "--seed", "1")
    c = indices("--max-train-rows", "7", "--max-test-rows", "3", "--seed", "2")
    assert a == b and a != c and a != first
    for s in ("train", "test"):
        assert a[s] == sorted(a[s]) and set(a[s]) <= set(geo[s])
    assert len(a["train"]) == 7 and len(a["test"]) == 3
    # a cap above the row count keeps every row
    assert indices("--max-test-rows", "100000")["test"] == geo["test"]


def test_splits_option_writes_only_named_split(tmp_path):
    out = tmp_path / "out"
    assert prepare_math.main(["--splits", "test", "--max-test-rows", "2", "--output-dir", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["test.parquet"]


# ---------------------------------------------------------------------------------------------
# errors: one line, exit status, nothing written
# ---------------------------------------------------------------------------------------------
def _assert_one_line_error(proc, *fragments: str, rc: int = 1) -> None:
    assert proc.returncode == rc, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_error_missing_column(tmp_path):
    schema = pa.schema([("problem", pa.string()), ("level", pa.string()), ("type", pa.string())])
    path = write_source(tmp_path / "src", "train", [{"problem": "p", "level": "Level 1", "type": "Algebra"}],
                        schema)
    out = tmp_path / "out"
    proc = run_cli("--input-dir", str(tmp_path / "src"), "--splits", "train", "--output-dir", str(out))
    _assert_one_line_error(proc, str(path), "field 'solution'", "column missing",
                           "expected columns problem, level, type, solution")
    assert not out.exists()


def test_error_solution_without_box(tmp_path):
    rows = [row("$\\boxed{1}$"), row("The answer is 2."), row("$\\boxed{3}$"), row("no box either")]
    path = write_source(tmp_path / "src", "test", rows)
    out = tmp_path / "out"
    proc = run_cli("--input-dir", str(tmp_path / "src"), "--splits", "test", "--output-dir", str(out))
    _assert_one_line_error(proc, str(path), "field 'solution'", "2 of 4 rows", "first at row 1",
                           "The answer is 2.")
    assert not out.exists()


def test_error_unbalanced_box_counts_as_missing(tmp_path):
    path = write_source(tmp_path / "src", "test", [row("$\\boxed{\\frac{1}{2}$")])
    proc = run_cli("--input-dir", str(tmp_path / "src"), "--splits", "test",
                   "--output-dir", str(tmp_path / "out"))
    _assert_one_line_error(proc, str(path), "field 'solution'", "1 of 1 rows", "first at row 0")


def test_error_missing_and_unreadable_files(tmp_path):
    out = tmp_path / "out"
    proc = run_cli("--input-dir", str(tmp_path / "nowhere"), "--output-dir", str(out))
    _assert_one_line_error(proc, "nowhere/data/train-00000-of-00001.parquet", "file not found")
    (tmp_path / "bad" / "data").mkdir(parents=True)
    (tmp_path / "bad" / "data" / "test-00000-of-00001.parquet").write_bytes(b"not parquet\n" * 10)
    proc = run_cli("--input-dir", str(tmp_path / "bad"), "--splits", "test", "--output-dir", str(out))
    _assert_one_line_error(proc, "test-00000-of-00001.parquet", "not a readable parquet file")
    assert not out.exists()


def test_error_bad_values(tmp_path):
    cases = [
        ([row("$\\boxed{1}$", level="Level 9")], "field 'level'", "'Level 1'..'Level 5' or 'Level ?'"),
        ([row("$\\boxed{1}$"), row("$\\boxed{1}$", problem="  ")], "field 'problem'", "first at row 1"),
    ]
    for k, (rows, *fragments) in enumerate(cases):
        src = tmp_path / f"src{k}"
        write_source(src, "test", rows)
        with pytest.raises(DataError) as err:
            prepare_math.load_split("test", src, from_hub=False)
        for fragment in fragments:
            assert fragment in str(err.value)
    src = tmp_path / "int_level"
    write_source(src, "test", [{"problem": "p", "level": 3, "type": "Algebra", "solution": "\\boxed{1}"}])
    with pytest.raises(DataError, match="field 'level': expected a string column, found int64"):
        prepare_math.load_split("test", src, from_hub=False)


def test_error_nothing_left_after_filter(tmp_path):
    write_source(tmp_path / "src", "test", [row("$\\boxed{1}$", level="Level 1")])
    out = tmp_path / "out"
    proc = run_cli("--input-dir", str(tmp_path / "src"), "--splits", "test", "--levels", "5",
                   "--output-dir", str(out))
    _assert_one_line_error(proc, "no test rows left after filtering", "expected at least 1")
    assert not out.exists()


def test_bad_options_exit_2(tmp_path):
    for args, fragment in [(["--levels", "6"], "expected level numbers 1-5 or ?"),
                           (["--types", "Calculus"], "unknown type 'Calculus'"),
                           (["--splits", "validation"], "expected splits from train,test"),
                           (["--max-train-rows", "0"], "expected an integer >= 1")]:
        proc = run_cli(*args, "--output-dir", str(tmp_path / "out"))
        _assert_one_line_error(proc, fragment, rc=2)
    assert not (tmp_path / "out").exists()


def test_error_keeps_existing_outputs(tmp_path):
    """A bad test split leaves an earlier train.parquet untouched and creates no test.parquet."""
    src = tmp_path / "src"
    write_source(src, "train", [row("$\\boxed{1}$")])
    write_source(src, "test", [row("no answer")])
    out = tmp_path / "out"
    out.mkdir()
    (out / "train.parquet").write_bytes(b"previous run")
    proc = run_cli("--input-dir", str(src), "--output-dir", str(out))
    _assert_one_line_error(proc, "field 'solution'")
    assert (out / "train.parquet").read_bytes() == b"previous run"
    assert sorted(p.name for p in out.iterdir()) == ["train.parquet"]


# ---------------------------------------------------------------------------------------------
# atomic writes
# ---------------------------------------------------------------------------------------------
def test_failed_write_leaves_targets_and_no_temp_files(tmp_path, monkeypatch):
    src = tmp_path / "src"
    write_source(src, "train", [row("$\\boxed{1}$")])
    write_source(src, "test", [row("$\\boxed{2}$")])
    out = tmp_path / "out"
    out.mkdir()
    (out / "train.parquet").write_bytes(b"old train")
    (out / "test.parquet").write_bytes(b"old test")
    real_write = pq.write_table
    calls = []

    def flaky_write(table, where, *args, **kwargs):
        calls.append(where)
        if len(calls) == 2:
            real_write(table.slice(0, 0), where)  # half-written temp file, then the disk "fails"
            raise OSError("disk full")
        return real_write(table, where, *args, **kwargs)

    monkeypatch.setattr(pq, "write_table", flaky_write)  # the pyarrow function write_parquet_atomic calls
    with pytest.raises(OSError, match="disk full"):
        prepare_math.main(["--input-dir", str(src), "--output-dir", str(out)])
    assert (out / "train.parquet").read_bytes() == b"old train"
    assert (out / "test.parquet").read_bytes() == b"old test"
    assert sorted(p.name for p in out.iterdir()) == ["test.parquet", "train.parquet"]
    assert all(Path(c).parent == out and Path(c).name.endswith(".tmp") for c in calls)


def test_success_replaces_outputs_with_readable_permissions(tmp_path):
    src = tmp_path / "src"
    write_source(src, "test", [row("$\\boxed{2}$")])
    out = tmp_path / "out"
    out.mkdir()
    (out / "test.parquet").write_bytes(b"old test")
    assert prepare_math.main(["--input-dir", str(src), "--splits", "test", "--output-dir", str(out)]) == 0
    assert pq.read_table(out / "test.parquet").num_rows == 1
    assert sorted(p.name for p in out.iterdir()) == ["test.parquet"]
    mask = os.umask(0)
    os.umask(mask)
    assert (out / "test.parquet").stat().st_mode & 0o777 == 0o666 & ~mask


# ---------------------------------------------------------------------------------------------
# verl actually loads the output
# ---------------------------------------------------------------------------------------------
#: Run in a stack's environment with the parquet file, the tokenizer folder and a cache folder:
#: prints, as JSON, what verl's RLHFDataset makes of the file: its length, the fourth item's
#: fields and how it carries the prompt, and how collate_fn batches four items. verl 0.6.0
#: tokenizes in the dataset (input_ids padded to max_prompt_length, raw_prompt_ids); verl 0.9.1
#: hands the messages (raw_prompt) to its agent loop, which templates and tokenizes them.
RLHF_DATASET = """
import json, sys
import omegaconf, transformers
from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

data, tokenizer_dir, cache = sys.argv[1:4]
tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_dir)
config = omegaconf.OmegaConf.create({
    "cache_dir": cache, "prompt_key": "prompt", "max_prompt_length": 1024,
    "filter_overlong_prompts": True, "filter_overlong_prompts_workers": 1, "truncation": "error",
})
ds = RLHFDataset(data_files=[data], tokenizer=tokenizer, config=config)
item = ds[3]
batch = collate_fn([ds[i] for i in range(4)])
out = {"len": len(ds), "data_source": item["data_source"], "index": item["index"],
       "reward_model": item["reward_model"], "type": item["extra_info"]["type"]}
if "input_ids" in item:
    out.update(input_ids=list(item["input_ids"].shape), prompt_text=tokenizer.decode(item["raw_prompt_ids"]),
               batch=list(batch["input_ids"].shape))
else:
    out.update(raw_prompt=[dict(m) for m in item["raw_prompt"]], batch=list(batch["raw_prompt"].shape))
print(json.dumps(out, default=str))
"""


@pytest.mark.parametrize("stack", ["reference", "current"])
def test_verl_rlhf_dataset_loads_output(tmp_path, stack):
    """Each stack's verl loads the prepared file with its RLHFDataset, in its environment."""
    if not TOKENIZER.is_dir():
        pytest.skip("../shared/data/qwen2_5_tokenizer not present")
    out = tmp_path / "out"
    assert prepare_math.main(["--splits", "train", "--max-train-rows", "8", "--seed", "0",
                              "--output-dir", str(out)]) == 0
    rows = pq.read_table(out / "train.parquet").to_pylist()
    got = json_from_stack(stack, RLHF_DATASET, str(out / "train.parquet"), str(TOKENIZER), str(tmp_path / "cache"))
    assert got["len"] == 8
    assert got["data_source"] == "DigitalLearningGmbH/MATH-lighteval"
    assert got["index"] == rows[3]["extra_info"]["index"]
    assert got["reward_model"] == rows[3]["reward_model"]
    assert got["type"] == rows[3]["extra_info"]["type"]
    if stack == "reference":
        assert got["input_ids"] == [1024]
        assert rows[3]["prompt"][0]["content"] in got["prompt_text"]
        assert got["batch"] == [4, 1024]
    else:
        assert got["raw_prompt"] == rows[3]["prompt"]
        assert got["batch"] == [4]


@pytest.mark.parametrize("schema", [pa.schema([(f, pa.string()) for f in ("problem", "level", "type", "solution")]),
                                    None])
def test_error_empty_file_says_no_rows_first(tmp_path, schema):
    src = tmp_path / "src"
    if schema is None:  # untyped: pandas writes 0-row object columns as type null
        (src / "data").mkdir(parents=True)
        path = src / "data" / "test-00000-of-00001.parquet"
        pd.DataFrame({f: [] for f in ("problem", "level", "type", "solution")}).to_parquet(path)
    else:
        path = write_source(src, "test", [], schema)
    out = tmp_path / "out"
    proc = run_cli("--input-dir", str(src), "--splits", "test", "--output-dir", str(out))
    _assert_one_line_error(proc, f"{path}: no rows (empty file)")
    assert not out.exists()


def test_error_output_dir_cannot_be_created(tmp_path):
    write_source(tmp_path / "src", "test", [row("$\\boxed{1}$")])
    proc = run_cli("--input-dir", str(tmp_path / "src"), "--splits", "test", "--output-dir", "/proc/nope")
    _assert_one_line_error(proc, "--output-dir /proc/nope: output folder missing and cannot be created",
                           "expected a writable folder")
