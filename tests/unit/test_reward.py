"""Tests for new_math_reward.py: interface, scheme, format and reasoning credit, extraction,
equivalence per answer category (our own cases, not the dev bench's), the hacks it guards
against, time bounds in any thread, and property tests (arbitrary text never raises).
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import new_math_reward as R
from conftest import REPO
from maintenance.reward_policy import POLICY_RULES, policy_markdown

SRC = "DigitalLearningGmbH/MATH-lighteval"
KEYS = {"score": float, "acc": float, "format": float, "cot": float, "pred": str}
BOUND_S = 1.0  # every call returns within 1 s (the reward's time bound)
GOOD_THINK = ("<think>\nStep 1: Solve the equation 2x = 8.\nStep 2: Therefore x = 4.\n"
              "Step 3: Substitute back to check: 2*4 = 8.\n</think>\n")


def score(resp: str, gold: str) -> dict:
    return R.compute_score(SRC, resp, gold)


def acc(boxed: str, gold: str) -> bool:
    return score("So the answer is $\\boxed{" + boxed + "}$.", gold)["acc"] == 1.0


def contract(answer: str, think: str = GOOD_THINK) -> str:
    return think + "<answer>\n\\boxed{" + answer + "}\n</answer>"


# ======================================================================================
# Interface
# ======================================================================================
@pytest.mark.parametrize("resp,gold", [
    (contract("4"), "4"),                        # correct
    (contract("5"), "4"),                        # wrong
    ("no box at all", "4"),                      # no answer
    ("\\boxed{9^{9^{9^{9}}}}", "4"),             # guarded
    ("", ""),                                    # empty
])
def test_same_keys_and_types_every_call(resp, gold):
    out = score(resp, gold)
    assert set(out) == set(KEYS)
    for k, t in KEYS.items():
        assert type(out[k]) is t, k


@pytest.mark.parametrize("source", sorted(R.SUPPORTED_DATA_SOURCES))
def test_supported_sources(source):
    assert R.compute_score(source, "\\boxed{2}", "2")["acc"] == 1.0


def test_unknown_data_source_raises_loudly():
    with pytest.raises(ValueError, match="unsupported data_source"):
        R.compute_score("openai/gsm8k", "\\boxed{2}", "2")


def test_keyword_call_as_verl_does():
    out = R.compute_score(data_source=SRC, solution_str="\\boxed{2}", ground_truth="2", extra_info={"index": 0})
    assert out["acc"] == 1.0


def test_non_string_inputs_do_not_raise():
    assert score(None, "2")["acc"] == 0.0
    assert R.compute_score(SRC, "\\boxed{2}", 2)["acc"] == 1.0


def test_internal_failure_scores_zero_and_is_counted(monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("boom")
    monkeypatch.setattr(R, "extract_final_answer", boom)
    before = R.STATS["internal_errors"]
    out = score(contract("4"), "4")
    assert out == {"score": 0.0, "acc": 0.0, "format": 0.0, "cot": 0.0, "pred": ""}
    assert R.STATS["internal_errors"] == before + 1


def test_verl_validation_metrics_accept_the_dicts():
    mu = pytest.importorskip("verl.trainer.ppo.metric_utils")
    outs = [score(contract(a), "4") for a in ("4", "5", "4", "x")]
    infos = {k: [o[k] for o in outs] for k in outs[0]}
    res = mu.process_validation_metrics([SRC] * 4, ["u1"] * 4, infos)
    assert res[SRC]["acc"]["mean@4"] == pytest.approx(0.5)


# ======================================================================================
# Scheme: correct -> 0.7 + format (<= 0.2) + reasoning (<= 0.1); wrong -> 0
# ======================================================================================
def test_full_marks_for_the_contract():
    out = score(contract("4"), "4")
    assert out == {"score": pytest.approx(1.0), "acc": 1.0, "format": pytest.approx(0.2),
                   "cot": R.COT_FULL_CREDIT, "pred": "4"}


def test_correct_without_format_earns_base_only():
    out = score("The answer is \\boxed{4}.", "4")
    assert out["score"] == pytest.approx(R.SCORE_CORRECT) and out["format"] == 0.0 and out["cot"] == 0.0


def test_wrong_answer_earns_nothing_whatever_the_format():
    out = score(contract("5"), "4")
    assert out["score"] == 0.0 and out["format"] == 0.0 and out["cot"] == 0.0 and out["pred"] == "5"


def test_score_never_exceeds_one():
    assert R.SCORE_CORRECT + 4 * R.FORMAT_TAG_CREDIT + R.COT_FULL_CREDIT == pytest.approx(1.0)


# ======================================================================================
# Weights and format_only: keyword arguments, as verl passes custom_reward_function.reward_kwargs
# ======================================================================================
def test_default_weights_are_the_reference_run():
    out = R.compute_score(SRC, contract("4"), "4", correct_weight=0.7, format_weight=0.2, reasoning_weight=0.1)
    assert out == score(contract("4"), "4")


@pytest.mark.parametrize("weights, paid", [
    (dict(correct_weight=1.0, format_weight=0.0, reasoning_weight=0.0), (1.0, 0.0, 0.0)),
    (dict(format_weight=0.4), (1.2, 0.4, 0.1)),
    (dict(correct_weight=0.5, reasoning_weight=0.5), (1.2, 0.2, 0.5)),
])
def test_weights_scale_each_credit(weights, paid):
    out = R.compute_score(SRC, contract("4"), "4", **weights)
    assert (out["score"], out["format"], out["cot"]) == pytest.approx(paid) and out["acc"] == 1.0


def test_weights_scale_partial_credit_in_proportion():
    partial = "<think>\nStep 1: Solve it.\nStep 2: Check it.\n</think>\nSo \\boxed{4}"  # two tags, two steps
    assert (R.format_credit(partial), R.reasoning_credit(partial)) == pytest.approx((0.1, R.COT_PARTIAL_CREDIT))
    out = R.compute_score(SRC, partial, "4", format_weight=0.4, reasoning_weight=1.0)
    assert (out["format"], out["cot"]) == pytest.approx((0.2, 0.5))


def test_weights_never_pay_a_wrong_answer():
    assert R.compute_score(SRC, contract("5"), "4", correct_weight=1.0, format_weight=1.0)["score"] == 0.0


@pytest.mark.parametrize("kwargs, field", [
    (dict(correct_weight=-0.1), "correct_weight"), (dict(format_weight="0.2"), "format_weight"),
    (dict(reasoning_weight=float("nan")), "reasoning_weight"), (dict(correct_weight=True), "correct_weight"),
    (dict(format_only="yes"), "format_only"),
])
def test_a_bad_keyword_argument_is_one_line_naming_it(kwargs, field):
    with pytest.raises(ValueError, match=rf"^new_math_reward: reward_kwargs\.{field}=") as err:
        R.compute_score(SRC, contract("4"), "4", **kwargs)
    assert "\n" not in str(err.value)


def test_format_only_pays_the_contract_whatever_the_answer():
    wrong = R.compute_score(SRC, contract("5"), "4", format_only=True)
    assert wrong["score"] == wrong["format"] == pytest.approx(1.0) and wrong["acc"] == 0.0
    assert R.compute_score(SRC, "Maybe 4.", "4", format_only=True)["score"] == 0.0


# ======================================================================================
# Format credit (reference rule)
# ======================================================================================
def test_format_earns_all_four_markers():
    assert R.format_credit("<think>\nx\n</think>\n<answer>\n\\boxed{1}\n</answer>") == pytest.approx(0.2)


def test_format_earns_nothing_without_tags():
    assert R.format_credit("The answer is \\boxed{1}.") == 0.0


def test_format_partial_markers():
    # "<think>" without its newline and no "</answer>" marker: 2 of 4 markers
    assert R.format_credit("<think>x\n</think>\n<answer>\n\\boxed{1}") == pytest.approx(0.1)


def test_format_stray_text_costs_per_character_capped():
    base = "<think>\nx\n</think>\n<answer>\n\\boxed{1}\n</answer>"
    assert R.format_credit("a" * 30 + base) == pytest.approx(0.2 - 0.03)
    assert R.format_credit(base + "b" * 50) == pytest.approx(0.15)
    assert R.format_credit("a" * 500 + base + "b" * 500) == pytest.approx(0.0)  # 0.2 - 0.1 - 0.1


def test_format_whitespace_around_is_not_stray_text():
    assert R.format_credit("\n" + "<think>\nx\n</think>\n<answer>\n1\n</answer>\n") == pytest.approx(0.2)


def test_format_tags_out_of_order_zero():
    assert R.format_credit("<answer>\n1\n</answer>\n<think>\nx\n</think>\n") == 0.0


def test_format_repeated_blocks_earn_nothing_for_them():
    # the hack of repeating think/answer blocks: markers no longer present exactly once
    twice = "<think>\nx\n</think>\n<answer>\n1\n</answer>" * 2
    assert R.format_credit(twice) < 0.2


def test_system_prompt_example_layout_earns_full_format():
    layout = R.SYSTEM_PROMPT[R.SYSTEM_PROMPT.index(R.THINK_OPEN):]
    assert R.format_credit(layout) == pytest.approx(0.2)


# ======================================================================================
# Format-only reward (format_only=True: the CPU learning profile's reward)
# ======================================================================================
def test_format_score_full_contract_is_one_whatever_the_answer():
    full = "<think>\nStep 1: add\n</think>\n<answer>\n\\boxed{7}\n</answer>"
    out = fmt_score(full, "3")
    assert out["score"] == pytest.approx(1.0) and out["format"] == pytest.approx(1.0)
    assert out["acc"] == 0.0 and out["pred"] == "7"


def test_system_prompt_layout_follows_every_contract_part():
    layout = R.SYSTEM_PROMPT.split("layout:", 1)[1].replace("\\boxed{...}", "\\boxed{7}")
    assert R.contract_parts(layout) == dict.fromkeys(R.CONTRACT_PARTS, True)


SEVENTH = 1 / len(R.CONTRACT_PARTS)


def fmt_score(text, gold: str) -> dict:
    return R.compute_score(SRC, text, gold, format_only=True)


@pytest.mark.parametrize("text, parts", [
    ("The answer is \\boxed{3}.", {"boxed"}),
    ("<think>\nhmm", {"think_open", "starts_with_think"}),
    ("Let me think inside <think> </think> first.", {"think_open", "think_close"}),
    ("Sure. <think> a </think> <answer> \\boxed{2} </answer>",
     {"think_open", "think_close", "answer_open", "answer_close", "boxed", "ends_with_answer"}),
    ("<think> a </think> <answer> \\boxed{2} </answer> More text.",
     {"think_open", "think_close", "answer_open", "answer_close", "boxed", "starts_with_think"}),
    ("<think> a <think> b </think>", {"think_close", "starts_with_think"}),  # a tag twice is not followed
    ("no tags, no box", set()),
])
def test_format_score_pays_each_contract_part_its_share(text, parts):
    assert {k for k, v in R.contract_parts(text).items() if v} == parts
    assert fmt_score(text, "3")["score"] == pytest.approx(len(parts) * SEVENTH)


def test_format_score_tags_out_of_order_pay_no_tag():
    out_of_order = "<answer>\n\\boxed{1}\n</answer>\n<think>\nx\n</think>\n"
    assert {k for k, v in R.contract_parts(out_of_order).items() if v} == {"boxed"}
    assert fmt_score(out_of_order, "1")["score"] == pytest.approx(SEVENTH)
    assert fmt_score(None, "1")["score"] == 0.0


def test_format_score_keys_match_compute_score():
    assert set(fmt_score("x", "1")) == set(R.compute_score(SRC, "x", "1"))


# ======================================================================================
# Reasoning credit (reference rule)
# ======================================================================================
def test_reasoning_full_credit():
    assert R.reasoning_credit(GOOD_THINK) == R.COT_FULL_CREDIT


def test_reasoning_partial_credit():
    think = "<think>\n1. We solve for x.\n2. It gives four here.\n</think>"
    assert R.reasoning_credit(think) == R.COT_PARTIAL_CREDIT


@pytest.mark.parametrize("think", [
    "<think>\nStep 1: add them up\nStep 2: get the value\nStep 3: done with it\n</think>",  # no keyword
    "<think>\nStep 1: thus\nStep 3: thus we have\nStep 5: thus it is\n</think>",           # not sequential
    "<think>\n1. sum\n2. sum\n3. sum\n</think>",                                            # <= 3 chars
    "Step 1: solve it now\nStep 2: therefore x\nStep 3: thus y\n",                          # outside <think>
    "<think>\nWe assume a lot.\n1. assume x\n2. assume y\n</think>",                          # 'sum' in 'assume'
])
def test_reasoning_no_credit(think):
    assert R.reasoning_credit(think) == 0.0


def test_reasoning_numbering_styles():
    think = "<think>\n(1) Solve the equation.\n(2) Substitute the root.\n(3) Thus it holds.\n</think>"
    assert R.reasoning_credit(think) == R.COT_FULL_CREDIT


def test_reasoning_copied_steps_count_once():
    # hack: one keyword step pasted three times under new numbers
    think = "<think>\n1. Therefore x = 4.\n2. Therefore x = 4.\n3. Therefore x = 4.\n</think>"
    assert R.reasoning_credit(think) < R.COT_FULL_CREDIT


def test_reasoning_decimal_is_not_a_step():
    assert R.reasoning_credit("<think>\n1.5 is the sum\n2.5 is the product\n</think>") == 0.0


def test_system_prompt_example_earns_no_reasoning_credit():
    assert R.reasoning_credit(R.SYSTEM_PROMPT[R.SYSTEM_PROMPT.index(R.THINK_OPEN):]) == 0.0


# ======================================================================================
# extract_last_boxed (shared with data preparation)
# ======================================================================================
@pytest.mark.parametrize("text,expected", [
    ("a \\boxed{\\frac{1}{2}} b", "\\frac{1}{2}"),
    ("\\boxed{1} then \\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),
    ("so \\boxed 5.", "5"),
    ("so \\boxed 12$.", "12"),
    ("\\fbox{3}", "3"),
    ("empty \\boxed{}", ""),
    ("no box", None),
    ("\\boxed{1} and \\boxed{2", None),            # truncated last box
    ("\\boxedx{3}", None),                          # another macro
    ("\\boxed{a{b{c}}d}", "a{b{c}}d"),
])
def test_extract_last_boxed(text, expected):
    assert R.extract_last_boxed(text) == expected


def test_extract_last_boxed_every_math_solution():
    pd = pytest.importorskip("pandas")
    data = REPO.parent / "shared" / "data" / "math-lighteval" / "data"
    files = sorted(data.glob("*.parquet"))
    if not files:
        pytest.skip("shared MATH parquet files not found")
    n = 0
    for f in files:
        for sol in pd.read_parquet(f, columns=["solution"]).solution:
            got = R.extract_last_boxed(sol)
            assert got is not None, sol[-200:]
            assert got.count("{") == got.count("}")
            n += 1
    assert n == 12500


# ======================================================================================
# Extraction rules
# ======================================================================================
EQ, NE = True, False
EXTRACTION = [
    ("self-correction: last box wins", "First \\boxed{4}. Wait, that is wrong; the answer is \\boxed{6}.", "6", EQ),
    ("self-correction: retracted box", "First \\boxed{4}. Wait, that is wrong; the answer is \\boxed{6}.", "4", NE),
    ("self-correction: a box ruled out", "I wrote \\boxed{8}, but 1 is not allowed. So the sum is \\boxed{6}.", "6", EQ),
    ("self-correction: a box ruled out", "I wrote \\boxed{8}, but 1 is not allowed. So the sum is \\boxed{6}.", "8", NE),
    ("a hedge is not ruled out", "It is \\boxed{8}, or possibly \\boxed{6}.", "6", NE),
    ("a later statement retracts the box", "So $\\boxed{12}$. Hmm, but that was 22. So the answer is 11.", "12", NE),
    ("a later statement retracts the box", "So $\\boxed{12}$. Hmm, but that was 22. So the answer is 11.", "11", NE),
    ("a later statement restates the box", "So $\\boxed{0.5}$. Thus the answer is $\\frac{1}{2}$.", "\\frac12", EQ),
    ("a later statement restates the box", "So $\\boxed{12}$. So the answer is 12, as claimed.", "12", EQ),
    ("a later statement of a hallucinated next problem", "So $\\boxed{12}$.\n\nProblem 2: What is 3+4? So the answer is 7.",
     "12", EQ),
    ("fbox", "Hence \\fbox{9}.", "9", EQ),
    ("text after box", "The answer is \\boxed{13}. I hope it is correct.", "13", EQ),
    ("display math", "Thus: \\[\\boxed{21}\\]", "21", EQ),
    ("box in think ignored", "<think>\nmaybe $\\boxed{2}$?\n</think>\nSo $\\boxed{3}$.", "2", NE),
    ("box after think", "<think>\nmaybe $\\boxed{2}$?\n</think>\nSo $\\boxed{3}$.", "3", EQ),
    ("list over boxes", "The roots are $\\boxed{2}$ and $\\boxed{5}$.", "2, 5", EQ),
    ("list over boxes vs single gold", "The roots are $\\boxed{2}$ and $\\boxed{5}$.", "5", NE),
    ("missing <think>", "Adding gives 9.\n</think>\n\nSo $\\boxed{9}$.", "9", EQ),
    ("brace-less box", "We get \\boxed 7.", "7", EQ),
    ("markdown", "**Final Answer:** $\\boxed{\\frac{3}{5}}$", "\\frac35", EQ),
    ("contract", "<think>\nStep 1: x\n</think>\n<answer>\n\\boxed{8}\n</answer>", "8", EQ),
    ("answer tag without box", "<think>\nI get \\boxed{8}\n</think>\n<answer>\nThe answer is 8.\n</answer>", "8", NE),
    ("answer blocks agree", "<think>\n.\n</think>\n<answer>\n\\boxed{8}\n</answer>\n<answer>\n\\boxed{8}\n</answer>", "8", EQ),
    ("nested box", "\\boxed{\\boxed{5}}", "5", EQ),
    ("no box", "The answer is 9.", "9", NE),
    ("truncated box", "Therefore \\boxed{9", "9", NE),
    ("truncated final box after a complete one", "First \\boxed{9}, then finally \\boxed{10", "9", NE),
    ("empty echoed box only", "answer within \\boxed{}", "9", NE),
    ("empty boxes around the answer", "<answer>\n\\boxed{}\\boxed{}\\boxed{9}\\boxed{}\n</answer>", "9", NE),
    ("one empty box beside the answer", "So $\\boxed{} \\boxed{9}$.", "9", NE),
    ("empty box in a sentence before it", "The answer goes in \\boxed{}. We get \\boxed{9}.", "9", EQ),
    ("another value boxed after </answer>",
     "<answer>\n\\boxed{22}\n</answer>\nActually, adding gives $25 + 3 = \\boxed{28}$.", "22", NE),
    ("the same value boxed after </answer>", "<answer>\n\\boxed{22}\n</answer>\nSo it is $\\boxed{\\frac{44}{2}}$.",
     "22", EQ),
    ("a new problem's box after </answer>", "<answer>\n\\boxed{22}\n</answer>\nQuestion: What is 2+2? $\\boxed{4}$",
     "22", EQ),
    ("empty response", "", "9", NE),
]


@pytest.mark.parametrize("name,resp,gold,expected", EXTRACTION, ids=[c[0] for c in EXTRACTION])
def test_extraction(name, resp, gold, expected):
    assert (score(resp, gold)["acc"] == 1.0) is expected


# ======================================================================================
# Equivalence, per dev-bench category, with our own numbers and forms
# ======================================================================================
EQUIVALENCE = {
    "frac_decimal": [
        ("0.75", "\\frac{3}{4}", EQ), ("\\frac{3}{4}", "0.75", EQ), ("3/4", "\\frac{3}{4}", EQ),
        ("-0.125", "-\\frac{1}{8}", EQ), ("\\frac{-3}{4}", "-\\frac34", EQ), ("\\tfrac{5}{8}", "0.625", EQ),
        ("0.0002", "\\frac{1}{5000}", EQ), ("\\frac{6}{8}", "\\frac{3}{4}", EQ), (".5", "\\frac12", EQ),
        ("0.33", "\\frac{1}{3}", NE), ("0.3333333", "\\frac13", NE), ("\\frac{5}{3}", "\\frac{3}{5}", NE),
        ("\\frac{1}{3^{50}}", "\\frac{1}{3^{49}}", NE), ("10^{-12}", "10^{-11}", NE), ("0.7499999", "\\frac34", NE),
        ("0.000003", "\\frac{1}{1000000}", NE), ("\\frac{1}{100!}", "\\frac{1}{101!}", NE), ("0.750001", "\\frac34", NE),
    ],
    "repeating_decimal": [
        ("0.\\overline{45}", "\\frac{5}{11}", EQ), ("0.8\\overline{3}", "\\frac{5}{6}", EQ), ("0.1666\\ldots", "\\frac16", EQ),
        ("1.\\overline{3}", "\\frac43", EQ), ("0.\\overline{285714}", "\\frac27", EQ), ("0.272727...", "\\frac{3}{11}", EQ),
        ("0.\\overline{3}", "\\frac{3}{10}", NE), ("0.33", "0.\\overline{3}", NE),
    ],
    "percent": [
        ("25", "25\\%", EQ), ("25\\%", "25", EQ), ("7.5", "7.5\\%", EQ), ("60%", "60\\%", EQ),
        ("26\\%", "25\\%", NE), ("0.25\\%", "25\\%", NE), ("250", "25\\%", NE),
    ],
    "degrees": [
        ("45", "45^\\circ", EQ), ("45^{\\circ}", "45", EQ), ("45°", "45^\\circ", EQ), ("45 \\text{ degrees}", "45^\\circ", EQ),
        ("135^\\circ", "45^\\circ", NE), ("44", "45^\\circ", NE),
    ],
    "units": [
        ("12 \\text{ inches}", "12", EQ), ("12", "12\\text{ inches}", EQ), ("\\$7.50", "7.5", EQ), ("7.50", "\\$7.5", EQ),
        ("9 \\text{ cm}^2", "9", EQ), ("3\\text{ meters}", "3", EQ), ("30\\text{ minutes}", "30", EQ), ("2\\mbox{ hours}", "2", EQ),
        ("20 \\text{ units}", "20\\text{ square units}", EQ), ("5 \\text{ ft}", "5\\text{ feet}", EQ),
        ("13 \\text{ inches}", "12\\text{ inches}", NE), ("\\$57", "\\$75", NE), ("3\\text{ boxes}", "3\\text{ cm}", NE),
        ("12 \\text{ grams}", "12 \\text{ gm}", EQ), ("12 \\text{ kg}", "12 \\text{ gm}", NE),
    ],
    "thousands": [
        ("2,500", "2500", EQ), ("2500", "2,\\!500", EQ), ("1{,}000{,}000", "1000000", EQ), ("12,345", "12345", EQ),
        ("\\$2,\\!000", "2000", EQ), ("\\dfrac{1}{12345678}", "\\dfrac{1}{12,\\!345,\\!678}", EQ), ("2,501", "2500", NE), ("12", "1, 2", NE), ("1,2", "12", NE),
    ],
    "latex_format": [
        ("\\dfrac{2}{5}", "\\frac25", EQ), ("\\left[ 1, 2 \\right]", "[1,2]", EQ), ("\\displaystyle \\frac{1}{3}", "\\frac13", EQ),
        ("\\mathbf{7}", "7", EQ), ("\\textbf{7}", "7", EQ), ("\\text{7}", "7", EQ), ("x^{3}+1", "x^3+1", EQ),
        ("\\frac {3} {5}", "\\frac35", EQ), ("7.", "7", EQ), ("-0", "0", EQ), ("\\frac{\\sqrt{2}}{2}\\,", "\\frac{\\sqrt2}{2}", EQ),
        ("\\boldsymbol{9}", "9", EQ), ("\\;5\\;", "5", EQ), ("8", "7", NE),
    ],
    "set_tuple": [
        ("5, 4", "4, 5", EQ), ("\\{3, 1, 2\\}", "1, 2, 3", EQ), ("(4,-2)", "(4, -2)", EQ), ("\\left(0, 1, 2\\right)", "(0, 1, 2)", EQ),
        ("a=2, b=3", "(2,3)", EQ), ("2+\\sqrt{3}, 2-\\sqrt{3}", "2 \\pm \\sqrt{3}", EQ), ("(2,3),(0,1)", "(0,1), (2,3)", EQ),
        ("-3, 3", "\\pm 3", EQ), ("7, 11, \\text{ and } 13", "7, 11, 13", EQ),
        ("4, 5, 6", "4, 5", NE), ("(-2, 4)", "(4,-2)", NE), ("\\pm 3", "3", NE), ("1, 3, \\ldots, 2n-1", "1, 2, \\ldots, n", NE),
        ("2:3", "3:2", NE), ("7, 11, \\text{and } 14", "7, 11, \\text{ and } 13", NE),
    ],
    "interval": [
        ("[0,5)", "[0, 5)", EQ), ("(-\\infty, 0) \\cup (2, \\infty)", "(2,\\infty)\\cup(-\\infty,0)", EQ), ("0 \\le x \\le 5", "[0,5]", EQ),
        ("x < 3", "(-\\infty,3)", EQ), ("x \\ge 0", "[0,\\infty)", EQ), ("\\mathbb{R}", "(-\\infty, \\infty)", EQ), ("3 < x", "(3,\\infty)", EQ),
        ("(-\\infty, 1]", "x\\leq 1", EQ), ("\\left[ \\frac12, 3 \\right)", "[0.5, 3)", EQ),
        ("(0,5)", "[0,5)", NE), ("[0, 6)", "[0,5)", NE), ("x \\geq 3", "x > 3", NE), ("[-100, 100]", "[3,3]", NE),
        ("(-\\infty,0)\\cup(2,\\infty)", "(-\\infty,0]\\cup(2,\\infty)", NE),
        ("x < -2 \\text{ or } x > 2", "(-\\infty, -2) \\cup (2, \\infty)", EQ),
        ("x < -2 \\text{ or } x \\geq 2", "(-\\infty, -2) \\cup (2, \\infty)", NE),
    ],
    "equation_lhs": [
        ("7", "x=7", EQ), ("m=-2", "-2", EQ), ("3x - y = 2", "y = 3x - 2", EQ), ("x^2+y^2-16=0", "x^2+y^2=16", EQ),
        ("b=1 \\text{ or } b=-3", "1, -3", EQ), ("3x-2", "y=3x-2", EQ), ("2+2=4", "4", EQ), ("x = 3, y = 4", "(3,4)", EQ),
        ("y = 4, x = 3", "(3,4)", EQ),
        ("x=2", "x=2 \\text{ or } x=5", NE), ("2x+y=1", "x+2y=1", NE), ("3 = 8", "8", NE), ("y = y", "4", NE),
        ("k=1, 2", "2, 3", NE), ("x=4, y=3", "(3,4)", NE), ("x^2+y^2=9", "x^2+y^2=3", NE),
    ],
    "matrix": [
        ("\\begin{pmatrix}3\\\\-1\\end{pmatrix}", "\\begin{pmatrix} 3 \\\\ -1 \\end{pmatrix}", EQ),
        ("\\begin{pmatrix} 0.25 & 1 \\\\ 0 & 2 \\end{pmatrix}", "\\begin{pmatrix} \\frac14 & 1 \\\\ 0 & 2 \\end{pmatrix}", EQ),
        ("\\begin{bmatrix} 1 & 0 \\\\ 0 & 1 \\end{bmatrix}", "\\begin{pmatrix} 1 & 0 \\\\ 0 & 1 \\end{pmatrix}", EQ),
        ("\\begin{pmatrix} \\sqrt{4} \\\\ -1 \\end{pmatrix}", "\\begin{pmatrix} 2 \\\\ -1 \\end{pmatrix}", EQ),
        ("\\begin{pmatrix} 1 & 2 \\\\ 3 & 5 \\end{pmatrix}", "\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}", NE),
        ("\\begin{pmatrix} 1 & 3 \\\\ 2 & 4 \\end{pmatrix}", "\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}", NE),
        ("\\begin{pmatrix} 1 \\\\ 2 \\\\ 3 \\end{pmatrix}", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", NE),
    ],
    "pi_sqrt_forms": [
        ("3\\pi", "3 \\cdot \\pi", EQ), ("\\frac{3\\pi}{4}", "\\frac34\\pi", EQ), ("\\pi/3", "\\frac{\\pi}{3}", EQ),
        ("\\sqrt{12}", "2\\sqrt3", EQ), ("\\frac{2}{\\sqrt{2}}", "\\sqrt2", EQ), ("3^{1/2}", "\\sqrt3", EQ), ("\\sqrt[3]{8}", "2", EQ),
        ("\\pi+1", "1+\\pi", EQ), ("\\frac{\\sqrt{6}}{3}", "\\sqrt{\\frac{2}{3}}", EQ), ("2\\sqrt{3}+1", "1+\\sqrt{12}", EQ),
        ("9.42", "3\\pi", NE), ("1.414", "\\sqrt2", NE), ("\\sqrt{3}", "\\sqrt{2}", NE), ("3.14159265", "\\pi", NE),
        ("4\\pi", "16\\pi", NE), ("3.14159265358979323846264338327950288", "\\pi", NE), ("2\\sqrt(3)", "2", NE),
    ],
    "sci_notation": [
        ("4.5 \\times 10^{3}", "4500", EQ), ("4500", "4.5 \\times 10^3", EQ), ("2.5e-4", "0.00025", EQ),
        ("7 \\cdot 10^{2}", "700", EQ), ("1.2\\times10^{-5}", "0.000012", EQ), ("4.5 \\times 10^4", "4500", NE),
    ],
    "mixed_number": [
        ("3\\frac{1}{4}", "\\frac{13}{4}", EQ), ("\\frac{7}{2}", "3\\frac12", EQ), ("-2\\frac{1}{3}", "-\\frac73", EQ),
        ("3 \\frac{1}{4}", "3.25", EQ), ("\\frac{3}{2}", "1\\frac{1}{2}", EQ),
        ("3\\frac{1}{4}", "\\frac34", NE), ("1.25", "2\\frac{1}{4}", NE),
    ],
    "base_number": [
        ("101_2", "101", EQ), ("101", "101_2", EQ), ("123_{4}", "123_4", EQ), ("\\text{B3}_{12}", "B3_{12}", EQ),
        ("5", "101_2", NE), ("4210_{5}", "4210_{7}", NE),
    ],
    "complex": [
        ("2-3i", "-3i+2", EQ), ("\\frac{1}{2}+\\frac{1}{2}i", "\\frac{1+i}{2}", EQ), ("i", "1i", EQ), ("-1+0i", "-1", EQ),
        ("5i-1", "-1+5i", EQ), ("2+3i", "2-3i", NE), ("3", "3i", NE),
    ],
    "text_answer": [
        ("\\text{Monday}", "Monday", EQ), ("monday", "\\text{Monday}", EQ), ("\\text{even}", "even", EQ),
        ("\\text{Tuesday}", "\\text{Monday}", NE), ("\\text{no}", "\\text{yes}", NE), ("\\text{Alice}", "\\text{Bob}", NE),
    ],
    "mc_letter": [
        ("C", "\\text{(C)}", EQ), ("(C)", "\\text{(C)}", EQ), ("\\text{(D)}", "D", EQ), ("\\textbf{(E)}", "\\text{(E)}", EQ),
        ("\\textbf{(B)}\\ 12", "\\text{(B)}", EQ), ("\\mathrm{(A)}", "\\text{(A)}", EQ),
        ("A, C", "\\text{(C)}", NE), ("\\text{B or C}", "\\text{(C)}", NE), ("B", "\\text{B, E}", NE), ("E", "\\text{(D)}", NE),
    ],
    "near_miss": [
        ("1606938044258990275541962092341162602522202993782792835301376", "2^{200}", EQ),
        ("7.001", "7", NE), ("999999", "1000000", NE), ("2.7183", "e", NE), ("\\infty", "-\\infty", NE), ("0.05", "0.5", NE),
        ("987654322", "987654321", NE), ("2^{200}+1", "2^{200}", NE), ("5", "-5", NE),
    ],
    "expression": [
        ("(x-2)^2", "x^2-4x+4", EQ), ("\\frac{n(n-1)}{2}", "\\frac{n^2-n}{2}", EQ), ("2^{n+1}", "2 \\cdot 2^n", EQ),
        ("\\log_3 9", "2", EQ), ("e^{2}+1", "1+\\exp(2)", EQ), ("\\frac{a+b}{2}", "\\frac{a}{2}+\\frac{b}{2}", EQ),
        ("(x+2)^2", "x^2-4x+4", NE), ("2^n", "2^{n+1}", NE), ("xy^2", "x^2y", NE), ("3a", "3b", NE),
    ],
    "gold_identity": [
        ("(-\\infty,-\\frac 13)\\cup(-\\frac 13,\\infty)", "(-\\infty,-\\frac 13)\\cup(-\\frac 13,\\infty)", EQ),
        ("\\text{(E)}", "\\text{(E)}", EQ), ("20,\\!000", "20,\\!000", EQ), ("7\\text{ m}", "7\\text{ m}", EQ),
        ("0.\\overline{6}", "0.\\overline{6}", EQ), ("\\{2, -5\\}", "\\{2, -5\\}", EQ), ("120^\\circ", "120^\\circ", EQ),
        ("\\begin{pmatrix} 1 & -1 \\\\ 0 & 3 \\end{pmatrix}", "\\begin{pmatrix} 1 & -1 \\\\ 0 & 3 \\end{pmatrix}", EQ),
    ],
}
_EQ_CASES = [(cat, p, g, e) for cat, cases in EQUIVALENCE.items() for p, g, e in cases]


@pytest.fixture
def unhurried(monkeypatch):
    """The reward's time limits raised tenfold: these tests judge which answers are equal, not how
    fast (the limits have tests of their own). In a fresh-clone run of the whole suite, right after
    the launcher tests, \\frac{3\\pi}{4} against \\frac34\\pi once overran the 0.5 s CAS budget and
    was judged unequal; alone it takes milliseconds."""
    monkeypatch.setattr(R, "CAS_BUDGET_S", 10 * R.CAS_BUDGET_S)
    monkeypatch.setattr(R, "HARD_TIMEOUT_S", 10 * R.HARD_TIMEOUT_S)


@pytest.mark.parametrize("cat,pred,gold,expected", _EQ_CASES,
                         ids=[f"{c}:{p[:30]}|{g[:20]}" for c, p, g, _ in _EQ_CASES])
def test_equivalence(cat, pred, gold, expected, unhurried):
    assert acc(pred, gold) is expected


# ======================================================================================
# Hacks the reward guards against (one test reproducing each)
# ======================================================================================
HACKS = [
    ("hedging boxes, gold last", "It is $\\boxed{2}$ or $\\boxed{4}$.", "4"),
    ("hedging boxes, gold first", "It is $\\boxed{2}$ or $\\boxed{4}$.", "2"),
    ("hedging across lines", "The answer is $\\boxed{3}$.\nAlternatively it might be $\\boxed{5}$.", "5"),
    ("two final boxes", "Final: $\\boxed{8}$, and also $\\boxed{9}$.", "8"),
    ("two final boxes, gold last", "Final: $\\boxed{8}$, and also $\\boxed{9}$.", "9"),
    ("enumerate boxes", " ".join("\\boxed{%d}" % i for i in range(1, 51)), "17"),
    ("list in one box", "\\boxed{1, 2, \\ldots, 50}", "17"),
    ("candidate fractions", "\\boxed{\\frac{1}{2}, \\frac{1}{3}}", "\\frac12"),
    ("every option", "\\boxed{\\text{A, B, C, D, E}}", "\\text{(A)}"),
    ("option disjunction", "\\boxed{\\text{A or C}}", "\\text{(C)}"),
    ("plus-minus hedge", "\\boxed{\\pm 4}", "4"),
    ("false equation ending in gold", "\\boxed{5 = 8}", "8"),
    ("membership in a set", "\\boxed{x \\in \\{3, 8\\}}", "8"),
    ("wide interval", "\\boxed{[7, 9]}", "8"),
    ("value or value", "\\boxed{8 \\text{ or } 9}", "8"),
    ("tolerance exploit below", "\\boxed{0.4999999}", "\\frac12"),
    ("tolerance exploit above", "\\boxed{0.50000001}", "\\frac12"),
    ("tiny absolute difference", "\\boxed{\\frac{1}{5^{80}}}", "\\frac{1}{5^{81}}"),
    ("approximate pi", "\\boxed{6.2832}", "2\\pi"),
    ("answer blocks disagree",
     "<think>\n.\n</think>\n<answer>\n\\boxed{8}\n</answer>\n<answer>\n\\boxed{9}\n</answer>", "9"),
    ("copied prompt example", "<think>\nStep 1: ...\n</think>\n<answer>\n\\boxed{...}\n</answer>", "5"),
    ("few-shot echo box", "Example: 1+1=\\boxed{2}.\nNow the real one: 1+2 = 3, so \\boxed{3}", "2"),
    ("continuation's box", "The answer is $\\boxed{8}$.\n\nQuestion: What is 2+2?\nAnswer: $\\boxed{4}$", "4"),
    ("gold spammed, other box", "$7$ " * 5000 + "\\boxed{8}", "7"),
    ("gold in think only", "<think>\n\\boxed{6}\n</think>\n<answer>\n\\boxed{7}\n</answer>", "6"),
]


@pytest.mark.parametrize("name,resp,gold", HACKS, ids=[h[0] for h in HACKS])
def test_hack_is_not_paid(name, resp, gold):
    out = score(resp, gold)
    assert out["acc"] == 0.0 and out["score"] == 0.0


def test_continuation_does_not_hide_the_answer():
    resp = "The answer is $\\boxed{8}$.\n\nQuestion: What is 2+2?\nAnswer: $\\boxed{4}$"
    assert score(resp, "8")["acc"] == 1.0


def test_prompt_options_then_answer():
    resp = "Options: \\boxed{1} \\boxed{2} \\boxed{3}\nI pick 2, so the answer is $\\boxed{2}$."
    assert score(resp, "2")["acc"] == 1.0 and score(resp, "1")["acc"] == 0.0


def test_echoed_instruction_box_is_ignored():
    assert score("So it is \\boxed{12}. Put the final answer within \\boxed{}.", "12")["acc"] == 1.0


# ======================================================================================
# Bounded time, in any thread
# ======================================================================================
BOMBS = [
    ("power tower", "\\boxed{8^{8^{8^{8}}}}", "3"),
    ("ungrouped tower", "\\boxed{7^7^7^7}", "3"),
    ("tower in fraction", "\\boxed{\\frac{3^{3^{3^{3}}}-1}{2}}", "3"),
    ("huge exponent", "\\boxed{3^{40^{6}}}", "3"),
    ("factorial of googol", "\\boxed{(10^{50})!}", "1"),
    ("large factorial", "\\boxed{99999!}", "4"),
    ("huge binomial", "\\boxed{\\binom{10^{8}}{10^{7}}}", "2"),
    ("non-integer factorial", "\\boxed{\\frac{93}{256}!}", "2"),
    ("deep parentheses", "\\boxed{" + "(" * 5000 + "1" + ")" * 5000 + "}", "1"),
    ("deep braces", "\\boxed{" + "{" * 10000 + "1" + "}" * 10000 + "}", "1"),
    ("nested boxes", "\\boxed{" * 10000 + "42" + "}" * 10000, "42"),
    ("symbolic tower", "\\boxed{y^{y^{y^{y^{y}}}}}", "3"),
    ("exp tower", "\\boxed{e^{e^{e^{e^{10}}}}}", "1"),
    ("100k characters", "Let me think again. " * 5000 + "\\boxed{42}", "41"),
    ("many boxes", "\\boxed{1}" * 20000, "1, 2"),
    ("long answer", "\\boxed{" + "+".join(["x"] * 3000) + "}", "x"),
    ("long list", "\\boxed{" + ", ".join(str(i) for i in range(5000)) + "}", "1, 2"),
]


@pytest.mark.parametrize("name,resp,gold", BOMBS, ids=[b[0] for b in BOMBS])
def test_hostile_input_is_bounded(name, resp, gold):
    t = time.perf_counter()
    out = score(resp, gold)
    assert time.perf_counter() - t < BOUND_S
    assert set(out) == set(KEYS)


@pytest.mark.parametrize("name,resp,gold,expected", [
    ("legit large power", "\\boxed{2^{1048576}}", "2^{2^{20}}", EQ),
    ("legit tower equality", "\\boxed{3^{3^{10}}}", "3^{59049}", EQ),
    ("tower with perfect-power base", "\\boxed{4^{2^{20}}}", "2^{2097152}", EQ),
    ("tower off by one", "\\boxed{7^{7^{7}}}", "7^{823544}", NE),
    ("exact big integer", "\\boxed{100!}", "100 \\cdot 99!", EQ),
])
def test_large_exact_values_are_decided(name, resp, gold, expected):
    t = time.perf_counter()
    assert (score(resp, gold)["acc"] == 1.0) is expected
    assert time.perf_counter() - t < BOUND_S


def test_off_main_thread_cas_path_and_bombs():
    """math-verify's signal timeouts raise off the main thread; ours must not."""
    cases = [("\\boxed{(x+1)^2}", "x^2+2x+1", 1.0), ("\\boxed{\\frac{\\sqrt{2}}{2}}", "\\frac{1}{\\sqrt2}", 1.0),
             ("\\boxed{x > 1}", "(1,\\infty)", 1.0)] + [(r, g, 0.0) for _, r, g in BOMBS[:8]]
    before = R.STATS["internal_errors"]

    def run(c):
        t = time.perf_counter()
        out = score(c[0], c[1])
        return out["acc"], time.perf_counter() - t, threading.current_thread() is threading.main_thread()

    with ThreadPoolExecutor(max_workers=2) as ex:
        results = list(ex.map(run, cases))
    for (resp, gold, want), (got, dt, main) in zip(cases, results):
        assert not main
        assert got == want, resp
        assert dt < BOUND_S, resp
    assert R.STATS["internal_errors"] == before


