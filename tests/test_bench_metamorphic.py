"""The metamorphic bench's classifier, its rewrites' labels and its reproducibility.

Fast: literal inputs only, no scoring and no data download; exact checks use fractions and
sympy's own parser (not the reward under test)."""

from __future__ import annotations

import random
import re
import subprocess
import sys
from fractions import Fraction

import pytest
import sympy

from conftest import REPO

from benchmarks import bench_metamorphic as bm


def truth(gt: str, problem: str = "") -> bm.Truth:
    return bm.annotate(bm.Truth(gt=gt, problem=problem, solution="We compute. So it is done.", source="test"))


@pytest.mark.parametrize("gt,problem,form", [
    ("42", "", "integer"),
    ("33,\\!800,\\!000", "", "integer"),
    ("111, \\! 111, \\! 111", "", "integer"),
    ("-17", "", "integer"),
    ("157.5", "", "decimal"),
    ("\\frac{9}{49}", "", "fraction"),
    ("-\\dfrac14", "", "fraction"),
    ("3\\frac18", "", "fraction"),
    ("4\\sqrt{6}", "", "radical"),
    ("\\frac{11 - \\sqrt{13}}{2}", "", "radical"),
    ("100+75\\pi", "", "constant"),
    ("(3x+7)(x+1)", "", "expression"),
    ("y = -\\frac{47}{8}", "", "equation"),
    ("\\frac{1}{3}, \\frac{1}{8}", "", "set"),
    ("12\\text{ and }13", "", "set"),
    ("(4,-7)", "", "tuple"),
    ("(2,\\infty)", "", "interval"),
    ("(-6, 6)", "Express your answer in interval notation.", "interval"),
    ("[1, 4)", "", "interval"),
    ("\\begin{pmatrix} 7 \\\\ -13 \\end{pmatrix}", "", "matrix"),
    ("\\mbox{Saturday}", "", "text"),
    ("\\text{C, F, H}", "", "text"),
    ("78\\%", "", "unit"),
    ("108\\text{ degrees}", "", "unit"),
    ("\\$2.50", "", "unit"),
    ("664_7", "", "base-n"),
    ("1 - 12i", "", "complex"),
])
def test_classify_literals(gt, problem, form):
    assert bm.classify(gt, problem) == form


def value(latex: str) -> sympy.Expr:
    """Exact value of the small LaTeX subset these tests use, by sympy's own parser."""
    from sympy.parsing.sympy_parser import (implicit_multiplication_application, parse_expr, rationalize,
                                            standard_transformations)

    s = latex.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").replace("−", "-")
    s = re.sub(r"√(\d+|[a-z])", r"sqrt(\1)", s).replace("√", "sqrt")
    s = s.replace("\\left", "").replace("\\right", "")
    while "\\frac" in s:
        i = s.index("\\frac")
        num, den, end = bm._frac_args(s, i)
        s = s[:i] + f"(({num})/({den}))" + s[end:]
    s = s.replace("\\sqrt", "sqrt").replace("{", "(").replace("}", ")").replace("\\pi", "pi").replace("π", "pi")
    s = s.replace("^", "**")
    tr = standard_transformations + (implicit_multiplication_application, rationalize)
    return parse_expr(s, transformations=tr)


@pytest.mark.parametrize("gt", ["\\frac{1}{4}", "-\\frac{3}{8}", "\\frac{7}{2}", "0.25", "2\\sqrt{3}",
                                "\\frac{3\\sqrt{2}}{4}", "100+75\\pi", "3-\\sqrt{5}"])
def test_keep_rewrites_are_equal(gt):
    t = truth(gt, "What is the probability?")
    checked = 0
    for kind, fn in bm.KEEP.items():
        ans = fn(t, random.Random(1))
        if ans is None or kind in ("answer_is", "var_label", "unit", "percent", "mixed_number"):
            continue
        assert sympy.simplify(value(ans) - value(gt)) == 0, (kind, ans)
        checked += 1
    assert checked >= 2


def test_exact_forms_are_exact():
    t = truth("\\frac{1}{4}", "What is the probability?")
    assert bm.k_exact_decimal(t, random.Random(0)) == "0.25"
    assert bm.k_percent(t, random.Random(0)) == "25\\%"
    assert bm.k_exact_decimal(truth("\\frac{1}{3}"), random.Random(0)) is None  # 1/3 has no exact decimal
    assert bm.exact_value(bm.k_mixed_number(truth("\\frac{7}{2}"), random.Random(0))) == Fraction(7, 2)
    assert bm.k_thousands(truth("34,\\!650"), random.Random(0)) in ("34650", "34{,}650", "34\\,650", "34,650")


