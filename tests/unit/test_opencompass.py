"""evaluate.py --rescore-opencompass (grpo_math/evaluation/rescore.py) on fake OpenCompass output
folders: OpenCompass's own verdicts read from its results file, beside the recipe's reward and
strict check on the identical predictions. Against a real OpenCompass run:
tests/e2e/test_opencompass_run.py (slow).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import evaluate as ev
from grpo_math.evaluation import rescore

#: a prediction in the 4-shot examples' answer style, boxed
BOXED = "So the answer is $\\boxed{%s}$.\nFinal Answer: The final answer is $%s$. I hope it is correct."
#: the same without a box: OpenCompass's judge reads the final-answer line, the recipe's judges want a box
UNBOXED = "So the answer is %s.\nFinal Answer: The final answer is $%s$. I hope it is correct."


def fake_opencompass_run(root: Path, predictions: list[str], golds: list[str], correct: list[bool],
                         details: bool = True) -> Path:
    """An OpenCompass output folder as 0.5.4 writes it (one model 'tiny', dataset 'math')."""
    out = root / "20260101_000000"
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


def test_model_and_data_required_unless_rescoring(capsys):
    with pytest.raises(SystemExit):
        ev.parse_args(["--data", "d.json"])
    assert "--model is required" in capsys.readouterr().err
    assert ev.parse_args(["--rescore-opencompass", "x"]).rescore_opencompass == Path("x")


def test_rescore_compares_the_recipe_judges_with_opencompass(tmp_path, capsys):
    fake_opencompass_run(tmp_path / "oc", [BOXED % ("1", "1"), BOXED % ("3", "3"), UNBOXED % ("5", "5")],
                         ["1", "2", "5"], [True, False, True])
    assert ev.main(["--rescore-opencompass", str(tmp_path / "oc"), "--output-dir", str(tmp_path / "r")]) == 0
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["mode"] == "rescore" and summary["problems"] == 3 and summary["opencompass_correct"] == 2
    assert summary["opencompass_accuracy_percent"] == pytest.approx(200 / 3)
    for name in ("reward", "strict"):  # the unboxed final-answer line is where they part
        judge = summary["judges"][name]
        assert judge["correct"] == 1 and judge["agreement"] == pytest.approx(2 / 3)
        assert [(d["index"], d["opencompass"], d[name]) for d in judge["disagreements"]] == [(2, True, False)]
    records = [json.loads(x) for x in (tmp_path / "r" / "rescore.jsonl").read_text().splitlines()]
    assert [r["opencompass_correct"] for r in records] == [True, False, True]
    assert [(r["reward_acc"], r["strict_correct"], r["boxed_answer"]) for r in records] == [
        (1.0, True, "1"), (0.0, False, "3"), (0.0, False, None)]
    assert records[0]["opencompass_pred"] == "[0]" and records[1]["gold"] == "2"
    out = capsys.readouterr().out
    assert "OpenCompass 2/3 correct (66.67 %)" in out and "reward disagrees #2" in out


def test_rescore_finds_the_predictions_file_or_the_newest_run(tmp_path):
    run = fake_opencompass_run(tmp_path / "oc", [BOXED % ("1", "1")], ["1"], [True])
    pred_file = run / "predictions" / "tiny" / "math.json"
    assert rescore.find_predictions(pred_file) == pred_file
    assert rescore.find_predictions(run) == pred_file == rescore.find_predictions(tmp_path / "oc")
    assert rescore.rescore(pred_file, tmp_path / "r")["judges"]["strict"]["agreement"] == 1.0


@pytest.mark.parametrize("details, correct, needle", [
    (False, [True], "results/tiny/math.json: not found"),
    (True, [True, False], "2 details for 1 predictions"),
])
def test_rescore_needs_one_opencompass_verdict_per_prediction(tmp_path, capsys, details, correct, needle):
    run = fake_opencompass_run(tmp_path / "oc", [BOXED % ("1", "1")], ["1", "2"], correct, details)
    assert ev.main(["--rescore-opencompass", str(run), "--output-dir", str(tmp_path / "r")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err and not (tmp_path / "r").exists()


def test_rescore_bad_path_is_one_line_exit_1(tmp_path, capsys):
    assert ev.main(["--rescore-opencompass", str(tmp_path / "missing")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(tmp_path / "missing") in err