def test_hard_timeout_in_main_thread(monkeypatch):
    """In the main thread (verl's naive manager) a SIGALRM guard cuts any Python-level
    overrun at HARD_TIMEOUT_S of the thread's CPU time, and the host's handler and timer are restored."""
    def slow(*args):
        t = time.monotonic()
        while time.monotonic() - t < 5:
            pass
    monkeypatch.setattr(R, "_judge", slow)
    previous = signal.getsignal(signal.SIGALRM)
    before = R.STATS["hard_timeouts"]
    t = time.thread_time()
    out = score(contract("4"), "4")
    assert R.HARD_TIMEOUT_S <= time.thread_time() - t < R.HARD_TIMEOUT_S + 0.5
    assert out["acc"] == 0.0 and R.STATS["hard_timeouts"] == before + 1
    assert signal.getsignal(signal.SIGALRM) is previous and signal.getitimer(signal.ITIMER_REAL)[0] == 0


@pytest.mark.parametrize("wall_s,timed_out", [(10.0, False), (0.5, True)])
def test_hard_timeout_counts_cpu_time_up_to_a_wall_limit(monkeypatch, wall_s, timed_out):
    """Time off the CPU (a busy machine) does not spend the guard's budget, up to HARD_WALL_S."""
    def waiting(*args):
        time.sleep(R.HARD_TIMEOUT_S + 0.3)  # off the CPU for longer than the CPU budget
        return True, "4"
    monkeypatch.setattr(R, "_judge", waiting)
    monkeypatch.setattr(R, "HARD_WALL_S", wall_s)
    before = R.STATS["hard_timeouts"]
    out = score(contract("4"), "4")
    assert out["acc"] == (0.0 if timed_out else 1.0)
    assert R.STATS["hard_timeouts"] == before + timed_out and _timer_clear()


