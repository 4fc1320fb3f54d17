"""OpenCompass's MATH protocol: the reproduction (grpo_math/evaluation/opencompass.py, evaluate.py
--protocol opencompass, --rescore-opencompass) on tiny literal inputs. Against a real OpenCompass
run: tests/e2e/test_opencompass_run.py (slow).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import evaluate as ev
from grpo_math.evaluation import data, rescore
from grpo_math.evaluation import opencompass as ocm


# ------------------------------------------------------------------------------------------
# reference answers
# ------------------------------------------------------------------------------------------
def test_reference_is_the_last_boxed():
    assert ocm.reference_answer("so $\\boxed{1}$, then $\\boxed{\\frac{1}{2}}$.") == "\\frac{1}{2}"
    assert ocm.reference_answer("$\\boxed{\\{1, 2\\}}$") == "\\{1, 2\\}"


@pytest.mark.parametrize("solution, expected", [
    ("so \\fbox{4}", None),                        # \fbox is found but is not \boxed{
    ("$\\boxed 5$", None),                          # no brace right after \boxed
    ("\\boxed{3", None),                            # never closed
    ("no box at all", None),
    ("\\fbox{1} and \\boxed{2}", "2"),             # \boxed wins over a later \fbox
])
def test_reference_edge_cases(solution, expected):
    assert ocm.reference_answer(solution) == expected


# ------------------------------------------------------------------------------------------
# prompt
# ------------------------------------------------------------------------------------------
def test_prompt_is_four_shot_with_doubled_braces_and_trailing_newlines():
    msgs = ocm.build_messages("What is $1+1$?")
    assert [m["role"] for m in msgs] == ["user", "assistant"] * 4 + ["user"]
    assert msgs[-1]["content"] == "Problem:\nWhat is $1+1$?\nSolution:\n\n"
    assert msgs[0]["content"].startswith("Problem:\nFind the domain of the expression $\\frac{{\\sqrt{{x-2}}}}")
    assert msgs[0]["content"].endswith("$.}}\nSolution:\n")
    assert all(m["content"].endswith("Solution:\n") for m in msgs[0:8:2])
    assert msgs[3]["content"].endswith("I hope it is correct.\n")  # assistant turns gain nothing


def test_prompt_keeps_the_problem_verbatim_but_blanks_the_answer_slot():
    problem = "Let $f(x) = \\frac{x}{2}$ and {problem} and {{y}}; also {solution}."
    last = ocm.build_messages(problem)[-1]["content"]
    assert last == "Problem:\nLet $f(x) = \\frac{x}{2}$ and {problem} and {{y}}; also .\nSolution:\n\n"


def test_origin_prompt_round_trip():
    msgs = ocm.build_messages("Compute $2^3$.")
    origin = [{"role": ocm.OC_ROLES[m["role"]], "prompt": m["content"]} for m in msgs]
    back = ocm.messages_from_origin_prompt(origin)
    assert back == msgs and ocm.problem_from_messages(back) == "Compute $2^3$."
    assert ocm.problem_from_messages([{"role": "user", "content": "no template"}]) is None
    with pytest.raises(ValueError):
        ocm.messages_from_origin_prompt("a plain string")


def test_stop_words_cut_the_prediction():
    assert ocm.cut_at_stop_words("answer 4<|im_end|><|im_end|>junk", ["<|im_end|>"]) == "answer 4"
    assert ocm.cut_at_stop_words("a<e>b<f>c", ["<f>", "<e>"]) == "a"
    assert ocm.cut_at_stop_words("nothing to cut", []) == "nothing to cut"


# ------------------------------------------------------------------------------------------
# judge
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("prediction, reference, correct", [
    ("So the answer is $\\boxed{24}$.\nFinal Answer: The final answer is $24$.", "24", True),
    ("$\\boxed{\\frac{2}{4}}$", "\\frac{1}{2}", True),
    ("$\\boxed{25}$", "24", False),
    ("I do not know.", "24", False),
])
def test_judge(prediction, reference, correct):
    verdict = ocm.score(prediction, reference)
    assert verdict["status"] == "ok" and verdict["correct"] is correct


def test_judge_skips_an_unparsable_reference_but_counts_it():
    verdicts = [ocm.score("$\\boxed{1}$", "1"), ocm.score("$\\boxed{1}$", "")]
    assert verdicts[1]["status"] == "skipped" and not verdicts[1]["correct"]
    assert ocm.accuracy_percent(verdicts) == 50.0


def test_judge_parses_like_opencompass_results_file():
    verdict = ocm.score("so $\\boxed{24}$", "24")
    assert verdict["pred"] == "[24, '24']" and verdict["answer"] == "[24, '24']"


# ------------------------------------------------------------------------------------------
# evaluate.py: data, arguments, re-scoring a (fake) OpenCompass output folder
# ------------------------------------------------------------------------------------------
def write_math_json(path: Path, n: int = 2) -> Path:
    rows = {f"Algebra_{i + 1}": {"problem": f"What is ${i}+1$?", "level": "Level 1", "type": "Algebra",
                                 "solution": f"It is $\\boxed{{{i + 1}}}$."} for i in range(n)}
    path.write_text(json.dumps(rows, indent=2), encoding="utf-8")
    return path


def test_math_json_loads_with_the_opencompass_prompt(tmp_path):
    fmt, problems, dropped = data.load_problems(write_math_json(tmp_path / "math.json"), "opencompass")
    assert fmt == "lighteval" and not dropped and [p["id"] for p in problems] == ["math-0", "math-1"]
    assert problems[1]["ground_truth"] == "2" and problems[1]["messages"] == ocm.build_messages("What is $1+1$?")
    _, recipe, _ = data.load_problems(tmp_path / "math.json")
    assert len(recipe[0]["messages"]) == 1  # the recipe protocol: one user turn


@pytest.mark.parametrize("extra", [["--temperature", "0.7"], ["--n", "2", "--temperature", "1"]])
def test_opencompass_protocol_is_greedy(extra, capsys):
    with pytest.raises(SystemExit) as exc:
        ev.parse_args(["--model", "m", "--data", "d.json", "--protocol", "opencompass", *extra])
    assert exc.value.code == 2 and "greedily" in capsys.readouterr().err


def test_model_and_data_required_unless_rescoring(capsys):
    with pytest.raises(SystemExit):
        ev.parse_args(["--data", "d.json"])
    assert "--model is required" in capsys.readouterr().err
    assert ev.parse_args(["--rescore-opencompass", "x"]).rescore_opencompass == Path("x")


def fake_opencompass_run(root: Path, predictions: list[str], golds: list[str], correct: list[bool]) -> Path:
    """An OpenCompass output folder as 0.5.4 writes it (one model 'tiny', dataset 'math')."""
    out = root / "20260101_000000"
    (out / "predictions" / "tiny").mkdir(parents=True)
    (out / "results" / "tiny").mkdir(parents=True)
    preds = {}
    for i, (pred, gold) in enumerate(zip(predictions, golds)):
        origin = [{"role": ocm.OC_ROLES[m["role"]], "prompt": m["content"]}
                  for m in ocm.build_messages(f"Problem number {i}.")]
        preds[str(i)] = {"origin_prompt": origin, "prediction": pred, "gold": gold}
    (out / "predictions" / "tiny" / "math.json").write_text(json.dumps(preds), encoding="utf-8")
    details = [{"example_abbr": f"math_test_{i}", "pred": ["x"], "answer": ["y"], "correct": [c]}
               for i, c in enumerate(correct)]
    (out / "results" / "tiny" / "math.json").write_text(json.dumps({"accuracy": 0, "details": details}))
    return out


def test_rescore_agrees_and_lists_disagreements(tmp_path, capsys):
    run = fake_opencompass_run(tmp_path / "oc", ["$\\boxed{1}$", "$\\boxed{3}$", "$\\boxed{5}$"],
                               ["1", "2", "5"], [True, False, False])
    assert ev.main(["--rescore-opencompass", str(tmp_path / "oc"), "--output-dir", str(tmp_path / "r")]) == 0
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["protocol"] == "opencompass" and summary["correct"] == 2
    assert summary["agreement"] == pytest.approx(2 / 3) and summary["prompt_mismatches"] == []
    assert [d["index"] for d in summary["disagreements"]] == [2]
    assert "disagreement #2" in capsys.readouterr().out
    assert len((tmp_path / "r" / "rescore.jsonl").read_text().splitlines()) == 3
    assert run.is_dir()


def test_rescore_flags_a_prompt_that_differs(tmp_path):
    run = fake_opencompass_run(tmp_path / "oc", ["$\\boxed{1}$"], ["1"], [True])
    pred_file = run / "predictions" / "tiny" / "math.json"
    data = json.loads(pred_file.read_text())
    data["0"]["origin_prompt"][0]["prompt"] = data["0"]["origin_prompt"][0]["prompt"].replace("{{", "{")
    pred_file.write_text(json.dumps(data))
    summary = rescore.rescore(pred_file, tmp_path / "r")
    assert summary["prompt_mismatches"] == [0] and summary["agreement"] == 1.0


def test_rescore_bad_path_is_one_line_exit_1(tmp_path, capsys):
    assert ev.main(["--rescore-opencompass", str(tmp_path / "missing")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(tmp_path / "missing") in err
