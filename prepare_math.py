#!/usr/bin/env python3
"""Turn MATH-lighteval parquet files into the parquet layout verl's RL trainer reads.

Output: one row per problem, the columns of verl 0.6.0's MATH example
(examples/data_preprocess/math_dataset.py), in this order:

    data_source   string  "DigitalLearningGmbH/MATH-lighteval" (verl's name for this dataset)
    prompt        list<struct<role, content>>: one user turn, problem + " " + new_math_reward.INSTRUCTION
    ability       string  "math"
    reward_model  struct<style = "rule", ground_truth>: the content of the solution's last \\boxed{} /
                  \\fbox{} (new_math_reward.extract_last_boxed; nested braces and whitespace kept)
    extra_info    struct<split, index (0-based source row), level ("Level 3"), type ("Algebra"), question
                  (the problem alone: the reward refuses an answer restating the problem's expression)>

verl's RLHFDataset reads prompt and extra_info.index; its reward manager passes data_source,
reward_model.ground_truth and extra_info to the reward. A row whose last box is empty has no ground
truth and is dropped and listed (train rows 5529 and 5531 of the shipped files).

Bad data: one line on stderr naming the file, the field, what was expected, the count and the first
offending row; exit 1; nothing written (all splits are moved into place once every one succeeded).
Columns and splits: the dataset card of DigitalLearningGmbH/MATH-lighteval (Hendrycks et al. 2021).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np
import pyarrow as pa

from grpo_math.evaluation import recipe
from grpo_math.evaluation.data import ground_truths, load_split
from grpo_math.io import ArgumentParser, DataError, ensure_output_dir, positive_int, write_parquet_atomic

HERE = Path(__file__).resolve().parent

#: Hub id of the dataset; verl's MATH example uses it as ``data_source`` too.
HUB_ID = recipe.DEFAULT_DATA_SOURCE
DEFAULT_INPUT_DIR = HERE / "data" / "math-lighteval"
DEFAULT_OUTPUT_DIR = HERE / "data" / "verl" / "math"
SPLITS = ("train", "test")
#: The seven MATH subjects, spelled as in the ``type`` column (Hendrycks et al. 2021).
SUBJECTS = ("Algebra", "Counting & Probability", "Geometry", "Intermediate Algebra", "Number Theory", "Prealgebra",
            "Precalculus")

#: verl's columns (module docstring).
OUTPUT_SCHEMA = pa.schema([
    ("data_source", pa.string()),
    ("prompt", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
    ("ability", pa.string()),
    ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
    ("extra_info", pa.struct([("split", pa.string()), ("index", pa.int64()), ("level", pa.string()),
                              ("type", pa.string()), ("question", pa.string())])),
])


def to_record(problem: str, level: str, subject: str, answer: str, split: str, index: int) -> dict:
    """One verl row (see the module docstring for the layout)."""
    return {"data_source": HUB_ID, "prompt": recipe.messages(problem), "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": answer},
            "extra_info": {"split": split, "index": index, "level": level, "type": subject, "question": problem}}


def select_rows(candidates: list[int], cap: Optional[int], seed: Optional[int]) -> list[int]:
    """The first ``cap`` of ``candidates`` (source rows, in order), or with ``seed`` a seeded random
    sample of them, in source order."""
    if seed is None or cap is None or cap >= len(candidates):
        return candidates[:cap]
    picked = np.random.default_rng(seed).choice(len(candidates), size=cap, replace=False)
    return [candidates[i] for i in sorted(picked.tolist())]


def build_split(split: str, parts: list[tuple[str, dict]], levels: Optional[set[str]],
                types: Optional[set[str]], cap: Optional[int], seed: Optional[int]) -> tuple[pa.Table, list[int]]:
    """Convert one validated split: (verl table, source rows dropped for an empty box). Raises
    DataError when a solution has no boxed answer or no row survives the filters."""
    rows: list[tuple[str, str, str, str]] = []  # (problem, level, type, ground truth), shards in order
    for label, cols in parts:
        answers = ground_truths(cols["solution"], label, f"{split}: boxed answers")
        rows += zip(cols["problem"], cols["level"], cols["type"], answers)
    label = parts[0][0] if len(parts) == 1 else f"{parts[0][0]} (+{len(parts) - 1} shards)"
    kept = [i for i, (_, level, subject, _) in enumerate(rows)
            if (levels is None or level in levels) and (types is None or subject in types)]
    candidates = [i for i in kept if rows[i][3].strip()]
    if not candidates:
        raise DataError(f"{label}: fields 'level'/'type': no {split} rows left after filtering"
                        f" (levels={sorted(levels) if levels else 'all'}, types={sorted(types) if types else 'all'});"
                        " expected at least 1")
    records = [to_record(*rows[i], split, i) for i in select_rows(candidates, cap, seed)]
    return pa.Table.from_pylist(records, schema=OUTPUT_SCHEMA), [i for i in kept if not rows[i][3].strip()]


def comma_list(what: str, pick, refused) -> Callable[[str], list[str]]:
    """argparse type: comma-separated ``what`` items, each mapped by ``pick`` (None: refused, the
    message ``refused(item)``), each kept once, at least one."""
    def parse(text: str) -> list[str]:
        out: list[str] = []
        for item in filter(None, (t.strip() for t in text.split(","))):
            value = pick(item)
            if value is None:
                raise argparse.ArgumentTypeError(refused(item))
            out += [value] if value not in out else []
        if not out:
            raise argparse.ArgumentTypeError(f"expected at least one {what}")
        return out
    return parse


def _level(item: str) -> Optional[str]:
    m = re.fullmatch(r"(?:level\s*)?([1-5?])", item, flags=re.IGNORECASE)
    return f"Level {m.group(1)}" if m else None


parse_levels = comma_list("level", _level, lambda t: f"expected level numbers 1-5 or ?, got {t!r}")
parse_types = comma_list("type", lambda t: {s.lower(): s for s in SUBJECTS}.get(t.lower()),
                         lambda t: f"unknown type {t!r}; expected some of: {', '.join(SUBJECTS)}")
parse_splits = comma_list("split", lambda t: t if t in SPLITS else None,
                          lambda t: f"expected splits from train,test, got {t!r}")


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="prepare_math.py", description=__doc__)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--input-dir", type=Path, default=DEFAULT_INPUT_DIR, metavar="DIR",
                     help="a MATH-lighteval folder holding data/{split}-*.parquet, the Hub dataset's layout "
                          "(default: %(default)s)")
    src.add_argument("--from-hub", action="store_true", help=(
        f"load {HUB_ID} with datasets.load_dataset instead (internet); its row order differs from the shipped "
        "files (same content), so extra_info.index differs too"))
    p.add_argument("--output-dir", type=Path, default=DEFAULT_OUTPUT_DIR, metavar="DIR",
                   help="receives train.parquet / test.parquet, created if missing (default: %(default)s)")
    p.add_argument("--splits", type=parse_splits, default=list(SPLITS), metavar="LIST",
                   help="comma-separated subset of train,test (default: both)")
    p.add_argument("--levels", type=parse_levels, metavar="LIST", help=(
        "comma-separated level numbers 1-5 or ? ('Level 3' also accepted) to keep (default: every row, including "
        "the two 'Level ?' train rows of the original MATH release)"))
    p.add_argument("--types", type=parse_types, metavar="LIST", help=(
        f"comma-separated subjects to keep, case-insensitive, from: {', '.join(SUBJECTS)} (default: all)"))
    p.add_argument("--max-train-rows", type=positive_int, metavar="N",
                   help="at most N train rows, counted after filtering (default: all)")
    p.add_argument("--max-test-rows", type=positive_int, metavar="N", help="the same for the test split")
    p.add_argument("--seed", type=int, metavar="S", help=(
        "with a cap, keep a seeded random sample (numpy.random.default_rng(S)) instead of the first N rows; "
        "rows keep source order either way"))
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line; returns the exit status (0 ok, 1 bad data; 2 bad options)."""
    args = build_parser().parse_args(argv)
    caps = {"train": args.max_train_rows, "test": args.max_test_rows}
    try:
        built = {split: build_split(split, load_split(split, args.input_dir, args.from_hub), args.levels,
                                    args.types, caps[split], args.seed) for split in args.splits}
        ensure_output_dir(args.output_dir, "--output-dir")
        write_parquet_atomic({args.output_dir / f"{s}.parquet": table for s, (table, _) in built.items()})
    except DataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for split, (table, dropped) in built.items():
        levels = Counter(table.column("extra_info").combine_chunks().field("level").to_pylist())
        print(f"{split}: {table.num_rows} rows -> {args.output_dir / f'{split}.parquet'}"
              f" ({', '.join(f'{k}: {levels[k]}' for k in sorted(levels))})")
        if dropped:
            print(f"  dropped {len(dropped)} row(s) whose last box is empty: {', '.join(map(str, dropped))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