def test_cas_deadline_counts_cpu_time_not_waiting(monkeypatch):
    """The soft deadline is CPU time of the calling thread: time the thread spends off the CPU
    (a loaded machine, a GIL held elsewhere) does not spend the budget, so the same response
    gets the same judgement under load."""
    real_parse = R._parse.__wrapped__

    def waiting_parse(s):
        time.sleep(0.3)  # off the CPU, as when the machine is busy
        return real_parse(s)
    monkeypatch.setattr(R, "_parse", waiting_parse)
    t = time.perf_counter()
    assert R.answers_match("\\sqrt{2}+\\sqrt{3}+x", "x+\\sqrt{3}+\\sqrt{2}")  # each parse waits 0.3 s
    assert time.perf_counter() - t > R.CAS_BUDGET_S  # a wall-clock deadline would have refused it


def test_typical_call_is_fast():
    """CPU time of this thread per call (the work a call does; wall-clock time would measure
    the machine's load as well)."""
    resp = contract("\\frac{3}{4}")
    score(resp, "0.75")
    t = time.thread_time()
    for _ in range(200):
        score(resp, "0.75")
    assert (time.thread_time() - t) / 200 < 0.002


# ======================================================================================
# Held-out review fixes (our own cases): unions with points, grouping braces, a scalar
# times a matrix, the reals minus finitely many points. Each: earning, near miss, edge.
# ======================================================================================
HOLDOUT_FIXES = [
    # unions are unordered, also when a piece is a finite set of points
    ("union", "\\{2\\} \\cup (-\\infty, -3]", "(-\\infty,-3] \\cup \\{2\\}", EQ),
    ("union", "[1,4) \\cup \\{-5\\} \\cup (6,8]", "(6,8] \\cup [1,4) \\cup \\{-5\\}", EQ),
    ("union", "\\{3\\} \\cup (-\\infty,-3]", "(-\\infty,-3] \\cup \\{2\\}", NE),        # another point
    ("union", "(-\\infty,-3) \\cup \\{2\\}", "(-\\infty,-3] \\cup \\{2\\}", NE),       # open vs closed
    ("union", "(-\\infty,-3]", "(-\\infty,-3] \\cup \\{2\\}", NE),                    # point missing
    ("union", "\\{2, 9\\} \\cup (-\\infty,-3]", "(-\\infty,-3] \\cup \\{2\\}", NE),     # extra point
    ("union", "\\{0\\} \\cup (1,4] \\cup \\{9\\}", "(1,4] \\cup \\{9, 0\\}", EQ),        # points merge
    ("union", "\\{1\\} \\cup \\{5\\}", "\\{5, 1\\}", EQ),                             # sets only
    ("union", "\\{1\\} \\cup \\{5\\}", "\\{5, 2\\}", NE),
    # braces around the whole answer are grouping only
    ("braces", "{{{\\frac{2}{3}}}}", "\\frac23", EQ),
    ("braces", "{ { 7 } }", "7", EQ),
    ("braces", "{{{8}}}", "7", NE),
    ("braces", "{{{-12}}}", "12", NE),
    ("braces", "{{3}}{{4}}", "34", NE),                                            # two groups: not stripped
    ("braces", "{{\\{2, 5\\}}}", "\\{5,2\\}", EQ),                                   # a set inside stays a set
    # a scalar times a matrix or vector is elementwise
    ("scaled matrix", "3\\begin{pmatrix} 2 \\\\ -1 \\end{pmatrix}", "\\begin{pmatrix} 6 \\\\ -3 \\end{pmatrix}", EQ),
    ("scaled matrix", "\\frac{1}{4}\\begin{bmatrix} 2 & 1 \\\\ 0 & 4 \\end{bmatrix}",
     "\\begin{pmatrix} \\frac12 & 0.25 \\\\ 0 & 1 \\end{pmatrix}", EQ),
    ("scaled matrix", "\\begin{pmatrix} 6 \\\\ -3 \\end{pmatrix}", "3 \\cdot \\begin{pmatrix} 2 \\\\ -1 \\end{pmatrix}", EQ),
    ("scaled matrix", "-\\begin{pmatrix} 4 \\\\ 0 \\end{pmatrix}", "\\begin{pmatrix} -4 \\\\ 0 \\end{pmatrix}", EQ),
    ("scaled matrix", "\\frac{1}{\\sqrt{3}}\\begin{pmatrix} 1 \\\\ 1 \\end{pmatrix}",
     "\\begin{pmatrix} \\frac{\\sqrt3}{3} \\\\ \\frac{\\sqrt{3}}{3} \\end{pmatrix}", EQ),
    ("scaled matrix", "\\frac{1}{3}\\begin{pmatrix} 2 \\\\ -1 \\end{pmatrix}", "\\begin{pmatrix} 6 \\\\ -3 \\end{pmatrix}", NE),
    ("scaled matrix", "3\\begin{pmatrix} 2 \\\\ 1 \\end{pmatrix}", "\\begin{pmatrix} 6 \\\\ -3 \\end{pmatrix}", NE),
    ("scaled matrix", "3\\begin{pmatrix} 2 & -1 \\end{pmatrix}", "\\begin{pmatrix} 6 \\\\ -3 \\end{pmatrix}", NE),
    ("scaled matrix", "2\\begin{vmatrix} 1 & 0 \\\\ 0 & 1 \\end{vmatrix}", "\\begin{vmatrix} 2 & 0 \\\\ 0 & 2 \\end{vmatrix}", NE),
    ("scaled matrix", "x = 3\\begin{pmatrix} 2 \\\\ -1 \\end{pmatrix}", "\\begin{pmatrix} 6 \\\\ -3 \\end{pmatrix}", NE),
    # the reals minus finitely many points
    ("reals minus", "\\mathbb{R} \\setminus \\{-2\\}", "(-\\infty,-2) \\cup (-2,\\infty)", EQ),
    ("reals minus", "(-\\infty,-\\frac12)\\cup(-\\frac12,3)\\cup(3,\\infty)", "\\mathbb{R}\\setminus\\{3, -\\frac{1}{2}\\}", EQ),
    ("reals minus", "\\R \\backslash \\{0\\}", "(-\\infty,0)\\cup(0,\\infty)", EQ),
    ("reals minus", "\\mathbb{R} \\setminus \\{2\\}", "(-\\infty,-2) \\cup (-2,\\infty)", NE),
    ("reals minus", "\\mathbb{R} \\setminus \\{-2\\}", "(-\\infty,-2] \\cup (-2,\\infty)", NE),
    ("reals minus", "\\mathbb{R} \\setminus \\{-2, 2\\}", "(-\\infty,-2) \\cup (-2,\\infty)", NE),
    ("reals minus", "\\mathbb{R} \\setminus \\{1, 1\\}", "(-\\infty,1)\\cup(1,\\infty)", EQ),     # repeated point
    ("reals minus", "\\mathbb{R} \\setminus \\{\\}", "(-\\infty,\\infty)", EQ),                  # nothing removed
]


