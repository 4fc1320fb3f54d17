#!/usr/bin/env python3
"""Convert a MATH-lighteval parquet split into the ``math.json`` OpenCompass's MATH dataset loads.

One JSON object (not a list), UTF-8 with non-ASCII kept, indented by 2. Keys are "{type}_{n}", a
counter per subject from 1, in row order ("Algebra_1", ..., "Counting & Probability_1", ...); each
value is the row's problem, level, type and solution, verbatim. OpenCompass's MATHDataset.load
(opencompass/datasets/math.py, config math_gen_a58d9d; opencompass/eval_math.py sets its path)
keeps the problem and the solution's last \\boxed{...} as the reference (None without one: a note
is printed); it opens the file without an encoding, so run OpenCompass under a UTF-8 locale.

Bad data or an unwritable output folder: one line on stderr naming the file and the field, exit 1,
the output untouched (written to a temporary file, then moved into place). Bad options: one line, exit 2.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Optional, Sequence

import pyarrow as pa

from grpo_math.evaluation.data import SOURCE_COLUMNS, check_columns, read_parquet, reference_answer
from grpo_math.io import ArgumentParser, DataError, ensure_output_dir, write_json_atomic

HERE = Path(__file__).resolve().parent

DEFAULT_INPUT = HERE / "data" / "math-lighteval" / "data" / "test-00000-of-00001.parquet"
DEFAULT_OUTPUT = HERE / "data" / "opencompass" / "math.json"


def to_math_json(table: pa.Table, label: str) -> dict[str, dict[str, str]]:
    """The ``math.json`` object of a MATH-lighteval table; ``label`` names the input in errors.
    Raises DataError (grpo_math.evaluation.data.check_columns)."""
    cols = check_columns(table, label)
    counters: Counter[str] = Counter()
    out: dict[str, dict[str, str]] = {}
    for i, subject in enumerate(cols["type"]):
        counters[subject] += 1
        out[f"{subject}_{counters[subject]}"] = {name: cols[name][i] for name in SOURCE_COLUMNS}
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line; returns the exit status (0 ok, 1 bad data, 2 bad options)."""
    p = ArgumentParser(prog="parquet2json.py", description=__doc__)
    p.add_argument("--input", type=Path, default=DEFAULT_INPUT, help=(
        f"a parquet file with string columns {', '.join(SOURCE_COLUMNS)} (the MATH-lighteval layout); "
        "default: the shipped test split, %(default)s"))
    p.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help=(
        "the JSON file to write, folders created; default %(default)s, where evaluate_opencompass.sh reads it"))
    args = p.parse_args(argv)
    try:
        data = to_math_json(read_parquet(args.input, "a MATH-lighteval parquet file"), str(args.input))
        ensure_output_dir(args.output.parent, "--output")
        write_json_atomic(args.output, data)
    except DataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    per_type = Counter(v["type"] for v in data.values())
    print(f"{len(data)} records -> {args.output} (" + ", ".join(f"{t}: {per_type[t]}" for t in sorted(per_type)) + ")")
    unreadable = [k for k, v in data.items() if reference_answer(v["solution"]) is None]
    if unreadable:
        print(f"  note: {len(unreadable)} solution(s) do not end their answer in \\boxed{{...}};"
              f" OpenCompass's loader gives them a None reference (first: {unreadable[0]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