def test_reorder_only_for_unordered_answers():
    listed = truth("1, 2, 3", "Find all solutions, separated by commas.")
    ans = bm.k_reorder(listed, random.Random(0))
    assert sorted(ans.replace(" ", "").split(",")) == ["1", "2", "3"] and ans.replace(" ", "") != "1,2,3"
    assert bm.k_reorder(truth("(1, 2)"), random.Random(0)) is None


@pytest.mark.parametrize("gt", ["\\frac{1}{3}", "7", "0", "-\\frac{5}{2}", "2.5", "2\\sqrt{3}", "100+75\\pi"])
def test_change_rewrites_change_the_value(gt):
    t = truth(gt)
    checked = 0
    for kind, fn in bm.CHANGE.items():
        for seed in range(5):
            ans = fn(t, random.Random(seed))
            if ans is None or not bm.changes_value(t, ans, kind):
                continue
            assert sympy.simplify(value(ans) - value(gt)) != 0, (kind, ans)
            checked += 1
    assert checked >= 2


def test_change_guard_drops_zero_flips_and_round_keeps_no_terminating():
    zero = truth("0")
    assert not bm.changes_value(zero, bm.c_flip_sign(zero, random.Random(0)), "flip_sign")  # -0 is 0
    assert bm.c_round(truth("\\frac{1}{4}"), random.Random(0)) is None
    assert bm.c_round(truth("\\frac{1}{3}"), random.Random(0)) in ("0.33", "0.333", "0.3333")


def test_structural_changes():
    rng = random.Random(0)
    assert bm.c_swap_order(truth("(3,3)"), rng) is None  # equal entries: no change
    assert bm.c_swap_order(truth("(1,2)"), rng) == "(2, 1)"
    assert bm.c_swap_bracket(truth("[1, 4)"), rng) in ("(1, 4)", "[1, 4]")
    assert bm.c_swap_bracket(truth("(2,\\infty)"), rng) == "[2,\\infty)"
    assert bm.c_drop_element(truth("1, 2", "Enter all the solutions, separated by commas."), rng) in ("1", "2")
    assert bm.c_wrong_base(truth("664_7"), random.Random(0)) != "664"
    assert bm.k_base_subscript(truth("664_7"), random.Random(0)) in ("664_{7}", "664")
    assert bm.c_flip_sign(truth("y = 0"), rng) is None
    assert all(bm.c_flip_sign(truth("(-15, 0)"), random.Random(k)) == "(15, 0)" for k in range(5))  # never -0
    for k in range(10):  # a base-2 answer's leading 1 has no other digit: never the unchanged digits
        assert bm.c_wrong_base(truth("11010_2"), random.Random(k)) not in ("11010", "11010_2", "11010_{2}")


def test_hedges_are_not_and_self_correction_is():
    cases = bm.cases_for(truth("\\frac{1}{4}", "What is the probability?"), per_truth=40, seed=3)
    for c in cases:
        if c["layout"] in ("hedge_or", "hedge_list", "late_wrong"):
            assert c["label"] == "not"
        if c["layout"] == "self_correct":
            assert c["label"] == "equivalent"
        if c["layout"] == "contract":
            assert c["response"].startswith("<think>\nStep 1: ") and c["response"].endswith("}\n</answer>")


def test_cases_are_reproducible_with_the_seed():
    truths = [truth(g, "Find all values, separated by commas.") for g in ("\\frac{1}{4}", "1, 2, 3", "(1,2)", "x^2+1")]
    a = bm.build_cases(truths, 4, seed=7)
    b = bm.build_cases([truth(t.gt, t.problem) for t in truths], 4, seed=7)
    c = bm.build_cases([truth(t.gt, t.problem) for t in truths], 4, seed=8)
    assert a == b and a != c


def test_help_and_bad_options():
    cmd = [sys.executable, "-m", "benchmarks.bench_metamorphic"]
    out = subprocess.run([*cmd, "--help"], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0 and "--per-truth" in out.stdout and "Rewrite kinds" in out.stdout
    bad = subprocess.run([*cmd, "--per-truth", "0"], capture_output=True, text=True, cwd=REPO)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
