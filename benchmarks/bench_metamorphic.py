#!/usr/bin/env python3
"""Metamorphic bench for a MATH reward, made from the real MATH ground truths.

    python -m benchmarks.bench_metamorphic [--markdown benchmarks/results/metamorphic.md]
        [--cases-out cases.jsonl] [--per-truth 4] [--limit N] [--seed 0] [--timeout 2]

Pipeline, in the order data flows through this file:

1. Ground truths. Every distinct ground truth of the shipped MATH train and test splits
   (``data/math-lighteval/data/{train,test}-00000-of-00001.parquet``), extracted by
   ``grpo_math.evaluation.data.ground_truths``, as prepare_math.py extracts them (the content of the
   solution's last ``\\boxed{}``, nested braces intact; empty boxes dropped). Each keeps the first
   problem and solution it came from.
2. Form. ``classify(gt, problem)`` puts each ground truth in one of ``FORMS`` by a few ordered
   pattern rules (first match wins; see its docstring).
3. Rewrites. ``KEEP`` rewrites keep the answer's meaning the way models really write answers
   (LaTeX spacing, ``\\left``/``\\right``, ``\\dfrac``/``\\tfrac``/``a/b``, unicode, text
   wrappers and labels, units spelled both ways and in any wrapper, reordered unordered lists,
   exact and repeating decimals, column vector vs tuple, ``pmatrix``/``bmatrix``, number words,
   articles, relation prefixes, base subscripts in any brace style, option letters and option
   values, ...); ``CHANGE`` rewrites change it (perturbed numbers, flipped signs, reordered
   tuples, swapped interval brackets, dropped or added elements, rounded non-terminating values,
   the wrong base, a residue that is not the remainder, another option, ...). Each rewrite is a
   small function that returns None where it does not apply. A meaning-changing rewrite of a
   number-like answer is dropped when exact arithmetic (``fractions``) or, failing that,
   latex2sympy2_extended at a random point says the value did not change; the POLICY_KINDS
   rewrites keep the value on purpose (the problem's own task expression, a list reversed
   against "in increasing order", an unreduced common fraction, an unrationalised denominator,
   a huge exact expression, the value in a form the problem rules out) and are labelled "not"
   by the reward's written policy (docs/reward_policy.md). A meaning-keeping rewrite that
   writes the problem's own task expression is dropped (by that policy it is an echo, not an
   answer), and so is one in a form the problem rules out (``named_forms``: the bench's own
   reading of "as a common fraction", "as a mixed number", "as a decimal", "interval notation").
4. Cases. Per ground truth, ``--per-truth`` rewrites are drawn (half keeping, half changing
   meaning) and each is put in a response layout: the recipe's contract
   (``<think>`` numbered steps ``</think>`` ``<answer>`` box ``</answer>``), plain MATH style
   ("The final answer is $\\boxed{..}$"), chatty markdown (``**Final Answer** \\[ \\boxed{..} \\]``),
   or a hedge: two boxes joined by "or", an unboxed "(or maybe ...)" after the box, and a list
   of several boxed candidates (all labelled not equivalent even when one candidate is right),
   a self-correction ending on the right box
   (equivalent) and one ending on a wrong box (not). The reasoning is the start of the real
   MATH solution with its boxes removed. Labels come from the construction only. Everything is
   drawn from ``random.Random(f"{seed}:{gt}")``, so a ground truth's cases do not depend on
   --limit or on the other ground truths. Every case carries its problem as ``question``, which
   the scorer receives as ``extra_info["question"]`` (as verl passes prepare_math.py's rows).
5. Scoring. ``new_math_reward.compute_score`` (its ``acc``) and math-verify alone
   (``verify(parse("\\boxed{gt}"), parse(response))``), the scorers of
   ``benchmarks/bench_reward.py``, each through ``../shared/tools/verifier_bench.py``'s worker:
   one process pinned to one CPU, each case under --timeout seconds (a timeout counts as
   "not correct" and restarts the worker), so a hang is counted, not a stall.
6. Report. Accuracy, false-positive rate (not-equivalent cases judged correct) and
   false-negative rate (equivalent cases judged wrong) by form, by rewrite kind and overall,
   timeouts, the slowest case, and the reward's most common failure patterns, as markdown;
   ``--markdown FILE`` also writes it (atomically), ``--cases-out FILE`` dumps the cases in
   verifier_bench's jsonl layout (id, category = form, response, ground_truth, label,
   rationale, source, question) so ``verifier_bench.py --bench FILE`` can score any other reward.
7. Audit of the rules that read the question (``question_audit``, skipped with --no-audit or
   --limit): new_math_reward in this process, each answer with and without its problem as the
   question, over the bench's cases and over every row of the shipped train and test splits
   (the gold as written, and up to two meaning-keeping rewrites per row).

Limits: the rewrites and the rules of a reward are written by the same kind of people with the
same ideas, so a reward tuned on this bench will agree with it; it does not replace blind,
independently written sets. Bad options print one line and exit 2.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import math
import os
import platform
import random
import re
import signal
import sys
import tempfile
import time
from collections import Counter, OrderedDict, defaultdict
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace
from typing import Callable, Optional

from benchmarks import bench_reward
from benchmarks import cpu_description
from grpo_math.io import ArgumentParser, positive_int, write_text_atomic

HERE = Path(__file__).resolve()
REPO = HERE.parents[1]
SHARED = REPO.parent / "shared"
DATA_DIR = REPO / "data" / "math-lighteval"
DATA_SOURCE = "DigitalLearningGmbH/MATH-lighteval"
DEFAULT_SEED = 0
DEFAULT_PER_TRUTH = 2

FORMS = ("integer", "decimal", "fraction", "radical", "constant", "expression", "equation", "set",
         "tuple", "interval", "matrix", "text", "unit", "base-n", "complex", "other")
FORM_HELP = {
    "integer": "an integer, thousands separators allowed", "decimal": "a terminating decimal",
    "fraction": "a rational a/b", "radical": "numbers with \\sqrt, no other constant",
    "constant": "pi or other constants/functions, no variable (pi/expression-with-constants)",
    "expression": "an expression with variables (polynomial etc.)", "equation": "lhs = rhs",
    "set": "a list/set of values", "tuple": "an ordered pair/tuple/point",
    "interval": "an interval or union of intervals", "matrix": "a matrix or column vector",
    "text": "words or a multiple-choice letter", "unit": "a number with a unit, degrees, dollars or percent",
    "base-n": "digits with a base subscript", "complex": "a complex number a+bi", "other": "anything else",
}


# =======================================================================================
# 1. Ground truths
# =======================================================================================
@dataclass
class Truth:
    """One distinct ground truth, the first problem it answers and what its form allows."""
    gt: str
    problem: str
    solution: str
    source: str
    form: str = "other"
    unordered: bool = False          # the problem asks for all values / a comma-separated list
    variable: Optional[str] = None   # the problem asks for the value of this one variable
    unit: Optional[tuple] = None     # (abbreviation, spelled) of a unit the problem names
    vector: bool = False             # the problem is about vectors
    extras: dict = field(default_factory=dict)


def load_truths(data_dir: Path = DATA_DIR) -> list[Truth]:
    """Every distinct ground truth of the train and test splits, in first-seen order."""
    from grpo_math.evaluation.data import ground_truths, load_split  # pyarrow: only when the cases are built

    seen: dict[str, Truth] = {}
    for split in ("train", "test"):
        for label, cols in load_split(split, data_dir, False):
            gts = ground_truths(cols["solution"], label, desc=f"{split} answers")
            for i, gt in enumerate(gts):
                if gt and gt not in seen:
                    seen[gt] = Truth(gt=gt, problem=cols["problem"][i], solution=cols["solution"][i],
                                     source=f"MATH {split} row {i} ({cols['type'][i]}, {cols['level'][i]})")
    truths = list(seen.values())
    for t in truths:
        annotate(t)
    return truths


# =======================================================================================
# 2. Form
# =======================================================================================
_TEXT_CMD = r"\\(?:text|textbf|mbox|mathrm|textrm)\s*"
_TEXT_SPAN_RE = re.compile(_TEXT_CMD + r"\{[^{}]*\}")
_CMD_RE = re.compile(r"\\[A-Za-z]+")
_CONST_CMDS = {"pi", "log", "ln", "sin", "cos", "tan", "cot", "sec", "csc", "arcsin", "arccos", "arctan",
               "exp", "binom", "dbinom", "tbinom", "infty", "lfloor", "rfloor", "lceil", "rceil"}
_INT_RE = re.compile(r"-?\d{1,3}(?:(?:,\\!|\{,\}|,)\d{3})+|-?\d+")
_DEC_RE = re.compile(r"-?\d*\.\d+")
_FRAC_RE = re.compile(r"(-?)\\[dt]?frac\s*(?:\{\s*(-?\d+)\s*\}|(\d))\s*(?:\{\s*(\d+)\s*\}|(\d))")
_MIXED_RE = re.compile(r"(-?)(\d+)\\[dt]?frac\s*(?:\{\s*(\d+)\s*\}|(\d))\s*(?:\{\s*(\d+)\s*\}|(\d))")
_SLASH_RE = re.compile(r"(-?)(\d+)\s*/\s*(\d+)")
_BASE_RE = re.compile(r"([0-9A-Z]+)_\{?(\d+)\}?")
_UNIT_HINT_RE = re.compile(r"\\%|\\\$|\^\s*\{?\\circ\}?|°|" + _TEXT_CMD + r"\{\s*[A-Za-z]")


def _squash(s: str) -> str:
    """The gt without spacing commands, \\left/\\right, outer $ and whitespace."""
    s = re.sub(r",\s*\\!\s*", "{,}", s.strip().strip("$"))
    s = re.sub(r"\\left|\\right|\\[,!;: ]|~|\s+", "", s)
    return s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")


def split_top(s: str, seps=(",",)) -> list[str]:
    """Split at depth-0 separators; brackets of any kind nest; ``,\\!`` and ``{,}`` do not split."""
    parts, depth, cur, i = [], 0, [], 0
    while i < len(s):
        c = s[i]
        if c in "{([":
            depth += 1
        elif c in "})]":
            depth -= 1
        if depth == 0 and any(s.startswith(x, i) for x in seps) and not re.match(r",\s*\\!", s[i:]):
            parts.append("".join(cur))
            cur = []
            i += len(next(x for x in seps if s.startswith(x, i)))
            continue
        cur.append(c)
        i += 1
    parts.append("".join(cur))
    return parts


def _outer_group(s: str) -> Optional[tuple[str, str, str]]:
    """(open, inside, close) when s is one bracketed group (any of ([ and )]), else None."""
    s2 = re.sub(r"\\left|\\right", "", s).strip()
    if len(s2) < 2 or s2[0] not in "([" or s2[-1] not in ")]":
        return None
    depth = 0
    for i, c in enumerate(s2):
        depth += c in "([{"
        depth -= c in ")]}"
        if depth == 0 and i < len(s2) - 1:
            return None
    return s2[0], s2[1:-1], s2[-1]


def _variables(s: str) -> set[str]:
    """Latin letters left after removing text spans and LaTeX commands."""
    s = _TEXT_SPAN_RE.sub("", s)
    s = re.sub(r"\\begin\{\w+\}|\\end\{\w+\}", "", s)
    s = _CMD_RE.sub("", s)
    return set(re.findall(r"[A-Za-z]", s))


def classify(gt: str, problem: str = "") -> str:
    """The ground truth's form, one of FORMS; the first rule that matches wins:

    matrix (``\\begin{..matrix}``) > base-n (``664_7``, ``A4_{16}``) > text (only words inside
    ``\\text``/``\\mbox``, or one bare word) > interval (``\\cup``, ``\\infty``, mixed brackets, or
    ``(a, b)`` when the problem says "interval") > equation (a top-level ``=``) > tuple
    (``(a, b, ...)``) > set (a top-level comma, ``\\text{ and }``, ``\\{..\\}`` or ``\\pm``) > unit
    (``\\%``, ``\\$``, ``^\\circ`` or a text word next to a number) > integer > decimal > fraction >
    complex (the only letter is ``i``) > expression (any other letter) > radical (``\\sqrt``) >
    constant (``\\pi``, ``\\log``, ``e``, powers, factorials) > other.
    """
    raw = gt.strip().strip("$").strip()
    s = _squash(raw)
    if re.search(r"\\begin\{[pbBvV]?matrix\}", s):
        return "matrix"
    if _BASE_RE.fullmatch(s) and not s.isdigit():
        return "base-n"
    no_text = _TEXT_SPAN_RE.sub("", s)
    text_inner = " ".join(m.group(0) for m in _TEXT_SPAN_RE.finditer(s))
    if (text_inner and not re.search(r"[0-9\\^=]", re.sub(_TEXT_CMD + r"\{", "", text_inner))
            and not no_text.strip("(),.") and re.search(r"[A-Za-z]", text_inner)) \
            or re.fullmatch(r"[A-Za-z]{2,}", s) and s.lower() not in ("pi",):
        return "text"
    group = _outer_group(s)
    if "\\cup" in s or "\\infty" in s or (group and group[0] + group[2] in ("[)", "(]", "[]")
                                         and len(split_top(group[1])) == 2) \
            or (group and re.search(r"\binterval", problem) and len(split_top(group[1])) == 2):
        return "interval"
    if re.fullmatch(r"-?\d{1,3}(?:,\d{3})+", raw) or _MIXED_RE.fullmatch(s):
        return "integer" if "frac" not in s else "fraction"
    if len(split_top(no_text, ("=",))) == 2 and "\\le" not in s and "\\ge" not in s:
        return "equation"
    if group and group[0] == "(" and len(split_top(group[1])) >= 2:
        return "tuple"
    if len(split_top(no_text)) >= 2 or "\\text{and}" in s or s.startswith("\\{") or "\\pm" in s:
        return "set"
    if _UNIT_HINT_RE.search(s) and re.search(r"\d", no_text):
        return "unit"
    if _INT_RE.fullmatch(s):
        return "integer"
    if _DEC_RE.fullmatch(s):
        return "decimal"
    if _FRAC_RE.fullmatch(s) or _SLASH_RE.fullmatch(s):
        return "fraction"
    letters = _variables(s)
    if letters == {"i"}:
        return "complex"
    if letters - {"e"}:
        return "expression"
    cmds = {c[1:] for c in _CMD_RE.findall(s)}
    if "sqrt" in cmds and not (cmds & _CONST_CMDS) and "e" not in letters:
        return "radical"
    if (cmds & _CONST_CMDS) or letters or re.search(r"[\^!]|\\cdot|\\times|\d\s*[+\-*]\s*\d", s):
        return "constant"
    return "other"


_UNITS = [("cm", "centimeters"), ("mm", "millimeters"), ("km", "kilometers"), ("m", "meters"),
          ("in", "inches"), ("ft", "feet"), ("yd", "yards"), ("mi", "miles"), ("mph", "miles per hour"),
          ("hr", "hours"), ("min", "minutes"), ("s", "seconds"), ("g", "grams"), ("kg", "kilograms"),
          ("lb", "pounds"), ("oz", "ounces")]
_UNIT_WORD_RE = re.compile(r"\b(?:in|of|how many)\s+(?:square\s+|cubic\s+)?(" +
                           "|".join(w for _, w in _UNITS) + r"|degrees|dollars|cents|percent)\b", re.I)
_UNORDERED_RE = re.compile(r"separated by commas|\ball\b|\bevery\b|\bset of\b", re.I)
_ORDERED_RE = re.compile(r"ordered|\border\b|greatest to least|least to greatest|increasing|decreasing|"
                         r"smallest to largest|largest to smallest", re.I)
_VAR_RE = re.compile(r"(?:value of|solve for|find|what is|compute|determine)\s+\$([a-z])\$", re.I)


def annotate(t: Truth) -> Truth:
    """Fill in the form and what the problem text says about the answer."""
    t.form = classify(t.gt, t.problem)
    t.unordered = bool(_UNORDERED_RE.search(t.problem)) and not _ORDERED_RE.search(t.problem)
    m = _VAR_RE.search(t.problem)
    t.variable = m.group(1) if m else None
    m = _UNIT_WORD_RE.search(t.problem)
    if m:
        word = m.group(1).lower()
        abbr = {"degrees": "^\\circ", "dollars": "\\$", "cents": "\\text{ cents}",
                "percent": "\\%"}.get(word) or next(a for a, w in _UNITS if w == word)
        t.unit = (abbr, word)
    t.vector = bool(re.search(r"\bvectors?\b", t.problem, re.I))
    return t


# =======================================================================================
# 3. Rewrites
# =======================================================================================
Rewrite = Callable[[Truth, random.Random], Optional[str]]
KEEP: "OrderedDict[str, Rewrite]" = OrderedDict()
CHANGE: "OrderedDict[str, Rewrite]" = OrderedDict()


def keep(fn: Rewrite) -> Rewrite:
    KEEP[fn.__name__[2:]] = fn
    return fn


def change(fn: Rewrite) -> Rewrite:
    CHANGE[fn.__name__[2:]] = fn
    return fn


def _protect(s: str, fn: Callable[[str], str]) -> str:
    """Apply fn to the parts of s outside \\text{..}-like spans and \\begin/\\end markers."""
    out, last = [], 0
    for m in re.finditer(_TEXT_CMD + r"\{[^{}]*\}|\\begin\{\w+\}|\\end\{\w+\}", s):
        out.append(fn(s[last:m.start()]))
        out.append(m.group(0))
        last = m.end()
    out.append(fn(s[last:]))
    return "".join(out)


def exact_value(s: str) -> Optional[Fraction]:
    """The exact rational value of an integer, decimal or fraction literal, else None."""
    s = _squash(s)
    if _INT_RE.fullmatch(s):
        return Fraction(int(re.sub(r",\\!|\{,\}|,", "", s)))
    if _DEC_RE.fullmatch(s):
        return Fraction(s)
    m = _FRAC_RE.fullmatch(s)
    if m:
        num, den = int(m.group(2) or m.group(3)), int(m.group(4) or m.group(5))
        return None if den == 0 else Fraction(-num if m.group(1) else num, den)
    m = _MIXED_RE.fullmatch(s)
    if m:
        num, den = int(m.group(3) or m.group(4)), int(m.group(5) or m.group(6))
        q = int(m.group(2)) + Fraction(num, den) if den else None
        return None if q is None else (-q if m.group(1) else q)
    m = _SLASH_RE.fullmatch(s)
    if m and int(m.group(3)):
        return Fraction(-int(m.group(2)) if m.group(1) else int(m.group(2)), int(m.group(3)))
    return None


def terminating(q: Fraction) -> bool:
    d = q.denominator
    for p in (2, 5):
        while d % p == 0:
            d //= p
    return d == 1


def decimal_str(q: Fraction) -> str:
    """The exact decimal of a terminating fraction."""
    sign, q = ("-" if q < 0 else ""), abs(q)
    k = 0
    while (q * 10 ** k).denominator != 1:
        k += 1
    digits = str((q * 10 ** k).numerator).rjust(k + 1, "0")
    return sign + (digits[:-k] + "." + digits[-k:] if k else digits)


def _elements(t: Truth) -> Optional[tuple[str, list[str], str]]:
    """(open, items, close) for a tuple/interval/set answer."""
    s = t.gt.strip()
    g = _outer_group(s)
    if t.form in ("tuple", "interval") and g and "\\cup" not in s:
        return g[0], [x.strip() for x in split_top(g[1])], g[2]
    if t.form == "set":
        m = re.fullmatch(r"\\\{(.*)\\\}", s)
        inner = m.group(1) if m else s
        items = [x.strip() for x in split_top(inner)]
        if len(items) == 1:
            items = [x.strip() for x in re.split(r"\\text\{\s*and\s*\}", inner)]
        if len(items) >= 2 and all(items):
            return ("\\{", items, "\\}") if m else ("", items, "")
    return None


def _join(o: str, items: list[str], c: str, sep: str = ", ") -> str:
    return f"{o}{sep.join(items)}{c}"


def _norm_item(x: str) -> str:
    return _squash(x)


# ---- meaning-keeping -------------------------------------------------------------------
@keep
def k_identity(t, rng):
    """The ground truth exactly as MATH writes it."""
    return t.gt


@keep
def k_spacing(t, rng):
    """LaTeX spacing: either all optional spaces removed or spaces around , + = and \\,."""
    if rng.random() < 0.5:
        out = _protect(t.gt, lambda x: re.sub(r"(?<![A-Za-z\\])\s+|(?<!\\)\s+(?![A-Za-z])", "", x))
    else:
        out = _protect(t.gt, lambda x: re.sub(r"(?<![{\\])\s*([,=+])\s*(?!\\!|\})", r" \1 ", x).replace(" , ", ", "))
        out = re.sub(r"\s+", " ", out).strip()
    return out if out != t.gt else None


@keep
def k_left_right(t, rng):
    """Outer brackets as \\left( .. \\right)."""
    if t.form not in ("tuple", "interval", "set", "expression", "constant"):
        return None
    s = t.gt.strip()
    if "\\left" in s:
        return re.sub(r"\\left|\\right", "", s)
    g = _outer_group(s)
    if g:
        return f"\\left{g[0]} {g[1].strip()} \\right{g[2]}"
    e = _elements(t)
    if e and e[0] == "\\{":
        return _join("\\left\\{ ", e[1], " \\right\\}")
    return None


@keep
def k_dfrac(t, rng):
    """\\frac as \\dfrac or \\tfrac (and \\dfrac/\\tfrac as \\frac)."""
    if re.search(r"\\[dt]frac", t.gt):
        return re.sub(r"\\[dt]frac", r"\\frac", t.gt)
    if "\\frac" in t.gt:
        return t.gt.replace("\\frac", rng.choice(["\\dfrac", "\\tfrac"]))
    return None


def _frac_args(s: str, i: int) -> Optional[tuple[str, str, int]]:
    """At s[i] = '\\frac': (numerator, denominator, end index) with braced or one-char args."""
    j = i + len(re.match(r"\\[dt]?frac\s*", s[i:]).group(0))
    args = []
    for _ in range(2):
        if j >= len(s):
            return None
        if s[j] == "{":
            depth, k = 0, j
            while k < len(s):
                depth += s[k] == "{"
                depth -= s[k] == "}"
                if depth == 0:
                    break
                k += 1
            if k >= len(s):
                return None
            args.append(s[j + 1:k])
            j = k + 1
        elif s[j].isalnum():
            args.append(s[j])
            j += 1
        else:
            return None
        while j < len(s) and s[j] == " " and len(args) < 2:
            j += 1
    return args[0], args[1], j


def _simple(x: str) -> bool:
    return bool(re.fullmatch(r"\d+|[A-Za-z]|\\pi|\d*\\sqrt\{\d+\}|\d+[A-Za-z]", x.strip()))


def slash_fracs(s: str) -> Optional[str]:
    """Every \\frac{a}{b} as a/b, with parentheses where the parts or the context need them."""
    m = re.search(r"\\[dt]?frac", s)
    if not m:
        return None
    args = _frac_args(s, m.start())
    if not args:
        return None
    num, den, end = args
    num = num if _simple(num) else f"({num})"
    den = den if _simple(den) else f"({den})"
    before, after = s[:m.start()], s[end:]
    if re.search(r"\d\s*$", before):
        return None  # a mixed number: 3\frac18 is not 3(1/8)
    b, a = re.sub(r"\\left\s*$", "", before.rstrip()).rstrip(" -"), re.sub(r"^\s*\\right", "", after).lstrip()
    whole = (not b or b[-1] in "(,[{=") and (not a or a[0] in ",)]}")
    piece = f"{num}/{den}" if whole else f"({num}/{den})"
    out = before + piece + after
    rest = slash_fracs(out)
    return rest or out


@keep
def k_slash(t, rng):
    """\\frac{a}{b} as a/b (parenthesised inside a larger expression)."""
    if t.form in ("matrix",) or "\\frac" not in t.gt and "frac" not in t.gt:
        return None
    return slash_fracs(t.gt)


_SUPERS = {"2": "²", "3": "³"}


def unicode_math(s: str) -> str:
    """√, π, −, ×, ·, ², ∞, ° and a/b for fractions, as models print them."""
    out = slash_fracs(s) or s
    out = re.sub(r"\\sqrt\s*\{(\d+|[A-Za-z])\}", r"√\1", out)
    out = re.sub(r"\\sqrt\s*(\d)", r"√\1", out)
    out = re.sub(r"\\sqrt\s*\{([^{}]*)\}", r"√(\1)", out)
    out = out.replace("\\pi", "π").replace("\\infty", "∞").replace("\\cdot", "·").replace("\\times", "×")
    out = re.sub(r"\^\s*\{?\\circ\}?", "°", out)
    out = re.sub(r"\^\{?([23])\}?(?![\d}])", lambda m: _SUPERS[m.group(1)], out)
    out = _protect(out, lambda x: x.replace("-", "−"))
    out = re.sub(r"(?<=[π√∞·×])\s+|\s+(?=[π√∞·×])", "", out) if "\\" not in out else out
    return out


@keep
def k_unicode(t, rng):
    """Unicode math: √2, π, −, ×, ·, ², ∞, ° and a slash for a fraction."""
    if t.form in ("matrix", "text", "base-n"):
        return None
    out = unicode_math(t.gt)
    return out if not out.isascii() else None


@keep
def k_text_wrap(t, rng):
    """Text answers with another wrapper (\\text, \\textbf, \\mbox or none)."""
    if t.form != "text":
        return None
    m = re.fullmatch(r"\s*" + _TEXT_CMD + r"\{([^{}]*)\}\s*", t.gt)
    inner = m.group(1).strip() if m else t.gt.strip()
    if not m and not re.fullmatch(r"[A-Za-z]+", inner):
        return None
    choices = [f"\\text{{{inner}}}", f"\\textbf{{{inner}}}", f"\\mbox{{{inner}}}"]
    if re.fullmatch(r"[A-Za-z ]+", inner):
        choices.append(inner)
    choices = [c for c in choices if c != t.gt.strip()]
    return rng.choice(choices) if choices else None


@keep
def k_var_label(t, rng):
    """"x = answer" when the problem asks for one variable's value."""
    if not t.variable or t.form in ("equation", "set", "text", "interval", "matrix"):
        return None
    if t.form in ("expression",) and t.variable in _variables(t.gt):
        return None
    return f"{t.variable} = {t.gt.strip()}"


