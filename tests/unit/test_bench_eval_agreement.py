"""benchmarks/bench_eval_agreement.py --predictions on fake OpenCompass output folders: OpenCompass's
own verdicts read from its results file, beside the recipe's reward and strict check on the
identical predictions. Against a real OpenCompass run: tests/e2e/test_opencompass_run.py (slow).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import bench_eval_agreement as bench

#: a prediction in the 4-shot examples' answer style, boxed
BOXED = "So the answer is $\\boxed{%s}$.\nFinal Answer: The final answer is $%s$. I hope it is correct."
#: the same without a box: OpenCompass's judge reads the final-answer line, the recipe's judges want a box
UNBOXED = "So the answer is %s.\nFinal Answer: The final answer is $%s$. I hope it is correct."


def fake_opencompass_run(root: Path, predictions: list[str], golds: list[str], correct: list[bool],
                         details: bool = True, timestamp: str = "20260101_000000") -> Path:
    """An OpenCompass output folder as 0.5.4 writes it (one model 'tiny', dataset 'math')."""
    out = root / timestamp
    (out / "predictions" / "tiny").mkdir(parents=True)
    preds = {str(i): {"origin_prompt": [{"role": "HUMAN", "prompt": f"Problem:\nProblem number {i}.\nSolution:\n\n"}],
                      "prediction": pred, "gold": gold} for i, (pred, gold) in enumerate(zip(predictions, golds))}
    (out / "predictions" / "tiny" / "math.json").write_text(json.dumps(preds), encoding="utf-8")
    if details:
        (out / "results" / "tiny").mkdir(parents=True)
        rows = [{"example_abbr": f"math_test_{i}", "pred": [f"[{i}]"], "answer": [f"[{g}]"], "correct": [c]}
                for i, (g, c) in enumerate(zip(golds, correct))]
        (out / "results" / "tiny" / "math.json").write_text(json.dumps({"accuracy": 0, "details": rows}))
    return out


def test_the_recipe_judges_beside_opencompass_on_a_real_run(tmp_path, capsys):
    run = fake_opencompass_run(tmp_path / "oc", [BOXED % ("1", "1"), BOXED % ("3", "3"), UNBOXED % ("5", "5")],
                               ["1", "2", "5"], [True, False, True])
    items, pred_file = bench.real_items(tmp_path / "oc")
    assert pred_file == str(run / "predictions" / "tiny" / "math.json")
    assert [(it["id"], it["gold"], it["OpenCompass"]) for it in items] == [("0", "1", True), ("1", "2", False),
                                                                          ("2", "5", True)]
    bench.judge_all(items)
    for judge in bench.JUDGES:  # the unboxed final-answer line is where they part
        assert [it[judge] for it in items] == [True, False, False], judge

    md = tmp_path / "agreement.md"
    assert bench.main(["--predictions", str(tmp_path / "oc"), "--note", "fake", "--markdown", str(md)]) == 0
    text = md.read_text()
    assert text.strip() in capsys.readouterr().out
    assert "**Real OpenCompass run: `20260101_000000/predictions/tiny/math.json` (fake)** (3 predictions)" in text
    assert "| OpenCompass `MATHVerifyEvaluator` | 2 | - | - |" in text
    for judge in bench.JUDGES:
        assert f"| {judge} | 1 | 66.7% (2/3) | 1 |" in text
    disagreements = [line for line in text.splitlines() if line.startswith("| 2 | `5` |")]
    assert len(disagreements) == 1 and "| yes | no | no |" in disagreements[0]


def test_the_predictions_file_is_found_in_a_run_or_the_newest_run(tmp_path):
    fake_opencompass_run(tmp_path / "oc", [BOXED % ("1", "1")], ["1"], [True], timestamp="20251231_000000")
    run = fake_opencompass_run(tmp_path / "oc", [BOXED % ("2", "2")], ["2"], [True])
    pred_file = run / "predictions" / "tiny" / "math.json"
    assert bench.find_predictions(pred_file) == pred_file
    assert bench.find_predictions(run) == pred_file == bench.find_predictions(tmp_path / "oc")
    assert bench.load_predictions(pred_file) == [{"index": 0, "prediction": BOXED % ("2", "2"), "gold": "2"}]
    assert bench.opencompass_verdicts(pred_file) == [{"example_abbr": "math_test_0", "pred": "[0]", "answer": "[2]",
                                                      "correct": True}]


@pytest.mark.parametrize("details, correct, needle", [
    (False, [True], "results/tiny/math.json: not found"),
    (True, [True, False], "OpenCompass's per-problem results missing or of another length"),
])
def test_one_opencompass_verdict_per_prediction_is_needed(tmp_path, capsys, details, correct, needle):
    run = fake_opencompass_run(tmp_path / "oc", [BOXED % ("1", "1")], ["1", "2"], correct, details)
    md = tmp_path / "agreement.md"
    assert bench.main(["--predictions", str(run), "--markdown", str(md)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err and not md.exists()


@pytest.mark.parametrize("content, needle", [
    ("not json", "not readable JSON"),
    ("[]", "expected a JSON object"),
    ('{"0": {"gold": "1"}}', "entry '0': field 'prediction': expected a string"),
    ("{}", "no predictions"),
])
def test_a_bad_predictions_file_is_one_line_exit_1(tmp_path, capsys, content, needle):
    pred_file = tmp_path / "math.json"
    pred_file.write_text(content)
    assert bench.main(["--predictions", str(pred_file)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(pred_file) in err and needle in err


def test_a_bad_path_is_one_line_exit_1(tmp_path, capsys):
    assert bench.main(["--predictions", str(tmp_path / "missing")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(tmp_path / "missing") in err
