#!/usr/bin/env python3
"""Agreement of the MATH judges on identical predictions: OpenCompass's own evaluator against
evaluate.py's strict check and the recipe's reward.

    python -m benchmarks.bench_eval_agreement [--predictions OC_OUT_DIR] [--synthetic N]
        [--markdown benchmarks/results/eval_agreement.md]

Inputs (one or both; each becomes one table):

* ``--predictions PATH``: a real OpenCompass run (evaluate_opencompass.sh's output folder, its
  ``predictions/<abbr>/math.json``, or a parent of runs: its newest). OpenCompass's verdicts are
  read from its ``results/<abbr>/math.json``.
* ``--synthetic N``: predictions built from the first N MATH-500 problems
  (``--math500``, default ../shared/data/math500/test.jsonl), three per problem, each in the
  4-shot prompt's answer style: the reference solution as written (its own ``\\boxed{}``); the
  solution's box replaced by the next problem's answer (a wrong box); the solution with its box
  unwrapped plus the closing line ``Final Answer: The final answer is $<answer>$. I hope it is
  correct.`` (right, no box). The reference is OpenCompass's (the solution's last box,
  ``grpo_math.evaluation.data.reference_answer``).
  OpenCompass's verdicts come from its real ``MATHVerifyEvaluator`` run in OpenCompass's own
  environment (``--oc-python``, default .venv-opencompass/bin/python).

Judges, each on the same prediction text and reference:

* ``OpenCompass``: MATHVerifyEvaluator (opencompass 0.5.4), the reference judge;
* ``evaluate.py strict``: ``grpo_math.evaluation.recipe.strict_verdict``, math-verify on the last ``\\boxed{}`` only
  (the recipe protocol's independent check);
* ``recipe reward``: ``new_math_reward.compute_score(...)["acc"]`` (data_source MATH-lighteval).

Printed: per input, each judge's correct count and its agreement with OpenCompass (share of
predictions with the same verdict), then every disagreement (index, reference, verdicts, the
prediction's tail). ``--markdown FILE`` also writes it (temp file + rename) for the README.
Errors: a missing input file or OpenCompass environment -> one line, exit 1.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import new_math_reward as nmr
from grpo_math.evaluation import recipe
from grpo_math.io import one_line, write_text_atomic
from grpo_math.evaluation.data import reference_answer

REPO = Path(__file__).resolve().parents[1]

DEFAULT_MATH500 = REPO.parent / "shared" / "data" / "math500" / "test.jsonl"
DEFAULT_OC_PYTHON = REPO / ".venv-opencompass" / "bin" / "python"
JUDGES = ("evaluate.py strict", "recipe reward")
TAIL_CHARS = 70

#: Runs OpenCompass's MATHVerifyEvaluator.score on each [prediction, reference] of the JSON file
#: argv[1], one at a time; prints a JSON list of verdicts (true / false; null: reference skipped).
OC_JUDGE = """
import json, sys
import latex2sympy2_extended, math_verify  # imported once here; each judging child is forked from us
from opencompass.evaluator import MATHVerifyEvaluator
judge = MATHVerifyEvaluator()
out = []
for pred, ref in json.load(open(sys.argv[1])):
    details = judge.score([pred], [ref])['details']  # no detail: a skipped reference
    out.append(bool(details[0]['correct']) if details else None)
