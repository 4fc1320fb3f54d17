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
        if ans is None or kind in ("answer_is", "var_label", "unit", "percent", "mixed_number", "fraction_words"):
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
        if kind in bm.POLICY_KINDS:  # the same value in a form the policy refuses: tested below
            continue
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


# ---- the families of the reward's generalised steps and its written policy -------------
def test_number_words():
    assert [bm.number_words(n) for n in (0, 7, 21, 40, 105, 999, 5636)] == [
        "zero", "seven", "twenty-one", "forty", "one hundred five", "nine hundred ninety-nine",
        "five thousand six hundred thirty-six"]
    t = truth("5", "How many digits does the number have?")
    seen = {bm.k_number_words(t, random.Random(k)) for k in range(20)}
    assert seen <= {"five", "five digits", "\\text{five}", "\\text{five digits}"} and len(seen) >= 3
    assert bm.k_number_words(truth("-3"), random.Random(0)) is None
    assert bm.c_words_perturb(truth("5"), random.Random(0)) in ("six", "seven", "fifteen", "four")


@pytest.mark.parametrize("q", [Fraction(1, 3), Fraction(1, 17), Fraction(34, 33), Fraction(-7, 12), Fraction(1, 97)])
def test_repeating_decimal_is_exact(q):
    s = bm.repeating_decimal(q)
    m = re.fullmatch(r"(-?)(\d+)\.(\d*)\\overline\{(\d+)\}", s)
    sign, whole, pre, rep = m.groups()
    value = int(whole) + Fraction(int(pre or "0"), 10 ** len(pre)) + Fraction(int(rep), (10 ** len(rep) - 1) * 10 ** len(pre))
    assert (-value if sign else value) == q
    assert bm.repeating_decimal(q, "paren").endswith(")")


def test_relation_prefixes_and_wrappers():
    rng = random.Random(0)
    assert bm.k_relation_prefix(truth("(3,4]"), rng).endswith("\\in (3,4]")
    rem = truth("8", "What is the remainder when $2^{100}$ is divided by 13?")
    assert re.search(r"8 \\pmod\{13\}$", bm.k_relation_prefix(rem, rng))
    assert bm.c_wrong_residue(rem, rng).endswith("21 \\pmod{13}")
    assert bm.k_relation_prefix(truth("15", "What is the remainder when 115 is divided by 13?"), rng) is None  # 15 >= 13
    assert "\\approx 3.14" in bm.k_relation_prefix(truth("3.14", "Round to the nearest hundredth."), rng)
    inches = truth("10", "How long is the side, in inches?")
    assert re.fullmatch(r"10(\\ |\\,|~)\\(mathrm|text|mbox)\{in\}", bm.k_unit_wrapper(inches, rng))
    assert bm.k_base_subscript(truth("1011_2"), random.Random(3)) in ("1011_{2}", "1011_{(2)}", "(1011)_{2}", "1011")
    assert bm.k_article(truth("\\text{circle}"), rng) in ("a circle", "the circle", "\\text{a circle}", "\\text{the circle}")
    assert bm.k_article(truth("\\text{odd}"), rng) is None


def test_options_and_letters():
    q = "Which? $\\textbf{(A)}\\ 2 \\qquad\\textbf{(B)}\\ 3 \\qquad\\textbf{(C)}\\ 7 \\qquad\\textbf{(D)}\\ 4$"
    assert bm.question_options(q) == {"A": "2", "B": "3", "C": "7", "D": "4"}
    t = truth("\\text{(C)}", q)
    assert bm.k_option_value(t, random.Random(0)) == "7"
    assert bm.c_other_option(t, random.Random(0)) in ("2", "3", "4", "(a)", "(b)", "(d)", "(e)")
    assert bm.k_choice_letter(t, random.Random(0)).upper().count("C") == 1


def test_policy_rewrites_keep_the_value_in_a_refused_form():
    rng = random.Random(0)
    assert bm.exact_value(bm.c_unreduced(truth("\\frac{3}{4}", "Express it as a common fraction."), rng)) == Fraction(3, 4)
    assert bm.c_unreduced(truth("\\frac{3}{4}"), rng) is None  # no form asked for
    unrat = bm.c_unrationalized(truth("\\frac{2\\sqrt{6}}{3}", "Rationalize the denominator."), rng)
    assert unrat == "\\frac{12}{3\\sqrt{6}}" and sympy.simplify(value(unrat) - value("\\frac{2\\sqrt{6}}{3}")) == 0
    assert bm.c_reverse_order(truth("1, 2, 3", "List them in increasing order."), rng) == "3, 2, 1"
    echo = truth("70", "Compute $\\dbinom{8}{4}$.")
    assert bm.c_echo(echo, rng) == "\\dbinom{8}{4}"
    task = truth("0.4625", "Express $\\frac{37}{80}$ as a terminating decimal.")
    assert bm.k_exact_decimal(task, rng) == "\\frac{37}{80}"  # the right value, but the problem's own expression:
    assert "\\frac{37}{80}" not in [a for _, a in bm._candidates(task, bm.KEEP, random.Random(0), False, 99)]
    huge = {bm.c_huge_equal(truth("5"), random.Random(k)) for k in range(40)} - {None}
    assert huge and all("2^{2^{" in h or "7^{7^{" in h or "\\prod" in h for h in huge)


def test_cases_carry_the_question():
    cases = bm.cases_for(truth("70", "Compute $\\dbinom{8}{4}$."), per_truth=6, seed=0)
    assert cases and all(c["question"] == "Compute $\\dbinom{8}{4}$." for c in cases)