@pytest.mark.parametrize("rule,pred,gold,expected", HOLDOUT_FIXES,
                         ids=[f"{r}:{p[:30]}|{g[:20]}" for r, p, g, _ in HOLDOUT_FIXES])
def test_holdout_fix_rules(rule, pred, gold, expected):
    assert acc(pred, gold) is expected
    assert acc(gold, pred) is expected  # the rules are symmetric: either side may use a form


@pytest.mark.parametrize("raw,expected", [
    ("{{{4}}}", "4"), ("{ {x+1} }", "x+1"), ("{}", ""), ("{a}{b}", "{a}{b}"), ("{\\{1\\}}", "\\{1\\}"),
    ("{{4}", "{{4}"), ("{4\\}", "{4\\}"), ("{4\\}}", "4\\}"), ("{a\\\\}", "a\\\\"), ("\\{4\\}", "\\{4\\}"), ("{{1}+{2}}", "{1}+{2}"),
])
def test_strip_grouping_braces(raw, expected):
    assert R.strip_grouping_braces(raw) == expected


def _strip_reference(s: str) -> str:
    """Obvious quadratic-free reference: pair every brace with a stack, then peel layers."""
    t = s.strip()
    partner, stack = {}, []
    for m in re.finditer(r"\\.|[{}]", t, re.S):
        if m.group(0) == "{":
            stack.append(m.start())
        elif m.group(0) == "}":
            if not stack:
                return t
            partner[stack.pop()] = m.start()
    if stack:
        return t
    lo, hi = 0, len(t)
    while lo < hi and t[lo] == "{" and partner.get(lo) == hi - 1:
        lo, hi = lo + 1, hi - 1
        while lo < hi and t[lo] in " \t\n":
            lo += 1
        while hi > lo and t[hi - 1] in " \t\n":
            hi -= 1
    return t[lo:hi].strip()


@settings(max_examples=300, deadline=None, database=None)
@given(st.lists(st.sampled_from(["{", "}", "\\", "\\{", "\\}", "a", "4", " ", "\\\\"]), max_size=14),
       st.integers(0, 4), st.booleans())
def test_property_strip_grouping_braces_matches_reference(tokens, k, spaced):
    core = "".join(tokens)
    raw = ("{ " * k if spaced else "{" * k) + core + (" }" * k if spaced else "}" * k)
    assert R.strip_grouping_braces(raw) == _strip_reference(raw)


@pytest.mark.parametrize("depth,gold,expected", [(3000, "-12", EQ), (3000, "12", NE), (150_000, "5", EQ)])
def test_deeply_braced_answer_is_linear(depth, gold, expected):
    """Over MAX_ANSWER_CHARS of braces around a short answer: stripped before the length cut,
    in linear time (no recursion, no CAS on the braces)."""
    inner = "-12" if depth == 3000 else "5"
    t = time.perf_counter()
    out = score(contract("{" * depth + inner + "}" * depth), gold)
    assert time.perf_counter() - t < BOUND_S
    assert (out["acc"] == 1.0) is expected
    unbalanced = score(contract("{" * depth + inner + "}" * (depth - 1)), gold)  # stays unstripped
    assert unbalanced["acc"] == 0.0 and time.perf_counter() - t < 2 * BOUND_S


# ======================================================================================
# SIGALRM guard hygiene (main thread, as in verl's naive reward manager)
# ======================================================================================
def _timer_clear():
    return signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_alarm_cancelled_and_restored_on_exception(monkeypatch):
    def boom(text, gold):
        assert signal.getitimer(signal.ITIMER_REAL)[0] > 0  # the guard was armed
        raise RuntimeError("internal bug")
    monkeypatch.setattr(R, "_judge", boom)
    previous = signal.getsignal(signal.SIGALRM)
    out = score(contract("4"), "4")
    assert out["acc"] == 0.0
    assert signal.getsignal(signal.SIGALRM) is previous and _timer_clear()


def test_late_alarm_during_cleanup_is_swallowed(monkeypatch):
    """An alarm that lands after the comparison finished (while the timer is being cancelled)
    must neither fail the answer nor leave our handler installed."""
    real = signal.setitimer

    def setitimer(which, seconds, interval=0.0):
        if seconds == 0:
            os.kill(os.getpid(), signal.SIGALRM)  # delivered during the clean-up
        return real(which, seconds, interval)
    monkeypatch.setattr(signal, "setitimer", setitimer)
    previous = signal.getsignal(signal.SIGALRM)
    before = R.STATS["hard_timeouts"]
    out = score(contract("4"), "4")
    monkeypatch.undo()
    assert out["acc"] == 1.0 and R.STATS["hard_timeouts"] == before
    assert signal.getsignal(signal.SIGALRM) is previous and _timer_clear()