@keep
def k_answer_is(t, rng):
    """"\\text{The answer is } answer" inside the box."""
    if t.form not in ("integer", "decimal", "fraction", "radical", "text"):
        return None
    return f"\\text{{The answer is }} {t.gt.strip()}"


@keep
def k_exact_decimal(t, rng):
    """A terminating fraction as its exact decimal (1/4 -> 0.25), a decimal as a fraction."""
    q = exact_value(t.gt)
    if q is None or t.form not in ("fraction", "decimal"):
        return None
    if t.form == "fraction":
        return decimal_str(q) if terminating(q) else None
    return (f"-\\frac{{{-q.numerator}}}{{{q.denominator}}}" if q < 0 else
            f"\\frac{{{q.numerator}}}{{{q.denominator}}}") if q.denominator != 1 else str(q.numerator)


@keep
def k_decimal_zeros(t, rng):
    """A decimal with a trailing zero added, or an integer as n.0."""
    s = t.gt.strip()
    if t.form == "decimal":
        return s + "0"
    if t.form == "integer" and _INT_RE.fullmatch(s) and "," not in s:
        return s + ".0"
    return None


@keep
def k_percent(t, rng):
    """A probability-like fraction or decimal as an exact percent (1/4 -> 25\\%)."""
    q = exact_value(t.gt)
    if q is None or t.form not in ("fraction", "decimal") or not (0 < q < 1) or not terminating(q * 100) \
            or len(decimal_str(q * 100).partition(".")[2]) > 2:
        return None
    if not re.search(r"probability|fraction|percent", t.problem, re.I):
        return None
    return decimal_str(q * 100) + "\\%"


