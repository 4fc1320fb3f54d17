"""Re-judge a real OpenCompass run's predictions with the opencompass protocol's judge, so that
both judges see identical generations, and compare the verdicts and the sent turns.

OpenCompass 0.5.4's output folder ``<timestamp>/`` holds ``predictions/<abbr>/math.json`` ({index:
{origin_prompt, prediction, gold}}) and, with details dumped, ``results/<abbr>/math.json`` (``details``:
one entry per judged problem, each field a one-element list).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from grpo_math.evaluation import opencompass as oc
from grpo_math.io import DataError, one_line, write_json_atomic, write_text_atomic

RESCORE_FILE = "rescore.jsonl"


def find_predictions(path: Path) -> Path:
    """The predictions file at or below ``path``: the file itself, else ``predictions/*/math.json``
    of the folder or, for a parent of runs, of its newest timestamped run. Raises DataError."""
    if path.is_file():
        return path
    if not path.is_dir():
        raise DataError(f"{path}: not found; expected an OpenCompass predictions file or output folder")
    hits = sorted(path.glob("predictions/*/math.json")) or sorted(path.glob("*/predictions/*/math.json"))
    if not hits:
        raise DataError(f"{path}: no predictions/<abbr>/math.json below it; expected an OpenCompass output "
                        "folder (evaluate_opencompass.sh prints it)")
    return hits[-1]  # timestamps sort in time order


def _numbered(path: Path, what: str) -> list[tuple[str, object]]:
    """(key, value) of a JSON object with numeric keys, in index order. Raises DataError."""
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: not readable JSON ({one_line(exc, 80)}); expected {what}") from None
    if not isinstance(obj, dict):
        raise DataError(f"{path}: expected a JSON object ({what}), found {type(obj).__name__}")
    return sorted(obj.items(), key=lambda kv: int(kv[0]) if str(kv[0]).isdigit() else -1)


def load_predictions(path: Path) -> list[dict]:
    """Rows ``{index, origin_prompt, prediction, gold}`` of a predictions file. Raises DataError."""
    rows = []
    for key, rec in _numbered(path, "OpenCompass predictions {index: {origin_prompt, prediction, gold}}"):
        if not str(key).isdigit() or not isinstance(rec, dict) or not isinstance(rec.get("prediction"), str):
            raise DataError(f"{path}: entry {key!r}: field 'prediction': expected a string under a numeric key")
        rows.append({"index": int(key), "origin_prompt": rec.get("origin_prompt"),
                     "prediction": rec["prediction"], "gold": rec.get("gold")})
    if not rows:
        raise DataError(f"{path}: no predictions; expected at least one")
    return rows


def opencompass_verdicts(pred_file: Path) -> Optional[list[dict]]:
    """OpenCompass's own per-problem details (results/<abbr>/math.json beside predictions/), or None."""
    results = pred_file.parent.parent.parent / "results" / pred_file.parent.name / pred_file.name
    if not results.is_file():
        return None
    details = dict(_numbered(results, "OpenCompass results with 'details'")).get("details")
    if isinstance(details, dict):
        details = [details[k] for k in sorted(details, key=lambda k: int(k) if str(k).isdigit() else -1)]
    if not isinstance(details, list) or not all(isinstance(d, dict) for d in details):
        raise DataError(f"{results}: field 'details': expected per-problem results (run with details dumped)")
    return [{k: v[0] if isinstance(v, list) and len(v) == 1 else v for k, v in d.items()} for d in details]


def rescore(path: Path, out: Path) -> dict:
    """Judge every prediction at ``path`` (find_predictions) with oc.score, compare each verdict with
    OpenCompass's and each sent prompt (origin_prompt) with oc.build_messages of its problem; write
    rescore.jsonl and summary.json to ``out``, print the agreement and each disagreement; return the summary."""
    pred_file = find_predictions(path)
    rows = load_predictions(pred_file)
    theirs = opencompass_verdicts(pred_file)
    if theirs is not None and len(theirs) != len(rows):
        raise DataError(f"{pred_file.parent.parent.parent / 'results'}: {len(theirs)} details for {len(rows)} "
                        "predictions; expected one per prediction (a skipped reference has no detail)")
    records = []
    for i, row in enumerate(rows):
        try:
            sent = oc.messages_from_origin_prompt(row["origin_prompt"])
        except ValueError:
            sent = []
        problem = oc.problem_from_messages(sent)
        rec = {"index": row["index"], "gold": row["gold"], "prediction": row["prediction"],
               **oc.score(row["prediction"], row["gold"]),
               "prompt_matches": problem is not None and sent == oc.build_messages(problem)}
        if theirs is not None:
            rec.update(opencompass_correct=bool(theirs[i].get("correct")), opencompass_pred=theirs[i].get("pred"))
        records.append(rec)
    disagreements = [r for r in records if theirs is not None and r["opencompass_correct"] != r["correct"]]
    mismatches = [r["index"] for r in records if not r["prompt_matches"]]
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / RESCORE_FILE, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    n = len(records)
    summary = {
        "protocol": "opencompass", "mode": "rescore", "predictions": str(pred_file),
        "problems": n, "correct": sum(r["correct"] for r in records), "accuracy_percent": oc.accuracy_percent(records),
        "opencompass_correct": None if theirs is None else sum(r["opencompass_correct"] for r in records),
        "agreement": None if theirs is None else (n - len(disagreements)) / n,
        "disagreements": [{k: r[k] for k in ("index", "gold", "pred", "opencompass_pred", "correct",
                                             "opencompass_correct")} for r in disagreements],
        "prompt_mismatches": mismatches,
    }
    write_json_atomic(out / "summary.json", summary)
    agree = ("OpenCompass's verdicts not found (results/<abbr>/math.json)" if theirs is None else
             f"agrees with OpenCompass on {n - len(disagreements)}/{n} problems "
             f"(OpenCompass {summary['opencompass_correct']} correct)")
    print(f"protocol opencompass (rescore of {pred_file}): {summary['correct']}/{n} correct "
          f"({summary['accuracy_percent']:.2f} %); {agree}; prompts equal to build_messages: "
          f"{n - len(mismatches)}/{n}; -> {out}")
    for r in disagreements:
        print(f"  disagreement #{r['index']}: gold={one_line(r['gold'], 40)} ours={r['correct']} "
              f"({one_line(r['pred'], 60)}) opencompass={r['opencompass_correct']} "
              f"({one_line(r['opencompass_pred'], 60)})")
    return summary