def test_alarm_stands_down_for_a_host_handler(monkeypatch):
    """A host that installed its own SIGALRM handler owns the signal: no swap, no timer."""
    seen = []

    def host_handler(signum, frame):
        seen.append(signum)

    def judge(text, gold, question=None):
        seen.append((signal.getsignal(signal.SIGALRM) is host_handler, _timer_clear()))
        return True, "4"
    monkeypatch.setattr(R, "_judge", judge)
    previous = signal.signal(signal.SIGALRM, host_handler)
    try:
        out = score(contract("4"), "4")
    finally:
        signal.signal(signal.SIGALRM, previous)
    assert out["acc"] == 1.0 and seen == [(True, True)]


def test_alarm_stands_down_for_a_host_timer(monkeypatch):
    """A host timer already armed (e.g. verl's timeout_limit) is left running, untouched."""
    def judge(text, gold, question=None):
        assert signal.getsignal(signal.SIGALRM) is signal.SIG_IGN
        return True, "4"
    monkeypatch.setattr(R, "_judge", judge)
    previous = signal.signal(signal.SIGALRM, signal.SIG_IGN)  # ignored: the test cannot be killed
    try:
        signal.setitimer(signal.ITIMER_REAL, 30)
        out = score(contract("4"), "4")
        left = signal.getitimer(signal.ITIMER_REAL)[0]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert out["acc"] == 1.0 and 25 < left <= 30


def test_no_timer_left_after_normal_calls():
    previous = signal.getsignal(signal.SIGALRM)
    for resp, gold in [(contract("4"), "4"), ("\\boxed{(x+1)^2}", "x^2+2x+1"), ("\\boxed{8^{8^{8^{8}}}}", "3")]:
        score(resp, gold)
        assert signal.getsignal(signal.SIGALRM) is previous and _timer_clear()