@keep
def k_mixed_number(t, rng):
    """An improper fraction as a mixed number (7/2 -> 3\\frac{1}{2})."""
    q = exact_value(t.gt)
    if q is None or t.form != "fraction" or abs(q) < 1 or q.denominator == 1:
        return None
    whole, rest = divmod(abs(q.numerator), q.denominator)
    return f"{'-' if q < 0 else ''}{whole}\\frac{{{rest}}}{{{q.denominator}}}"


@keep
def k_frac_sign(t, rng):
    """The minus sign of a negative fraction moved into the numerator."""
    m = re.fullmatch(r"\s*-\s*\\([dt]?frac)\s*\{([^{}]+)\}\s*\{([^{}]+)\}\s*", t.gt)
    if not m:
        return None
    num = m.group(2) if _simple(m.group(2)) else f"({m.group(2)})"
    return f"\\{m.group(1)}{{-{num}}}{{{m.group(3)}}}"


@keep
def k_thousands(t, rng):
    """An integer of 1000 or more with or without thousands separators."""
    if t.form != "integer":
        return None
    n = exact_value(t.gt)
    if n is None or abs(n) < 1000:
        return None
    plain = str(n.numerator)
    grouped = f"{abs(n.numerator):,}"
    sign = "-" if n < 0 else ""
    choices = [plain, sign + grouped.replace(",", ",\\!"), sign + grouped.replace(",", "{,}"),
               sign + grouped.replace(",", "\\,")]
    if not t.unordered and not re.search(r"comma", t.problem, re.I):
        choices.append(sign + grouped)
    choices = [c for c in choices if c != t.gt.strip()]
    return rng.choice(choices)


def _terms(s: str) -> list[str]:
    """Top-level summands of s, each with its sign ('+3x', '-2')."""
    out, depth, cur = [], 0, ""
    for i, c in enumerate(s):
        depth += c in "{(["
        depth -= c in "})]"
        if depth == 0 and c in "+-" and cur.strip() and not cur.rstrip().endswith(("^", "_", "\\pm", "e")):
            out.append(cur)
            cur = ""
        cur += c
    out.append(cur)
    return [x.strip() for x in out if x.strip()]


def _join_terms(terms: list[str]) -> str:
    out = ""
    for k, x in enumerate(terms):
        if k == 0:
            out = x[1:].strip() if x.startswith("+") else x
        else:
            out += f" {x[0]} {x[1:].strip()}" if x[0] in "+-" else f" + {x}"
    return out


@keep
def k_commute(t, rng):
    """The terms of a top-level sum (or the factors of (a)(b)) in another order."""
    if t.form not in ("expression", "constant", "radical", "complex", "equation"):
        return None
    s = t.gt.strip()
    lhs = ""
    if t.form == "equation":
        lhs, s = s.split("=", 1)
        lhs, s = lhs.strip() + " = ", s.strip()
    if "\\pm" in s or "\\mp" in s:
        return None
    factors = re.fullmatch(r"(\([^()]+\))(\([^()]+\))", s.replace(" ", ""))
    if factors and factors.group(1) != factors.group(2):
        return lhs + factors.group(2) + factors.group(1)
    terms = _terms(s)
    if len(terms) < 2 or len(set(terms)) < 2:
        return None
    order = terms[1:] + terms[:1]
    return lhs + _join_terms(order)


@keep
def k_frac_factor(t, rng):
    """\\frac{a\\pi}{b} or \\frac{a\\sqrt{c}}{b} as \\frac{a}{b}\\pi / \\frac{a}{b}\\sqrt{c}."""
    m = re.fullmatch(r"\s*(-?)\\[dt]?frac\{(\d*)\s*(\\pi|\\sqrt\{\d+\})\}\{(\d+)\}\s*", t.gt)
    if not m:
        return None
    return f"{m.group(1)}\\frac{{{m.group(2) or 1}}}{{{m.group(4)}}}{m.group(3)}"


@keep
def k_explicit_times(t, rng):
    """A coefficient and its variable with an explicit \\cdot (3x -> 3 \\cdot x)."""
    if t.form not in ("expression", "equation") or re.search(r"\\(?:sin|cos|tan|cot|sec|csc|log|ln)", t.gt):
        return None
    out = _protect(t.gt, lambda x: re.sub(r"(?<![\\_^\w])(\d+)\s*([a-z])(?![a-z])", r"\1 \\cdot \2", x))
    return out if out != t.gt else None


@keep
def k_swap_sides(t, rng):
    """An equation with its two sides swapped."""
    if t.form != "equation" or "\\le" in t.gt or "<" in t.gt or ">" in t.gt:
        return None
    lhs, rhs = t.gt.split("=", 1)
    return f"{rhs.strip()} = {lhs.strip()}"


@keep
def k_drop_lhs(t, rng):
    """x = 5 answered as 5, when the problem asks for a value and not an equation."""
    m = re.fullmatch(r"\s*([a-z])\s*=\s*([^=]+)", t.gt)
    if t.form != "equation" or not m or re.search(r"equation|line|plane|curve|graph", t.problem, re.I):
        return None
    rhs = m.group(2).strip()
    return rhs if not _variables(rhs) else None


@keep
def k_reorder(t, rng):
    """An unordered answer (the problem asks for all values) in another order."""
    e = _elements(t)
    if t.form == "interval" and "\\cup" in t.gt:
        parts = [p.strip() for p in t.gt.split("\\cup")]
        return " \\cup ".join(parts[1:] + parts[:1]) if len(set(parts)) > 1 else None
    if t.form == "text":
        m = re.fullmatch(r"\s*\\text\{([A-Z](?:\s*,\s*[A-Z])+)\}\s*", t.gt)
        if m and t.unordered:
            letters = [x.strip() for x in m.group(1).split(",")]
            return "\\text{" + ", ".join(letters[1:] + letters[:1]) + "}"
        return None
    if not e or t.form != "set" or not t.unordered:
        return None
    o, items, c = e
    if len({_norm_item(x) for x in items}) < 2:
        return None
    new = items[:]
    while new == items:
        rng.shuffle(new)
    return _join(o, new, c)


@keep
def k_set_braces(t, rng):
    """A comma-separated list of all values written as a set \\{a, b\\}."""
    e = _elements(t)
    if not e or t.form != "set" or not t.unordered or e[0]:
        return None
    return _join("\\{", e[1], "\\}")


@keep
def k_vector_layout(t, rng):
    """A vector as a column pmatrix or as a tuple."""
    s = t.gt.strip()
    if t.form == "matrix":
        m = re.fullmatch(r"\\begin\{([pb])matrix\}(.*)\\end\{\1matrix\}", s, re.S)
        if not m or "&" in m.group(2) or not t.vector:
            return None
        rows = [r.strip() for r in m.group(2).split("\\\\") if r.strip()]
        return "(" + ", ".join(rows) + ")" if len(rows) >= 2 else None
    e = _elements(t)
    if t.form == "tuple" and t.vector and e:
        return "\\begin{pmatrix} " + " \\\\ ".join(e[1]) + " \\end{pmatrix}"
    return None


@keep
def k_matrix_env(t, rng):
    """pmatrix as bmatrix and back."""
    if "pmatrix" in t.gt:
        return t.gt.replace("pmatrix", "bmatrix")
    if "bmatrix" in t.gt:
        return t.gt.replace("bmatrix", "pmatrix")
    return None


_SPELL = {"^\\circ": "degrees", "\\%": "percent", "\\$": "dollars"}
_SPELL.update({a: w for a, w in _UNITS})


@keep
def k_unit(t, rng):
    """The unit spelled another way (cm / centimeters, ^\\circ / degrees, \\$ / dollars, \\% /
    percent), added where the problem names one, or dropped as MATH does."""
    s = t.gt.strip()
    num_forms = ("integer", "decimal", "fraction", "radical", "constant")
    if t.form in num_forms and t.unit:
        abbr, word = t.unit
        if abbr == "\\$":
            return rng.choice([f"\\${s}", f"{s} \\text{{ dollars}}"])
        if abbr in ("^\\circ", "\\%"):
            return rng.choice([f"{s}{abbr}", f"{s} \\text{{ {word}}}"])
        sq = ""
        m = re.search(r"\b(square|cubic)\s+" + word, t.problem, re.I)
        if m:
            sq = "^2" if m.group(1).lower() == "square" else "^3"
            return rng.choice([f"{s} \\text{{ {abbr}}}{sq}", f"{s} \\text{{ {m.group(1).lower()} {word}}}"])
        return rng.choice([f"{s} \\text{{ {abbr}}}", f"{s} \\text{{ {word}}}"])
    if t.form != "unit":
        return None
    m = re.fullmatch(r"\\\$\s*(.+)", s)
    if m:
        return rng.choice([m.group(1), f"{m.group(1)} \\text{{ dollars}}"])
    m = re.fullmatch(r"(.+?)\s*(\^\s*\{?\\circ\}?|\\%|°)", s)
    if m:
        word = "percent" if "%" in m.group(2) else "degrees"
        return rng.choice([m.group(1), f"{m.group(1)} \\text{{ {word}}}"])
    m = re.fullmatch(r"(.+?)(?:\s|\\[ ,;:]|~)*" + _TEXT_CMD + r"\{\s*([A-Za-z ]+?)\s*\}(\^\d)?", s)
    if m and re.search(r"\d", m.group(1)):
        word, power = m.group(2), m.group(3) or ""
        other = {"degrees": "^\\circ", "degree": "^\\circ", "percent": "\\%", "dollars": "\\$"}.get(word)
        if other:
            return rng.choice([m.group(1), m.group(1) + other]) if other != "\\$" else "\\$" + m.group(1)
        pair = next(((a, w) for a, w in _UNITS if word in (a, w)), None)
        if pair:
            alt = pair[1] if word == pair[0] else pair[0]
            return rng.choice([m.group(1), f"{m.group(1)} \\text{{ {alt}}}{power}"])
        return m.group(1)
    return None


