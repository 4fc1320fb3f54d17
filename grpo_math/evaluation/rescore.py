"""Set the recipe's judges beside OpenCompass's own verdicts on a real OpenCompass run: each
prediction judged by the training reward and the strict check (recipe.judge, against OpenCompass's
reference), compared with OpenCompass's per-problem verdict, so that both sides judge identical
generations.

OpenCompass 0.5.4's output folder ``<timestamp>/`` holds ``predictions/<abbr>/math.json`` ({index:
{origin_prompt, prediction, gold}}) and ``results/<abbr>/math.json`` (``details``: one entry per judged
problem, each field a one-element list; a reference OpenCompass cannot parse gets none).
"""
from __future__ import annotations

import json
from pathlib import Path

from grpo_math.evaluation import recipe
from grpo_math.io import DataError, one_line, write_json_atomic, write_text_atomic

RESCORE_FILE = "rescore.jsonl"
#: The recipe's judges, by name: a record's verdict.
JUDGES = {"reward": lambda r: r["reward_acc"] >= 1.0, "strict": lambda r: r["strict_correct"]}


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
    """Rows ``{index, prediction, gold}`` of a predictions file. Raises DataError."""
    rows = []
    for key, rec in _numbered(path, "OpenCompass predictions {index: {origin_prompt, prediction, gold}}"):
        if not str(key).isdigit() or not isinstance(rec, dict) or not isinstance(rec.get("prediction"), str):
            raise DataError(f"{path}: entry {key!r}: field 'prediction': expected a string under a numeric key")
        rows.append({"index": int(key), "prediction": rec["prediction"], "gold": rec.get("gold")})
    if not rows:
        raise DataError(f"{path}: no predictions; expected at least one")
    return rows


def results_file(pred_file: Path) -> Path:
    """``results/<abbr>/math.json`` of the run ``pred_file`` (predictions/<abbr>/math.json) belongs to."""
    return pred_file.parent.parent.parent / "results" / pred_file.parent.name / pred_file.name


def opencompass_verdicts(pred_file: Path) -> list[dict]:
    """OpenCompass's own per-problem details (:func:`results_file`), one-element lists unwrapped.
    Raises DataError when the file is missing or holds no details."""
    results = results_file(pred_file)
    if not results.is_file():
        raise DataError(f"{results}: not found; expected OpenCompass's results beside {pred_file} "
                        "(an evaluation that finished)")
    details = dict(_numbered(results, "OpenCompass results with 'details'")).get("details")
    if isinstance(details, dict):
        details = [details[k] for k in sorted(details, key=lambda k: int(k) if str(k).isdigit() else -1)]
    if not isinstance(details, list) or not all(isinstance(d, dict) for d in details):
        raise DataError(f"{results}: field 'details': expected per-problem results (run with details dumped)")
    return [{k: v[0] if isinstance(v, list) and len(v) == 1 else v for k, v in d.items()} for d in details]


def rescore(path: Path, out: Path) -> dict:
    """Judge every prediction at ``path`` (find_predictions) with recipe.judge against OpenCompass's reference
    and compare each judge's verdict with OpenCompass's; write rescore.jsonl and summary.json to ``out``, print
    the agreement and the first disagreements of each judge; return the summary."""
    pred_file = find_predictions(path)
    rows = load_predictions(pred_file)
    theirs = opencompass_verdicts(pred_file)
    if len(theirs) != len(rows):
        raise DataError(f"{results_file(pred_file)}: {len(theirs)} details for {len(rows)} predictions; expected "
                        "one per prediction (a reference OpenCompass cannot parse gets no detail)")
    records = []
    for row, detail in zip(rows, theirs):
        problem = {"data_source": recipe.DEFAULT_DATA_SOURCE, "ground_truth": row["gold"] or "", "extra_info": None}
        records.append({**row, "opencompass_correct": bool(detail.get("correct")),
                        "opencompass_pred": detail.get("pred"), **recipe.judge(problem, row["prediction"])})
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / RESCORE_FILE, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    n, oc_correct = len(records), sum(r["opencompass_correct"] for r in records)
    judges = {}
    for name, ok in JUDGES.items():
        diff = [r for r in records if bool(ok(r)) != r["opencompass_correct"]]
        judges[name] = {"correct": sum(1 for r in records if ok(r)), "agreement": (n - len(diff)) / n,
                        "disagreements": [{"index": r["index"], "gold": r["gold"],
                                           "opencompass": r["opencompass_correct"], name: bool(ok(r)),
                                           "opencompass_pred": r["opencompass_pred"],
                                           "boxed_answer": r["boxed_answer"]} for r in diff]}
    summary = {"mode": "rescore", "predictions": str(pred_file), "problems": n, "opencompass_correct": oc_correct,
               "opencompass_accuracy_percent": 100.0 * oc_correct / n, "judges": judges}
    write_json_atomic(out / "summary.json", summary)
    print(f"rescore of {pred_file}: OpenCompass {oc_correct}/{n} correct "
          f"({summary['opencompass_accuracy_percent']:.2f} %); "
          + "; ".join(f"{name} {j['correct']}/{n}, agrees on {n - len(j['disagreements'])}/{n}"
                      for name, j in judges.items()) + f" -> {out}")
    for name, j in judges.items():
        for d in j["disagreements"][:recipe.GAP_EXAMPLES]:
            print(f"  {name} disagrees #{d['index']}: gold={one_line(d['gold'], 40)} opencompass={d['opencompass']} "
                  f"({one_line(d['opencompass_pred'], 60)}) {name}={d[name]} (box {one_line(d['boxed_answer'], 40)})")
        if len(j["disagreements"]) > recipe.GAP_EXAMPLES:
            print(f"  ... {len(j['disagreements']) - recipe.GAP_EXAMPLES} more {name} disagreements in summary.json")
    return summary