# ======================================================================================
# Property tests: arbitrary text never raises and stays within the time bound
# ======================================================================================
LATEX_TOKENS = [
    "\\boxed{", "\\fbox{", "{", "}", "\\frac", "\\dfrac", "\\sqrt", "^", "_", "!", "\\binom", "(", ")", "[", "]",
    "\\{", "\\}", ",", ";", "=", "<", ">", "\\le", "\\pm", "\\cup", "\\infty", "\\pi", "e", "i", "x", "0", "1", "2",
    "9", "99999", ".", "\\overline", "\\ldots", "\\%", "^\\circ", "\\text{", "\\textbf{", " cm", " or ", " and ",
    "\\begin{pmatrix}", "\\end{pmatrix}", "&", "\\\\", "\\left(", "\\right)", "\\times", "/", "-", "+", "\\sin",
    "\\log", "<think>\n", "\n</think>\n", "\n<answer>\n", "\n</answer>", "Step 1: solve", "\n", " ", "$",
    "Problem:", "wait", "\\mathbb{R}", "(B)", "1e5", "\\sum", "\\int", "\\sqrt[3]", "3.14", "_2", "\\",
]
_PROP = settings(max_examples=150, deadline=None, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _check(resp, gold):
    t = time.perf_counter()
    out = score(resp, gold)
    assert time.perf_counter() - t < BOUND_S
    assert set(out) == set(KEYS) and all(type(out[k]) is t_ for k, t_ in KEYS.items())
    assert 0.0 <= out["score"] <= 1.0


@_PROP
@given(st.text(max_size=400), st.text(max_size=40))
def test_property_arbitrary_text(resp, gold):
    _check(resp, gold)
    _check("\\boxed{" + resp + "}", gold)


@_PROP
@given(st.lists(st.sampled_from(LATEX_TOKENS), max_size=40), st.lists(st.sampled_from(LATEX_TOKENS), max_size=12))
def test_property_latex_soup(pred_tokens, gold_tokens):
    before = R.STATS["internal_errors"]
    _check("So $\\boxed{" + "".join(pred_tokens) + "}$", "".join(gold_tokens))
    _check("".join(pred_tokens), "".join(gold_tokens))
    assert R.STATS["internal_errors"] == before


@_PROP
@given(st.sampled_from([v[1] for cases in EQUIVALENCE.values() for v in cases]))
def test_property_gold_matches_itself(gold):
    assert score("\\boxed{" + gold + "}", gold)["acc"] == 1.0


# ======================================================================================
# The equivalence pipeline, step by step (section 4 of the reward): for each step one
# answer that earns, one that does not, and an edge case. Our own literals.
# ======================================================================================
PIPELINE_STEPS = [
    # (a) unicode maths to LaTeX
    ("a unicode", "7√5", "7\\sqrt{5}", EQ),
    ("a unicode", "5√7", "7\\sqrt{5}", NE),
    ("a unicode", "1¼", "\\frac{5}{4}", EQ),                     # a mixed number
    ("a unicode", "∜8", "\\sqrt[4]{8}", EQ),
    ("a unicode", "(−∞, 2) ∪ (2, ∞)", "(-\\infty,2)\\cup(2,\\infty)", EQ),
    ("a unicode", "3x⁴", "3x^4", EQ),
    ("a unicode", "3x⁴", "3x^3", NE),
    # (b) wrappers, labels, units
    ("b label", "\\text{The total is } 12", "12", EQ),
    ("b label", "\\text{Remainder: } \\frac{7}{3}", "7", NE),
    ("b label", "\\textbf{(A)}\\ 12", "12", EQ),                 # a choice letter before a value
    ("b unit", "32\\text{ m}^2", "32\\text{ square meters}", EQ),
    ("b unit", "5 \\text{ sq ft}", "5\\mbox{ feet}^2", EQ),
    ("b unit", "0.5\\text{ m}", "0.5\\text{ cm}", NE),           # another unit is another answer
    ("b unit", "6 \\text{ cm}^3", "6\\text{ square cm}", NE),    # the power is part of the unit
    ("b time", "7:15 \\text{ PM}", "\\text{7:15 p.m.}", EQ),
    ("b time", "7:15 \\text{ a.m.}", "\\text{7:15 p.m.}", NE),
    ("b time", "7\\!:\\!15", "\\text{7:15 p.m.}", EQ),           # the half of the day omitted
    ("b thousands", "30^\\circ, 150^\\circ", "150^\\circ,30^\\circ", EQ),  # a list, not 30,150
    # (c) relation chains: the last side, when the gold is no relation
    ("c chain", "AB = 2 \\cdot 3\\sqrt{2} = 6\\sqrt{2}", "6\\sqrt2", EQ),
    ("c chain", "g(1) = 2 + 3 = 6", "6", NE),                    # a false numeric side
    ("c chain", "(a, b) = (1, 4)", "(1,4)", EQ),
    ("c chain", "(a, b) = (4, 1)", "(1,4)", NE),
    ("c chain", "y = 2x + 1", "y = 2x+1", EQ),                   # gold a relation: compared as one
    # (d) typed parse: vectors, bracketed arrays, word answers
    ("d vector", "(3, -4)", "\\begin{pmatrix} 3 \\\\ -4 \\end{pmatrix}", EQ),
    ("d vector", "(3, 4)", "\\begin{pmatrix} 3 \\\\ -4 \\end{pmatrix}", NE),
    ("d vector", "\\left[\\begin{array}{cc} 1 & 2 \\\\ 3 & 4 \\end{array}\\right]",
     "\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}", EQ),
    ("d text", "\\text{The function is odd}", "\\text{odd}", EQ),
    ("d text", "\\text{It is not odd}", "\\text{odd}", NE),
    ("d text", "\\text{Monday or Tuesday}", "\\text{Monday}", NE),
    # (e) compare by type: relations by side, numbers exactly
    ("e relation", "4r^2 \\geq t", "t \\le 4r^2", EQ),
    ("e relation", "t \\geq 4r^2", "t \\le 4r^2", NE),
    ("e relation", "t < 4r^2", "t \\le 4r^2", NE),
]


@pytest.mark.parametrize("step,pred,gold,expected", PIPELINE_STEPS,
                         ids=[f"{s}:{p[:30]}|{g[:20]}" for s, p, g, _ in PIPELINE_STEPS])
def test_pipeline_step(step, pred, gold, expected):
    assert acc(pred, gold) is expected


# ======================================================================================
# The hack-defence policy (section 3): each hack reproduced, and the honest form beside it
# ======================================================================================
POLICY = [
    ("candidate cycling", "If it were 3 the sum is $\\boxed{7}$.\nIf it were 4 it is $\\boxed{9}$.\n"
     "If it were 5 it is $\\boxed{11}$.", "11", NE),
    ("self-correction is not cycling", "I get $\\boxed{7}$.\nWait, that is wrong. Redo: $\\boxed{9}$.\n"
     "So the answer is $\\boxed{9}$.", "9", EQ),
    ("echoed worked example", "Example: $2+2 = \\boxed{4}$.\nNow let's solve the given problem: we need",
     "4", NE),
    ("example then own answer", "Example: $2+2 = \\boxed{4}$.\nNow let's solve the given problem: $\\boxed{6}$.",
     "6", EQ),
    ("restated expand task", "We need to expand $(x+1)(x-2)$.\n\nSo $\\boxed{(x+1)(x-2)}$.", "x^2-x-2", NE),
    ("expand task done", "We need to expand $(x+1)(x-2)$.\n\nSo $\\boxed{x^2-x-2}$.", "x^2-x-2", EQ),
    ("restated simplify task", "To simplify $\\frac{12}{16}$ we look for factors. $\\boxed{\\frac{12}{16}}$",
     "\\frac34", NE),
    ("factor task answered with a sum", "To factor, note the common factor. $\\boxed{x(x+3)+2(x+3)}$",
     "(x+2)(x+3)", NE),
    ("factor task done", "To factor, note the common factor. $\\boxed{(x+3)(x+2)}$", "(x+2)(x+3)", EQ),
]


@pytest.mark.parametrize("name,resp,gold,expected", POLICY, ids=[c[0] for c in POLICY])
def test_policy(name, resp, gold, expected):
    assert (score(resp, gold)["acc"] == 1.0) is expected


def test_restated_task_read_from_the_question():
    """With the problem text in extra_info (prepare_math's ``question``) the task is read
    from it, even when the response never restates it."""
    resp = "The expression is $\\boxed{x(x+2)+3(x+2)}$."
    info = {"question": "Factor the expression $x(x+2)+3(x+2)$."}
    assert R.compute_score(SRC, resp, "(x+3)(x+2)", info)["acc"] == 0.0
    assert R.compute_score(SRC, resp, "(x+3)(x+2)")["acc"] == 1.0  # no task known: equal values
    assert R.compute_score(SRC, "$\\boxed{(x+2)(x+3)}$", "(x+3)(x+2)", info)["acc"] == 1.0


# ======================================================================================
# The generalised steps: one answer that earns, one that does not, per family (our literals)
# ======================================================================================
FAMILIES = [
    # (b7) number words, with or without a unit word; an article before a text answer
    ("words", "five", "5", EQ),
    ("words", "\\text{twenty-one digits}", "21", EQ),
    ("words", "one hundred and five", "105", EQ),
    ("words", "\\text{six}", "5", NE),
    ("words", "\\text{one of them}", "1", NE),                    # not a count of a unit
    ("words", "one-to-one", "1", NE),
    ("words", "two three", "5", NE),                             # two numbers, not one cardinal
    ("words", "\\text{There are five digits}", "5", EQ),          # a sentence stating the count
    ("words", "\\text{There are not five digits}", "5", NE),
    ("article", "\\text{a circle}", "\\text{circle}", EQ),
    ("article", "\\text{an ellipse}", "\\text{circle}", NE),
    ("article", "\\text{not a circle}", "\\text{circle}", NE),
    ("words", "\\text{one half}", "\\frac{1}{2}", EQ),       # fractions in words
    ("words", "three quarters", "\\frac34", EQ),
    ("words", "\\text{one third}", "\\frac23", NE),
    ("words", "\\text{one third of them}", "\\frac13", NE),
    ("article", "\\text{an even function}", "\\text{even}", EQ),  # the answer word with its noun
    ("article", "\\text{an odd function}", "\\text{even}", NE),
    ("article", "\\text{not an even function}", "\\text{even}", NE),
    ("article", "\\text{neither even nor odd}", "\\text{neither}", EQ),
    ("article", "\\text{even or odd}", "\\text{even}", NE),
    # (c) relation prefixes whose right side is the answer
    ("relation", "\\lambda \\in (3,4]", "(3,4]", EQ),
    ("relation", "a_1 \\in [3,4)", "(3,4]", NE),
    ("relation", "F(x) \\in [6, \\infty)", "[6,\\infty)", EQ),   # a name with its argument
    ("relation", "F(x) \\in (6, \\infty)", "[6,\\infty)", NE),
    ("relation", "\\frac{1}{2} \\le p(x) \\le \\frac{3}{2}", "\\left[ \\frac{1}{2}, \\frac{3}{2} \\right]", EQ),
    ("relation", "\\frac{1}{2} < p(x) \\le \\frac{3}{2}", "\\left[ \\frac{1}{2}, \\frac{3}{2} \\right]", NE),
    ("relation", "\\approx 2.65", "2.65", EQ),
    ("relation", "x ≈ 2.65", "2.65", EQ),
    ("relation", "x ≡ 8 (mod 13)", "8", EQ),
    ("relation", "\\sqrt{7} \\approx 2.65", "\\sqrt7", EQ),        # the exact side, rounded right
    ("relation", "\\sqrt{7} \\approx 2.71", "\\sqrt7", NE),        # a false approximation
    ("relation", "x \\equiv 8 \\pmod{13}", "8", EQ),
    ("relation", "8 \\ (\\text{mod } 13)", "8", EQ),
    ("relation", "\\equiv 21 \\pmod{13}", "8", NE),               # a residue, not the remainder
    ("relation", "8 \\pmod{13}", "8 \\pmod{12}", NE),             # another modulus
    ("relation", "r = 3 \\text{ units}", "3", EQ),
    ("relation", "r = 4 \\text{ units}", "3", NE),
    # (b3) unit abbreviations in any wrapper
    ("unit", "10\\ \\mathrm{in}", "10\\text{ inches}", EQ),
    ("unit", "10\\,\\operatorname{cm}", "10", EQ),
    ("unit", "10~\\mbox{ft}", "10\\text{ inches}", NE),
    # (b6) base subscripts in any brace style
    ("base", "1011_2", "1011_{2}", EQ),
    ("base", "(1011)_{(2)}", "1011_2", EQ),
    ("base", "1011_{\\text{two}}", "1011_2", EQ),
    ("base", "1011_{3}", "1011_2", NE),
    ("base", "141 \\text{ in base } 13", "141_{13}", EQ),         # the base in words
    ("base", "1112112\\ (\\text{base }3)", "1112112_3", EQ),
    ("base", "7602 \\text{ (base 9)}", "7602_8", NE),
    ("base", "0.0011_{(2)}", "0.0011_{2}", EQ),                   # a radix point
    ("base", "0.0011_{(3)}", "0.0011_{2}", NE),
    # (d) option letters in any case and bracket
    ("choice", "\\text{(e)}", "\\text{(E)}", EQ),
    ("choice", "[E]", "E", EQ),
    ("choice", "\\text{Option e}", "(E)", EQ),
    ("choice", "(d)", "\\text{(E)}", NE),
    ("choice", "(a)(a+1)", "a^2+a", EQ),                         # a product, not the option (a)
    # (e) repeating decimals, long periods and other notations
    ("repeating", "0.\\overline{0588235294117647}", "\\frac{1}{17}", EQ),
    ("repeating", "0.(142857)", "\\frac17", EQ),
    ("repeating", "0.\\dot{1}4285\\dot{7}", "\\frac17", EQ),
    ("repeating", "0.\\overline{0588235294117648}", "\\frac{1}{17}", NE),
    ("repeating", "0.0588235294117647", "\\frac{1}{17}", NE),     # a truncation is no exact value
]


@pytest.mark.parametrize("family,pred,gold,expected", FAMILIES, ids=[f"{f}:{p[:30]}|{g[:20]}" for f, p, g, _ in FAMILIES])
def test_generalised_family(family, pred, gold, expected):
    assert acc(pred, gold) is expected


def test_hedged_bases_and_moduli_are_distinct_answers():
    """Boxes that differ only in a base subscript or a modulus are different answers (a hedge)."""
    assert score("It is $\\boxed{422_8}$ or $\\boxed{422_{9}}$.", "422_8")["acc"] == 0.0
    assert score("It is $\\boxed{8 \\pmod{13}}$ or $\\boxed{8 \\pmod{12}}$.", "8")["acc"] == 0.0


# ======================================================================================
# The written policy (maintenance/reward_policy.py POLICY_RULES, docs/reward_policy.md): every rule's examples
# ======================================================================================
@pytest.mark.parametrize("rule", POLICY_RULES, ids=[r["rule"] for r in POLICY_RULES])
def test_policy_rule(rule, unhurried):
    assert rule["examples"] and rule["source"] and rule["decision"] and rule["choice"]
    for question, answer, gold, paid in rule["examples"]:
        t0 = time.perf_counter()
        got = R.compute_score(SRC, contract(answer), gold, {"question": question} if question else None)["acc"]
        assert (got == 1.0) is paid, (rule["rule"], question[:60], answer, gold)
        assert time.perf_counter() - t0 < BOUND_S


def test_policy_table_lists_every_rule():
    table = policy_markdown()
    assert table.count("\n") == len(POLICY_RULES) + 1
    assert all(f"| {r['rule']} |" in table for r in POLICY_RULES)
    assert (REPO / "docs" / "reward_policy.md").read_text().count(table) == 1


@pytest.mark.parametrize("question,demands", [
    ("List the solutions in increasing order.", {"ordered"}),
    ("Order them from greatest to least.", {"ordered"}),
    ("Rationalize the denominator of $\\frac{1}{\\sqrt3}$.", {"rationalised"}),
    ("Express your answer in simplest radical form.", {"radical form"}),
    ("Express your answer as a common fraction.", {"common fraction"}),
    ("Express the ratio in lowest terms.", {"lowest terms"}),
    ("Express your answer as a decimal or a common fraction.", set()),
    ("How many rationals in $[0,2)$ can be written as fractions $\\frac{n}{d}$?", set()),  # describes, not asks
    ("Consider the proper fractions with denominator 7. What is their sum?", set()),
    ("Express the sum as a simple fraction in lowest terms.", {"common fraction", "lowest terms"}),
    ("Give the endpoints as common fractions (not mixed numbers or decimals).", {"common fraction"}),
    ("Express your answer as a mixed number.", {"mixed number"}),
    ("What is the 9th digit to the right of the decimal point?", set()),
    ("Express your answer as a decimal to the nearest tenth.", {"decimal"}),
    ("Your answer should use exponential notation.", {"exponential"}),
    ("Express your answer as a percent.", {"percent"}),
    ("Express your answer in interval notation.", {"interval"}),
    ("Express your answer as an interval or as a union of intervals.", {"interval"}),
    ("What is the length of the interval $[2, 5]$?", set()),
    ('Enter the equation of the line in the form "$y = mx + b$".', {"solved for y"}),
    ("Enter all the solutions, separated by commas.", {"list"}),
    ("where $A > 0$ and $\\gcd(|A|,|B|,|C|,|D|) = 1.$", {"normalised"}),
    ("Find all solutions.", set()),
])
def test_question_demands(question, demands):
    assert R.question_demands(question) == demands


def test_question_options():
    q = ("Which is it?\n\n(A) Line\n(B) Circle\n(C) Parabola\n(D) Ellipse\n(E) Hyperbola\n\n"
         "Enter the letter of the correct option.")
    assert R.question_options(q) == {"A": "Line", "B": "Circle", "C": "Parabola", "D": "Ellipse", "E": "Hyperbola"}
    assert R.question_options("Find (A) and (B).") == {}
    info = {"question": q}
    assert R.compute_score(SRC, "$\\boxed{\\text{circle}}$", "\\text{(B)}", info)["acc"] == 1.0
    assert R.compute_score(SRC, "$\\boxed{\\text{circle}}$", "\\text{(B)}")["acc"] == 0.0  # options unknown
    assert R.compute_score(SRC, "$\\boxed{\\text{ellipse}}$", "\\text{(B)}", info)["acc"] == 0.0


@pytest.mark.parametrize("question,letters", [
    ("Which is closest to 67.4?\n\nA.\t67.332\nB.\t67.473\nC.\t67.526\n\nExpress your answer as A, B, or C.",
     {"A": "67.332", "B": "67.473", "C": "67.526"}),
    ("Which is true?\n\nA) $f(0) < 0$\n\nB) $f(0) = 0$\n\nC) $f(0) = 5$", {"A": "f(0) < 0", "B": "f(0) = 0",
                                                                          "C": "f(0) = 5"}),
    ("Cost?\n\n$\\bullet$ A. $50$ dollars\n\n$\\bullet$ B. $38$ dollars\n\n$\\bullet$ C. $34$ dollars\n\nAnswer A, B or C.",
     {"A": "50  dollars", "B": "38  dollars", "C": "34  dollars"}),
    ('Enter "C" for circle, "P" for parabola, "E" for ellipse, and "N" for none of the above.',
     {"C": "circle", "P": "parabola", "E": "ellipse", "N": "none of the above"}),
    ('label("A", (0,0)); label("B", (1,0)); Find $AB$.', {}),
])
def test_question_options_layouts(question, letters):
    assert R.question_options(question) == letters


@pytest.mark.parametrize("question,answer,gold,expected", [
    ("Closest?\n\nA. 10\nB. 8\nC. 5\nD. 3\n\nExpress your answer as A, B, C, or D.", "10", "\\text{A}", True),
    ("Closest?\n\nA. 10\nB. 8\nC. 5\nD. 3\n\nExpress your answer as A, B, C, or D.", "8", "\\text{A}", False),
    ("Which type of conic? Enter \"C\" for circle, \"P\" for parabola, \"E\" for ellipse.", "\\text{circle}",
     "\\text{(C)}", True),
    ("Which type of conic? Enter \"C\" for circle, \"P\" for parabola, \"E\" for ellipse.", "\\text{ellipse}",
     "\\text{(C)}", False),
    ("Which round to 40?\nA. $43$\nB. $23$\nC. $38$\nD. $51$\nAnswer as a block of letters.", "\\text{A, C}",
     "\\text{AC}", True),
    ("Which round to 40?\nA. $43$\nB. $23$\nC. $38$\nD. $51$\nAnswer as a block of letters.", "\\text{C, A}",
     "\\text{AC}", False),
    ("Which round to 40?\nA. $43$\nB. $23$\nC. $38$\nD. $51$\nAnswer as a block of letters.", "\\text{A, C, D}",
     "\\text{AC}", False),
    ("Closest?\n\nA. 10\nB. 8\nC. 5\nD. 3\n\nExpress your answer as A, B, C, or D.", "B: 8", "\\text{B}", True),
    ("Closest?\n\nA. 10\nB. 8\nC. 5\nD. 3\n\nExpress your answer as A, B, C, or D.", "(B) 5", "\\text{B}", False),
])
def test_options_in_any_layout(question, answer, gold, expected):
    assert (R.compute_score(SRC, contract(answer), gold, {"question": question})["acc"] == 1.0) is expected


@pytest.mark.parametrize("pred,gold,expected", [
    ("3+4\\mathrm{i}", "3+4i", EQ),                     # the imaginary unit is no unit
    ("\\langle 1, 2 \\rangle", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", EQ),
    ("\\langle 2, 1 \\rangle", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", NE),
    ("\\pi/3", "\\frac\\pi3", EQ),
    ("\\varnothing", "\\emptyset", EQ),
    ("\\{\\}", "\\emptyset", EQ),
    ("\\{0\\}", "\\emptyset", NE),
    ("6\\text{ cm}, 8\\text{ cm}", "6, 8", EQ),            # the unit on every item of a list
    ("6\\text{ cm}, 9\\text{ cm}", "6, 8", NE),
    ("\\textcolor{blue}{5}", "5", EQ),
    ("\\color{red}6", "5", NE),
    ("5 \\text{ (the smallest)}", "5", EQ),                    # a remark in words after the value
    ("x = 5 \\text{ (only positive root)}", "5", EQ),
    ("5 \\text{ (approximately)}", "5", NE),                    # an approximation, not a remark
    ("5 \\text{ (or maybe six)}", "5", NE),
    ("5 \\text{ (in thousands)}", "5", NE),                     # a scale changes the value
])
def test_notation_only(pred, gold, expected):
    assert acc(pred, gold) is expected


@pytest.mark.parametrize("resp,gold,expected", [
    ("So $x = \\boxed{3}$ (or maybe 4).", "3", NE),        # an unboxed alternative after the box
    ("So $x = \\boxed{3}$, or possibly $4$.", "3", NE),
    ("So $x = \\boxed{3}$, or $3$ units.", "3", EQ),       # the same value again
    ("So $x = \\boxed{3}$ or equivalently $\\frac{6}{2}$.", "3", EQ),
    ("It is $\\boxed{\\frac{1}{2}} = \\boxed{0.5}$.", "\\frac12", EQ),  # one value, two notations
    ("It is $\\boxed{\\frac{1}{2}} = \\boxed{0.6}$.", "\\frac12", NE),
    ("We need to compute $55^2 - 45^2$. It is $\\boxed{55^2 - 45^2}$ and $\\boxed{1000}$.", "1000", NE),  # an echo box
    ("So $\\boxed{3}$ (or maybe $\\frac{7}{2}$).", "3", NE),
    ("Step 1 gives $\\boxed{4}$. Step 2 corrects it: the answer is $\\boxed{5}$.", "5", EQ),
])
def test_final_statement_alternatives(resp, gold, expected):
    assert (score(resp, gold)["acc"] == 1.0) is expected


#: A question whose options run past E, each a value: "F) 10^5".
CLOSEST = ("Which of the following is closest to $10^0 + 10^1 + 10^2 + 10^3 + 10^4 + 10^5$?"
           + "".join(f"\n\n$\\bullet$ {letter}) $10^{k}$" for k, letter in enumerate("ABCDEFG"))
           + "\n\nWrite your answer as A, B, C, D, E, F, or G.")


@pytest.mark.parametrize("question,answer,gold,expected", [
    ("What percent of the class? Express your answer as a percent.", "0.25", "25\\%", False),
    ("What percent of the class? Express your answer as a percent.", "25", "25\\%", True),
    ("What fraction of the class?", "0.25", "25\\%", True),                  # no form named
    ("Simplify the fraction $\\frac{18}{24}$.", "\\frac{6}{8}", "\\frac34", False),
    ("What is the probability that both are red?", "\\frac{48}{64}", "\\frac34", True),
    ("Simplify $\\sqrt{6}\\cdot\\sqrt{12}$.", "\\sqrt{72}", "6\\sqrt2", False),
    ("Simplify $\\sqrt{6}\\cdot\\sqrt{12}$.", "6\\sqrt{2}", "6\\sqrt2", True),
    ("Your answer should have an integer denominator.", "\\frac{1}{\\sqrt2}", "\\frac{\\sqrt2}{2}", False),
    ("Express your answer in simplest radical form.", "\\sqrt{12.5}", "\\frac{5\\sqrt2}{2}", False),
    ("Express your answer in interval notation.", "-2 < x < 3", "(-2,3)", False),
    ("Express your answer in interval notation.", "x \\in (-2, 3)", "(-2,3)", True),
    ("Find the range of $f$.", "-2 < f(x) < 3", "(-2,3)", True),
    ("Express your answer as a fraction in simplest form.", "0.\\overline{3}", "\\frac13", False),
    ("Enter all the solutions, separated by commas.", "110, 70", "70,110", True),
    ("Enter all the solutions, separated by commas.", "x = 70^\\circ \\text{ or } x = 110^\\circ", "70,110", True),
    ("Enter all the solutions, separated by commas.", "70", "70,110", False),
    ("How many ways?", "70110", "70,110", True),                                # a thousands separator
    ("Factor $8x^2 - 14x + 3$ as $(2x-3)$ times what?", "4x-1", "(4x - 1)", True),
    ("What time is it?", "4{:}30\\ \\text{p.m.}", "\\text{4:30 p.m.}", True),
    ("What time is it?", "4{:}30\\ \\text{a.m.}", "\\text{4:30 p.m.}", False),
    ("What time is it?", "4\\text{ p.m.}", "\\text{4:00 p.m.}", True),
    ("What time is it?", "5\\text{ p.m.}", "\\text{4:00 p.m.}", False),
    ("On what day?", "\\text{June 20th}", "\\text{June 20}", True),
    ("On what day?", "\\text{June 21st}", "\\text{June 20}", False),
    ("What is the remainder?", "\\equiv 2 \\pmod{n}", "2", True),
    ("Expand the product: $\\frac{2}{5}\\left(\\frac{5}{x} + 10x^2\\right)$.", "(2/x) + 4x^2", "\\frac{2}{x} + 4x^2",
     True),                                                                   # a bracketed fraction is no product
    ("Expand the product: $\\frac{2}{5}\\left(\\frac{5}{x} + 10x^2\\right)$.", "2(\\frac{1}{x} + 2x^2)",
     "\\frac{2}{x} + 4x^2", False),
    ("Write it in simplest radical form as $\\frac{\\sqrt{a}}{b}$; what is $ab$?", "18.0", "18", True),  # 18.0 is 18
    ("Express your answer as a common fraction.", "2.50", "\\frac52", False),
    ("Write your answer in the form $a\\sqrt{b}$.", "\\sqrt{12}", "2\\sqrt3", False),  # a template names the form
    ("Write your answer in the form $a\\sqrt{b}$.", "2 \\sqrt{3}", "2\\sqrt3", True),
    ("Express it in the form $\\frac{a}{b}$.", "0.75", "\\frac34", False),
    ("Write it in the form $\\frac{a\\sqrt{b}}{c}$. Find $a+b+c$.", "12", "12", True),
    # a fractional exponent is no radical form; without that demand it is the same value
    ("Express your answer in simplest radical form in terms of $x$.", "x^{1/2}", "\\sqrt{x}", False),
    ("Express your answer in simplest radical form in terms of $x$.", "\\sqrt{x}", "\\sqrt{x}", True),
    ("Write $\\sqrt{x^3}/x$ as a power of $x$ or a root.", "x^{\\frac{1}{2}}", "\\sqrt{x}", True),
    # a ratio with a colon is no common fraction; without that demand it states the ratio
    ("What is the ratio? Express your answer as a common fraction.", "1:10", "\\frac{1}{10}", False),
    ("What is the ratio? Express your answer as a common fraction.", "\\frac{1}{10}", "\\frac{1}{10}", True),
    ("What is the ratio of the areas?", "1:10", "\\frac{1}{10}", True),
    # "simplest fractional form" demands a fraction, unless the clause offers a decimal too
    ("Solve for $x$. Express your answer in simplest fractional form.", "1.8", "\\frac9{5}", False),
    ("Solve for $x$. Express your answer in simplest fractional form.", "\\frac{9}{5}", "\\frac9{5}", True),
    ("Solve for $x$. Give your answer as a decimal or in fractional form.", "1.8", "\\frac9{5}", True),
    # "terms of decreasing degree": the terms' total degrees may not rise left to right
    ("Write your answer as a polynomial with terms of decreasing degree.", "-5+y+7y^2-2y^3+y^4",
     "y^4-2y^3+7y^2+y-5", False),
    ("Write your answer as a polynomial with terms of decreasing degree.", "y^4 - 2y^3 + 7y^2 + y - 5",
     "y^4-2y^3+7y^2+y-5", True),
    ("Write the answer in descending order of degree.", "x^2y - 3xy + 2", "x^2y-3xy+2", True),
    # a word after the value that bounds or hedges it is no unit
    ("Find the number of ordered triples.", "6 \\text{ or fewer}", "6", False),
    ("Find the number of ordered triples.", "6 \\text{ triples}", "6", True),
    ("How fast does it go, in miles per hour?", "5 \\text{ miles per hour}", "5", True),
    # "divided by 6" names the modulus of the remainder, beside a \\pmod 7 in the data
    ("Let $3^i\\equiv 5\\pmod 7.$ What is the remainder when $ij$ is divided by $6?$", "1 \\pmod{6}", "1", True),
    ("Let $3^i\\equiv 5\\pmod 7.$ What is the remainder when $ij$ is divided by $6?$", "1 \\pmod{5}", "1", False),
    ("Let $3^i\\equiv 5\\pmod 7.$ What is the smallest such $i$?", "5 \\pmod{6}", "5", False),
    # option letters past E, with their own text
    (CLOSEST, "\\text{F) } 10^5", "F", True),
    (CLOSEST, "\\text{G) } 10^6", "F", False),
    (CLOSEST, "\\text{F) } 10^6", "F", False),
    # an inverse function's label binds its variable as f(t) does
    ("If $h(x)=f(g(x))$, what is the inverse of $h(x)$?", "h^{-1}(y) = \\frac{y+2}{7}", "\\frac{x+2}{7}", True),
    ("If $h(x)=f(g(x))$, what is the inverse of $h(x)$?", "h^{-1}(y) = \\frac{y-2}{7}", "\\frac{x+2}{7}", False),
    ("If $h(x)=f(g(x))$, what is the inverse of $h(x)$?", "h^{-1}(x) = \\frac{x+2}{7}", "\\frac{x+2}{7}", True),
])
def test_named_forms_and_notations(question, answer, gold, expected):
    assert (R.compute_score(SRC, contract(answer), gold, {"question": question})["acc"] == 1.0) is expected


@pytest.mark.parametrize("pred,gold,expected", [
    ("f(2), f(1), f(4)", "f(2) < f(1) < f(4)", EQ),   # an order stated as a chain or as a list
    ("f(1), f(2), f(4)", "f(2) < f(1) < f(4)", NE),
    ("f(4) > f(1) > f(2)", "f(2) < f(1) < f(4)", EQ),
    ("a < c < b", "a < b < c", NE),
    ("-1 < x < 3", "(-1,3)", EQ),                      # one name: an interval, not an order
])
def test_order_chains(pred, gold, expected):
    assert acc(pred, gold) is expected


@pytest.mark.parametrize("question,answer,gold", [
    ("Compute $\\dbinom{8}{4}$.", "\\binom{8}{4}", "70"),
    ("What is $56.78-43.6?$", "56.78-43.6", "13.18"),
    ("Evaluate $\\left(\\frac{1}{2}\\right)^{2}$.", "(\\frac12)^2", "\\frac14"),
    ("Express $1.\\overline{27}$ as a common fraction in lowest terms.", "1.\\overline{27}", "\\frac{14}{11}"),
    ("Find $\\log_2 8$.", "\\log_2 8", "3"),
    ("Simplify\n\\[\\frac{\\sec x}{\\sin x} - \\frac{\\sin x}{\\cos x}.\\]", "\\frac{\\sec x}{\\sin x} - \\frac{\\sin x}{\\cos x}",
     "\\cot x"),  # the line break leads into the task's display maths
])
def test_prompt_echo_with_the_question_is_not_paid(question, answer, gold):
    info = {"question": question}
    assert R.compute_score(SRC, contract(answer), gold, info)["acc"] == 0.0
    assert R.compute_score(SRC, contract(answer), gold)["acc"] == 1.0  # without the question: equal values
    assert R.compute_score(SRC, contract(gold), gold, info)["acc"] == 1.0  # the gold as written always earns


@pytest.mark.parametrize("question,answer,gold", [
    ("Which is larger, $\\frac{3}{4}$ or $\\frac{2}{3}$?", "\\frac{3}{4}", "\\frac34"),
    ("Compute $x$ if $x - 7 = 0$; is it $7$?", "7", "7"),
    ("Find $k$ such that the line passes through $(2, 5)$.", "5", "5"),
    ("Simplify $\\sqrt{50}$.", "5\\sqrt{2}", "5\\sqrt2"),
    ("Let $f(x) = x + 1$.\n\n\\[g(x) = 2x.\\]\nFind $g(1)$.", "2", "2"),  # no task verb before the display
])
def test_answers_that_appear_in_the_question_stay_correct(question, answer, gold):
    assert R.compute_score(SRC, contract(answer), gold, {"question": question})["acc"] == 1.0


# ======================================================================================
# Forms a task demands beyond the value, and notations that state the value: one family a
# list (question, boxed answer, gold, paid), with one answer paid, one refused and the edges
# ======================================================================================
_ORDERED_FACTORS_Q = ("Factor $-16x^4+x^2+2x+1$ into two quadratic polynomials with integer coefficients.  Submit "
                      "your answer in the form $(ax^2+bx+c)(dx^2+ex+f)$, with $a<d$.")
_FACTOR_Q = "Factor $36-4x^2$ completely."
_ROUNDED_OPTIONS_Q = ("Which of these is the smallest?\n$\\bullet$ A. $14.45001$ rounded to the nearest tenth.\n"
                      "$\\bullet$ B. $14.54999$ rounded to the nearest tenth.\n"
                      "$\\bullet$ C. $14.44999$ rounded to the nearest tenth.\n"
                      "$\\bullet$ D. $14.55001$ rounded to the nearest tenth.")
_NAMED_Q = "Which is least? $$A=\\sqrt{2}, \\quad B=\\sqrt[4]{4}, \\quad C=\\sqrt[8]{8}.$$"
_LINES_Q = "Which are valid?\n\n(A) $a$\n\n(B) $b$\n\n(C) $c$\n\n(D) $d$\n\n(E) $e$\n\n(F) $f$\n\nEnter the letters."
_RADICAL_Q = "Express your answer in simplest radical form."
_HUNDREDTH_Q = "What is the volume in cubic inches? Express your answer as a decimal to the nearest hundredth."
_GRAPH_Q = "Which graph shows the volume over time? Provide the correct letter (A, B, C, D, or E) answer."
_AXBY_Q = ("What is the equation of this line? Express your answer as $ax+by=c$, where $a$, $b$, and $c$ are "
           "integers, $a>0$, and $a$ is as small as possible.")
_ZERO3 = "\\begin{pmatrix} 0 \\\\ 0 \\\\ 0 \\end{pmatrix}"
QUESTION_FAMILIES = {
    "true chain ending in the value": [
        ("", "\\binom{5}{4}\\binom{10}{8} = 225", "225", True),
        ("", "\\binom{5}{4}\\binom{10}{8} = 50", "50", False),                       # a false chain
        ("", "2\\binom{10}{8}", "90", True), ("", "2\\binom{10}{8}", "47", False),   # a product, not a sum
        ("", "2(3)", "6", True), ("", "2(3)", "5", False), ("", "6\\frac{1}{5}", "\\frac{31}{5}", True),
    ],
    "labelled values": [
        ("", "n_1 = 19, n_2 = 22", "19, 22", True), ("", "n_2 = 22, n_1 = 19", "19, 22", True),
        ("", "x = 1, y = 2", "1, 2", True),
        ("", "n_1 = 19, n_2 = 23", "19, 22", False),
        ("", "0 < x < 1", "0, 1", False),                                            # an interval, not two values
        ("Express your answer as an ordered pair.", "x=-1, y=6", "(-1,6)", True),
        ("$x^2 + 1$ is a factor of $x^4 + px^2 + q$. Enter the ordered pair $(p,q)$.", "p = 2, q = 1", "(2,1)", True),
        ("Enter the ordered pair $(b,a)$.", "b = 1, a = 2", "(1,2)", True),          # the question's order
        ("Enter the ordered pair $(b,a)$.", "b = 2, a = 1", "(1,2)", False),
        ("Enter the ordered pair $(b,a)$.", "a = 1, b = 2", "(1,2)", False),         # values in place, names not
    ],
    "zero vector": [
        ("", "\\mathbf{0}", _ZERO3, True), ("", "\\vec{0}", _ZERO3, True), ("", "\\vec 0", _ZERO3, True),
        ("", "\\boldsymbol{0}", _ZERO3, True),
        ("", "\\mathbf 0", "\\begin{pmatrix} 0 & 0 \\\\ 0 & 0 \\end{pmatrix}", True),
        ("", _ZERO3, "\\mathbf{0}", True),
        ("", "0", _ZERO3, False),                                                  # the number is not the vector
        ("", "\\mathbf{0}", "\\begin{pmatrix} 0 \\\\ 1 \\end{pmatrix}", False),
    ],
    "identity matrix": [
        ("", "-\\mathbf{I}", "\\begin{pmatrix} -1 & 0 \\\\ 0 & -1 \\end{pmatrix}", True),
        ("", "2\\mathbf{I}", "\\begin{pmatrix} 2 & 0 & 0 \\\\ 0 & 2 & 0 \\\\ 0 & 0 & 2 \\end{pmatrix}", True),
        ("", "\\mathbf{I}", "\\begin{pmatrix} -1 & 0 \\\\ 0 & -1 \\end{pmatrix}", False),
        ("", "-\\mathbf{I}", "\\begin{pmatrix} -1 & 0 \\\\ 0 & 1 \\end{pmatrix}", False),
        ("", "-\\mathbf{I}", "-1", False),                                          # the matrix is not the number
    ],
    "set-builder notation": [
        ("", "\\{x \\mid x \\leq 0\\}", "(-\\infty,0]", True), ("", "\\{y \\mid y \\le 0\\}", "(-\\infty, 0]", True),
        ("", "\\{x|0<x<1\\}", "(0,1)", True), ("", "\\left\\{x : x > 5\\right\\}", "(5,\\infty)", True),
        ("", "\\{x|0<x\\le 1\\}", "(0,1)", False),
        ("", "\\{x \\mid y \\leq 0\\}", "(-\\infty,0]", False),                      # the condition is on another name
        ("Express your answer in interval notation.", "\\{x|x>5\\}", "(5,\\infty)", False),
        ("", "\\{x : |x| \\geq 5\\}", "(-\\infty,-5]\\cup[5,\\infty)", True),      # a bound on |x|
        ("", "\\{x \\mid |x| < 2\\}", "(-2,2)", True),
        ("", "\\{x : |x| > 5\\}", "(-\\infty,-5]\\cup[5,\\infty)", False),
        ("", "\\{x \\mid |x| \\le 2\\}", "(-2,2)", False),
        ("", "\\{x \\mid |x| < a\\}", "(-2,2)", False),                                # a bound that is no constant
    ],
    "renamed function variable": [
        ("", "f(t) = t^2 - 7t + 12", "x^2 - 7x + 12", True),
        ("", "k(u) = 3 - \\sqrt{u - 3}", "-\\sqrt{x-3}+3", True),
        ("", "f(t) = t^2 - 7t + 13", "x^2 - 7x + 12", False),
        ("", "3 - \\sqrt{t-3}", "-\\sqrt{x-3}+3", False),                            # no label binds t
        ("", "f(t) = x^2 - 7t + 12", "x^2 - 7x + 12", False),                        # x is not bound by the label
    ],
    "segment named without its bar": [
        ("", "CD", "\\overline{CD}", True), ("", "\\overline{AB}", "\\overline{CD}", False),
        ("", "0.\\overline{36}", "\\frac{4}{11}", True),                               # a repeating decimal's bar
    ],
    "fraction demanded in words": [
        ("If $|z| = 1$, express $\\overline{z}$ as a simplified fraction in terms of $z$.", "z^{-1}", "\\frac{1}{z}",
         False),                                                                       # a negative power
        ("If $|z| = 1$, express $\\overline{z}$ as a simplified fraction in terms of $z$.", "\\frac{1}{z}", "\\frac1z",
         True),
        ("If $|z| = 1$, what is $\\overline{z}$ in terms of $z$?", "z^{-1}", "\\frac{1}{z}", True),  # no form asked
    ],
    "echo after a colon": [
        ("Find the value of $ : 8[6^2-3(11)]\\div8 + 3$.", "8[6^2-3(11)]\\div8 + 3", "6", False),
        ("Find the value of $ : 8[6^2-3(11)]\\div8 + 3$.", "6", "6", True),
    ],
    "word label from the question": [
        ("In what base does $44 \\times 55 = 3506$?", "\\text{base } 7", "7", True),
        ("In what base does $44 \\times 55 = 3506$?", "\\text{base } 8", "7", False),
        ("What is $44 \\times 55$ in base 10?", "\\text{base } 7", "7", False),       # not the noun asked for
        ("On which day of the month is the meeting?", "\\text{day } 12", "12", True),
        ("Find the positive base $b$ in which $5_b \\cdot 23_b = 151_b$.", "\\text{base } 7", "7", True),
        ("Find the positive base $b$ in which $5_b \\cdot 23_b = 151_b$.", "\\text{base } 8", "7", False),
    ],
    "modulus of the question": [
        ("Solve the congruence $3n \\equiv 2 \\pmod{11}$.", "n \\equiv 8 \\pmod{13}", "8", False),
        ("Solve the congruence $3n \\equiv 2 \\pmod{11}$.", "n \\equiv 8 \\pmod{11}", "8", True),
        ("Solve the congruence $3n \\equiv 2 \\pmod{11}$.", "8", "8", True),
        ("Find $x$ if $x \\equiv 2 \\pmod{3}$ and $x \\equiv 3 \\pmod{5}$.", "x \\equiv 8 \\pmod{15}", "8", True),
    ],
    "demanded interval": [
        ("Express your answer as an interval or as a union of intervals.", "0 \\le x < 1", "[0,1)", False),
        ("Express your answer as an interval or as a union of intervals.", "[0, 1)", "[0,1)", True),
        ("What is the domain of the function?", "0 \\le x < 1", "[0,1)", True),
    ],
    "unit the question asks for": [
        ("How much, in dollars, will 10 oranges cost?", "2.50 \\text{ cents}", "\\$2.50", False),
        ("How much, in dollars, will 10 oranges cost?", "2.50 \\text{ dollars}", "\\$2.50", True),
        ("How much, in dollars, will 10 oranges cost?", "\\$2.50", "\\$2.50", True),
        ("What is the height in centimeters of the cylinder?", "5 \\text{ m}", "5", False),
        ("What is the height in centimeters of the cylinder?", "5 \\text{ cm}", "5", True),
        ("What is the height in centimeters of the cylinder?", "5 \\text{ centimeters}", "5", True),
        ("In terms of $\\pi$, what is the area of the circle?", "5\\pi \\text{ cm}^2", "5\\pi", True),
        ("The height (in feet) is $77$. In how many seconds is it reached?", "3.5 \\text{ seconds}", "3.5", True),
        ("How many hours per week must she work?", "12 \\text{ hours}", "12", True),  # a rate without its "per"
        ("What is the length, in feet, of the shorter side?", "9 \\text{ ft}^2", "9", False),
        ("They differ by 27 years. What is the number of years in his age?", "41 \\text{ days}", "41", False),
        ("They differ by 27 years. What is the number of years in his age?", "41 \\text{ years}", "41", True),
        ("They differ by 27 years. What is the number of years in his age?", "41", "41", True),
        ("A rope is 3 feet long. How long is the rest?", "5 \\text{ m}", "5", False),      # length, another unit
        ("A rope is 3 feet long. After 2 hours, how long is it?", "5 \\text{ ft}", "5", True),
        ("It takes 27 years. What is the second number?", "4 \\text{ cm}", "4", True),     # another kind: not read
    ],
    "demanded line form": [
        ('Enter the equation of this line in the form "$y = mx + b$".', "2x + y = 0", "y = -2x", False),
        ('Enter the equation of this line in the form "$y = mx + b$".', "y = -2x + 0", "y = -2x", True),
        ('Enter the equation of this line in the form "$y = mx + b$".', "-2x", "y = -2x", True),
        ('Enter the equation of this line in the form "$y = mx + b$".', "-2x = y", "y = -2x", True),
        ("Find the equation of the line.", "2x + y = 0", "y = -2x", True),
    ],
    "normalised equation": [
        (_AXBY_Q, "4x - 5y = -50", "4x-5y=-50", True), (_AXBY_Q, "-5y + 4x = -50", "4x-5y=-50", True),
        (_AXBY_Q, "8x - 10y = -100", "4x-5y=-50", False),                             # a not as small as possible
        (_AXBY_Q, "-4x + 5y = 50", "4x-5y=-50", False),                               # a > 0 broken
        (_AXBY_Q, "y = \\frac{4}{5}x + 10", "4x-5y=-50", False),
        ("Find the equation of the line.", "8x - 10y = -100", "4x-5y=-50", True),      # no normalisation asked for
        ("Enter the plane in the form $Ax + By + Cz + D = 0,$ where $\\gcd(|A|,|B|,|C|,|D|) = 1.$",
         "x + 0y - 3z + 0 = 0", "x - 3z = 0", True),                                  # zero terms written out
    ],
    "letter with its computed value": [
        (_ROUNDED_OPTIONS_Q, "(C)\\ 14.4", "\\text{C}", True),
        (_ROUNDED_OPTIONS_Q, "(A)\\ 14.4", "\\text{C}", False),
        ("Closest?\n\nA. 10\nB. 8\nC. 5\nD. 3\n\nExpress your answer as A, B, C, or D.", "(B) 5", "\\text{B}", False),
        (_GRAPH_Q, "\\text{A: rises, then stays constant}", "A", True),           # a description after the letter
        (_GRAPH_Q, "\\text{B: rises, then stays constant}", "A", False),
        (_GRAPH_Q, "\\text{(A) and (B)}", "A", False),                              # two options named
    ],
    "complete factorisation": [
        ("Factor $28z^{97}+7z^{96}$.", "z^{96}(28z+7)", "7z^{96}(4z+1)", False),   # a common factor left inside
        ("Factor $28z^{97}+7z^{96}$.", "7z^{96}(1+4z)", "7z^{96}(4z+1)", True),
        (_FACTOR_Q, "(6-2x)(6+2x)", "4(3-x)(3+x)", False),
        (_FACTOR_Q, "4(9-x^2)", "4(3-x)(3+x)", False),                               # a reducible factor left
        (_FACTOR_Q, "-4(x-3)(x+3)", "4(3-x)(3+x)", True),                            # order, sign, units free
        ("Factor $2x^2+4x+2$.", "2(x+1)^2", "2(x+1)(x+1)", True),                    # a power of a factor
        ("Factor $2x^2+4x+2$.", "(2x+2)(x+1)", "2(x+1)^2", False),
        ("Factor $x^2-2$ over the reals.", "(x+\\sqrt{2})(x-\\sqrt{2})", "(x-\\sqrt2)(x+\\sqrt2)", True),  # not over Z
        ("Factor $4x^2+8x+4$.", "4(x+1)^2", "(2x+2)^2", True),                       # a gold not complete: no check
        ("Find the product of the two factors.", "(6-2x)(6+2x)", "4(3-x)(3+x)", True),  # no factor task
        ("Factor $x^4-4x^3+14x^2-4x+13$ over the integers.", "(x^2+1)(x-2-3i)(x-2+3i)", "(x^2+1)(x^2-4x+13)",
         False),                                                                     # factors not over Z
        ("Factor $x^{30}+x^{29}$.", "x^{29}(x+1)", "x^{29}(x+1)", True),
    ],
    "factors in a stated order": [
        (_ORDERED_FACTORS_Q, "(4x^2+x+1)(-4x^2+x+1)", "(-4x^2+x+1)(4x^2+x+1)", False),   # a<d broken
        (_ORDERED_FACTORS_Q, "(1+x-4x^2)(4x^2+x+1)", "(-4x^2+x+1)(4x^2+x+1)", True),     # each factor in any form
        ("Factor $-16x^4+x^2+2x+1$.", "(4x^2+x+1)(-4x^2+x+1)", "(-4x^2+x+1)(4x^2+x+1)", True),  # no order stated
        (_ORDERED_FACTORS_Q, "-(4x^2-x-1)(4x^2+x+1)", "(-4x^2+x+1)(4x^2+x+1)", True),    # not two bare factors
    ],
    "options named with letters": [
        (_NAMED_Q, "\\sqrt[8]{8}", "C", True), (_NAMED_Q, "2^{3/8}", "C", True),
        (_NAMED_Q, "\\sqrt[4]{4}", "B", False),                                   # the value of two options
        (_NAMED_Q, "\\sqrt[8]{8}", "A", False),
        (_NAMED_Q + " Enter your answer as $A$, $B$, or $C$.", "\\sqrt[8]{8}", "C", False),  # the letter demanded
        ("Let $A=(0,0)$, $B=(3,4)$ and $C=(1,1)$. Find the point nearest to $(3,5)$.", "B", "(3,4)", False),
    ],
    "block of option letters": [
        (_LINES_Q, "ACF", "\\text{A,C,F}", True), (_LINES_Q, "A, C, F", "\\text{ACF}", True),
        (_LINES_Q, "ACE", "\\text{A,C,F}", False), (_LINES_Q, "AC", "\\text{A,C,F}", False),
    ],
    "power factor under a root": [
        (_RADICAL_Q, "6x\\sqrt{1260x}", "36x \\sqrt{35x}", False),
        (_RADICAL_Q, "36x\\sqrt{35x}", "36x \\sqrt{35x}", True),
        (_RADICAL_Q, "2\\sqrt[3]{2}", "\\sqrt[3]{16}", True),                       # the gold has the form
        (_RADICAL_Q, "\\sqrt[3]{16}", "2\\sqrt[3]{2}", False), (_RADICAL_Q, "\\sqrt{4+x}", "\\sqrt{x+4}", True),
        ("Express in simplest form: $\\sqrt[12]{8^4}$", "\\sqrt[3]{8}", "2", False),
        ("Express in simplest form: $\\sqrt[12]{8^4}$", "2", "2", True),
        ("What is $\\sqrt[12]{8^4}$?", "\\sqrt[3]{8}", "2", True),                    # no form asked for
    ],
    "exact value with its rounding": [
        (_HUNDREDTH_Q, "\\frac{32\\sqrt{2}}{3} \\approx 15.08", "15.08", True),
        (_HUNDREDTH_Q, "\\frac{32\\sqrt{2}}{3}", "15.08", False),                   # the exact value alone
        (_HUNDREDTH_Q, "\\frac{1}{2} \\approx 15.08", "15.08", False),               # it does not round to 15.08
        (_HUNDREDTH_Q, "\\frac{32\\sqrt{2}}{3} \\approx 15.09", "15.08", False),
        (_HUNDREDTH_Q, "V \\approx 15.08", "15.08", True),
        ("Express your answer in simplest radical form.", "\\frac{32\\sqrt{2}}{3} \\approx 15.08",
         "\\frac{32\\sqrt2}{3}", True),                                                  # the exact side's form
    ],
    "one-symbol label": [
        ("What digit is $\\Delta$?", "\\Delta = 8", "8", True), ("", "E = 4", "4", True),
        ("", "\\Delta = 9", "8", False),
        ("", "\\pi = 3", "3", False), ("", "e = 4", "4", False),                   # constants, not names
    ],
}
_QF_CASES = [(f, q, a, g, e) for f, cases in QUESTION_FAMILIES.items() for q, a, g, e in cases]


@pytest.mark.parametrize("family,question,answer,gold,expected", _QF_CASES,
                         ids=[f"{f}:{a[:30]}|{g[:20]}" for f, _, a, g, _ in _QF_CASES])
def test_question_family(family, question, answer, gold, expected, unhurried):
    info = {"question": question} if question else None
    assert (R.compute_score(SRC, contract(answer), gold, info)["acc"] == 1.0) is expected
