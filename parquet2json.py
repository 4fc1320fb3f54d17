#!/usr/bin/env python3
"""Convert a MATH-lighteval parquet split into the ``math.json`` OpenCompass's MATH dataset loads.

Usage
-----
    python parquet2json.py                                   # shipped test split, default output
    python parquet2json.py --input data/math-lighteval/data/test-00000-of-00001.parquet \\
        --output data/opencompass/math.json

Arguments
---------
--input PATH    path to a parquet file with string columns problem, level, type, solution (the
                MATH-lighteval layout). Default: the shipped test split,
                ``data/math-lighteval/data/test-00000-of-00001.parquet`` beside this script.
--output PATH   path of the JSON file to write; parent directories are created. Default:
                ``data/opencompass/math.json`` beside this script, where evaluate_opencompass.sh
                reads it (its config gives OpenCompass this absolute path, which OpenCompass's
                ``get_data_path`` uses as is).

Output layout
-------------
One JSON object (not a list). Keys are ``"{type}_{n}"`` with a separate counter per subject,
starting at 1, in input row order (``"Algebra_1"``, ..., ``"Counting & Probability_1"``, ...);
each value is ``{"problem", "level", "type", "solution"}`` copied verbatim from the row. Written
as UTF-8 with ``ensure_ascii=False`` and 2-space indentation; object order = input row order.

How OpenCompass reads it (``opencompass/datasets/math.py``, ``MATHDataset.load``, used by the
config ``configs/datasets/math/math_gen_a58d9d.py``; opencompass/eval_math.py sets its ``path``): it
``json.load``s the file, iterates over the keys (which only identify records), and keeps
``problem`` plus the last boxed answer of ``solution`` as the reference. Two caveats of that
loader: its answer extractor accepts only ``\\boxed{...}``, so a solution ending in ``\\fbox{...}``
or ``\\boxed 5`` gets a None reference (none in the test split; this script prints a note when
it sees one); and it opens the file without an explicit encoding, so run it under a UTF-8 locale
(the test split has one non-ASCII character, a typographic apostrophe in row 2777).

Errors: a missing or unreadable file, a missing or non-string column, null or malformed values,
an input with no rows (``FILE: no rows (empty file)``), or an output folder that cannot be
created or written -> one line on stderr naming the file, the field and what was expected;
exit status 1; the output file is not created or changed. Bad options -> one line, exit status 2.
The JSON goes to a temporary file in the output directory and is moved into place with
``os.replace``.

Sources: columns from the dataset card of DigitalLearningGmbH/MATH-lighteval (Hendrycks et al.
2021, MIT); the file layout from OpenCompass's MATH loader named above.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import Optional, Sequence

import pyarrow as pa

from prepare_math import HERE, SOURCE_COLUMNS, check_columns, read_table
from grpo_math.io import ArgumentParser, DataError, ensure_output_dir, write_json_atomic

DEFAULT_INPUT = HERE / "data" / "math-lighteval" / "data" / "test-00000-of-00001.parquet"
DEFAULT_OUTPUT = HERE / "data" / "opencompass" / "math.json"


def to_math_json(table: pa.Table, label: str) -> dict[str, dict[str, str]]:
    """Build the ``math.json`` object from a MATH-lighteval table.

    ``label`` names the input in errors. Raises DataError when columns are missing or malformed
    (see ``prepare_math.check_columns``) or when the table has no rows.
    """
    cols = check_columns(table, label)
    if table.num_rows == 0:
        raise DataError(f"{label}: field 'problem': expected at least 1 row, found 0")
    counters: Counter[str] = Counter()
    out: dict[str, dict[str, str]] = {}
    for i in range(table.num_rows):
        subject = cols["type"][i]
        counters[subject] += 1
        out[f"{subject}_{counters[subject]}"] = {name: cols[name][i] for name in SOURCE_COLUMNS}
    return out


def opencompass_reads_answer(solution: str) -> bool:
    """True when the last ``\\boxed`` of ``solution`` opens a brace, the only answer form
    OpenCompass's MATH loader turns into a reference (``\\fbox{}`` and ``\\boxed 5`` give None)."""
    pos = solution.rfind("\\boxed")
    return pos >= 0 and solution.startswith("{", pos + len("\\boxed"))


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="parquet2json.py",
                       description=__doc__.split("\n\n", 1)[0], epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--input", type=Path, default=DEFAULT_INPUT,
                   help="MATH-lighteval parquet file (default: %(default)s)")
    p.add_argument("--output", type=Path, default=DEFAULT_OUTPUT,
                   help="math.json to write (default: %(default)s)")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line; returns the exit status (0 ok, 1 bad data, 2 bad options)."""
    args = build_parser().parse_args(argv)
    try:
        data = to_math_json(read_table(args.input), str(args.input))
        ensure_output_dir(args.output.parent, "--output")
        write_json_atomic(args.output, data)
    except DataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    per_type = Counter(v["type"] for v in data.values())
    print(f"{len(data)} records -> {args.output} ("
          + ", ".join(f"{t}: {per_type[t]}" for t in sorted(per_type)) + ")")
    unreadable = [k for k, v in data.items() if not opencompass_reads_answer(v["solution"])]
    if unreadable:
        print(f"  note: {len(unreadable)} solution(s) do not end their answer in \\boxed{{...}};"
              f" OpenCompass's loader gives them a None reference (first: {unreadable[0]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