@keep
def k_base_subscript(t, rng):
    """A base-n answer with its subscript in another brace style (_2, _{2}, _{(2)}, (digits)_2),
    or without it (MATH's convention)."""
    m = _BASE_RE.fullmatch(_squash(t.gt))
    if t.form != "base-n" or not m:
        return None
    d, b = m.group(1), m.group(2)
    styles = [f"{d}_{{{b}}}", f"{d}_{b}" if len(b) == 1 else f"{d}_{{{b}}}", f"{d}_{{({b})}}", f"({d})_{{{b}}}", d]
    return rng.choice([x for x in styles if x != t.gt.strip()])


_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
         "seventeen eighteen nineteen").split()
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()


def number_words(n: int) -> str:
    """An integer 0..999,999 in English words ("twenty-one", "three hundred five")."""
    if n < 20:
        return _ONES[n]
    if n < 100:
        return _TENS[n // 10 - 2] + ("-" + _ONES[n % 10] if n % 10 else "")
    if n < 1000:
        return _ONES[n // 100] + " hundred" + (" " + number_words(n % 100) if n % 100 else "")
    return number_words(n // 1000) + " thousand" + (" " + number_words(n % 1000) if n % 1000 else "")


_HOW_MANY_RE = re.compile(r"\bhow many ([a-z]{3,})\b", re.I)


@keep
def k_number_words(t, rng):
    """A non-negative integer as a cardinal in words, with or without the counted noun of a
    "how many X" problem ("five digits"), sometimes in \\text{}."""
    q = exact_value(t.gt)
    if t.form != "integer" or q is None or q.denominator != 1 or not 0 <= q < 10 ** 6:
        return None
    words = number_words(int(q))
    m = _HOW_MANY_RE.search(t.problem)
    if m and m.group(1).lower() not in ("of", "different", "more", "times", "ways", "positive", "integers") + \
            tuple(_ONES) + tuple(_TENS):
        words = rng.choice([words, f"{words} {m.group(1).lower()}"])
    return rng.choice([words, f"\\text{{{words}}}"])


_ARTICLE_SKIP = {"yes", "no", "odd", "even", "neither", "none", "true", "false"} | {d.lower() for d in
                                                                                       ("Monday", "Tuesday", "Wednesday",
                                                                                        "Thursday", "Friday", "Saturday",
                                                                                        "Sunday")}


@keep
def k_article(t, rng):
    """A one-word text answer with an article in front ("\\text{a circle}" for circle)."""
    m = re.fullmatch(r"\s*(?:" + _TEXT_CMD + r"\{\s*([A-Za-z]{2,})\s*\}|([A-Za-z]{2,}))\s*", t.gt)
    if t.form != "text" or not m:
        return None
    word = m.group(1) or m.group(2)
    if word.lower() in _ARTICLE_SKIP:
        return None
    art = rng.choice(["an" if word[0].lower() in "aeiou" else "a", "the"])
    return rng.choice([f"\\text{{{art} {word}}}", f"{art} {word}"])


_MODULUS_RE = re.compile(r"(?:divided by|modulo|mod)\s*\$?\s*(\d{1,6})\b", re.I)
_ROUND_RE = re.compile(r"\bnearest\b|\bround|\bdecimal\b", re.I)


@keep
def k_relation_prefix(t, rng):
    """A relation before the answer whose right side is the answer: ``x \\in`` an interval,
    ``\\approx`` a value the problem asks to round, ``\\equiv r \\pmod{m}`` a remainder,
    ``r = 3 \\text{ units}`` a named quantity with a unit word."""
    s = t.gt.strip()
    if t.form == "interval":
        var = rng.choice(["x", "t", "\\lambda", "k"])
        return f"{var} \\in {s}"
    if t.form == "decimal" and _ROUND_RE.search(t.problem):
        return rng.choice([f"\\approx {s}", f"{t.variable or 'x'} \\approx {s}"])
    m = _MODULUS_RE.search(t.problem)
    q = exact_value(t.gt)
    if t.form == "integer" and m and re.search(r"remainder", t.problem, re.I) and q is not None \
            and 0 <= q < int(m.group(1)):
        mod = m.group(1)
        return rng.choice([f"\\equiv {s} \\pmod{{{mod}}}", f"x \\equiv {s} \\pmod{{{mod}}}", f"{s} \\pmod{{{mod}}}"])
    if t.form in ("integer", "decimal") and re.search(r"\bunits?\b", t.problem):
        return f"{t.variable or rng.choice(['r', 'x', 'h'])} = {s} \\text{{ units}}"
    return None


@keep
def k_unit_wrapper(t, rng):
    """A unit abbreviation the problem names, in another wrapper (``\\mathrm{in}``, ``\\ \\text{cm}``,
    ``\\,\\mbox{ft}``)."""
    if t.form not in ("integer", "decimal", "fraction") or not t.unit or t.unit[0].startswith(("\\", "^")):
        return None
    if re.search(r"\b(square|cubic)\s+" + t.unit[1], t.problem, re.I):
        return None
    abbr = t.unit[0]
    return rng.choice([f"{t.gt.strip()}\\ \\mathrm{{{abbr}}}", f"{t.gt.strip()}\\,\\mathrm{{{abbr}}}",
                       f"{t.gt.strip()}\\ \\text{{{abbr}}}", f"{t.gt.strip()}~\\mbox{{{abbr}}}"])


_LETTER_GT_RE = re.compile(r"\s*(?:" + _TEXT_CMD + r"\{\s*\(?([A-E])\)?\s*\}|\(?([A-E])\)?)\s*")
_OPT_RE = re.compile(r"(?:\\(?:textbf|text|mathrm)\s*\{\s*)?\(([A-E])\)\s*\}?")


def question_options(problem: str) -> dict:
    """letter -> value text of a problem that lists options (A)..(E) in order (at least 3)."""
    labels = [m for m in _OPT_RE.finditer(problem)]
    run = []
    for m in labels:
        if len(run) < 5 and m.group(1) == "ABCDE"[len(run)]:
            run.append(m)
    if len(run) < 3:
        return {}
    out = {}
    for i, m in enumerate(run):
        chunk = problem[m.end():run[i + 1].start() if i + 1 < len(run) else len(problem)]
        if i + 1 == len(run):
            chunk = re.split(r"\$|\n", chunk.lstrip("$ "), maxsplit=1)[0]
        v = re.sub(r"\\q?quad|\\\\|\$|\\[ ,;!]|~", " ", chunk).strip().rstrip(".,;")
        if v:
            out[m.group(1)] = v
    return out


@keep
def k_choice_letter(t, rng):
    """An option letter in another case or bracket: (e), \\text{(e)}, e, [E], E), \\textbf{(E)}."""
    m = _LETTER_GT_RE.fullmatch(t.gt)
    if t.form != "text" or not m:
        return None
    L = m.group(1) or m.group(2)
    forms = [f"({L.lower()})", f"\\text{{({L.lower()})}}", L.lower(), f"[{L}]", f"{L})", f"\\textbf{{({L})}}",
             f"\\text{{Option {L}}}"]
    return rng.choice([x for x in forms if x != t.gt.strip()])


@keep
def k_option_value(t, rng):
    """The chosen option's value instead of its letter, where the problem lists the options."""
    m = _LETTER_GT_RE.fullmatch(t.gt)
    if t.form != "text" or not m:
        return None
    opts = question_options(t.problem)
    value = opts.get(m.group(1) or m.group(2))
    if not value or sum(_squash(v) == _squash(value) for v in opts.values()) > 1:
        return None
    return value


def repeating_decimal(q: Fraction, style: str = "overline") -> Optional[str]:
    """The exact repeating decimal of a non-terminating fraction (period up to 120 digits):
    0.\\overline{142857}, or with the period in parentheses 0.(142857)."""
    sign, q = ("-" if q < 0 else ""), abs(q)
    whole, rem = divmod(q.numerator, q.denominator)
    digits, seen = [], {}
    while rem and rem not in seen and len(digits) < 200:
        seen[rem] = len(digits)
        rem *= 10
        digits.append(str(rem // q.denominator))
        rem %= q.denominator
    if not rem or rem not in seen or len(digits) - seen[rem] > 120:
        return None
    start = seen[rem]
    pre, period = "".join(digits[:start]), "".join(digits[start:])
    body = f"\\overline{{{period}}}" if style == "overline" else f"({period})"
    return f"{sign}{whole}.{pre}{body}"


@keep
def k_repeating(t, rng):
    """A non-terminating fraction as its exact repeating decimal, long periods included
    (1/17 -> 0.\\overline{0588235294117647}); sometimes the period in parentheses."""
    q = exact_value(t.gt)
    if t.form != "fraction" or q is None or terminating(q):
        return None
    return repeating_decimal(q, rng.choice(["overline", "overline", "paren"]))


@keep
def k_base_words(t, rng):
    """A base-n answer with its base named in words after the digits: "141 \\text{ in base } 13",
    "1112112\\ (\\text{base }3)", "7602 \\text{ (base 8)}"."""
    m = _BASE_RE.fullmatch(_squash(t.gt))
    if t.form != "base-n" or not m:
        return None
    d, b = m.group(1), m.group(2)
    return rng.choice([f"{d} \\text{{ in base }} {b}", f"{d}\\ (\\text{{base }}{b})", f"{d} \\text{{ (base {b})}}"])


_FRACTION_WORD = {2: ("half", "halves"), 3: ("third", "thirds"), 4: ("quarter", "quarters"), 5: ("fifth", "fifths"),
                  6: ("sixth", "sixths"), 8: ("eighth", "eighths"), 10: ("tenth", "tenths")}


@keep
def k_fraction_words(t, rng):
    """A simple fraction in words: "one half", "\\text{three quarters}", "two thirds"."""
    q = exact_value(t.gt)
    if t.form != "fraction" or q is None or not 0 < q < 1 or q.denominator not in _FRACTION_WORD:
        return None
    one, many = _FRACTION_WORD[q.denominator]
    words = f"{number_words(q.numerator)} {one if q.numerator == 1 else many}"
    return rng.choice([words, f"\\text{{{words}}}"])


_RANGE_RE = re.compile(r"\b(?:range|domain)\s+of\s+(?:the\s+function\s+)?\$?\s*([a-zA-Z])\s*\(\s*([a-z])\s*\)", re.I)


@keep
def k_name_prefix(t, rng):
    """An interval named by the function or variable of a domain/range problem, with its
    argument: "f(x) \\in [6, \\infty)" for the range of f, "x \\in ..." for a domain."""
    m = _RANGE_RE.search(t.problem)
    if t.form != "interval" or not m:
        return None
    name = f"{m.group(1)}({m.group(2)})" if re.search(r"\brange\b", t.problem, re.I) else m.group(2)
    return f"{name} \\in {t.gt.strip()}"


@keep
def k_text_noun(t, rng):
    """An even/odd/neither answer stated with its noun: "\\text{an even function}",
    "\\text{neither even nor odd}"."""
    m = re.fullmatch(r"\s*(?:" + _TEXT_CMD + r"\{\s*([A-Za-z]+)\s*\}|([A-Za-z]+))\s*", t.gt)
    if t.form != "text" or not m or (m.group(1) or m.group(2)).lower() not in ("odd", "even", "neither"):
        return None
    w = (m.group(1) or m.group(2)).lower()
    if w == "neither":
        return "\\text{neither even nor odd}"
    return rng.choice([f"\\text{{an {w} function}}", f"\\text{{{w} function}}"])


# ---- meaning-changing ------------------------------------------------------------------
_NUM_LIT_RE = re.compile(r"(?<![\\A-Za-z_^{.\d])\d+(?:\.\d+)?(?![\d}]*_)")


def _perturb_literal(lit: str, rng: random.Random) -> str:
    if "." in lit:
        whole, frac = lit.split(".")
        digit = int(frac[-1])
        return f"{whole}.{frac[:-1]}{(digit + rng.choice([1, 2, 3])) % 10}"
    n = int(lit)
    return str(rng.choice([n + 1, n + 2, n + 10] + ([n - 1, 2 * n] if n > 1 else [])))


@change
def c_perturb(t, rng):
    """One number literal changed (n -> n+1, n+2, n-1, 2n, n+10; a decimal's last digit)."""
    if t.form in ("text", "base-n"):
        return None
    s = t.gt
    spans = []
    for m in _NUM_LIT_RE.finditer(s):
        inside_text = any(a.start() <= m.start() < a.end() for a in _TEXT_SPAN_RE.finditer(s))
        if not inside_text and not s[:m.start()].rstrip().endswith(("\\begin{", "^", "_")):
            spans.append(m)
    if not spans:
        return None
    m = rng.choice(spans)
    return s[:m.start()] + _perturb_literal(m.group(0), rng) + s[m.end():]


@change
def c_flip_sign(t, rng):
    """The sign flipped: of the whole answer, of one element of a tuple/set/matrix, of an
    equation's right side, of a complex number's imaginary part."""
    s = t.gt.strip()
    e = _elements(t)
    if t.form in ("tuple", "set") and e:
        o, items, c = e
        nonzero = [k for k, x in enumerate(items) if exact_value(x) != 0]
        if not nonzero:
            return None
        k = rng.choice(nonzero)  # -0 is 0
        x = items[k]
        items = items[:]
        items[k] = x[1:].strip() if x.startswith("-") else ("-" + x if _simple(x) or x.startswith("\\") else f"-({x})")
        return _join(o, items, c)
    if t.form == "matrix":
        cells = list(re.finditer(r"(?<=[&{}\\\s])(-?)(\d+)(?=\s*(?:&|\\\\|\\end))", s))
        cells = [m for m in cells if m.group(2).strip("0")]
        if not cells:
            return None
        m = rng.choice(cells)
        return s[:m.start()] + ("" if m.group(1) else "-") + m.group(2) + s[m.end():]
    if t.form == "complex":
        terms = _terms(s)
        for k, x in enumerate(terms):
            if re.search(r"(?<![A-Za-z\\])i(?![A-Za-z])", x):
                terms = terms[:]
                terms[k] = ("+" + x[1:] if x.startswith("-") else "-" + x.lstrip("+")) if k else \
                    (x[1:] if x.startswith("-") else "-" + x)
                return _join_terms(terms)
        return None
    if t.form == "equation":
        lhs, rhs = s.split("=", 1)
        rhs = rhs.strip()
        if exact_value(rhs) == 0:
            return None  # -0 is 0
        return f"{lhs.strip()} = " + (rhs[1:].strip() if rhs.startswith("-") and len(_terms(rhs)) == 1
                                       else f"-({rhs})" if len(_terms(rhs)) > 1 else "-" + rhs)
    if t.form in ("integer", "decimal", "fraction", "radical", "constant", "expression", "unit"):
        if s.startswith("-") and len(_terms(s)) == 1:
            return s[1:].strip()
        if t.form == "unit" and s.startswith("\\$"):
            return "-" + s
        return "-" + s if len(_terms(s)) == 1 else f"-({s})"
    return None


@change
def c_flip_term(t, rng):
    """The sign of one term of a sum flipped (x^2 + 3 -> x^2 - 3)."""
    if t.form not in ("expression", "constant", "radical"):
        return None
    terms = _terms(t.gt.strip())
    if len(terms) < 2 or "\\pm" in t.gt:
        return None
    k = rng.randrange(1, len(terms))
    x = terms[k]
    terms = terms[:]
    terms[k] = ("+" + x[1:]) if x.startswith("-") else "-" + x.lstrip("+")
    return _join_terms(terms)


@change
def c_reciprocal(t, rng):
    """A fraction turned upside down (3/4 -> 4/3)."""
    q = exact_value(t.gt)
    if t.form != "fraction" or q is None or abs(q) == 1 or q == 0:
        return None
    r = 1 / q
    return (f"-\\frac{{{-r.numerator}}}{{{r.denominator}}}" if r < 0 else
            f"\\frac{{{r.numerator}}}{{{r.denominator}}}") if r.denominator != 1 else str(r.numerator)


@change
def c_round(t, rng):
    """A non-terminating exact value as a rounded decimal (1/3 -> 0.33, \\sqrt{2} -> 1.414)."""
    if t.form not in ("fraction", "radical", "constant"):
        return None
    q = exact_value(t.gt)
    if q is not None:
        if terminating(q):
            return None
        v = float(q)
    else:
        v = numeric_value(t.gt)
        if v is None or isinstance(v, complex) or not math.isfinite(v) or abs(v - round(v)) < 1e-9:
            return None  # an integer value (5^{12}) has an exact decimal: no rounding
    return f"{v:.{rng.choice([2, 3, 4])}f}"


@change
def c_round_decimal(t, rng):
    """A terminating decimal rounded to one digit fewer (54.55 -> 54.6)."""
    s = t.gt.strip()
    if t.form != "decimal" or "." not in s or len(s.split(".")[1]) < 2:
        return None
    k = len(s.split(".")[1]) - 1
    out = f"{float(Fraction(s)):.{k}f}"
    return out if Fraction(out) != Fraction(s) else None


@change
def c_swap_order(t, rng):
    """An ordered tuple, matrix row or interval with two different entries swapped."""
    s = t.gt.strip()
    if t.form == "matrix":
        m = re.fullmatch(r"(\\begin\{(\w+)\})(.*)(\\end\{\2\})", s, re.S)
        if not m:
            return None
        rows = [r for r in m.group(3).split("\\\\")]
        if len(rows) == 2 and "&" not in m.group(3) and _norm_item(rows[0]) != _norm_item(rows[1]):
            return m.group(1) + f" {rows[1].strip()} \\\\ {rows[0].strip()} " + m.group(4)
        cells = [[c.strip() for c in r.split("&")] for r in rows if r.strip()]
        if len(cells) == len(cells[0]) >= 2 and all(len(r) == len(cells) for r in cells):
            tr = [[cells[j][i] for j in range(len(cells))] for i in range(len(cells))]
            if [[_norm_item(x) for x in r] for r in tr] != [[_norm_item(x) for x in r] for r in cells]:
                return m.group(1) + " " + " \\\\ ".join(" & ".join(r) for r in tr) + " " + m.group(4)
        return None
    e = _elements(t)
    if not e or t.form not in ("tuple", "interval") or (t.form == "set" and t.unordered):
        return None
    o, items, c = e
    pairs = [(i, j) for i in range(len(items)) for j in range(i + 1, len(items))
             if _norm_item(items[i]) != _norm_item(items[j])]
    if not pairs:
        return None
    i, j = rng.choice(pairs)
    items = items[:]
    items[i], items[j] = items[j], items[i]
    return _join(o, items, c)


@change
def c_swap_bracket(t, rng):
    """An interval with one finite endpoint's bracket swapped (open <-> closed)."""
    if t.form != "interval":
        return None
    s = t.gt
    spots = []
    for m in re.finditer(r"(\\left)?([\[\(])(?!\s*-\\infty)", s):
        spots.append((m.start(2), "(" if m.group(2) == "[" else "["))
    for m in re.finditer(r"(?<!\\infty)(\s*)(\\right)?([\]\)])", s):
        before = s[:m.start()].rstrip()
        if not before.endswith("\\infty"):
            spots.append((m.start(3), ")" if m.group(3) == "]" else "]"))
    spots = [(i, ch) for i, ch in spots if _interval_endpoint_ok(s, i)]
    if not spots:
        return None
    i, ch = rng.choice(spots)
    return s[:i] + ch + s[i + 1:]


def _interval_endpoint_ok(s: str, i: int) -> bool:
    """A bracket at s[i] that belongs to an interval (a comma at depth 1 inside it)."""
    if s[i] in "[(":
        depth = 0
        for c in s[i:]:
            depth += c in "([{"
            depth -= c in ")]}"
            if depth == 1 and c == ",":
                return True
            if depth == 0 and c in ")]":
                return False
        return False
    depth = 0
    for c in reversed(s[:i + 1]):
        depth += c in ")]}"
        depth -= c in "([{"
        if depth == 1 and c == ",":
            return True
        if depth == 0 and c in "([":
            return False
    return False


@change
def c_drop_element(t, rng):
    """One element of a set, list, tuple or union dropped."""
    if t.form == "interval" and "\\cup" in t.gt:
        parts = [p.strip() for p in t.gt.split("\\cup")]
        k = rng.randrange(len(parts))
        return " \\cup ".join(parts[:k] + parts[k + 1:])
    e = _elements(t)
    if not e or t.form not in ("set", "tuple"):
        return None
    o, items, c = e
    k = rng.randrange(len(items))
    rest = items[:k] + items[k + 1:]
    if t.form == "set" and {_norm_item(x) for x in rest} == {_norm_item(x) for x in items}:
        return None
    return _join(o, rest, c) if len(rest) >= 1 else None


@change
def c_add_element(t, rng):
    """An extra value added to a set or list (a perturbed copy of one element)."""
    e = _elements(t)
    if not e or t.form != "set":
        return None
    o, items, c = e
    x = rng.choice(items)
    sub = Truth(gt=x, problem="", solution="", source="")
    sub.form = classify(x)
    new = c_perturb(sub, rng)
    if not new or _norm_item(new) in {_norm_item(y) for y in items}:
        return None
    return _join(o, items + [new], c)


_DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


@change
def c_other_text(t, rng):
    """A text answer replaced: another letter, the next weekday, or another text answer."""
    if t.form != "text":
        return None
    s = t.gt
    m = re.search(r"\((?P<l>[A-Z])\)|\{(?P<b>[A-Z])\}|\b(?P<c>[A-Z])\b", s)
    for day in _DAYS:
        if day in s:
            return s.replace(day, _DAYS[(_DAYS.index(day) + rng.randrange(1, 7)) % 7])
    if m:
        letter = m.group("l") or m.group("b") or m.group("c")
        present = set(re.findall(r"\b[A-Z]\b", s))
        choices = [x for x in "ABCDEFGH" if x not in present]
        start = m.start("l") if m.group("l") else m.start("b") if m.group("b") else m.start("c")
        return s[:start] + rng.choice(choices) + s[start + 1:]
    swaps = [("odd", "even"), ("even", "odd"), ("yes", "no"), ("no", "yes"), ("Yes", "No"), ("No", "Yes"),
             ("true", "false"), ("neither", "even"), ("increasing", "decreasing")]
    for a, b in swaps:
        if re.search(rf"\b{a}\b", s):
            return re.sub(rf"\b{a}\b", b, s, count=1)
    pool = t.extras.get("text_pool") or []
    others = [x for x in pool if _squash(x).lower() != _squash(s).lower()]
    return rng.choice(others) if others else None


@change
def c_wrong_base(t, rng):
    """A base-n answer as its decimal value, with one digit changed, or with another base."""
    m = _BASE_RE.fullmatch(_squash(t.gt))
    if t.form != "base-n" or not m:
        return None
    digits, base = m.group(1), int(m.group(2))
    if not 2 <= base <= 36:
        return None
    try:
        value = int(digits, base)
    except ValueError:
        return None
    choice = rng.choice(["decimal", "digit", "subscript"])
    if choice == "decimal" and str(value) != digits:
        return str(value)
    if choice == "subscript" and all(int(d, 36) < base + 1 for d in digits) and len(digits) > 1:
        return f"{digits}_{{{base + 1}}}"
    k = rng.randrange(len(digits))
    alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"[:base]
    options = [d for d in alphabet if d != digits[k] and not (k == 0 and d == "0")]
    if not options:
        return None
    new = rng.choice(options)
    return f"{digits[:k]}{new}{digits[k + 1:]}_{{{base}}}" if rng.random() < 0.5 else f"{digits[:k]}{new}{digits[k + 1:]}"


@change
def c_words_perturb(t, rng):
    """A non-negative integer in words, perturbed (five -> six)."""
    q = exact_value(t.gt)
    if t.form != "integer" or q is None or q.denominator != 1 or not 0 <= q < 10 ** 6:
        return None
    n = int(q)
    return number_words(rng.choice([n + 1, n + 2, n + 10] + ([n - 1] if n > 0 else [])))


@change
def c_wrong_residue(t, rng):
    """A remainder stated as a congruence with a residue that is not the remainder (r + m)."""
    m = _MODULUS_RE.search(t.problem)
    q = exact_value(t.gt)
    if t.form != "integer" or not m or q is None or not re.search(r"remainder", t.problem, re.I) \
            or not 0 <= q < int(m.group(1)):
        return None
    mod = int(m.group(1))
    return rng.choice([f"\\equiv {int(q) + mod} \\pmod{{{mod}}}", f"x \\equiv {int(q) + mod} \\pmod{{{mod}}}"])


@change
def c_other_option(t, rng):
    """Another option's value, or another letter in lower case, where the problem lists options."""
    m = _LETTER_GT_RE.fullmatch(t.gt)
    if t.form != "text" or not m:
        return None
    L = m.group(1) or m.group(2)
    opts = question_options(t.problem)
    others = [v for k, v in sorted(opts.items()) if k != L and _squash(v) != _squash(opts.get(L, ""))]
    if others and rng.random() < 0.7:
        return rng.choice(others)
    return f"({rng.choice([x for x in 'abcde' if x != L.lower()])})"


# ---- policy rewrites: the right value in a form the task or the policy rules out ---------
_TASK_SENTENCE_RE = re.compile(r"(?:^|[.?!]\s+)(?:Compute|Evaluate|Simplify|Expand|Factor|What is|Find|Calculate|"
                               r"Express|Write|Convert|Rewrite)\b[^.?!$]{0,40}\$([^$]{1,200})\$")


def task_expressions(problem: str) -> set:
    """The squashed math spans a problem asks to compute, evaluate, simplify, expand, factor,
    express or convert (its first span after the verb): a response that boxes one echoes the task."""
    return {_squash(m.group(1).strip().rstrip(".,?")) for m in _TASK_SENTENCE_RE.finditer(problem)}
_ORDER_WORDS_RE = re.compile(r"increasing order|decreasing order|least to greatest|greatest to least|"
                             r"smallest to largest|largest to smallest", re.I)


@change
def c_echo(t, rng):
    """The expression the problem asks to compute/evaluate/simplify/expand/factor, boxed as
    the answer (prompt echo: not paid by the policy whatever its value)."""
    m = _TASK_SENTENCE_RE.search(t.problem)
    if not m or t.form in ("text", "matrix"):
        return None
    expr = m.group(1).strip().rstrip(".,?")
    if "=" in expr or "\\in" in expr or "\\text" in expr or re.search(r"[<>]|\\[lg]eq|\\le |\\ge ", expr):
        return None
    if _squash(expr) == _squash(t.gt) or not re.search(r"[\d\\+\-^]", expr) or len(expr) < 3:
        return None
    return expr


@change
def c_reverse_order(t, rng):
    """A list the problem asks for in increasing/decreasing order, reversed."""
    e = _elements(t)
    if not e or t.form != "set" or not _ORDER_WORDS_RE.search(t.problem) or "\\text" in t.gt:
        return None
    o, items, c = e
    if len({_norm_item(x) for x in items}) < 2:
        return None
    return _join(o, items[::-1], c)


@change
def c_unreduced(t, rng):
    """A fraction the problem asks for as a common fraction or in lowest terms, not reduced (3/4 -> 6/8)."""
    q = exact_value(t.gt)
    if t.form != "fraction" or q is None or q.denominator == 1 or \
            not re.search(r"common fraction|lowest terms|simplest form", t.problem, re.I):
        return None
    k = rng.choice([2, 3, 5])
    return (f"-\\frac{{{-q.numerator * k}}}{{{q.denominator * k}}}" if q < 0 else
            f"\\frac{{{q.numerator * k}}}{{{q.denominator * k}}}")


@change
def c_unrationalized(t, rng):
    """A rationalised \\frac{a\\sqrt{b}}{c} written back with the radical in the denominator
    (\\frac{ab}{c\\sqrt{b}}), where the problem asks to rationalise or for simplest radical form."""
    m = re.fullmatch(r"\s*(-?)\\[dt]?frac\{(\d*)\\sqrt\{(\d+)\}\}\{(\d+)\}\s*", t.gt)
    if not m or not re.search(r"rationali|simplest radical form", t.problem, re.I):
        return None
    a, b, c = int(m.group(2) or 1), int(m.group(3)), int(m.group(4))
    return f"{m.group(1)}\\frac{{{a * b}}}{{{'' if c == 1 else c}\\sqrt{{{b}}}}}"


#: Forms a problem names, read by the bench with its own patterns (not the reward's): a keep
#: rewrite into a form the problem rules out is not generated, and c_wrong_form writes one on
#: purpose (labelled "not" by the stated-form policy).
_NAMED_FORMS = (
    ("fraction", re.compile(r"(?:common|improper)\s+fraction|as\s+a\s+(?:simple\s+)?fraction|"
                            r"(?:simple\s+)?fraction\s+in\s+(?:simplest|lowest)|"
                            r"in\s+the\s+form\s+\$\\frac\{?[a-z]\}?\{?[a-z]\}?\$", re.I)),
    ("mixed", re.compile(r"as\s+a\s+mixed\s+number|to\s+a\s+mixed\s+number", re.I)),
    ("decimal", re.compile(r"(?:as|to|in)\s+a\s+(?:terminating\s+)?decimal(?!\s+point)|in\s+decimal\s+form", re.I)),
    ("percent", re.compile(r"(?:as|in)\s+(?:a\s+)?percent\b", re.I)),
    ("interval", re.compile(r"interval\s+notation", re.I)),
)
GEQ = "\\geq"
_DECIMAL_LIT_RE = re.compile(r"\d\.(?=\d|\\overline)|(?<!\d)\.\d")


def named_forms(problem: str) -> set:
    """The forms a problem names (the bench's reading; a negated mention "(not ... decimals)"
    names nothing)."""
    out = set()
    for name, rx in _NAMED_FORMS:
        for m in rx.finditer(problem):
            clause = re.split(r"[.?!(]\s*", problem[:m.start()])[-1]  # the demand's clause, up to it
            if not re.search(r"\bnot\b|\bor\b", clause):
                out.add(name)
    return out


def breaks_named_form(ans: str, t: Truth) -> bool:
    """A rewrite written in a form the problem rules out (the gold has not that form)."""
    forms = t.extras.setdefault("named_forms", named_forms(t.problem))
    if not forms:
        return False
    dec = lambda s: bool(_DECIMAL_LIT_RE.search(s))
    frac = lambda s: "\\frac" in s or bool(re.search(r"\d\s*/\s*\d", s))
    mixed = lambda s: bool(re.search(r"(?<![\w.}{^])\d+\s*\\[dt]?frac", s))
    pct = lambda s: "%" in s
    ineq = lambda s: bool(re.search(r"[<>]|\\[lg]e", s))
    checks = {"fraction": (dec, mixed, pct), "mixed": (dec, pct), "decimal": (frac, pct), "percent": (),
              "interval": (ineq,)}
    return any(c(ans) and not c(t.gt) for f in forms for c in checks[f])


@change
def c_wrong_form(t, rng):
    """The gold's value in a form the problem rules out: a decimal (also repeating) for "as a
    common fraction", an improper fraction for "as a mixed number", a mixed number for "as an
    improper fraction", a fraction for "as a decimal", an inequality for "in interval notation"."""
    forms = named_forms(t.problem)
    q = exact_value(t.gt)
    s = t.gt.strip()
    if "fraction" in forms and t.form == "fraction" and q is not None and q.denominator > 1:
        if re.search(r"improper\s+fraction", t.problem, re.I) and abs(q) > 1:
            whole, rest = divmod(abs(q.numerator), q.denominator)
            return f"{'-' if q < 0 else ''}{whole}\\frac{{{rest}}}{{{q.denominator}}}"
        return decimal_str(q) if terminating(q) else repeating_decimal(q)
    if "mixed" in forms and q is not None and q.denominator > 1 and abs(q) > 1:
        return f"\\frac{{{q.numerator}}}{{{q.denominator}}}"
    if "decimal" in forms and t.form == "decimal" and q is not None and q.denominator > 1:
        return f"\\frac{{{q.numerator}}}{{{q.denominator}}}"
    m = re.fullmatch(r"\\left\s*([\[(])\s*(-?[\w\\{}]+?)\s*,\s*(-?[\w\\{}]+?)\s*\\right\s*([\])])|"
                     r"([\[(])\s*(-?[^,]+?)\s*,\s*(-?[^,]+?)\s*([\])])", s)
    if "interval" in forms and t.form == "interval" and m and "\\cup" not in s:
        lo_b, lo, hi, hi_b = [g for g in m.groups() if g is not None]
        if "infty" in lo and "infty" in hi:
            return None
        lo_op = "<" if lo_b == "(" else "\\leq"
        hi_op = "<" if hi_b == ")" else "\\leq"
        if "infty" in hi:
            return f"x {'>' if lo_b == '(' else GEQ} {lo}"
        if "infty" in lo:
            return f"x {hi_op} {hi}"
        return f"{lo} {lo_op} x {hi_op} {hi}"
    return None


@change
def c_huge_equal(t, rng):
    """An integer or fraction as a huge exact expression equal to it (n - n + g with n =
    2^{2^{30}}, a huge power over itself, a telescoping product): refused by the bounded-time
    policy whatever its value."""
    q = exact_value(t.gt)
    if t.form not in ("integer", "fraction") or q is None or rng.random() < 0.75:
        return None  # a quarter of the eligible truths: math-verify spends its timeout on each
    g = t.gt.strip()
    k = rng.randrange(20, 40)
    if q.denominator == 1 and q > 1 and q < 10 ** 6 and rng.random() < 0.34:
        return f"\\prod_{{k=1}}^{{{int(q) - 1}}} \\frac{{k+1}}{{k}}"
    return rng.choice([f"2^{{2^{{{k}}}}} - 2^{{2^{{{k}}}}} + {g}" if not g.startswith("-") else
                       f"2^{{2^{{{k}}}}} - 2^{{2^{{{k}}}}} {g}",
                       f"\\frac{{7^{{7^{{{k}}}}} \\cdot ({g})}}{{7^{{7^{{{k}}}}}}}"])


#: Rewrites whose answer keeps the gold's value but that the reward's policy (docs/reward_policy.md)
#: does not pay; labelled "not" by that policy, exempt from the value-change guard.
POLICY_KINDS = ("echo", "reverse_order", "unreduced", "unrationalized", "huge_equal", "wrong_form")


# ---- label guard -----------------------------------------------------------------------
class _Deadline(Exception):
    pass


def _on_alarm(signum, frame):
    raise _Deadline()


_POINT = {}


@functools.lru_cache(maxsize=None)
def numeric_value(latex: str, seconds: float = 1.0):
    """The value of a LaTeX expression at a fixed random point (latex2sympy2_extended), or None
    when it does not parse, has no single value, or takes longer than ``seconds``."""
    try:
        from latex2sympy2_extended import latex2sympy
        import sympy
    except ImportError:
        return None
    use_alarm = hasattr(signal, "setitimer") and _main_thread()
    if use_alarm:
        old = signal.signal(signal.SIGALRM, _on_alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        expr = latex2sympy(latex)
        if isinstance(expr, (list, tuple)) or not isinstance(expr, sympy.Basic) or isinstance(expr, sympy.Eq):
            if isinstance(expr, sympy.Eq):
                expr = expr.lhs - expr.rhs
            else:
                return None
        subs = {}
        for sym in sorted(expr.free_symbols, key=str):
            subs[sym] = _POINT.setdefault(str(sym), sympy.Rational(random.Random(str(sym)).randint(1000, 9999), 977))
        v = complex(sympy.N(expr.subs(subs), 30))
        return v.real if abs(v.imag) < 1e-12 else v
    except (_Deadline, Exception):
        return None
    finally:
        if use_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)


def _main_thread() -> bool:
    import threading
    return threading.current_thread() is threading.main_thread()


#: Rewrites that can leave a value unchanged by accident (perturbing a literal of x^0, flipping
#: a term that is 0); the others change it by construction once exact values differ.
GUARDED = ("perturb", "flip_term")


def changes_value(t: Truth, new: str, kind: str = "perturb") -> bool:
    """False when exact arithmetic or, for GUARDED kinds, the CAS says ``new`` has the ground
    truth's value (the CAS is slow: about 20 ms a parse)."""
    a, b = exact_value(t.gt), exact_value(new)
    if a is not None and b is not None:
        return a != b
    if kind not in GUARDED:
        return _squash(new) != _squash(t.gt)
    if t.form not in ("integer", "decimal", "fraction", "radical", "constant", "expression", "complex"):
        if t.form == "equation":
            va, vb = numeric_value(t.gt), numeric_value(new)
            if va is not None and vb is not None and abs(va - vb) < 1e-9 * (1 + abs(va)):
                return False
        return _squash(new) != _squash(t.gt)
    va, vb = numeric_value(t.gt), numeric_value(new)
    if va is None or vb is None:
        return _squash(new) != _squash(t.gt)
    return abs(va - vb) > 1e-9 * (1 + abs(va))


# =======================================================================================
# 4. Cases
# =======================================================================================
LAYOUTS = ("contract", "plain", "markdown", "hedge_or", "hedge_list", "self_correct", "late_wrong", "hedge_trailing")
LAYOUT_WEIGHTS = (35, 22, 19, 6, 6, 6, 6, 4)
SINGLE = ("contract", "plain", "markdown")
_SENTENCE_RE = re.compile(r"(?<=[.!?])\s+(?=[A-Z$\\])")


def strip_boxes(text: str) -> str:
    """Text with every \\boxed{X} / \\fbox{X} replaced by X."""
    out, i = [], 0
    while True:
        m = re.compile(r"\\(?:boxed|fbox)\s*\{").search(text, i)
        if not m:
            out.append(text[i:])
            return "".join(out)
        out.append(text[i:m.start()])
        depth, k = 1, m.end()
        while k < len(text) and depth:
            depth += text[k] == "{"
            depth -= text[k] == "}"
            k += 1
        out.append(text[m.end():k - 1])
        i = k


def reasoning_sentences(solution: str, max_chars: int = 300) -> list[str]:
    """The start of the real solution, boxes removed, as whole sentences with balanced $."""
    text = re.sub(r"\s+", " ", strip_boxes(solution)).strip()
    out, total, cur = [], 0, ""
    for piece in _SENTENCE_RE.split(text):
        cur = f"{cur} {piece}".strip()
        if cur.count("$") % 2 or cur.count("\\[") != cur.count("\\]"):
            continue  # the split fell inside math: join with the next piece
        if total + len(cur) > max_chars and out:
            break
        out.append(cur)
        total += len(cur)
        cur = ""
    return out[:4] or ["Let me work through the problem carefully."]


def render(layout: str, sents: list[str], right: str, wrong: Optional[str], other: Optional[str],
           rng: random.Random) -> str:
    """A full model response that puts the answer(s) in ``layout``; a single-box layout
    boxes ``right`` (the rewrite itself, whatever its label)."""
    text = " ".join(sents)
    if layout == "contract":
        steps = "\n".join(f"Step {k + 1}: {s}" for k, s in enumerate(sents))
        return f"<think>\n{steps}\n</think>\n<answer>\n\\boxed{{{right}}}\n</answer>"
    if layout == "plain":
        return f"{text} The final answer is $\\boxed{{{right}}}$."
    if layout == "markdown":
        return (f"Let's solve this step by step.\n\n{text}\n\n**Final Answer**\n\\[ \\boxed{{{right}}} \\]")
    if layout == "hedge_or":
        a, b = (right, wrong) if rng.random() < 0.5 else (wrong, right)
        return f"{text} So the answer is $\\boxed{{{a}}}$ or $\\boxed{{{b}}}$."
    if layout == "hedge_trailing":
        return f"{text} So the answer is $\\boxed{{{right}}}$ (or maybe ${wrong}$)."
    if layout == "hedge_list":
        cands = [right, wrong] + ([other] if other else [])
        rng.shuffle(cands)
        boxed = ", ".join(f"$\\boxed{{{c}}}$" for c in cands[:-1]) + f" and $\\boxed{{{cands[-1]}}}$"
        return f"{text}\n\nThe possible answers are {boxed}."
    if layout == "self_correct":
        return (f"{text} So the answer is $\\boxed{{{wrong}}}$.\n\nWait, that was wrong: I made an error in "
                f"the last step. Redoing it carefully, the answer is $\\boxed{{{right}}}$.")
    if layout == "late_wrong":
        return (f"{text} So the answer is $\\boxed{{{right}}}$.\n\nWait, that was wrong: I made an error in "
                f"the last step. Redoing it carefully, the answer is $\\boxed{{{wrong}}}$.")
    raise ValueError(layout)


#: Meaning-keeping rewrites dropped because they write the problem's own task expression.
ECHO_KEEPS_DROPPED = [0]
#: Meaning-keeping rewrites dropped because they are in a form the problem rules out.
WRONG_FORM_KEEPS_DROPPED = [0]


def _candidates(t: Truth, table: "OrderedDict[str, Rewrite]", rng: random.Random, guard: bool,
                need: int) -> list[tuple[str, str]]:
    """(kind, answer) for up to ``need`` rewrites of ``table`` that apply to t, in a seeded order."""
    kinds = list(table)
    rng.shuffle(kinds)
    out = []
    for kind in kinds:
        try:
            ans = table[kind](t, rng)
        except (ValueError, IndexError, ZeroDivisionError, OverflowError):
            ans = None
        if not ans or not ans.strip() or ans.count("{") != ans.count("}"):
            continue
        if kind != "identity" and ans.strip() == t.gt.strip() and table is KEEP:
            continue
        if table is KEEP and kind != "identity" and _squash(ans) in t.extras.setdefault(
                "tasks", task_expressions(t.problem)):
            ECHO_KEEPS_DROPPED[0] += 1
            continue  # the right value written as the problem's own expression: an echo (policy)
        if table is KEEP and kind != "identity" and breaks_named_form(ans, t):
            WRONG_FORM_KEEPS_DROPPED[0] += 1
            continue  # the right value in a form the problem rules out (the stated-form policy)
        if guard and kind not in POLICY_KINDS and not changes_value(t, ans, kind):
            continue
        out.append((kind, ans))
        if len(out) >= need:
            break
    return out


def cases_for(t: Truth, per_truth: int, seed: int) -> list[dict]:
    """The labelled cases of one ground truth."""
    rng = random.Random(f"{seed}:{t.gt}")
    keeps = _candidates(t, KEEP, rng, guard=False, need=len(KEEP))
    changes = _candidates(t, CHANGE, rng, guard=True, need=per_truth)
    sents = reasoning_sentences(t.solution)
    n_change = min(len(changes), per_truth // 2)
    n_keep = min(len(keeps), per_truth - n_change)
    if n_keep + n_change < per_truth:
        n_change = min(len(changes), per_truth - n_keep)
    chosen = [("equivalent", k, a) for k, a in keeps[:n_keep]] + [("not", k, a) for k, a in changes[:n_change]]
    cases = []
    for label, kind, ans in chosen:
        layout = rng.choices(LAYOUTS, LAYOUT_WEIGHTS)[0]
        right_kind, right = rng.choice(keeps) if label == "not" else (kind, ans)
        wrong = ans if label == "not" else (rng.choice(changes)[1] if changes else None)
        if layout in ("hedge_or", "hedge_list", "self_correct", "late_wrong", "hedge_trailing") and \
                (wrong is None or not keeps):
            layout = "plain"
        if layout in ("hedge_or", "hedge_list", "late_wrong", "hedge_trailing"):
            case_label = "not"
        elif layout == "self_correct":
            case_label = "equivalent"
        else:
            case_label = label
        others = [a for _, a in keeps + changes if a not in (right, wrong)]
        other = rng.choice(others) if others else None
        resp = render(layout, sents, ans if layout in SINGLE else right, wrong, other, rng)
        shown = ans if layout in SINGLE else f"right {right!r}, wrong {wrong!r}"
        cases.append(dict(form=t.form, kind=kind, right_kind=right_kind, layout=layout, response=resp, ground_truth=t.gt,
                          question=t.problem,
                          label=case_label, rationale=f"{kind} ({'keeps' if label == 'equivalent' else 'changes'} "
                          f"meaning) in layout {layout}: {shown}", source=t.source, answer=ans))
    return cases


def build_cases(truths: list[Truth], per_truth: int, seed: int, limit: Optional[int] = None) -> list[dict]:
    """All cases, with ids ``<form>-<n>``; --limit takes a seeded sample of the ground truths."""
    text_pool = sorted(t.gt for t in truths if t.form == "text")
    for t in truths:
        t.extras["text_pool"] = text_pool
    chosen = truths
    if limit is not None and limit < len(truths):
        idx = sorted(random.Random(seed).sample(range(len(truths)), limit))
        chosen = [truths[i] for i in idx]
    cases, counter = [], Counter()
    for t in chosen:
        for c in cases_for(t, per_truth, seed):
            counter[c["form"]] += 1
            c["id"] = f"{c['form']}-{counter[c['form']]:05d}"
            cases.append(c)
    return cases


def write_cases(cases: list[dict], path: Path) -> None:
    """verifier_bench's jsonl layout; the form is the category."""
    rows = [dict(id=c["id"], category=c["form"], response=c["response"], ground_truth=c["ground_truth"],
                 label=c["label"], rationale=c["rationale"], source=c["source"], question=c["question"]) for c in cases]
    write_text_atomic(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


# =======================================================================================
# 5. Scoring
# =======================================================================================
SCORERS = [("new_math_reward", "new_reward_score"), ("math-verify", "math_verify_score")]


def score_cases(cases: list[dict], func: str, timeout: float, cpu: Optional[int], mem_mb: int) -> list[dict]:
    """Score every case with one of bench_reward's scorers in verifier_bench's time-limited worker."""
    spec = importlib.util.spec_from_file_location("verifier_bench", SHARED / "tools" / "verifier_bench.py")
    verifier_bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(verifier_bench)
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        scorer = bench_reward._scorer_module(Path(tmp), func)
        args = SimpleNamespace(scorer=f"{scorer}:compute_score", cpu=cpu, mem_mb=mem_mb,
                               data_source=DATA_SOURCE, load_timeout=120.0)
        worker = verifier_bench.Worker(args)
        try:
            for c in cases:
                status, payload, dt = worker.run(c["response"], c["ground_truth"], timeout,
                                                 {"question": c["question"]} if c.get("question") else None)
                val = verifier_bench.to_value(payload, "auto") if status == "ok" else None
                try:
                    judged = val is not None and float(val) > 0.0
                except (TypeError, ValueError):
                    judged = False
                out.append(dict(status=status, judged=judged, latency_s=dt))
        finally:
            worker.close()
    return out


def load_rows(data_dir: Path = DATA_DIR) -> list[tuple[str, str]]:
    """(problem, ground truth) of every row of the shipped train and test splits."""
    from grpo_math.evaluation.data import ground_truths, load_split

    rows = []
    for split in ("train", "test"):
        for label, cols in load_split(split, data_dir, False):
            gts = ground_truths(cols["solution"], label, desc=f"{split} answers")
            rows += [(cols["problem"][i], gt) for i, gt in enumerate(gts) if gt]
    return rows


def question_audit(cases: list[dict], rows: list[tuple[str, str]], seed: int) -> dict:
    """What the rules that read ``extra_info["question"]`` (prompt echo, required forms) cost,
    measured in this process with new_math_reward: each answer scored with and without its
    problem as the question.

    * metamorphic cases: right answers refused only because of the question (FN cost), echoed
      or ruled-out forms the question catches (FP saved), and policy cases still paid (FP left);
    * the shipped data: every MATH train/test gold, boxed as written in the contract layout
      (an answer equal to the gold must never be refused), and up to two meaning-keeping
      rewrites per row (the same seeded draw as the bench).

    A refusal with the question is counted once it repeats: the CAS soft deadline is wall
    time, and a loaded machine can miss it once."""
    import new_math_reward as R

    def paid(resp, gt, q):
        return R.compute_score(DATA_SOURCE, resp, gt, {"question": q} if q else None)["acc"] == 1.0

    out = Counter()
    refused_kinds = Counter()
    t0 = time.perf_counter()
    for c in cases:
        with_q, without_q = paid(c["response"], c["ground_truth"], c["question"]), paid(c["response"], c["ground_truth"], None)
        if without_q and not with_q:  # once more: a CAS soft deadline missed on a loaded machine is no rule
            with_q = paid(c["response"], c["ground_truth"], c["question"])
        if c["label"] == "equivalent":
            out["meta_pos"] += 1
            if without_q and not with_q:
                out["meta_fn"] += 1
                refused_kinds[c["kind"]] += 1
        elif c["kind"] in POLICY_KINDS and c["layout"] in SINGLE:
            out["meta_policy"] += 1
            out["meta_fp_saved"] += without_q and not with_q
            out["meta_fp_left"] += with_q
    for k, (problem, gt) in enumerate(rows):
        resp = f"<think>\nStep 1: Work it out.\n</think>\n<answer>\n\\boxed{{{gt}}}\n</answer>"
        out["gold_rows"] += 1
        if not paid(resp, gt, problem) and not paid(resp, gt, problem):
            out["gold_refused"] += 1
            out["gold_refused_no_q"] += not paid(resp, gt, None)
        t = annotate(Truth(gt=gt, problem=problem, solution="", source=""))
        rng = random.Random(f"{seed}:audit:{k}")
        for kind, ans in _candidates(t, KEEP, rng, guard=False, need=3):
            if kind == "identity":
                continue
            resp = f"<think>\nStep 1: Work it out.\n</think>\n<answer>\n\\boxed{{{ans}}}\n</answer>"
            out["rewrites"] += 1
            if paid(resp, gt, None) and not paid(resp, gt, problem) and not paid(resp, gt, problem):
                out["rewrite_refused"] += 1
                refused_kinds["shipped:" + kind] += 1
    out["seconds"] = round(time.perf_counter() - t0)
    return {"counts": dict(out), "kinds": dict(refused_kinds)}


# =======================================================================================
# 6. Report
# =======================================================================================
def stats(rows: list[tuple[dict, dict]]) -> dict:
    pos = [r for c, r in rows if c["label"] == "equivalent"]
    neg = [r for c, r in rows if c["label"] == "not"]
    fp = sum(r["judged"] for r in neg)
    fn = sum(not r["judged"] for r in pos)
    n = len(rows)
    return dict(n=n, pos=len(pos), neg=len(neg), acc=100.0 * (n - fp - fn) / n if n else float("nan"),
                fpr=100.0 * fp / len(neg) if neg else float("nan"), fnr=100.0 * fn / len(pos) if pos else float("nan"),
                timeouts=sum(r["status"] == "timeout" for _, r in rows),
                errors=sum(r["status"] in ("error", "crash") for _, r in rows))


def pct(v) -> str:
    return "–" if v is None or v != v else f"{v:.1f}"


def _cell(s: dict) -> str:
    out = f"{pct(s['acc'])} / {pct(s['fpr'])} / {pct(s['fnr'])}"
    return out + (f" ({s['timeouts']} TO)" if s["timeouts"] else "")


def _md(text: str, limit: int = 90) -> str:
    text = text.replace("\n", "⏎")
    text = text if len(text) <= limit else text[:limit - 1] + "…"
    return "`" + text.replace("|", "\\|").replace("`", "'") + "`"


def group_table(cases, results, key: str, title: str, order=None) -> list[str]:
    names = list(results)
    groups = defaultdict(list)
    for i, c in enumerate(cases):
        groups[c[key]].append(i)
    keys = [k for k in (order or sorted(groups)) if k in groups]
    lines = [f"| {title} | n (pos/neg) | " + " | ".join(f"{n} acc / FPR / FNR %" for n in names) + " |",
             "|---|---|" + "---|" * len(names)]
    for k in keys:
        idx = groups[k]
        cells = [_cell(stats([(cases[i], results[n][i]) for i in idx])) for n in names]
        pos = sum(cases[i]["label"] == "equivalent" for i in idx)
        lines.append(f"| {k} | {len(idx)} ({pos}/{len(idx) - pos}) | " + " | ".join(cells) + " |")
    return lines


def failure_patterns(cases, res, top: int = 20) -> list[str]:
    """The most common (form, rewrite kind, layout family, FP/FN) misjudgements of one scorer."""
    pats, example = Counter(), {}
    for c, r in zip(cases, res):
        if r["judged"] != (c["label"] == "equivalent"):
            fam = c["layout"] if c["layout"] not in SINGLE else "single box"
            # a refused self-correction is about its right answer's rewrite
            kind = c["right_kind"] if c["layout"] == "self_correct" else c["kind"]
            key = (c["form"], kind, fam, "FP" if r["judged"] else "FN" + ("/TO" if r["status"] == "timeout" else ""))
            pats[key] += 1
            example.setdefault(key, c)
    lines = ["| # | form | rewrite kind | layout | error | cases | example answer (ground truth) |",
             "|---|---|---|---|---|---|---|"]
    for k, (key, n) in enumerate(pats.most_common(top), 1):
        c = example[key]
        shown = c["answer"] if key[2] == "single box" else c["rationale"].split(": ", 1)[1]
        lines.append(f"| {k} | {key[0]} | {key[1]} | {key[2]} | {key[3]} | {n} | {_md(shown)} ({_md(c['ground_truth'], 40)}) |")
    return lines


def audit_lines(audit: dict) -> list[str]:
    c, kinds = audit["counts"], audit["kinds"]
    kind_text = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items(), key=lambda x: -x[1])) or "none"
    return [
        "Rules that read the question (prompt echo, required forms), new_math_reward scored in-process with and "
        f"without `extra_info[\"question\"]` ({c.get('seconds', 0)} s):", "",
        "| measured on | cases | refused only with the question | paid with the question |",
        "|---|---|---|---|",
        f"| metamorphic, meaning-keeping cases (FN cost) | {c.get('meta_pos', 0)} | {c.get('meta_fn', 0)} | – |",
        f"| metamorphic, policy cases in one box ({', '.join(POLICY_KINDS)}; FP) | {c.get('meta_policy', 0)} | "
        f"{c.get('meta_fp_saved', 0)} | {c.get('meta_fp_left', 0)} |",
        f"| shipped MATH train+test golds, boxed as written | {c.get('gold_rows', 0)} | "
        f"{c.get('gold_refused', 0) - c.get('gold_refused_no_q', 0)} | – |",
        f"| shipped rows, up to 2 meaning-keeping rewrites each (FN cost) | {c.get('rewrites', 0)} | "
        f"{c.get('rewrite_refused', 0)} | – |",
        "", f"Refused only with the question, by rewrite kind: {kind_text}. Meaning-keeping rewrites that "
        f"wrote the problem's own task expression were dropped as echoes before labelling ({ECHO_KEEPS_DROPPED[0]} "
        "while building the bench and the audit), and those in a form the problem rules out (\"as a common fraction\" "
        f"answered with a decimal, ...) were dropped as well ({WRONG_FORM_KEEPS_DROPPED[0]})."]


def report(cases, results, args, n_truths: int, form_counts: Counter, gen_s: float, audit: Optional[dict] = None) -> str:
    names = list(results)
    pos = sum(c["label"] == "equivalent" for c in cases)
    lines = [f"Metamorphic bench: {len(cases)} cases ({pos} equivalent / {len(cases) - pos} not) from "
             f"{n_truths} distinct MATH train+test ground truths, seed {args.seed}, {args.per_truth} rewrites per "
             f"ground truth, generated in {gen_s:.0f} s; `python -m benchmarks.bench_metamorphic --seed {args.seed} "
             f"--per-truth {args.per_truth}{f' --limit {args.limit}' if args.limit else ''}`, each case in "
             f"verifier_bench.py's worker (one process pinned to one CPU, --timeout {args.timeout:g} s).",
             "",
             "| scorer | accuracy % | FPR % | FNR % | timeouts | errors | p50 ms | worst s (case) | scoring s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for n in names:
        s = stats(list(zip(cases, results[n])))
        lat = sorted(r["latency_s"] for r in results[n])
        w = max(range(len(cases)), key=lambda i: results[n][i]["latency_s"])
        lines.append(f"| {n} | {pct(s['acc'])} | {pct(s['fpr'])} | {pct(s['fnr'])} | {s['timeouts']} | {s['errors']} | "
                     f"{1000 * lat[len(lat) // 2]:.2f} | {results[n][w]['latency_s']:.3f} ({cases[w]['id']}, "
                     f"{cases[w]['kind']}) | {sum(lat):.0f} |")
    lines += ["", "By ground-truth form (distinct ground truths per form: " +
              ", ".join(f"{f} {form_counts[f]}" for f in FORMS if form_counts[f]) + "):", ""]
    lines += group_table(cases, results, "form", "form", FORMS)
    lines += ["", "By rewrite kind (a hedge layout's label overrides its rewrite's):", ""]
    lines += group_table(cases, results, "kind", "rewrite kind", list(KEEP) + list(CHANGE))
    lines += ["", "By response layout:", ""]
    lines += group_table(cases, results, "layout", "layout", LAYOUTS)
    lines += ["", f"Most common misjudgements of {names[0]} (form, rewrite kind, layout; FP = paid a wrong answer, "
              "FN = refused a right one; a self-correction is counted under the rewrite of its final, right box):", ""]
    lines += failure_patterns(cases, results[names[0]])
    if audit:
        lines += [""] + audit_lines(audit)
    from importlib.metadata import version
    vers = ", ".join(f"{p} {version(p)}" for p in ("math-verify", "latex2sympy2_extended", "sympy"))
    lines += ["", f"Machine: {cpu_description()} ({platform.machine()}), cores shared with other jobs (load average "
              f"{os.getloadavg()[0]:.1f} at the end); Python {platform.python_version()}; {vers}."]
    return "\n".join(lines)


# =======================================================================================
# Entry point
# =======================================================================================
def _timeout(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = -1
    if not v > 0:
        raise argparse.ArgumentTypeError(f"expected seconds > 0, got {text!r}")
    return v


def build_parser() -> argparse.ArgumentParser:
    forms = "\n".join(f"  {f:11s} {FORM_HELP[f]}" for f in FORMS)
    kinds = "\n".join(f"  keep   {k:15s} {(f.__doc__ or '').splitlines()[0]}" for k, f in KEEP.items())
    kinds += "\n" + "\n".join(f"  change {k:15s} {(f.__doc__ or '').splitlines()[0]}" for k, f in CHANGE.items())
    ap = ArgumentParser(prog="bench_metamorphic.py", description=__doc__,
                        epilog=f"Forms:\n{forms}\n\nRewrite kinds:\n{kinds}\n\nLayouts: {', '.join(LAYOUTS)}")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED, help="seed of every random choice (default %(default)s)")
    ap.add_argument("--per-truth", type=positive_int, default=DEFAULT_PER_TRUTH,
                    help="rewrites drawn per ground truth, half keeping meaning (default %(default)s)")
    ap.add_argument("--limit", type=positive_int, help="only a seeded sample of this many ground truths (quick run)")
    ap.add_argument("--data-dir", type=Path, default=DATA_DIR,
                    help="MATH-lighteval folder with data/{train,test}-*.parquet (default: the shipped copy)")
    ap.add_argument("--timeout", type=_timeout, default=2.0, help="per-case wall limit in seconds (default %(default)s)")
    ap.add_argument("--cpu", type=int, default=0, help="CPU to pin the scoring worker to; -1: no pinning (default 0)")
    ap.add_argument("--mem-mb", type=int, default=4096, help="address-space limit of the worker in MiB (default 4096)")
    ap.add_argument("--only", default="", help="comma-separated scorers to run: new_math_reward, math-verify (default both)")
    ap.add_argument("--no-score", action="store_true", help="only build the cases (with --cases-out)")
    ap.add_argument("--no-audit", action="store_true",
                    help="skip the audit of the rules that read the question (in-process, about a minute)")
    ap.add_argument("--cases-out", type=Path, help="write the cases as jsonl in verifier_bench's layout")
    ap.add_argument("--markdown", type=Path, help="also write the report to this file (atomically)")
    return ap


def main(argv=None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    names = dict(SCORERS)
    only = [x.strip() for x in args.only.split(",") if x.strip()]
    unknown = [x for x in only if x not in names]
    if unknown:
        ap.error(f"--only: unknown scorer {unknown[0]!r}; choose from {', '.join(names)}")
    if not (args.data_dir / "data").is_dir():
        ap.error(f"--data-dir: {args.data_dir} has no data/ folder with the MATH parquet files")
    if not args.no_score and not (SHARED / "tools" / "verifier_bench.py").is_file():
        print(f"bench_metamorphic.py: error: {SHARED / 'tools' / 'verifier_bench.py'} not found "
              "(the shared folder beside the repository); use --no-score to only build cases", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    try:
        truths = load_truths(args.data_dir)
    except Exception as exc:  # a bad data folder: one line
        print(f"bench_metamorphic.py: error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
              file=sys.stderr)
        return 1
    cases = build_cases(truths, args.per_truth, args.seed, args.limit)
    gen_s = time.perf_counter() - t0
    used = {c["ground_truth"] for c in cases}
    form_counts = Counter(t.form for t in truths if t.gt in used)
    print(f"[metamorphic] {len(cases)} cases from {len(used)} ground truths in {gen_s:.1f} s", file=sys.stderr)
    if args.cases_out:
        write_cases(cases, args.cases_out)
    if args.no_score:
        return 0
    results = {}
    cpu = None if args.cpu < 0 else args.cpu
    for name, func in SCORERS:
        if only and name not in only:
            continue
        print(f"[metamorphic] scoring with {name} ...", file=sys.stderr, flush=True)
        t1 = time.perf_counter()
        results[name] = score_cases(cases, func, args.timeout, cpu, args.mem_mb)
        print(f"[metamorphic] {name}: {time.perf_counter() - t1:.0f} s", file=sys.stderr, flush=True)
    audit = None
    if not args.no_audit and (not only or "new_math_reward" in only) and args.limit is None:
        print("[metamorphic] auditing the rules that read the question ...", file=sys.stderr, flush=True)
        audit = question_audit(cases, load_rows(args.data_dir), args.seed)
    out = report(cases, results, args, len(used), form_counts, gen_s, audit)
    print(out)
    if args.markdown:
        write_text_atomic(args.markdown, out + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