print(json.dumps(out))
"""


class BenchError(Exception):
    """Bad input; the message is one line."""


def synthetic_items(math500: Path, n: int) -> list[dict]:
    """Three predictions per MATH-500 problem (module docstring)."""
    if not math500.is_file():
        raise BenchError(f"{math500}: not found (expected MATH-500 jsonl with problem, solution, answer)")
    rows = [json.loads(line) for line in math500.read_text(encoding="utf-8").splitlines() if line.strip()][:n]
    items = []
    for i, row in enumerate(rows):
        sol, ref = row["solution"], reference_answer(row["solution"])
        if ref is None:
            continue
        box = "\\boxed{" + ref + "}"
        at = sol.rfind(box)
        wrong = rows[(i + 1) % len(rows)]["answer"]
        if wrong.strip() == ref.strip():
            wrong = ref + "+1"
        items.append({"id": f"{row.get('unique_id', i)}#solution", "prediction": sol, "gold": ref})
        items.append({"id": f"{row.get('unique_id', i)}#wrong-box",
                      "prediction": sol[:at] + "\\boxed{" + wrong + "}" + sol[at + len(box):], "gold": ref})
        items.append({"id": f"{row.get('unique_id', i)}#final-answer-line",
                      "prediction": sol[:at] + ref + sol[at + len(box):]
                      + f"\nFinal Answer: The final answer is ${ref}$. I hope it is correct.", "gold": ref})
    return items


def opencompass_judge(items: list[dict], oc_python: Path) -> list[Optional[bool]]:
    """The real MATHVerifyEvaluator's verdicts, run in OpenCompass's environment."""
    if not oc_python.exists():
        raise BenchError(f"{oc_python}: not found (expected OpenCompass's environment: bash setup.sh "
                         "--with-opencompass)")
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, encoding="utf-8") as fh:
        json.dump([[it["prediction"], it["gold"]] for it in items], fh)
    try:
        proc = subprocess.run([str(oc_python), "-c", OC_JUDGE, fh.name], capture_output=True, text=True,
                              timeout=3600, env={**os.environ, "LANG": "C.UTF-8"})
    finally:
        os.unlink(fh.name)
    if proc.returncode != 0:
        raise BenchError(f"{oc_python}: MATHVerifyEvaluator failed ({one_line(proc.stderr[-300:])})")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# OpenCompass 0.5.4's output folder ``<timestamp>/`` holds ``predictions/<abbr>/math.json`` ({index:
# {origin_prompt, prediction, gold}}) and ``results/<abbr>/math.json`` (``details``: one entry per judged
# problem, each field a one-element list; a reference OpenCompass cannot parse gets none).
def find_predictions(path: Path) -> Path:
    """The predictions file at or below ``path``: the file itself, else ``predictions/*/math.json``
    of the folder or, for a parent of runs, of its newest timestamped run."""
    if path.is_file():
        return path
    if not path.is_dir():
        raise BenchError(f"{path}: not found; expected an OpenCompass predictions file or output folder")
    hits = sorted(path.glob("predictions/*/math.json")) or sorted(path.glob("*/predictions/*/math.json"))
    if not hits:
        raise BenchError(f"{path}: no predictions/<abbr>/math.json below it; expected an OpenCompass output "
                         "folder (evaluate_opencompass.sh prints it)")
    return hits[-1]  # timestamps sort in time order


def _numbered(path: Path, what: str) -> list[tuple[str, object]]:
    """(key, value) of a JSON object with numeric keys, in index order."""
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BenchError(f"{path}: not readable JSON ({one_line(exc, 80)}); expected {what}") from None
    if not isinstance(obj, dict):
        raise BenchError(f"{path}: expected a JSON object ({what}), found {type(obj).__name__}")
    return sorted(obj.items(), key=lambda kv: int(kv[0]) if str(kv[0]).isdigit() else -1)


def load_predictions(path: Path) -> list[dict]:
    """Rows ``{index, prediction, gold}`` of a predictions file."""
    rows = []
    for key, rec in _numbered(path, "OpenCompass predictions {index: {origin_prompt, prediction, gold}}"):
        if not str(key).isdigit() or not isinstance(rec, dict) or not isinstance(rec.get("prediction"), str):
            raise BenchError(f"{path}: entry {key!r}: field 'prediction': expected a string under a numeric key")
        rows.append({"index": int(key), "prediction": rec["prediction"], "gold": rec.get("gold")})
    if not rows:
        raise BenchError(f"{path}: no predictions; expected at least one")
    return rows


def opencompass_verdicts(pred_file: Path) -> list[dict]:
    """OpenCompass's own per-problem details, one-element lists unwrapped, from ``results/<abbr>/math.json``
    of the run whose ``predictions/<abbr>/math.json`` is ``pred_file``."""
    results = pred_file.parent.parent.parent / "results" / pred_file.parent.name / pred_file.name
    if not results.is_file():
        raise BenchError(f"{results}: not found; expected OpenCompass's results beside {pred_file} "
                         "(an evaluation that finished)")
    details = dict(_numbered(results, "OpenCompass results with 'details'")).get("details")
    if isinstance(details, dict):
        details = [details[k] for k in sorted(details, key=lambda k: int(k) if str(k).isdigit() else -1)]
    if not isinstance(details, list) or not all(isinstance(d, dict) for d in details):
        raise BenchError(f"{results}: field 'details': expected per-problem results (run with details dumped)")
    return [{k: v[0] if isinstance(v, list) and len(v) == 1 else v for k, v in d.items()} for d in details]


def real_items(path: Path) -> tuple[list[dict], str]:
    """Predictions and OpenCompass's verdicts of a real run; returns (items, predictions file)."""
    pred_file = find_predictions(path)
    rows = load_predictions(pred_file)
    details = opencompass_verdicts(pred_file)
    if len(details) != len(rows):
        raise BenchError(f"{pred_file}: OpenCompass's per-problem results missing or of another length")
    items = [{"id": str(r["index"]), "prediction": r["prediction"], "gold": r["gold"],
              "OpenCompass": bool(d.get("correct"))} for r, d in zip(rows, details)]
    return items, str(pred_file)


def judge_all(items: list[dict]) -> float:
    """Fill each item's verdicts of the recipe-side judges; returns the seconds taken."""
    start = time.perf_counter()
    for it in items:
        it["evaluate.py strict"] = recipe.strict_verdict(it["prediction"], it["gold"] or "")[0]
        res = nmr.compute_score(recipe.DEFAULT_DATA_SOURCE, it["prediction"], it["gold"] or "")
        it["recipe reward"] = float(res["acc"]) >= 1.0
    return time.perf_counter() - start


def table(title: str, items: list[dict]) -> list[str]:
    """Markdown: one line per judge, then every disagreement with OpenCompass."""
    n = len(items)
    oc_correct = sum(1 for it in items if it["OpenCompass"])
    lines = [f"**{title}** ({n} predictions)", "",
             "| judge | correct | agreement with OpenCompass | disagreements |", "|---|---|---|---|",
             f"| OpenCompass `MATHVerifyEvaluator` | {oc_correct} | - | - |"]
    for judge in JUDGES:
        diff = [it for it in items if bool(it[judge]) != bool(it["OpenCompass"])]
        lines.append(f"| {judge} | {sum(1 for it in items if it[judge])} | "
                     f"{(n - len(diff)) / n:.1%} ({n - len(diff)}/{n}) | {len(diff)} |")
    diffs = [it for it in items if any(bool(it[j]) != bool(it["OpenCompass"]) for j in JUDGES)]
    if diffs:
        lines += ["", "| prediction | reference | OpenCompass | " + " | ".join(JUDGES) + " | prediction's tail |",
                  "|---|---|---|" + "---|" * len(JUDGES) + "---|"]
        for it in diffs:
            tail = one_line(it["prediction"][-TAIL_CHARS:], TAIL_CHARS + 3).replace("|", "\\|")
            verdicts = " | ".join("yes" if it[j] else "no" for j in ("OpenCompass", *JUDGES))
            gold = one_line(it["gold"], 40).replace("|", "\\|")
            lines.append(f"| {it['id']} | `{gold}` | {verdicts} | `...{tail}` |")
    else:
        lines += ["", "No disagreements."]
    return lines + [""]


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--predictions", type=Path, help="OpenCompass output folder or predictions file")
    p.add_argument("--synthetic", type=int, default=0, metavar="N", help="MATH-500 problems (3 predictions each)")
    p.add_argument("--math500", type=Path, default=DEFAULT_MATH500, help="MATH-500 jsonl")
    p.add_argument("--oc-python", type=Path, default=DEFAULT_OC_PYTHON, help="python of OpenCompass's env")
    p.add_argument("--note", default="", help="a line naming how the real run was made (model, limit, tokens)")
    p.add_argument("--markdown", type=Path, help="also write the tables to this file")
    args = p.parse_args(argv)
    if not args.predictions and args.synthetic < 1:
        p.error("give --predictions PATH and/or --synthetic N (N >= 1)")
    out = []
    try:
        if args.predictions:
            items, pred_file = real_items(args.predictions)
            secs = judge_all(items)
            title = f"Real OpenCompass run: `{Path(pred_file).relative_to(Path(pred_file).parents[3])}`"
            out += table(title + (f" ({args.note})" if args.note else ""), items)
            out.append(f"Recipe-side judges: {secs:.1f} s for {len(items)} predictions.\n")
        if args.synthetic:
            items = synthetic_items(args.math500, args.synthetic)
            start = time.perf_counter()
            for it, verdict in zip(items, opencompass_judge(items, args.oc_python)):
                it["OpenCompass"] = bool(verdict)
                it["skipped"] = verdict is None
            oc_secs = time.perf_counter() - start
            secs = judge_all(items)
            out += table(f"Synthetic predictions from the first {args.synthetic} MATH-500 solutions "
                         "(as written / wrong box / unboxed + final-answer line)", items)
            out.append(f"OpenCompass's evaluator: {oc_secs:.1f} s (a child process per prediction); "
                       f"recipe-side judges: {secs:.1f} s.\n")
    except BenchError as exc:
        print(f"bench_eval_agreement: {exc}", file=sys.stderr)
        return 1
    out.append(f"Machine: {platform.machine()}, Python {platform.python_version()}; opencompass 0.5.4, "
               "math-verify 0.9.0 in both environments.")
    text = "\n".join(out) + "\n"
    print(text)
    if args.markdown:
        write_text_atomic(args.markdown, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
