"""Rule-based MATH reward for verl GRPO: set ``custom_reward_function.path`` to this file (one self-contained file; it
needs sympy, latex2sympy2_extended and math-verify).

Only a correct final answer earns; format and reasoning credit come on top of it. "Correct" means mathematically
equivalent to the gold, exactly (no float tolerance), in the form the question demands (docs/reward_policy.md). Every
call is bounded in time; model text never reaches eval/exec/sympify nor makes compute_score raise. Sections, in
data-flow order: 1 contract and limits, 2 extract, 3 normalise, 4 judge, 5 policy, 6 format credit, 7 entry point. Rules
and measurements: docs/reward.md."""

from __future__ import annotations

import math
import re
import signal
import threading
import time
from array import array
from collections import namedtuple
from fractions import Fraction
from functools import lru_cache
from itertools import accumulate, combinations
from typing import List, Optional, Tuple

import sympy as _sympy
from latex2sympy2_extended import latex2sympy as _latex2sympy
from latex2sympy2_extended.math_normalization import NormalizationConfig as _NormalizationConfig
from latex2sympy2_extended.math_normalization import normalize_latex as _normalize_latex
from math_verify import verify as _mv_verify
from math_verify.grader import should_treat_as_complex as _complex_re


# ======================================================================================
# 1. The answer contract (tokenizer_config.json's system prompt and prepare_math.py follow it), weights and limits.
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
#: Qwen2.5-Instruct's stock default system prompt (its tokenizer_config.json chat template).
QWEN_STOCK_SYSTEM_PROMPT = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
#: The recipe's system prompt: Qwen's stock prompt plus the answer contract (real newlines).
SYSTEM_PROMPT = (QWEN_STOCK_SYSTEM_PROMPT + " First think through the problem step by step inside <think> </think>"
                 " tags, then give the final answer inside <answer> </answer> tags, written as \\boxed{}. Use exactly"
                 " this layout:\n<think>\nStep 1: ...\nStep 2: ...\n</think>\n<answer>\n\\boxed{...}\n</answer>")
#: Appended to every MATH problem by prepare_math.py (in place of verl's "Let's think step by step ...").
INSTRUCTION = ("Let's think step by step inside <think> </think> tags, then give the final answer within \\boxed{} "
               "inside <answer> </answer> tags.")
#: The reference run's weights (compute_score's defaults): correct 0.7, format up to 0.2 (per marker), reasoning 0.1.
SCORE_CORRECT, FORMAT_TAG_CREDIT = 0.7, 0.05
FORMAT_MARKERS = (THINK_OPEN + "\n", "\n" + THINK_CLOSE + "\n", "\n" + ANSWER_OPEN + "\n", "\n" + ANSWER_CLOSE)
FORMAT_CREDIT_MAX = len(FORMAT_MARKERS) * FORMAT_TAG_CREDIT
#: Text before <think> / after </answer> costs this per character (reference), each side capped.
FORMAT_STRAY_COST_PER_CHAR, FORMAT_STRAY_COST_MAX = 0.001, 0.1
#: Reasoning (reference): numbered steps of COT_MIN_STEP_CHARS characters or more, credit by steps and keyword steps.
COT_FULL_CREDIT, COT_FULL_MIN_STEPS, COT_FULL_MIN_KEYWORD_STEPS = 0.1, 3, 2
COT_PARTIAL_CREDIT, COT_PARTIAL_MIN_STEPS, COT_PARTIAL_MIN_KEYWORD_STEPS = 0.05, 2, 1
COT_MIN_STEP_CHARS = 4
COT_KEYWORDS = ("solve", "equation", "calculate", "substitute", "therefore", "because", "thus", "sum", "product",
                "derivative", "integral")
#: What format_only pays an equal share of: each tag once and in order, a final \boxed{}, no text around the tags.
CONTRACT_PARTS = ("think_open", "think_close", "answer_open", "answer_close", "boxed", "starts_with_think",
                  "ends_with_answer")
#: data_source values judged here (MATH and its hub copies); any other raises ValueError.
SUPPORTED_DATA_SOURCES = frozenset({"DigitalLearningGmbH/MATH-lighteval", "lighteval/MATH", "HuggingFaceH4/MATH-500",
                                    "hendrycks/competition_math", "EleutherAI/hendrycks_math"})

# Limits that keep every call bounded: over a limit, exact string comparison only, or not correct.
MAX_RESPONSE_CHARS = 400_000   # longer responses: only the tail is searched for the answer
MAX_ANSWER_CHARS = 2_000       # longer final answers: exact normalised string match only
MAX_CAS_CHARS = 400            # longest item handed to the CAS
MAX_NESTING = 40               # deepest {[( nesting handed to the CAS
MAX_LIST_ITEMS = 16            # longer answer lists: exact item strings only (no CAS)
MAX_FINAL_BOXES = 16           # more distinct boxes in the final statement: an enumeration hack
MAX_INT_DIGITS = 4_000         # integer literals longer than this: string compare only
MAX_POWER_DEPTH = 2            # a^{b^{c}} is parsed; deeper symbolic towers are refused
MAX_FACTORIAL_ARG = 10_000     # n! and binomial(n, k) evaluated only for integers up to this
MAX_POWER_BITS = 200_000       # integer powers up to this size are evaluated exactly
MAX_LOG10_MAGNITUDE = 20_000   # CAS input whose value may exceed 10**this is rejected
MAX_FACTOR_DEGREE = 24         # largest total degree of a factor whose irreducibility is decided
MAX_FACTOR_VARIABLES = 3       # and its number of variables
CAS_BUDGET_S = 0.5             # soft deadline for CAS work in one call, CPU seconds of the calling thread
HARD_TIMEOUT_S = 1.5           # SIGALRM guard (main thread only) for the whole comparison: the thread's CPU seconds,
HARD_WALL_S = 10.0             # and wall-clock seconds in any case
NUMERIC_DIGITS = 50            # precision of the sample-point evaluation
NUMERIC_SLACK_DIGITS = 20      # values must agree to all evaluated digits but these (exactness)
MAX_EVAL_EXTRA_DIGITS = 2_000  # extra digits for large magnitudes (2^{200}+1 vs 2^{200})
PRED_MAX_CHARS = 300           # longest ``pred`` string returned
STATS = {"calls": 0, "internal_errors": 0, "guard_rejections": 0, "cas_deadline": 0, "hard_timeouts": 0}


class _Rejected(Exception):
    """An answer (or a step) refused by a size/time guard: judged not correct."""


class _HardTimeout(BaseException):
    """Raised by the SIGALRM guard (a BaseException: no library's ``except Exception`` swallows it)."""


# ======================================================================================
# 2. Extract the final boxed answer. None: a box copied from the prompt, a last box left unclosed, a hallucinated next
#    problem, a hedge ("or" between boxes), cycled candidates, an echoed example (tests/unit/test_reward.py: each hack).
#: Box commands (with or without a brace), escaped braces (no groups) and braces: one linear pass.
_BOX_TOKEN_RE = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])[ \t]*(\{)?|\\[{}]|[{}]")
_BARE_BOX_ARG_RE = re.compile(r"[^\s$]+")
_BARE_BOX_STOP_RE = re.compile(r"\\[\]\)]")
_PLACEHOLDER_BOXES = frozenset({"", "...", "\\ldots", "\\cdots", "\\dots", "answer", "\\text{answer}", "?"})
_MATH_DELIMS_RE = re.compile(r"\\[()\[\]]|\$+|\*\*")
#: A retraction between two boxes: the later one supersedes the earlier (self-correction).
_CORRECTION_RE = re.compile(
    r"\b(?:wait|wrong|mistake|incorrect|actually|correct(?:s|ed|ing|ion)?|instead|re-?check|oops|"
    r"sorry|error|redo|scratch|revis\w*|reconsider\w*|invalid|not\s+(?:allowed|valid|possible))\b", re.I)
_HEDGE_RE = re.compile(r"\b(?:or|either|maybe|perhaps|possibly|might|could|alternatively|also|otherwise)\b", re.I)
_CONTINUATION_RE = re.compile(
    r"(?m)^[ \t#*]*(?:Problem|Question|Human|User)\s*\d*\s*[:.]|<\|im_start\|>|<\|endoftext\|>|<\|im_end\|>")
_NEW_TASK_RE = re.compile(
    r"\b(?:now|next)\b[^\n.]{0,30}?\b(?:the|our|this)\s+(?:given|real|actual|original|current|own|"
    r"problem|question|one)\b|\b(?:following|using|with)\s+the\s+same\s+(?:approach|method|steps|idea)\b", re.I)
_GAP_LONG = 150
MAX_SUPERSEDED_CANDIDATES = 2  # distinct superseding boxed answers, none retracted: cycling candidates
#: A later unboxed final statement of a value, which may retract the box ("... So the answer is 11.").
_LATER_ANSWER_RE = re.compile(r"\b(?:so|thus|hence|therefore)\b[^.\n$]{0,20}?\bthe\s+(?:final\s+)?answer\s+is\s*:?\s*"
                              r"(?:\$([^$]{1,100})\$|([-+]?\d+(?:[./]\d+)?))[.!]?(?:\s|$)", re.I)
#: An unboxed alternative right after the final box: "$\\boxed{3}$ (or maybe 4)".
_TRAILING_HEDGE_RE = re.compile(
    r"^[\s$).,;:*]{0,8}(?:\(\s*)?(?:or|maybe|perhaps|possibly|alternatively|otherwise)\b(?:\s+(?:maybe|perhaps|"
    r"possibly|else|also|even|just))?[\s,]*(?:\$(?P<span>[^$]{1,300})\$|(?P<alt>[-+]?(?:\d|\\(?:frac|sqrt|pi|dfrac))"
    r"[^\n.;!?)$]{0,60}?)[\s]*(?:[.;!?)]|\n|$))", re.I)


def _scan_boxes(text: str) -> Tuple[List[Tuple[int, int, int, int]], int]:
    """All complete boxes (start, end, content start or -1 brace-less, content end); the last unclosed one's start."""
    boxes: List[Tuple[int, int, int, int]] = []
    open_boxes: List[Tuple[int, int, int]] = []  # (depth, content start, box start)
    depth = 0
    for m in _BOX_TOKEN_RE.finditer(text):
        tok = m.group(0)
        if tok[0] == "\\" and len(tok) > 2:  # \boxed / \fbox
            if m.group(1):
                depth += 1
                open_boxes.append((depth, m.end(), m.start()))
            elif arg := _BARE_BOX_ARG_RE.match(text, m.end()):
                boxes.append((m.start(), arg.end(), -1, arg.start()))
        elif tok == "{":
            depth += 1
        elif tok == "}":
            if open_boxes and open_boxes[-1][0] == depth:
                _, cstart, bstart = open_boxes.pop()
                boxes.append((bstart, m.end(), cstart, m.start()))
            depth = max(depth - 1, 0)
            while open_boxes and open_boxes[-1][0] > depth:  # stray closers: drop orphans
                open_boxes.pop()
    return sorted(boxes), open_boxes[-1][2] if open_boxes else -1


def _box_content(text: str, box: Tuple[int, int, int, int]) -> str:
    """A box's content (brace-less: the token without trailing punctuation, ``\\boxed 5.`` -> 5)."""
    _, end, cstart, cend = box
    return text[cstart:cend] if cstart >= 0 else _BARE_BOX_STOP_RE.split(text[cend:end], 1)[0].rstrip(".,;:")


def extract_last_boxed(text: str) -> Optional[str]:
    """The content of the last complete ``\\boxed{...}`` / ``\\fbox{...}``, or None (none, or the last one unclosed)."""
    boxes, unclosed = _scan_boxes(text)
    boxes = [b for b in boxes if b[2] >= 0 or _box_content(text, b)]
    return None if not boxes or unclosed > boxes[-1][0] else _box_content(text, boxes[-1])


def _gap_kind(gap: str) -> str:
    """The text between two boxes: 'separate' statements, a 'correction', a 'hedge' or a 'join' (one statement)."""
    g = _MATH_DELIMS_RE.sub(" ", gap)
    if _CORRECTION_RE.search(g):
        return "correction"
    if _HEDGE_RE.search(g):
        return "hedge"
    long_or_prose = len(g.strip()) > _GAP_LONG or ("\n" in g and re.search(r"[A-Za-z]{2,}", g.strip()))
    return "separate" if long_or_prose else "join"


def _cycles_candidates(region: str, outer: list, first: int, values: List[str]) -> bool:
    """MAX_SUPERSEDED_CANDIDATES separate statements with other boxed values before the final one, none retracted."""
    gaps = [_gap_kind(region[outer[k][1]:outer[k + 1][0]]) for k in range(first)]  # gaps[k]: after box k
    others = sum(g == "separate" and _box_content(region, outer[k]).strip() not in values for k, g in enumerate(gaps))
    return "correction" not in gaps and others >= MAX_SUPERSEDED_CANDIDATES


def _final_statement(region: str, cut_continuation: bool) -> Tuple[Optional[List[str]], bool]:
    """The boxed answers of the final statement and whether hedged or cycled; (None, False) without a usable box."""
    boxes, unclosed = _scan_boxes(region)
    if cut_continuation and boxes and (m := _CONTINUATION_RE.search(region, min(b[1] for b in boxes))):
        boxes = [b for b in boxes if b[1] <= m.start()]
        unclosed = unclosed if unclosed < m.start() else -1
    outer: List[Tuple[int, int, int, int]] = []  # outermost boxes only
    for b in boxes:
        if not (outer and b[0] < outer[-1][1]):
            outer.append(b)
    if unclosed >= 0 and (not outer or unclosed > outer[-1][0]):
        return None, False  # the last box is truncated
    blank = [b for b in outer if b[3] - b[2] <= MAX_ANSWER_CHARS and
             _box_content(region, b).strip() in _PLACEHOLDER_BOXES]
    outer = [b for b in outer if b not in blank]
    turns = [m.start() for m in _NEW_TASK_RE.finditer(region, outer[0][1])] if outer else []
    outer = [b for b in outer if not any(b[1] <= t for t in turns)]  # an echoed example's boxes come before the turn
    if not outer:
        return None, False
    first, hedged = len(outer) - 1, False
    while first > 0 and len(outer) - first <= MAX_FINAL_BOXES:
        kind = _gap_kind(region[outer[first - 1][1]:outer[first][0]])
        if kind in ("separate", "correction"):
            break
        hedged = hedged or kind == "hedge"
        first -= 1
    group = outer[first:]
    lo, hi = group[0][0], group[-1][1]  # a placeholder box in or next to the statement, no word between: spam
    if any(lo <= b[0] < hi or not re.search(r"[A-Za-z0-9]", _COMMAND_RE.sub("", region[min(b[1], hi):max(b[0], lo)]))
           for b in blank):
        return [strip_grouping_braces(_box_content(region, b)) for b in group] + [""], True
    if first > 0 and _cycles_candidates(region, outer, first, [_box_content(region, b).strip() for b in group]):
        group, hedged = outer[-(MAX_FINAL_BOXES + 1):], True  # report every candidate
    # whole-answer brace groups go before the length cut ({{...{4}...}} is the answer 4)
    answers = [strip_grouping_braces(_box_content(region, b))[:MAX_ANSWER_CHARS + 1] for b in group]
    if m := _TRAILING_HEDGE_RE.match(region[group[-1][1]:group[-1][1] + 400]):
        return answers + [(m.group("span") or m.group("alt")).strip()], True
    if (m := _LATER_ANSWER_RE.search(_CONTINUATION_RE.split(region[group[-1][1]:], 1)[0])) and not _restates(
            later := (m.group(1) or m.group(2)).strip(), answers, time.thread_time() + CAS_BUDGET_S):
        return answers + [later], True
    return answers, hedged


def _restates(box: str, answers: List[str], deadline: float) -> bool:
    """Whether a box (a later one, a side) states one of the answers' values (section 4 judges)."""
    try:
        return any(answers_match(box[:MAX_ANSWER_CHARS + 1], a, deadline) for a in answers)
    except _Rejected:
        return False


def extract_final_answer(text: str) -> Tuple[Optional[List[str]], bool]:
    """The final boxed answer(s), in the ``<answer>`` blocks (which must agree) or after ``</think>``; a hedge flag."""
    text = text[-MAX_RESPONSE_CHARS:]
    tail = text.rsplit(THINK_CLOSE, 1)[1] if THINK_CLOSE in text else ""
    region = tail if ANSWER_OPEN in tail or "\\boxed" in tail or "\\fbox" in tail else text
    if ANSWER_OPEN not in region:
        return _final_statement(region, cut_continuation=True)
    blocks = [b.split(ANSWER_CLOSE, 1)[0] for b in region.split(ANSWER_OPEN)[1:]]
    stated = [_final_statement(b, cut_continuation=False) for b in blocks]
    finals, hedged = [ans for ans, _ in stated if ans is not None], any(h for _, h in stated)
    if not finals:
        return None, False
    if len({tuple(_norm_key(a) for a in f) for f in finals}) > 1:
        return [a for f in finals for a in f], True  # blocks disagree: a hedge
    after = region.rsplit(ANSWER_CLOSE, 1)[1] if ANSWER_CLOSE in region.rsplit(ANSWER_OPEN, 1)[1] else ""
    after = _CONTINUATION_RE.split(after, 1)[0] if "\\boxed" in after or "\\fbox" in after else ""  # a new problem's
    later = [c for c in (strip_grouping_braces(_box_content(after, b)) for b in _scan_boxes(after)[0][:8])
             if c not in _PLACEHOLDER_BOXES and not _restates(c, finals[-1], time.thread_time() + CAS_BUDGET_S)]
    return (finals[-1] + later, True) if later else (finals[-1], hedged)  # a later box of another value hedges


# ======================================================================================
# 3. Normalise the answer and the gold alike: presentation is dropped, what may change the answer (percent, unit, base,
#    choice letter, modulus) is recorded, so that two different ones still differ.
class _Norm(namedtuple("_Norm", "s pct unit text base choice mod", defaults=(False, None, False, None, None, None))):
    """An answer's canonical string ``s`` with its percent sign, unit, \\text{} phrase, base, choice letter, modulus."""

    def compatible(self, g: "_Norm") -> bool:
        """A unit, base or modulus is optional (MATH pays "5" for "5 cm"), but two different ones differ."""
        units_differ = self.unit and g.unit and self.unit != g.unit and not ({self.unit, g.unit} & _GENERIC_UNITS)
        return not units_differ and not any(a and b and a != b for a, b in ((self.base, g.base), (self.mod, g.mod)))

    def same(self, other: "_Norm") -> bool:
        return self.s == other.s and self.pct == other.pct and self.compatible(other)

# (a) Unicode maths as models write it -> LaTeX (latex2sympy2_extended's normaliser knows none of it).
_UNICODE = {"π": "\\pi ", "∞": "\\infty ", "−": "-", "–": "-", "×": "\\times ", "·": "\\cdot ",
            "⋅": "\\cdot ", "∙": "\\cdot ", "÷": "\\div ", "≤": "\\leq ", "≥": "\\geq ", "≠": "\\ne ",
            "∪": "\\cup ", "∩": "\\cap ", "±": "\\pm ", "∓": "\\mp ", "∈": "\\in ", "≈": "\\approx ",
            "≡": "\\equiv ", "λ": "\\lambda ", "…": "\\ldots ", "θ": "\\theta ", "α": "\\alpha ", "β": "\\beta ",
            "°": "^\\circ ", "\u00a0": " ", "\u2009": " ", "\u202f": " "}
_UNICODE_CHAR_RE = re.compile("[" + "".join(_UNICODE) + "]")
_SUPERSCRIPT = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻", "0123456789+-")
_SUPERSCRIPT_RE = re.compile("[⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻]+")
_VULGAR = {"½": "1}{2", "⅓": "1}{3", "⅔": "2}{3", "¼": "1}{4", "¾": "3}{4", "⅕": "1}{5", "⅖": "2}{5", "⅗": "3}{5",
           "⅘": "4}{5", "⅙": "1}{6", "⅚": "5}{6", "⅛": "1}{8", "⅜": "3}{8", "⅝": "5}{8", "⅞": "7}{8"}
_VULGAR_RE = re.compile("[" + "".join(_VULGAR) + "]")
#: √ takes the next group, number, command or letter: √21/14 -> \sqrt{21}/14, ∜8 -> \sqrt[4]{8}
_ROOT_RE = re.compile(r"([√∛∜])\s*(?:\(([^()]*)\)|\{([^{}]*)\}|(\d+(?:\.\d+)?|\\[A-Za-z]+|[A-Za-z]))")
_ROOT_INDEX = {"√": "", "∛": "[3]", "∜": "[4]"}

# (b) Wrappers, labels and units.
_SUBS = (("\\!", ""), ("{,}", ","), ("\\dfrac", "\\frac"), ("\\tfrac", "\\frac"), ("\\cfrac", "\\frac"),
         ("\\dbinom", "\\binom"), ("\\tbinom", "\\binom"), ("\\le ", "\\leq "), ("\\ge ", "\\geq "),
         ("\\leqslant", "\\leq"), ("\\geqslant", "\\geq"), ("\\lt", "<"), ("\\gt", ">"), ("\\cdotp", "\\cdot"),
         ("\\dots", "\\ldots"), ("\\cdots", "\\ldots"), ("...", "\\ldots"), ("\\neq", "\\ne"), ("\\infin", "\\infty"),
         ("{:}", ":"), ("\\langle", "("), ("\\rangle", ")"), ("\\varnothing", "\\emptyset"))
_BRACELESS_FRAC_RE = re.compile(r"\\frac\s*(\d|\\[A-Za-z]+)\s*(\d|\\[A-Za-z]+)")  # \frac12, \frac\pi3
_BRACELESS_FRAC2_RE = re.compile(r"\\frac\s*\{([^{}]*)\}\s*(\d)")
_BRACELESS_FRAC3_RE = re.compile(r"\\frac\s*(\d)\s*\{")  # \frac 1{72}
_BRACELESS_SQRT_RE = re.compile(r"\\sqrt\s*(\d|[A-Za-z](?![A-Za-z]))")
_ONE_TOKEN_EXP_RE = re.compile(r"\^\s*\{\s*(\w)\s*\}")  # x^{2} -> x^2
_STYLE_RE = re.compile(
    r"\\(?:displaystyle|textstyle|scriptstyle|left|right|bigl|bigr|Bigl|Bigr|big|Big|bigg|Bigg)(?![A-Za-z])\s*|"
    r"\\(?:text)?color\s*\{[^{}]*\}\s*")
_SPACE_CMD_RE = re.compile(r"(?<!\\)\\[,;: ]|\\q?quad(?![A-Za-z])|~")
_BRACKETED_MATRIX_RE = re.compile(r"^[\[(]\s*(\\begin\{([a-zA-Z]*matrix|array)\}.*\\end\{\2\})\s*[\])]$", re.S)
_DEG_RE = re.compile(r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|\\circ|\\degree(?![A-Za-z])|\^\s*\{\s*o\s*\}")
_WRAP_RE = re.compile(r"\\(text|textbf|textit|textrm|textnormal|mathrm|mathbf|mathit|mathsf|mathnormal|"
                      r"mbox|boxed|fbox|bm|boldsymbol|emph|overline(?=\s*\{[A-Z]{2,3}\}))\s*\{")  # \overline{CD}
_TEXTISH = frozenset({"text", "textbf", "textit", "textrm", "textnormal", "mbox", "mathrm", "emph"})
#: Trailing text pieces, then an optional power: "32\text{ cm}^2", "5\text{ sq}\text{ in}".
_TRAIL_TEXT_UNIT_RE = re.compile(
    r"^(?P<v>.*?[^\s{(\[])\s*(?P<u>(?:\\(?:text|mbox|mathrm|textrm|textnormal|textit|operatorname|rm)\s*\{[^{}]*\}"
    r"\s*)+)(?:\^\s*\{?\s*(?P<p>[23])\s*\}?)?\s*\.?$")
#: A letter or command with a subscript (``a_1``, ``\\lambda``); a name (_NAME) may add primes and arguments.
_SYMBOL = r"(?:[A-Za-z]|\\[A-Za-z]+)(?:_\{?\w+\}?)?"
_TRAIL_WORD_UNIT_RE = re.compile(r"^(?P<l>" + _SYMBOL + r"\s*=\s*)?(?P<v>[-+]?[\d.,]*\d)\s+"
                                 r"(?P<u>[A-Za-z]{2,}(?: [A-Za-z]+)*)(?:\^\{?(?P<p>[23])\}?)?\.?$")
_NUMBER_WORDS = {w: i for i, w in enumerate("zero one two three four five six seven eight nine ten eleven twelve "
                                            "thirteen fourteen fifteen sixteen seventeen eighteen nineteen".split())}
_NUMBER_WORDS.update({w: 10 * i for i, w in
                      enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split(), 2)})
_NUMBER_SCALES = {"hundred": 100, "thousand": 1000, "million": 10 ** 6, "billion": 10 ** 9}
_NUMBER_WORD_RE = re.compile(r"^(?:(?:" + "|".join(list(_NUMBER_WORDS) + list(_NUMBER_SCALES)) +
                             r"|and|a)(?:[\s-]+|$))+", re.I)
#: Denominators in words: "one half", "two thirds", "three quarters", "a fifth".
_FRACTION_WORDS = {"half": 2, "halve": 2, "third": 3, "quarter": 4, "fourth": 4, "fifth": 5, "sixth": 6,
                   "seventh": 7, "eighth": 8, "ninth": 9, "tenth": 10, "eleventh": 11, "twelfth": 12,
                   "hundredth": 100, "thousandth": 1000}
_FRACTION_WORD_RE = re.compile(r"^(?P<n>.+?|an?)[\s-]+(?P<d>" + "|".join(_FRACTION_WORDS) + r")s?$", re.I)
#: A sentence that states a count: "There are five digits", "The answer is 12 cm".
_COUNT_SENTENCE_RE = re.compile(r"^(?:[A-Za-z][A-Za-z ,'-]*\s)?(?:is|are|was|were|equals?)\s+(?P<rest>[A-Za-z0-9]"
                                r"[A-Za-z0-9 .-]*?)\.?$", re.I)
#: Words after a cardinal that make it something else than a count ("one of them", "two less").
_NOT_A_UNIT_RE = re.compile(r"\b(?:of|less|more|than|or|and|not|times|per|over|out|plus|minus|half|third|"
                            r"quarter|fifths?|sixths?|eighths?|tenths?|hundredths?|thousandths?)\b", re.I)
#: A leading label: "\text{The sum is } 45", "\text{Directrix: } y = 3", "Remainder: 7".
_LABEL_RE = re.compile(
    r"^(?:\\(?:text|textbf|mbox|textrm|mathrm)\s*\{\s*(?P<t>[A-Za-z][A-Za-z ,'-]*?(?:\sis|\sare|\sequals?|"
    r"\swas|\swere|:|=))\s*\}|(?P<w>[A-Za-z][A-Za-z ]+):)\s*(?P<rest>\S.*)$", re.S)
#: A choice label before a value: "(A) 12", "[B] 7"; lower case only before a space ("(a)(a+1)" is a product).
_CHOICE_LABEL_RE = re.compile(r"^(?:[(\[]([A-J])[)\]]\s*|[(\[]([a-e])[)\]]\s+|([A-J])(?::\s*|[.)]\s+))"
                              r"(?!.*\([A-Ja-e]\)|.*\b(?:and|or)\b)(?P<rest>\S.*)$", re.S)
_OPTION_WORD_RE = re.compile(r"^(?:option|choice|answer)\s*:?\s*(?=[(\[]?[A-Ea-e][)\]]?$)", re.I)  # "Option E"
_THOUSANDS_SEP_RE = re.compile(r"(?<=\d),\s*\\!\s*(?=\d)")  # MATH's "11,\! 111" is one number
#: A remark in words in brackets after a value ("5 (the smallest)"), unless it hedges or approximates.
_REMARK_RE = re.compile(r"^(?P<v>.*[\d}\])])\s+\((?P<r>[A-Za-z]{2,}(?:[ ,'-]+[A-Za-z]+){0,7})\)\.?$")
_HEDGE_REMARK_RE = re.compile(r"\b(?:approx\w*|about|roughly|around|nearly|estimat\w*|round\w*|or|maybe|perhaps|"
                              r"possibly|if|unless|assum\w*|when|not|either|guess\w*|likely|probably|hundreds?|"
                              r"thousands?|millions?|billions?|dozens?|percent|times|squared|cubed|per|"
                              r"units?\s+of)\b", re.I)
#: Words after a value that make it a bound or a guess, not a unit ("6 \\text{ or fewer}", "5 \\text{ at most}").
_QUALIFIER_RE = re.compile(r"\b(?:or|and|fewer|less|more|than|least|most|approx\w*|about|roughly|around|nearly|"
                           r"almost|over|under|up\s+to|maybe|perhaps|possibly)\b", re.I)
_ORDINAL_RE = re.compile(r"(\d)\s*(?:\^\s*\{?\s*)?(?:st|nd|rd|th)\b\}?")
_TIME_RE = re.compile(r"^(\d{1,2}(?::\d{2}){1,2})\s*(?:([ap])\s*\.?\s*m\.?)?$", re.I)
#: The zero vector in bold or with an arrow (``\\mathbf{0}``, ``\\vec 0``): canonical ``\\vec{0}``.
_ZERO_VECTOR_RE = re.compile(r"^\\(?:mathbf|boldsymbol|bm|vec|overrightarrow)\s*(?:\{\s*0\s*\}|0)$")
_ZERO_VECTOR = "\\vec{0}"
_IDENTITY_RE = re.compile(r"^(?P<c>[-+]?\d*)\s*\\(?:mathbf|boldsymbol|bm)\s*(?:\{\s*I\s*\}|I)$")  # -\mathbf{I}
_REALS = r"\\mathbb\{R\}|\\mathbb R|\\R|\\reals"
_REALS_RE = re.compile(r"^(?:" + _REALS + r"|\\text\{all real numbers\}|all real numbers)$")
#: A name, for every step that tells a name from a value: ``a_1``, ``f'``, ``F(x)``, ``\\lambda``.
_NAME = _SYMBOL + r"'*(?:\([A-Za-z](?:,[A-Za-z])*\))?"
_IN_PREFIX_RE = re.compile(r"^" + _NAME + r"\s*\\in(?![A-Za-z])\s*")
#: A congruence: "x \\equiv 8 \\pmod{13}", "8 \\pmod{13}", "8 (mod 13)", "8 \\bmod 13".
_EQUIV_RE = re.compile(r"^.*?\\equiv(?![A-Za-z])\s*", re.S)
_MOD_RE = re.compile(r"\s*(?:\\[pb]?mod\s*\{?\s*(\d+|[A-Za-z])\s*\}?|"
                     r"\(\s*(?:\\bmod|\\mod|mod)(?![A-Za-z])\s*\{?\s*(\d+|[A-Za-z])\s*\}?\s*\))$")
#: A base subscript in any brace style: 1011_2, 1011_{2}, (1011)_{(2)}, 1011_{\\text{two}} (wrappers gone).
_BASE_SUB_RE = re.compile(r"^\(?([0-9A-Za-z]+(?:\.[0-9A-Za-z]+)?)\)?_\{?\(?(\d{1,2}|[a-z]{3,9})\)?\}?$")
#: A base in words after the numeral: "141 in base 13", "1112112 (base 3)", "7602 base-8".
_BASE_WORDS_RE = re.compile(r"^(?P<v>[0-9A-Za-z]+(?:\.[0-9A-Za-z]+)?)\s*(?P<o>\()?\s*(?:in\s+)?base[\s-]*"
                            r"(?P<b>\d{1,2}|[a-z]{3,9})\s*(?(o)\))$", re.I)
_BASE_WORDS = {w: str(i) for w, i in _NUMBER_WORDS.items() if 2 <= i <= 12 or i == 16}  # "two" .. "twelve", "sixteen"
_THOUSANDS_RE = re.compile(r"^[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
_NAME_EQ_RE = re.compile(r"^[A-Za-z]\s*=\s*")  # "N = 14,916": the number after a name
_GROUP_THOUSANDS_RE = re.compile(r"\{(\d{1,3}(?:,\d{3})+(?:\.\d+)?)\}")
_SPACE_DROP_RE = re.compile(r"(?<![A-Za-z]) | (?![A-Za-z])")
_BRACE_OR_ESCAPE_RE = re.compile(r"\\.|[{}]", re.S)
_BRACE_STEP = bytes.maketrans(b"{}", b"\x01\xff")  # +1 / -1 as signed bytes
_WS_CHARS = " \t\n\r\f\v"
_UNIT_ALIASES = {"inches": "inch", "in": "inch", "feet": "foot", "ft": "foot", "yd": "yard", "mi": "mile",
                 "centimeter": "cm", "centimetre": "cm", "meter": "m", "metre": "m", "kilometer": "km",
                 "millimeter": "mm", "hr": "hour", "hrs": "hour", "h": "hour", "min": "minute", "mins": "minute",
                 "sec": "second", "secs": "second", "s": "second", "lb": "pound", "lbs": "pound", "oz": "ounce",
                 "mph": "mile per hour", "kg": "kilogram", "g": "gram", "gm": "gram"}
_UNIT_POWERS = {"sq": "2", "square": "2", "squared": "2", "cu": "3", "cubic": "3", "cubed": "3"}
#: Units of measure: an answer in another one than the question asks for states another quantity.
_MEASURES = frozenset(_UNIT_ALIASES.values()) | frozenset(
    "dollar cent degree radian day week month year liter gallon".split())
_GENERIC_UNITS = frozenset({"unit", "square unit", "cubic unit"})
#: Units by kind (canonical keys), and their names in a question's words.
_UNIT_KINDS = {u: kind for kind, units in (("time", "second minute hour day week month year"),
               ("length", "inch foot yard mile mm cm m km"), ("mass", "gram kilogram pound ounce"),
               ("money", "dollar cent"), ("volume", "liter gallon"), ("angle", "degree radian")) for u in units.split()}
_UNIT_WORD_RE = re.compile(r"\b(seconds?|minutes?|hours?|days?|weeks?|months?|years?|inch(?:es)?|foot|feet|yards?|"
                           r"miles?|(?:milli|centi|kilo)?meters?|(?:kilo)?grams?|pounds?|ounces?|dollars?|"
                           r"(?<!per )cents?|liters?|gallons?|degrees?|radians?)\b", re.I)


def _unicode_to_latex(s: str) -> str:
    """Step (a): ``7√5`` -> ``7\\sqrt{5}``, ``8x⁹`` -> ``8x^{9}``, ``1¼`` -> ``1\\frac{1}{4}``."""
    if s.isascii():
        return s
    s = _UNICODE_CHAR_RE.sub(lambda m: _UNICODE[m.group(0)], s)
    s = _ROOT_RE.sub(lambda m: "\\sqrt%s{%s}" % (_ROOT_INDEX[m.group(1)], next(
        g for g in m.groups()[1:] if g is not None).strip()), s)
    s = _SUPERSCRIPT_RE.sub(lambda m: "^{%s}" % m.group(0).translate(_SUPERSCRIPT), s)
    return _VULGAR_RE.sub(lambda m: "\\frac{%s}" % _VULGAR[m.group(0)], s)


def _match_brace(s: str, i: int) -> int:
    """Index of the brace closing the group opened at s[i] == '{', or -1 (escaped characters skipped)."""
    depth = 0
    for m in _BRACE_OR_ESCAPE_RE.finditer(s, i):
        depth += {"{": 1, "}": -1}.get(m.group(), 0)
        if depth == 0 and m.group() == "}":
            return m.start()
    return -1


def strip_grouping_braces(s: str) -> str:
    """Remove any number of braces wrapping the whole answer (``{{{4}}}`` -> ``4``; sets are ``\\{...\\}``): with k
    braces in front, k' at the end and the core's depth walk between them (lowest prefix m <= 0, final f), the whole is
    balanced iff k + f == k', and then k + m layers enclose it. A C-level walk: 200,000 braces cost milliseconds."""
    t = s.strip()
    if not (t.startswith("{") and t.endswith("}")):
        return t
    body = t.lstrip("{" + _WS_CHARS)
    lead = len(t) - len(body)
    core_end = len(body.rstrip("}" + _WS_CHARS))
    backslashes = core_end - len(body[:core_end].rstrip("\\"))
    if backslashes % 2:  # the first closing char is escaped ("\\}"): it belongs to the core
        core_end += 1
    core = body[:core_end]
    k_open, k_close = t.count("{", 0, lead), body.count("}", core_end)
    if not core:  # nothing but braces: balanced runs of "{" then "}"
        return t if k_open != k_close else ""
    braces = re.sub(r"[^{}]+", "", re.sub(r"\\.", "", core, flags=re.S)).encode("ascii").translate(_BRACE_STEP)
    depth = list(accumulate(array("b", braces))) if braces else []
    if k_open + (depth[-1] if depth else 0) != k_close:
        return t
    layers = k_open + min(min(depth, default=0), 0)
    if layers <= 0:
        return t
    if lead == k_open and len(body) - core_end == k_close:  # no spaces between layers
        return t[layers:len(t) - layers].strip()
    lo = re.match(r"(?:\s*\{){%d}" % layers, t).end()
    hi = len(t) - re.match(r"(?:\s*\}){%d}" % layers, t[::-1]).end()
    return t[lo:hi].strip()


def _unwrap(s: str) -> Tuple[str, bool]:
    """Drop formatting wrappers (\\text, \\mathbf, \\boxed, ...), keeping their content; whether it was one \\text{}."""
    m0 = _WRAP_RE.match(s)
    whole_text = bool(m0 and m0.group(1) in _TEXTISH and _match_brace(s, m0.end() - 1) == len(s) - 1)
    for _ in range(32):
        if not (m := _WRAP_RE.search(s)) or (close := _match_brace(s, m.end() - 1)) < 0:
            break
        s = s[:m.start()] + s[m.end():close] + s[close + 1:]
    return s, whole_text


def _unit_key(u: str, power: Optional[str] = None) -> str:
    """Canonical unit: lower case, singular, abbreviations expanded, the power as a word ("sq in" -> "square inch")."""
    words = []
    for w in u.lower().replace(".", "").split():
        if w in _UNIT_POWERS:
            power = _UNIT_POWERS[w]
            continue
        w = _UNIT_ALIASES.get(w, w)
        w = w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w
        words.append(_UNIT_ALIASES.get(w, w))
    return {"2": "square ", "3": "cubic "}.get(power or "", "") + " ".join(words)


@lru_cache(maxsize=16384)
def _normalise(raw: str) -> _Norm:
    """One answer's canonical form (cached: golds repeat): unicode to LaTeX, presentation (braces, \\dfrac, \\left,
    spacing) dropped, then percent and dollar signs, zero vector, units, wrappers, remarks, ordinals, labels, choice
    letter, number words, degrees, times, prefixes, thousands separators, base subscripts, grouping parentheses."""
    s = _THOUSANDS_SEP_RE.sub(",", _unicode_to_latex(raw.strip()))
    if s.startswith("{"):
        s = strip_grouping_braces(s)
    for a, b in _SUBS:
        s = s.replace(a, b)
    s = _BRACELESS_FRAC2_RE.sub(r"\\frac{\1}{\2}", _BRACELESS_FRAC_RE.sub(r"\\frac{\1}{\2}", _STYLE_RE.sub("", s)))
    s = _ONE_TOKEN_EXP_RE.sub(r"^\1", _BRACELESS_SQRT_RE.sub(r"\\sqrt{\1}", _BRACELESS_FRAC3_RE.sub(r"\\frac{\1}{", s)))
    s = re.sub(r"\\(le|ge)(?![A-Za-z])", lambda m: "\\" + m.group(1) + "q", _SPACE_CMD_RE.sub(" ", s)).strip()
    s = m.group(1) if (m := _BRACKETED_MATRIX_RE.match(s)) else s
    s2 = s.replace("\\%", "").replace("%", "")
    pct, s = s2 != s, s2.replace("\\$", "").replace("$", "").strip()
    if _ZERO_VECTOR_RE.match(s):  # before the font wrappers go: bold 0 is a vector, not the number
        return _Norm(_ZERO_VECTOR)
    if m := _IDENTITY_RE.match(s):  # and bold I the identity matrix, not a variable
        return _Norm(m.group("c") + "\\mathbf{I}")
    unit = None
    m = _TRAIL_TEXT_UNIT_RE.match(s) if "{" in s else None  # "r = 3 \\text{ units}": the unit is its last side's
    if m and re.search(r"\d", m.group("v").rsplit("=", 1)[-1]) and not re.search(r"[<>]|\\[lg]eq", m.group("v")):
        u = " ".join(re.findall(r"\{([^{}]*)\}", m.group("u"))).strip()
        if (re.match(r"^[A-Za-z][A-Za-z .]*$", u) and len(u.split()) <= 3 and u.lower() not in ("i", "e")
                and not _QUALIFIER_RE.search(u)
                and "base" not in u):
            s, unit = m.group("v"), _unit_key(u, m.group("p"))
            if "," in s:  # a list with the unit on every item: "6\\text{ cm}, 8\\text{ cm}"
                s = s.replace(m.group("u").strip(), "")
    if (label := _LABEL_RE.match(s) if s[:1] == "\\" or ":" in s else None):
        s = label.group("rest")
    s, is_text = _unwrap(s)
    m = _REMARK_RE.match(s) if s.endswith(")") and " (" in s else None
    if m and not _HEDGE_REMARK_RE.search(m.group("r")):
        s = m.group("v")
    s = " ".join(_ORDINAL_RE.sub(r"\1", s).split())  # "June 20th", "20^{\\text{th}}" -> "June 20"
    if s[:1].isalpha():
        s = _OPTION_WORD_RE.sub("", s)
        words = _number_words(s)
        if words is None and is_text and (m := _COUNT_SENTENCE_RE.match(s)):  # "\text{There are five digits}"
            rest = m.group("rest")
            words = _number_words(rest) or (rest if re.match(r"^\d+(?: [A-Za-z]+){0,2}$", rest) else None)
        if words is not None:
            s, is_text = words, False
    choice = None
    if (m := _CHOICE_LABEL_RE.match(s) if s[:1] in "([" or (s[:1] in "ABCDEFGHIJ" and s[1:2] in ":.)") else None):
        choice, s = (m.group(1) or m.group(2) or m.group(3)).upper(), m.group("rest")
    if unit is None:
        m = _TRAIL_WORD_UNIT_RE.match(s)
        if m and not _NOT_A_UNIT_RE.search(m.group("u")):
            s, unit = (m.group("l") or "") + m.group("v"), _unit_key(m.group("u"), m.group("p"))
        elif ":" in s and (m := _TIME_RE.match(s)):
            s, unit = m.group(1), (m.group(2).lower() + "m" if m.group(2) else None)
    s2 = _DEG_RE.sub("", s)
    thousands = "," in s2 and _THOUSANDS_RE.match(_NAME_EQ_RE.sub("", s2)) and all(  # "60^\circ,120^\circ" is a list
        d.start() > s.rfind(",") for d in _DEG_RE.finditer(s))
    s, unit = s2, ("degree" if s2 != s and unit is None else unit)
    if _REALS_RE.match(s):
        s = "(-\\infty,\\infty)"
    elif s.replace(" ", "") == "\\{\\}":
        s = "\\emptyset"
    s = _IN_PREFIX_RE.sub("", s)
    if "base" in s and (m := _BASE_WORDS_RE.match(s)):
        s = "%s_{%s}" % (m.group("v"), m.group("b").lower())
    mod, m = None, _MOD_RE.search(s)
    if m:
        s, mod = s[:m.start()], next(g for g in m.groups() if g)
    s = _SPACE_DROP_RE.sub("", _EQUIV_RE.sub("", s)).rstrip(".,;: ").lstrip("+")
    if thousands:
        s = s.replace(",", "")
    elif "," in s and "{" in s:  # inside a group a comma separates no answers: \frac{1}{29,322,216}
        s = _GROUP_THOUSANDS_RE.sub(lambda m: "{" + m.group(1).replace(",", "") + "}", s)
    base = None
    m = _BASE_SUB_RE.match(s) if "_" in s else None
    if m and (m.group(2).isdigit() or m.group(2) in _BASE_WORDS):
        s, base = m.group(1), _BASE_WORDS.get(m.group(2), m.group(2))
        s = s.upper() if int(base) > 10 else s  # digits above 9 in any case: a4_{16} is A4_{16}
    if s.startswith("{") and s.endswith("}"):  # braces exposed by the steps above
        s = strip_grouping_braces(s)
    if s[:1] == "(" and s[-1:] == ")" and len(s) > 3 and _bracket_pair_ok(s) and len(_split_top(s[1:-1])) == 1:
        s = s[1:-1]  # parentheses around one whole item group it only: "(4x-7)" is 4x-7
    if unit in ("am", "pm") and s.isdigit() and len(s) <= 2:
        s += ":00"  # "2 p.m." is 2:00 p.m.
    return _Norm(s, pct, unit, is_text and not label, base, choice, mod)


def _number_words(s: str) -> Optional[str]:
    """A cardinal (``twenty-one digits`` -> ``21 digits``) or fraction (``three quarters``) in words, else None."""
    if m := _FRACTION_WORD_RE.match(s):
        n = "1" if m.group("n").lower() in ("a", "an") else _number_words(m.group("n"))
        return "\\frac{%s}{%d}" % (n, _FRACTION_WORDS[m.group("d").lower()]) if n and n.isdigit() else None
    if not (m := _NUMBER_WORD_RE.match(s)):
        return None
    tokens = [t for t in re.split(r"[\s-]+", m.group(0).lower()) if t]
    while tokens and tokens[-1] in ("and", "a"):
        tokens.pop()
    if not tokens or tokens[0] == "and":
        return None
    consumed = re.match(r"^(?:[A-Za-z]+[\s-]+){%d}" % (len(tokens) - 1) + r"[A-Za-z]+", s)
    rest = s[consumed.end():] if consumed else ""
    if rest and not rest[:1].isspace():
        return None  # "one-to-one", "fivefold"
    total, current, prev = 0, 0, ""
    for i, t in enumerate(tokens):
        if t == "a":
            if i + 1 >= len(tokens) or tokens[i + 1] not in _NUMBER_SCALES:
                return None
            current = 1
        elif t == "and":
            continue
        elif t in _NUMBER_WORDS:
            v = _NUMBER_WORDS[t]
            if current % 100 and not (prev in _NUMBER_WORDS and _NUMBER_WORDS[prev] >= 20 and 0 < v < 10):
                return None  # "five five", "twenty thirty": not one cardinal
            current += v
        elif t == "hundred":
            current = max(current, 1) * 100
        else:
            total += max(current, 1) * _NUMBER_SCALES[t]
            current = 0
        prev = t
    rest = rest.strip()
    if rest and (len(rest.split()) > 2 or not re.fullmatch(r"[A-Za-z ]+\.?", rest) or _NOT_A_UNIT_RE.search(rest)):
        return None
    return str(total + current) + (" " + rest if rest else "")


def _norm_key(raw: str) -> str:
    """One string for an answer and its decorations: boxes with equal keys are one answer."""
    n = _normalise(raw[:MAX_ANSWER_CHARS])
    return (n.s + ("%" if n.pct else "") + ("_" + n.base if n.base else "") + ("mod" + n.mod if n.mod else "")
            + ("(%s)" % n.choice if n.choice else ""))


# ======================================================================================
# 4. Judge equivalence: (a) the typed parse, (b) the comparison by type, (c) exact numbers (0.333 is not 1/3), (d) the
#    CAS at high precision, hostile inputs refused before sympy sees them, (e) the hard guard (_run_guarded).
# (a) The typed parse: matrix, union, tuple or interval, set or list, or one item.
_OPEN, _CLOSE = "([{", ")]}"
#: Brackets, escaped braces and the separators of _split_top (each separator set it is called with).
_TOP_TOKEN_RES = {seps: re.compile(r"\\[{}]|[(\[{)\]}%s]" % re.escape(seps)) for seps in (",;", "=", "+-")}
_WORD_SEP_RE = re.compile(r"(?<![A-Za-z\\])(?:and|or)(?![A-Za-z])")
_MATRIX_RE = re.compile(r"^\\begin\{([pbBvV]?matrix|array)\}(?:\{[lcr|]*\})?(.*)\\end\{\1\}$", re.S)
_INEQ_RE = re.compile(r"(\\leq|\\geq|<|>)")
_FLIP = {"<": ">", ">": "<", "\\leq": "\\geq", "\\geq": "\\leq"}  # an inequality read from the other side
_ASSIGN_LHS_RE = re.compile(r"^(?:" + _NAME + r"|[A-Za-z]{1,3})$")
_VAR_RE = re.compile(r"^" + _NAME + r"$")
_SCALED_MATRIX_RE = re.compile(
    r"^(?P<c>.*?)(?:\\cdot|\\times|\*)?(?P<m>\\begin\{(?P<env>[bB]?matrix|pmatrix)\}.*\\end\{(?P=env)\})$", re.S)
#: A factor in front of a matrix that is not one scalar (a relation, a list, another matrix).
_NOT_SCALAR_RE = re.compile(r"[=<>,;&]|\\\\|\\begin|\\end|\\[lg]eq|\\ne(?![A-Za-z])")
_SETMINUS_RE = re.compile(r"^(?P<a>.+?)(?:\\setminus|\\backslash)(?P<b>\\\{.*\\\})$", re.S)
_SET_BUILDER_RE = re.compile(r"^\\\{\s*(?P<v>" + _NAME + r")\s*(?:\\in\s*(?:" + _REALS + r"))?"
                             r"\s*(?:\\mid|\||:)\s*(?P<c>.+)\\\}$", re.S)
#: A bound on an absolute value, ``|x| \\geq 5``, the bound one constant term.
_ABS_BOUND_RE = re.compile(r"^\|\s*(?P<v>" + _NAME + r")\s*\|\s*(?P<op>\\[lg]eq|<|>)\s*(?P<k>[^<>|=,+-]+)$")

#: A parse: 'scalar' (s), 'list' (items), 'tuple' (items, ``brackets``: pairs, vectors, intervals), 'union', 'matrix'.
_Struct = namedtuple("_Struct", "kind s items ordered brackets", defaults=("", (), False, ""))


def _split_top(s: str, seps: str = ",;", words: bool = True) -> List[str]:
    """Split at top-level separators (not inside any bracket or brace)."""
    if words and ("and" in s or "or" in s):
        s = _WORD_SEP_RE.sub(";", s)
    parts, depth, last = [], 0, 0
    for m in _TOP_TOKEN_RES[seps].finditer(s):
        c = m.group()[-1]
        depth += (c in _OPEN) - (c in _CLOSE)
        if depth == 0 and c in seps:
            parts.append(s[last:m.start()])
            last = m.end()
    parts.append(s[last:])
    return [p for p in (q.strip() for q in parts) if p]


def _encloses(steps) -> bool:
    """Bracket steps (+1 open, -1 close) between an opener and a closer: the opener closes at the end, not before."""
    depth = list(accumulate(steps, initial=0))
    return min(depth) >= 0 and depth[-1] == 0


def _bracket_pair_ok(s: str) -> bool:
    """s = (...) / [...] / (...] / [...) (its first and last character checked by the caller) closed only at the end."""
    return _encloses((c in _OPEN) - (c in _CLOSE) for c in s[1:-1])


def _is_set_literal(s: str) -> bool:
    """s is ``\\{...\\}`` with the opening ``\\{`` closed by the final ``\\}``."""
    return (s.startswith("\\{") and s.endswith("\\}")
            and _encloses(1 if t == "\\{" else -1 for t in re.findall(r"\\[{}]", s[2:-2])))


def _top_level_eq(s: str) -> List[str]:
    """Split at top-level '=' (a string with <=, >=, != or an inequality command stays whole)."""
    if "=" not in s or re.search(r"[<>!]=|=[<>]|\\[lg]eq|\\ne", s):
        return [s]
    return _split_top(s, seps="=", words=False)


def _inequality_interval(s: str) -> Optional[_Struct]:
    """``x > 1`` -> (1,\\infty); ``-2 \\leq x \\leq 7`` -> [-2,7] (one variable only)."""
    parts = [x.strip() for x in _INEQ_RE.split(s)]
    terms = parts[0::2]
    if len(parts) not in (3, 5) or not all(terms) or sum(bool(_VAR_RE.match(t)) for t in terms) != 1:
        return None
    if len(parts) == 3:  # "x > 1" is "1 < x < \infty", "x \leq 1" is "-\infty < x \leq 1"
        a, op, b = parts
        if _VAR_RE.match(b):  # "1 < x"  ->  "x > 1"
            a, b, op = b, a, _FLIP[op]
        parts = [b, _FLIP[op], a, "<", "\\infty"] if op in (">", "\\geq") else ["-\\infty", "<", a, op, b]
    lo, o1, var, o2, hi = parts
    if not _VAR_RE.match(var) or not ({o1, o2} <= {"<", "\\leq"} or {o1, o2} <= {">", "\\geq"}):
        return None
    if o1 in (">", "\\geq"):  # "7 >= x >= -2"  ->  "-2 <= x <= 7"
        lo, hi, o1, o2 = hi, lo, _FLIP[o2], _FLIP[o1]
    return _Struct("tuple", items=[lo, hi], brackets=("[" if o1 == "\\leq" else "(") + ("]" if o2 == "\\leq" else ")"))


def _expand_pm(item: str) -> List[str]:
    """``a \\pm b`` -> [a+b, a-b]; ``\\pm b`` -> [b, -b] (one \\pm per item)."""
    a, _, b = item.partition("\\pm")
    if item.count("\\pm") != 1 or not b:
        return [item]
    return [a + "+" + b, a + "-" + b] if a else [b, "-" + b]


def _matrix_rows(body: str) -> List[List[str]]:
    return [[c.strip() for c in r.split("&")] for r in body.split("\\\\") if r.strip()]


def _scaled_matrix(s: str) -> Optional[_Struct]:
    """``c\\begin{pmatrix}...\\end{pmatrix}`` as the matrix of products (not a determinant's vmatrix)."""
    m = _SCALED_MATRIX_RE.match(s)
    c = m.group("c").strip() if m and m.group("m").count("\\begin{") == 1 else ""
    if not c or c == "+" or _NOT_SCALAR_RE.search(c):
        return None
    cv = Fraction(-1) if c == "-" else _exact_number(c)
    if not isinstance(cv, Fraction) and not isinstance(_parse(c), _sympy.Expr):
        return None  # not a scalar (e.g. \\det): no elementwise reading
    if not (inner := _MATRIX_RE.match(m.group("m"))):
        return None

    def product(e: str) -> str:
        ev = _exact_number(_normalise(e).s) if isinstance(cv, Fraction) else None
        return str(cv * ev) if isinstance(ev, Fraction) else "(%s)\\cdot(%s)" % (c, e)
    return _Struct("matrix", items=[[product(e) for e in row] for row in _matrix_rows(inner.group(2))])


def _reals_minus_points(s: str) -> Optional[_Struct]:
    """``\\mathbb{R} \\setminus \\{a, b\\}`` as the union of open intervals between the exact points."""
    m = _SETMINUS_RE.match(s)
    if (not m or not (_REALS_RE.match(m.group("a")) or m.group("a") == "(-\\infty,\\infty)")
            or not _is_set_literal(m.group("b"))):
        return None
    pts = {}
    for xs in (_normalise(x).s for x in _structure(m.group("b")).items):
        if not isinstance(v := _exact_number(xs), Fraction):
            return None
        pts.setdefault(v, xs)
    bounds = ["-\\infty"] + [pts[v] for v in sorted(pts)] + ["\\infty"]
    ivs = [_Struct("tuple", items=[bounds[i], bounds[i + 1]], brackets="()") for i in range(len(bounds) - 1)]
    return ivs[0] if len(ivs) == 1 else _Struct("union", items=ivs)


def _set_builder(s: str) -> Optional[_Struct]:
    """``\\{x \\mid x \\leq 0\\}`` (one name, inequalities joined by "or") as its interval or union."""
    m = _SET_BUILDER_RE.match(s)
    if not m or not _INEQ_RE.search(m.group("c")) or re.search(r"\band\b|,", m.group("c")):
        return None
    cond = m.group("c").strip()
    if (a := _ABS_BOUND_RE.match(cond)) and not _letters(a.group("k")):  # |x| < 5: -5 < x < 5; |x| >= 5: two rays
        v, op, k = a.group("v"), a.group("op"), a.group("k").strip()
        cond = (f"-{k} {op} {v} {op} {k}" if op in ("<", "\\leq") else f"{v} {_FLIP[op]} -{k} or {v} {op} {k}")
    names = {t.strip() for it in _split_top(cond) for t in _INEQ_RE.split(it)[0::2] if _VAR_RE.match(t.strip())}
    st = _structure(cond)
    return st if names == {m.group("v")} and st.kind in ("tuple", "union") else None


def _union(s: str) -> _Struct:
    """Intervals and finite sets joined by ``\\cup`` (the points in one set); a union of finite sets is that set."""
    intervals, points = [], []
    for piece in s.split("\\cup"):
        st = _structure(piece)
        if st.kind == "tuple" and len(st.items) == 2:
            intervals.append(st)
        elif st.kind == "list" and st.brackets == "{}":
            points.extend(st.items)
        else:
            return _Struct("scalar", s=s)
    finite = _Struct("list", items=points, ordered=False, brackets="{}")
    return _Struct("union", items=intervals + ([finite] if points else [])) if intervals else finite


def _structure(s: str) -> _Struct:
    """Parse a normalised answer into the structure the comparison works on."""
    if m := _MATRIX_RE.match(s):
        return _Struct("matrix", items=_matrix_rows(m.group(2)))
    if "\\begin" in s and (st := _scaled_matrix(s)) is not None:
        return st
    if ("\\setminus" in s or "\\backslash" in s) and (st := _reals_minus_points(s)) is not None:
        return st
    if "\\cup" in s:
        return _union(s)
    if _is_set_literal(s):
        return _set_builder(s) or _Struct("list", items=[x for it in _split_top(s[2:-2]) for x in _expand_pm(it)],
                                          ordered=False, brackets="{}")
    if s[:1] in "([" and s[-1:] in ")]" and _bracket_pair_ok(s) and len(items := _split_top(s[1:-1], words=False)) > 1:
        return _Struct("tuple", items=items, brackets=s[0] + s[-1])
    items = _split_top(s)
    if (len(items) >= 2 and all(_INEQ_RE.search(it) for it in items)  # "x < -1 or x > 1": a union
            and None not in (ivs := [_inequality_interval(it) for it in items])):
        return _Struct("union", items=ivs)
    if len(items) >= 2:
        items = [x for it in items for x in _expand_pm(it)]
        return _assignments(_Struct("list", items=items, ordered=any("\\ldots" in it for it in items)))
    if "\\pm" in s and len(ex := _expand_pm(s)) == 2:
        return _Struct("list", items=ex, ordered=False)
    if _INEQ_RE.search(s) and "=" not in s and (iv := _inequality_interval(s)) is not None:
        return iv
    return _Struct("scalar", s=s)


def _assignments(st: _Struct) -> _Struct:
    """``x=1, y=-2`` -> the tuple ordered by name; ``a=1 or a=-2`` and ``n=1, 2, 3`` -> the values."""
    lhs, vals = [], []
    for it in st.items:
        parts = _top_level_eq(it)
        named = len(parts) == 2 and _ASSIGN_LHS_RE.match(parts[0])
        lhs.append(parts[0] if named else None)
        vals.append(parts[1] if named else it)
    named = [l for l in lhs if l is not None]
    if not named:
        return st
    if len(named) == len(lhs) and len(set(named)) == len(named) and len(named) > 1:
        return _Struct("tuple", items=[v for _, v in sorted(zip(lhs, vals))], brackets="()")  # names distinct
    if len(named) == len(lhs) and len(set(named)) == 1 or (lhs[0] is not None and len(named) == 1):
        return _Struct("list", items=vals, ordered=st.ordered)
    return st


def _order_chain(s: str) -> Optional[Tuple[str, List[str]]]:
    """``f(2) < f(1) < f(4)``, a strict chain of three terms or more (no interval): (direction, terms)."""
    parts = [x.strip() for x in re.split(r"([<>])", s)]
    if len(parts) < 5 or "=" in s or "\\leq" in s or "\\geq" in s:
        return None
    terms, ops = parts[0::2], set(parts[1::2])
    if len(ops) != 1 or not all(terms) or _inequality_interval(s) is not None:
        return None
    return ops.pop(), terms

# (b) The comparison by type.
_LETTER_RE = re.compile(r"^\(?([A-J])\)?$")  # options A-J, as the option-label readers take them
_OTHER_LETTER_RE = re.compile(r"(?<![A-Za-z\\])[A-J](?![A-Za-z])")  # an option letter in a choice's description
_LETTER_PRED_RE = re.compile(r"^[(\[]?([A-Ja-j])[)\]](?:\S.*)?$|^([A-Ja-j])$")
_WORD_RE = re.compile(r"^[A-Za-z][A-Za-z' -]*[A-Za-z]$")
#: Words that make a sentence around a text answer something else than that answer.
_NOT_THE_ANSWER_RE = re.compile(r"\b(?:not|no|neither|nor|or|either|never|except|unless|and|but|maybe)\b", re.I)
_COPULAS = frozenset({"is", "was", "are", "were", "be"})
_ARTICLES = frozenset({"a", "an", "the"})
_COMMAND_RE = re.compile(r"\\[A-Za-z]+")
_VARIABLE_RE = re.compile(r"[A-DF-HJ-Za-df-hj-z]")  # letters other than e and i (constants)
_FUNC_LABEL_RE = re.compile(r"^" + _SYMBOL + r"(?:\^\{?-1\}?)?'*\((?P<v>[A-Za-z])\)$")
#: A structured answer's label: a tuple of names "(x, y) =", a capital "M =", an arrow "\\vec{v} =" (not "x =").
_STRUCT_LABEL_RE = re.compile(r"^(?:\((?:[A-Za-z\\]+,)+[A-Za-z\\]+\)|[A-Z]\w*|\\(?:vec|overrightarrow)\{\w+\})=")
#: A one-symbol name labels the value after it ("\\Delta = 8", "E = 4"): a letter but e and i, a Greek letter but \\pi.
_LABEL_NAME_RE = re.compile(r"^(?:[A-DF-HJ-Za-df-hj-z]|[EI]|\\(?:(?:var)?(?:alpha|beta|gamma|delta|epsilon|zeta|eta|"
                            r"theta|iota|kappa|lambda|mu|nu|xi|rho|sigma|tau|upsilon|phi|chi|psi|omega)|Gamma|Delta|"
                            r"Theta|Lambda|Xi|Sigma|Upsilon|Phi|Psi|Omega))(?:_\{?\w+\}?)?'*$")


def _letters(s: str) -> set:
    """The variables s names (letters outside LaTeX commands, but e and i)."""
    return set(_VARIABLE_RE.findall(_COMMAND_RE.sub("", s)))


def _answer_sides(p: _Norm, g: _Norm, ctx) -> Optional[Tuple[_Norm, _Norm]]:
    """A relation chain states its last side (a side without variables must equal it); ``x = 7`` states 7."""
    pe, ge = _top_level_eq(p.s), _top_level_eq(g.s)
    if len(pe) > 1 and len(ge) == 1:
        if any(not _letters(side) and not _LABEL_NAME_RE.match(side) and not _plain_equal(side, pe[-1], False, False,
                                                                                          ctx) for side in pe[:-1]):
            return None
        return _Norm(_bound_renamed(pe[0], pe[-1], g.s), p.pct, p.unit, False, p.base), g
    if len(ge) == 2 and len(pe) == 1 and _ASSIGN_LHS_RE.match(ge[0]):
        return p, _Norm(ge[1], g.pct, g.unit, False, g.base)
    return p, g


def _bound_renamed(label: str, expr: str, gold: str) -> str:
    """``f(t) = t^2 - 7t`` for a gold in x: the variable the label binds becomes the gold's one variable."""
    m, theirs = _FUNC_LABEL_RE.match(label), _letters(gold)
    if not m or _letters(expr) != {m.group("v")} or len(theirs) != 1 or theirs == {m.group("v")}:
        return expr
    return re.sub(r"(?<![A-Za-z\\])%s(?![A-Za-z])" % m.group("v"), theirs.pop(), expr)


def _item_kind(n: _Norm) -> str:
    """One item: 'choice' (a letter A-E), 'text' (a word answer), 'relation' or 'value'."""
    if _LETTER_RE.match(n.s) and (n.text or n.s.startswith("(") or len(n.s) == 1):
        return "choice"
    if _WORD_RE.match(n.s) and (n.text or (len(n.s) > 3 and " " not in n.s)):
        return "text"
    return "relation" if len(_top_level_eq(n.s)) > 1 else "value"


def _text_equal(p: _Norm, g: _Norm) -> bool:
    """A word answer: the same words, or a short sentence stating it after a copula, once, without negation."""
    pw, gw = ([w.lower() for w in re.findall(r"[A-Za-z]+", x.s)] for x in (p, g))
    pw, gw = (w[1:] if w[1:] and w[0] in _ARTICLES else w for w in (pw, gw))  # "a circle" for "circle"
    if pw == gw or (gw == ["neither"] and len(pw) in (4, 5) and pw[0] == "neither" and pw[2] == "nor"):
        return True  # the same words, or "neither even nor odd" (a trailing noun allowed)
    if not gw or len(pw) > 12 or _NOT_THE_ANSWER_RE.search(p.s):
        return False
    if len(pw) == len(gw) + 1 and pw[:len(gw)] == gw and pw[-1] not in _COPULAS:
        return True  # the answer word with its noun: "an even function" for "even"
    hits = [i for i in range(len(pw) - len(gw) + 1) if pw[i:i + len(gw)] == gw]
    if len(hits) != 1 or len(pw) - hits[0] - len(gw) > 2:
        return False
    before = pw[max(hits[0] - 2, 0):hits[0]]
    return bool(before) and (before[-1] in _COPULAS or (before[-1] in _ARTICLES and before[0] in _COPULAS))


def _values_equal(p: _Norm, g: _Norm, ctx) -> bool:
    """One item against one item, by the gold's kind."""
    if not p.compatible(g):
        return False
    if p.s == g.s and p.pct == g.pct:
        return True
    if (sides := _answer_sides(p, g, ctx)) is None:
        return False
    p, g = sides
    kind = _item_kind(g)
    if kind == "choice":  # "(B)", "\text{(B)}", "B" (MATH's AMC-style answers)
        mp = _LETTER_PRED_RE.match(p.s)
        letter = p.choice or (mp and (mp.group(1) or mp.group(2)))
        return bool(letter) and letter.upper() == _LETTER_RE.match(g.s).group(1)
    if kind == "text" or (p.text and _WORD_RE.match(p.s)):
        return _text_equal(p, g)  # word answers compare as words, never as products of symbols
    if kind == "relation" or _item_kind(p) == "relation":
        pe, ge = _top_level_eq(p.s), _top_level_eq(g.s)
        if len(pe) == 2 and len(ge) == 2 and pe[0] == ge[0] and _ASSIGN_LHS_RE.match(pe[0]):
            return _values_equal(_Norm(pe[1], p.pct), _Norm(ge[1], g.pct), ctx)
        return _equations_equal(p.s, g.s, ctx["deadline"], "normalised" in ctx["demands"])
    pi, gi = _INEQ_RE.split(p.s), _INEQ_RE.split(g.s)
    if len(pi) == 3 or len(gi) == 3:  # "s^2 \\leq 8r^2": the same relation, each read as "smaller <(=) larger"
        if len(pi) != len(gi):
            return False
        (a, op, b), (c, gop, d) = ((x[2], _FLIP[x[1]], x[0]) if x[1] in (">", "\\geq") else x for x in (pi, gi))
        return op == gop and _plain_equal(a, c, False, False, ctx) and _plain_equal(b, d, False, False, ctx)
    return _plain_equal(p.s, g.s, p.pct, g.pct, ctx)


def _plain_equal(ps: str, gs: str, ppct: bool, gpct: bool, ctx) -> bool:
    """Numbers exactly, then expressions by the CAS; 10\\% is 10 and 0.1 unless the question asks for a percent."""
    if ps == gs and ppct == gpct:
        return True
    pv, gv = _exact_number(ps), _exact_number(gs)
    if pv is not None and gv is not None:
        if isinstance(pv, _BigPow) or isinstance(gv, _BigPow):
            return pv == gv and pv.e is not None
        return pv == gv or (ppct != gpct and "percent" not in ctx["demands"]
                            and (pv * 100 == gv if gpct else pv == gv * 100))
    if isinstance(pv, _BigPow) or isinstance(gv, _BigPow):
        return False
    if ps == gs:
        return True
    if bool(_letters(ps)) != bool(_letters(gs)):
        return False  # a number never equals an expression in variables: skip the parser
    if time.thread_time() > ctx["deadline"]:
        STATS["cas_deadline"] += 1
        raise _Rejected("deadline")
    ok = _cas_equal(ps, gs, ctx["deadline"])
    if not ok and ppct != gpct and "percent" not in ctx["demands"]:
        ok = _cas_equal(ps + "/100" if ppct else ps, gs + "/100" if gpct else gs, ctx["deadline"])
    return ok


def _items_equal(p_items: List[str], g_items: List[str], ordered: bool, ctx) -> bool:
    if len(p_items) != len(g_items):
        return False
    pn, gn = [_normalise(x) for x in p_items], [_normalise(x) for x in g_items]
    if ordered:
        if len(p_items) > MAX_LIST_ITEMS:
            return [x.s for x in pn] == [x.s for x in gn]
        return all(_match(pi, gi, ctx) for pi, gi in zip(pn, gn))
    return sorted(x.s for x in pn) == sorted(x.s for x in gn) or (
        len(p_items) <= MAX_LIST_ITEMS and _matched_unordered(pn, gn, lambda a, b: _match(a, b, ctx)))


def _matched_unordered(p_items: list, g_items: list, eq) -> bool:
    """Every gold item matched by a distinct predicted item (sets, unions: any order)."""
    used = [False] * len(p_items)
    for gi in g_items:
        for j, pj in enumerate(p_items):
            if not used[j] and eq(pj, gi):
                used[j] = True
                break
        else:
            return False
    return True


def _as_matrix(st: _Struct, other: _Struct) -> _Struct:
    """A tuple ``(7, -13)`` is a column vector, or a row when the other side is one row."""
    if st.kind != "tuple" or st.brackets != "()":
        return st
    row = other.kind == "matrix" and len(other.items) == 1
    return _Struct("matrix", items=[list(st.items)] if row else [[x] for x in st.items])


def _match(p: _Norm, g: _Norm, ctx) -> bool:
    """Compare two normalised answers by the type of their parse."""
    if p.same(g):
        return True
    if "\\approx" in p.s and "\\approx" not in g.s and len(_split_top(p.s)) == 1:
        return _approx_equal(p, g, ctx)
    if _item_kind(g) == "text":  # a word answer has no structure: "Friday" vs a sentence
        return _values_equal(p, g, ctx)
    if p.choice and _item_kind(g) == "choice" and not _OTHER_LETTER_RE.search(p.s):  # "A: rises, then stays"
        return _values_equal(p, g, ctx)
    ps, gs = _structure(p.s), _structure(g.s)
    pc, gc = _order_chain(p.s), _order_chain(g.s)
    if pc or gc:  # "f(2) < f(1) < f(4)" states an order: the list of its terms as written
        if pc and gc:
            return _items_equal(pc[1] if pc[0] == "<" else pc[1][::-1],
                                gc[1] if gc[0] == "<" else gc[1][::-1], True, ctx)
        pl = pc[1] if pc else (ps.items if ps.kind == "list" else None)
        gl = gc[1] if gc else (gs.items if gs.kind == "list" else None)
        return pl is not None and gl is not None and _items_equal(pl, gl, True, ctx)
    if _ZERO_VECTOR in (p.s, g.s):  # the zero vector is a vector or matrix of zeros, never the number 0
        m = _as_matrix(gs if p.s == _ZERO_VECTOR else ps, _Struct("scalar"))
        return m.kind == "matrix" and all(_exact_number(_normalise(x).s) == 0 for row in m.items for x in row)
    if (m := _IDENTITY_RE.match(p.s)) and gs.kind == "matrix" and all(len(r) == len(gs.items) for r in gs.items):
        c = {"": "1", "+": "1", "-": "-1"}.get(m.group("c"), m.group("c"))  # c times the identity of the gold's size
        rows = "\\\\".join("&".join(c if i == j else "0" for j in range(len(gs.items))) for i in range(len(gs.items)))
        return _match(_normalise(f"\\begin{{pmatrix}}{rows}\\end{{pmatrix}}"), g, ctx)
    if gs.kind == "scalar" and ps.kind == "scalar":
        return _values_equal(p, g, ctx)
    if ps.kind == "scalar" and _STRUCT_LABEL_RE.match(p.s):  # "(x, y) = (2, -3)"
        sides = _answer_sides(p, g, ctx)
        return sides is not None and sides[0].s != p.s and _match(sides[0], g, ctx)
    if gs.kind == "matrix" or ps.kind == "matrix":
        ps, gs = _as_matrix(ps, gs), _as_matrix(gs, ps)
        return gs.kind == ps.kind and [len(r) for r in gs.items] == [len(r) for r in ps.items] and all(
            _match(_normalise(a), _normalise(b), ctx) for r1, r2 in zip(ps.items, gs.items) for a, b in zip(r1, r2))
    if gs.kind == "union" or ps.kind == "union":
        return (gs.kind == ps.kind and len(gs.items) == len(ps.items)
                and _matched_unordered(ps.items, gs.items, lambda a, b: _piece_equal(a, b, ctx)))
    if gs.kind == "tuple":
        if ps.kind == "list" and len(gs.items) > 2:
            return _items_equal(ps.items, gs.items, True, ctx)  # "1, 2, 3" for "(1, 2, 3)"
        return ps.kind == "tuple" and _piece_equal(ps, gs, ctx)
    if gs.kind == "list":
        if ps.kind == "list":
            return _items_equal(ps.items, gs.items, gs.ordered or ps.ordered or "ordered" in ctx["demands"], ctx)
        # "1, 2, 3" written "(1, 2, 3)" or "n_1 = 19, n_2 = 22" (a 2-tuple in brackets is an interval, not a list)
        return (ps.kind == "tuple" and not gs.ordered and ps.brackets == "()" and (len(ps.items) > 2 or "=" in p.s)
                and _items_equal(ps.items, gs.items, True, ctx))
    # gold scalar, answer a list: a hedge unless all state it ("\\boxed{\\frac12} = \\boxed{0.5}": one value twice)
    return (ps.kind == "list" and not ps.ordered and len(ps.items) <= MAX_FINAL_BOXES
            and all(_match(_normalise(x), g, ctx) for x in ps.items))


def _approx_equal(p: _Norm, g: _Norm, ctx) -> bool:
    """``x \\approx 3.14`` states 3.14, ``\\frac{32\\sqrt2}{3} \\approx 15.08`` too if the exact side rounds to it;
    ``\\frac13 \\approx 0.33`` states 1/3 when the rounding is right."""
    sides = [x.strip() for x in p.s.split("\\approx")]
    first, last = (_Norm(x, p.pct, p.unit, False, p.base) for x in (sides[0], sides[-1]))
    if last.s and _match(last, g, ctx):  # a constant before it must round to it
        return (len(sides) != 2 or not first.s or bool(_letters(first.s)) or bool(_LABEL_NAME_RE.match(first.s))
                or _rounds_to(first.s, sides[-1]) is not False)
    return len(sides) == 2 and bool(first.s) and _match(first, g, ctx) and _rounds_to(g.s, sides[-1]) is True


def _rounds_to(exact: str, approx: str) -> Optional[bool]:
    """Whether the value of ``exact`` rounds (or truncates) to the decimal ``approx``; None when either is unknown."""
    a, v, e = _exact_number(approx), _exact_number(exact), None
    try:
        if not isinstance(v, Fraction) and isinstance(e := _parse(exact), _sympy.Expr) and e.is_real:
            v = Fraction(str(_sympy.N(e, 30)))
    except Exception:
        return None
    if not isinstance(a, Fraction) or not isinstance(v, Fraction):
        return None
    tol = Fraction(1, 10 ** len(approx.partition(".")[2]))
    return abs(v - a) <= tol / 2 or (v * a >= 0 and 0 <= abs(v) - abs(a) < tol)


def _piece_equal(p: _Struct, g: _Struct, ctx) -> bool:
    """Two tuples (pairs, vectors, intervals: in order, brackets count) or two finite sets (a union's pieces)."""
    ordered = p.kind != "list"
    return (p.kind == g.kind and (not ordered or p.brackets == g.brackets)
            and _items_equal(p.items, g.items, ordered, ctx))


def answers_match(pred: str, gold: str, deadline: Optional[float] = None, demands: frozenset = frozenset()) -> bool:
    """Whether ``pred`` states the value of ``gold``; ``demands``: the question's "ordered" or "normalised"."""
    if len(pred) > MAX_ANSWER_CHARS or len(gold) > MAX_ANSWER_CHARS:
        return pred.strip() == gold.strip()  # too long to normalise or compare: verbatim only
    deadline = time.thread_time() + CAS_BUDGET_S if deadline is None else deadline
    pn, gn = _normalise(pred), _normalise(gold)
    return pn.same(gn) or (bool(pn.s and gn.s) and _match(pn, gn, {"deadline": deadline, "demands": demands}))

# (c) Exact numbers, the fast path: a Fraction, or a _BigPow for an integer power too large to evaluate.
#: r**e with r not a perfect power (canonical), or an unresolvable tower (e None, key its literal shape).
_BigPow = namedtuple("_BigPow", "r e key", defaults=("",))

_INT_RE = re.compile(r"^[-+]?\d+$")
_DEC_RE = re.compile(r"^([-+]?)(\d*)\.(\d*)$")
_FRAC_RE = re.compile(r"^([-+]?)\\frac\{([-+]?)(\d+(?:\.\d+)?)\}\{(\d+(?:\.\d+)?)\}$")
_SLASH_RE = re.compile(r"^([-+]?)()(\d+(?:\.\d+)?)/(\d+(?:\.\d+)?)$")  # groups as _FRAC_RE's
_MIXED_RE = re.compile(r"^([-+]?)(\d+)\\frac\{(\d+)\}\{(\d+)\}$")
_SCI_RE = re.compile(r"^([-+]?\d*\.?\d+)(?:(?:\\times|\\cdot|\*|x)10\^\{?([-+]?\d+)\}?|[eE]([-+]?\d+))$")  # or 1e5
#: 0.\\overline{36}, 0.1\\bar{6}, 0.(142857), a trailing \\ldots allowed; 0.\\dot{1}4285\\dot{7}; 0.333...
_REPEAT_RE = re.compile(r"^([-+]?)(\d*)\.(\d*)(?:\\(?:overline|bar|dot)\{?(\d+)\}?|\((\d+)\))(?:\\ldots)?$")
_DOT_PAIR_RE = re.compile(r"^([-+]?)(\d*)\.(\d*)\\dot\{?(\d)\}?(\d*)\\dot\{?(\d)\}?$")
_ELLIPSIS_RE = re.compile(r"^([-+]?)(\d*)\.(\d+)(?:\\ldots|\.\.\.)$")
_TOWER_RE = re.compile(r"^[-+]?\d+(?:\^\{?[-+]?\d+\}?)+$|^[-+]?\d+\^(?:\{\d+\^)+\{?\d+\}?\}+$")


def _dec(s: str) -> Optional[Fraction]:
    return None if len(s) > MAX_INT_DIGITS else Fraction(s)


def _tower(s: str):
    """An integer power tower ``a^{b^{c}}`` as a Fraction, or a canonical _BigPow beyond MAX_POWER_BITS."""
    sign = -1 if s.startswith("-") else 1
    nums = [int(t) for t in re.findall(r"[-+]?\d+", s.lstrip("+-"))]
    if len(nums) > 8 or any(len(str(abs(x))) > 18 for x in nums):
        return None
    val: object = nums[-1]
    for base in reversed(nums[:-1]):
        if isinstance(val, _BigPow):
            return _BigPow(0, None, s)
        if isinstance(val, Fraction) and val.denominator != 1:
            return None  # fractional exponent: a radical, for the CAS
        e = int(val)
        if base == 0 and e <= 0:
            return None  # 0^0, 0^{-k}
        if base in (0, 1):
            val = Fraction(base)
        elif e < 0:
            if -e * abs(base).bit_length() > MAX_POWER_BITS:
                return _BigPow(0, None, s)
            val = Fraction(1, base ** (-e))
        elif e * abs(base).bit_length() <= MAX_POWER_BITS:
            val = Fraction(base) ** e
        elif base > 0:
            r, k = (_sympy.perfect_power(base) if base.bit_length() <= 62 else False) or (base, 1)  # base = r**k
            val = _BigPow(r, k * e)
        else:
            return None
    return sign * val if isinstance(val, Fraction) else (val if sign == 1 else _BigPow(-1, None, s))


@lru_cache(maxsize=16384)
def _exact_number(s: str):
    """The exact value of a number as MATH writes it (also mixed, scientific, repeating, a power tower), else None."""
    if len(s) > MAX_INT_DIGITS:
        return None
    if _INT_RE.match(s):
        return Fraction(int(s))
    m = _DEC_RE.match(s)
    if m and (m.group(2) or m.group(3)):
        return _dec(s if m.group(3) else s + "0")
    if m := _FRAC_RE.match(s) or _SLASH_RE.match(s):
        num, den = _dec(m.group(3)), _dec(m.group(4))
        return None if den == 0 else (-1 if (m.group(1) == "-") != (m.group(2) == "-") else 1) * num / den
    if m := _MIXED_RE.match(s):
        whole, num, den = int(m.group(2)), int(m.group(3)), int(m.group(4))
        if den == 0 or num >= den:
            return None  # not a proper mixed number: let the CAS read it as a product
        return (-1 if m.group(1) == "-" else 1) * (whole + Fraction(num, den))
    if m := _SCI_RE.match(s):
        e = int(m.group(2) or m.group(3))
        return None if abs(e) > 1000 else Fraction(m.group(1)) * Fraction(10) ** e
    if (m := _REPEAT_RE.match(s) if "." in s else None):
        return _repeating(*m.groups()[:3], m.group(4) or m.group(5))
    if (m := _DOT_PAIR_RE.match(s) if "\\dot" in s else None):
        return _repeating(*m.groups()[:3], "".join(m.groups()[3:]))
    if m := _ELLIPSIS_RE.match(s):
        sign, whole, digits = m.groups()
        for p in range(1, len(digits) // 2 + 1):
            block = digits[-p:]
            if digits[-2 * p:-p] == block:
                pre = digits[:-p]
                while pre.endswith(block):
                    pre = pre[:-p]
                return _repeating(sign, whole, pre, block)
        return None
    return _tower(s) if "^" in s and _TOWER_RE.match(s) else None


def _repeating(sign: str, whole: str, pre: str, rep: str) -> Fraction:
    """``whole.pre`` followed by ``rep`` repeated forever (0.1(6) is 1/6)."""
    shift, period = 10 ** len(pre), 10 ** len(rep) - 1
    v = int(whole or "0") + Fraction(int(pre or "0"), shift) + Fraction(int(rep), period * shift)
    return -v if sign == "-" else v

# (d) The CAS: latex2sympy2_extended parses (never sympify on model text), sympy evaluates at
# sample points with high precision, math-verify decides what evaluation cannot.
_NORM_CFG = _NormalizationConfig(basic_latex=True, units=False, malformed_operators=True, nits=False, boxed="none")
_CAS_BANNED_RE = re.compile(r"\\(?:sum|prod|int|iint|oint|lim|infty|begin|text|mbox|cup|cap|in|sim|approx)(?![A-Za-z])")
_BINOM_ARGS_RE = re.compile(r"\\binom\{([^{}]*)\}\{([^{}]*)\}|\\choose")
_IMAG_UNIT_RE = re.compile(r"(?<![A-Za-z\\_])(?<!_\{)i(?![A-Za-z])")  # "4i+3", "-1i" (math-verify misses "1i")
_DECIMAL_RE = re.compile(r"(?<![\d.])(\d*)\.(\d+)(?![\d.])")
#: An integer-valued factor next to another: the parser reads ``2(3)`` as the mixed number 5, so it gets a ``\cdot``
#: (but a mixed number ``6\frac{1}{5}`` stays, and sub- and superscript digits are no factor).
_JUXTAPOSED_RE = re.compile(r"(\\(?:frac|binom)\{[^{}]*\}\{[^{}]*\}|\\sqrt\{[^{}]*\}|\([^()]*\)|"
                            r"(?<![\^_\d])(?<![\^_]\{)\d+(?!\d))\s*(?=\(|\\(?:binom|frac|sqrt)(?![A-Za-z])|\d)")
_MIXED_TAIL_RE = re.compile(r"\s*\\frac\{\d+\}\{\d+\}(?![\w\\({^])")
#: Functions the evaluation may meet (MATH answers use no others); anything else is refused.
_ALLOWED_FUNCS = frozenset({"sin", "cos", "tan", "cot", "sec", "csc", "asin", "acos", "atan", "acot", "asec", "acsc",
                           "sinh", "cosh", "tanh", "coth", "asinh", "acosh", "atanh", "exp", "log", "Abs", "floor",
                           "ceiling", "sign", "re", "im", "conjugate", "arg", "Max", "Min", "factorial", "binomial"})
_SAMPLE_POINTS = tuple(tuple(_sympy.Rational(x) for x in pt.split()) for pt in (
    "7/5 9/4 13/7 5/3 11/6 17/9", "8/3 6/5 19/11 23/10 3/7 29/13", "2/9 31/12 10/7 37/15 41/16 4/11"))


def _power_depth(s: str) -> int:
    """Deepest superscript nesting: ``a^b`` is 1, ``a^{b^c}`` 2, ``a^{b^{c^d}}`` 3."""
    stack: List[bool] = []
    level = best = 0
    for prev, c in zip(" " + s, s):
        if c == "{":
            stack.append(prev == "^")
            level += prev == "^"
        elif c == "}" and stack:
            level -= stack.pop()
        elif c == "^":
            best = max(best, level + 1)
    return best


def _guard_text(s: str) -> None:
    """Cheap refusals before parsing (the parser is exponential in superscript nesting)."""
    if (len(s) > MAX_CAS_CHARS or max(accumulate((c in _OPEN) - (c in _CLOSE) for c in s), default=0) > MAX_NESTING
            or _CAS_BANNED_RE.search(s) or re.search(r"\d{40,}", s)):
        raise _Rejected(s[:40])
    if "^" in s and _power_depth(s) > MAX_POWER_DEPTH:
        raise _Rejected("power tower")
    if "!" in s and any(int(m.group(1)) > MAX_FACTORIAL_ARG for m in re.finditer(r"(\d+)\s*!", s)):
        raise _Rejected("factorial")
    if "binom" in s or "choose" in s:
        for m in _BINOM_ARGS_RE.finditer(s):  # the parser evaluates integer binomials at once
            if m.group(0) == "\\choose" or any("^" in a or "!" in a or any(
                    int(d) > MAX_FACTORIAL_ARG for d in re.findall(r"\d+", a)) for a in m.groups()):
                raise _Rejected("binomial")


@lru_cache(maxsize=8192)
def _parse(s: str):
    """LaTeX -> unevaluated sympy object, decimals as exact fractions; None when unparsable or refused."""
    try:
        _guard_text(s)
        if (_INT_RE.match(s) or _DEC_RE.match(s) or _FRAC_RE.match(s)) and isinstance(v := _exact_number(s), Fraction):
            return _sympy.Rational(v.numerator, v.denominator)  # the commonest numbers without the parser (~5 ms each)
        t = _DECIMAL_RE.sub(lambda m: "\\frac{%s}{1%s}" % ((m.group(1) or "") + m.group(2), "0" * len(m.group(2))),
                            _normalize_latex(s, _NORM_CFG))
        t = _JUXTAPOSED_RE.sub(lambda m: m.group(0) if m.group(1)[0].isdigit() and _MIXED_TAIL_RE.match(t, m.end())
                               else m.group(1) + "\\cdot ", t)  # 2(3) -> 2\cdot (3); a mixed number stays
        _guard_text(t)
        is_complex = bool(_complex_re(t) or _IMAG_UNIT_RE.search(t))
        e = _latex2sympy(t, is_real=not is_complex, normalization_config=None)
        _magnitude(e)
        if is_complex and hasattr(e, "free_symbols") and (isym := [x for x in e.free_symbols if x.name == "i"]):
            e = e.xreplace({isym[0]: _sympy.I})
        return e
    except _Rejected:
        STATS["guard_rejections"] += 1
        return None
    except Exception:
        return None


def _integer_arg(a) -> int:
    """A factorial/binomial argument's value: a small non-negative integer, else refused."""
    v = _rational_value(a)
    if v is None or v.denominator != 1 or not 0 <= v <= MAX_FACTORIAL_ARG:
        raise _Rejected("factorial argument")
    return int(v)


def _magnitude(e, depth: int = 0) -> float:
    """An upper bound of log10|value| of an unevaluated tree; _Rejected for what evaluation cannot do quickly."""
    sp = _sympy
    if depth > 60:
        raise _Rejected("deep")
    if isinstance(e, sp.Rational):
        return max(int(e.p).bit_length(), int(e.q).bit_length()) * 0.30103
    if isinstance(e, sp.Float):
        return 20.0
    if not (args := getattr(e, "args", None)):
        return 1.0

    def power(x) -> float:  # 10 ** (log10 of x's magnitude): refused beyond exponents of 10^7
        if (lx := _magnitude(x, depth + 1)) > 7:
            raise _Rejected("exponent")
        return 10 ** lx
    if isinstance(e, sp.Function) and not isinstance(e, sp.core.function.AppliedUndef):
        name = e.func.__name__
        if name not in _ALLOWED_FUNCS:
            raise _Rejected("function " + name)
        if name in ("factorial", "binomial"):
            n = _integer_arg(args[0])
            if name == "binomial":
                _integer_arg(args[1])
            out = (n * math.log10(n + 1) if name == "factorial" else n * 0.30103) + 1
        elif name == "exp":
            out = 0.4343 * power(args[0])
        else:
            out = max(_magnitude(a, depth + 1) for a in args) + 1
    elif isinstance(e, sp.Pow):
        out = max(_magnitude(args[0], depth + 1), 0.5) * power(args[1])
    elif isinstance(e, (sp.Integral, sp.Sum, sp.Product, sp.Limit, sp.Derivative)):
        raise _Rejected("unevaluated operator")
    elif isinstance(e, sp.Add):
        out = max(_magnitude(a, depth + 1) for a in args) + math.log10(len(args))
    elif isinstance(e, sp.Mul):
        out = sum(_magnitude(a, depth + 1) for a in args)
    else:
        out = max(_magnitude(a, depth + 1) for a in args) + 1
    if out > MAX_LOG10_MAGNITUDE:
        raise _Rejected("magnitude")
    return out


def _points(syms):
    order = sorted(syms, key=lambda x: x.name)
    for pt in _SAMPLE_POINTS:
        yield {x: pt[i % len(pt)] + i // len(pt) for i, x in enumerate(order)}


def _num(e, subs, digits: int):
    """(re, im) of e at the sample point as ``digits``-digit Floats, or None."""
    v = e.evalf(digits, subs=subs) if subs else e.evalf(digits)
    if not v.is_number or v.has(_sympy.nan, _sympy.zoo, _sympy.oo, -_sympy.oo):
        return None
    re_, im_ = v.as_real_imag()
    return (re_, im_) if re_.is_Number and im_.is_Number else None


def _rational_value(e) -> Optional[Fraction]:
    """The exact value of a symbol-free rational expression, else None (2^{200}+1 is not 2^{200})."""
    sp = _sympy
    if isinstance(e, sp.Rational):
        return Fraction(int(e.p), int(e.q))
    if isinstance(e, (sp.Add, sp.Mul)):
        vals = [_rational_value(x) for x in e.args]
        if any(v is None for v in vals):
            return None
        return sum(vals, Fraction(0)) if isinstance(e, sp.Add) else math.prod(vals, start=Fraction(1))
    if isinstance(e, (sp.factorial, sp.binomial)):  # arguments checked by _magnitude
        vals = [_rational_value(x) for x in e.args]
        if any(v is None or v.denominator != 1 or not 0 <= v <= MAX_FACTORIAL_ARG for v in vals):
            return None
        return Fraction(math.factorial(int(vals[0])) if len(vals) == 1 else math.comb(int(vals[0]), int(vals[1])))
    if isinstance(e, sp.Pow) and isinstance(e.args[1], sp.Integer):
        base = _rational_value(e.args[0])
        return None if base is None or (base == 0 and e.args[1] < 0) else base ** int(e.args[1])
    return None


def _numeric_equal(a, b, deadline: float) -> Optional[bool]:
    """Rationals exactly, else relative agreement at every sample point (no absolute tolerance); None: undecided."""
    sp = _sympy
    if not (isinstance(a, sp.Expr) and isinstance(b, sp.Expr)):
        return None
    if a.free_symbols != b.free_symbols:
        return False
    if not a.free_symbols:
        ra, rb = _rational_value(a), _rational_value(b)
        if ra is not None and rb is not None:
            return ra == rb
        if (ra is not None and b.is_rational is False) or (rb is not None and a.is_rational is False):
            return False  # an exact rational (e.g. a decimal) never equals an irrational
    extra = min(max(_magnitude(a), _magnitude(b)), MAX_EVAL_EXTRA_DIGITS)
    digits = NUMERIC_DIGITS * (2 + int(extra) // NUMERIC_DIGITS)  # tiers: mpmath caches per precision
    decided = 0
    for pt in _points(a.free_symbols):
        if time.thread_time() > deadline:
            STATS["cas_deadline"] += 1
            raise _Rejected("deadline")
        va, vb = _num(a, pt, digits), _num(b, pt, digits)
        if va is None or vb is None:
            continue
        (ar, ai), (br, bi) = va, vb  # relative agreement to all but NUMERIC_SLACK_DIGITS of the evaluated digits
        d, m = abs(ar - br) + abs(ai - bi), max(abs(ar) + abs(ai), abs(br) + abs(bi))
        if not (m == 0 or bool(d <= _sympy.Float(10, digits) ** (NUMERIC_SLACK_DIGITS - digits) * m)):
            return False
        decided += 1
        if not a.free_symbols:
            break
    return True if decided else None


def _cas_equal(p: str, g: str, deadline: float) -> bool:
    a, b = _parse(p), _parse(g)
    if a is None or b is None or isinstance(a, _sympy.Equality) or isinstance(b, _sympy.Equality):
        return False  # equations are compared by _equations_equal
    if (r := _numeric_equal(a, b, deadline)) is not None:
        return r
    if time.thread_time() > deadline:
        return False
    try:  # relations, sets, matrices the evaluation could not decide: math-verify decides
        return bool(_mv_verify(b, a, timeout_seconds=None, strict=True))
    except Exception:
        return False


def _equations_equal(p: str, g: str, deadline: float, same_scale: bool = False) -> bool:
    """lhs - rhs proportional at every sample point (``same_scale``: by 1, or -1 with the sides swapped)."""
    pp, gp = _top_level_eq(p), _top_level_eq(g)
    parts = [_parse(x) for x in pp + gp] if len(pp) == len(gp) == 2 else [None]  # lhs, rhs of each
    if not all(isinstance(x, _sympy.Expr) for x in parts):
        return False
    e1, e2 = (parts[0] - parts[1]).doit(), (parts[2] - parts[3]).doit()  # "x + 0y - 3z" has no y
    if e1.free_symbols != e2.free_symbols or not e1.free_symbols:
        return False
    ratio, n = None, 0
    for pt in _points(e1.free_symbols):
        if time.thread_time() > deadline:
            raise _Rejected("deadline")
        v1, v2 = _num(e1, pt, NUMERIC_DIGITS), _num(e2, pt, NUMERIC_DIGITS)
        if v1 is None or v2 is None:
            continue
        (r1, i1), (r2, i2) = v1, v2
        if r2 == 0 and i2 == 0:
            if r1 == 0 and i1 == 0:
                continue
            return False
        q = complex(r1, i1) / complex(r2, i2)
        if q == 0:
            return False
        if ratio is None:
            ratio = q
        elif abs(q - ratio) > 1e-12 * abs(ratio):
            return False
        n += 1
    if not same_scale or n < 2 or abs(ratio - 1) < 1e-12:
        return n >= 2
    return abs(ratio + 1) < 1e-12 and not parts[0].free_symbols and bool(parts[2].free_symbols)

def _run_guarded(fn, *args):
    """fn(*args) under a SIGALRM limit of HARD_TIMEOUT_S CPU (HARD_WALL_S wall) seconds in the main thread, unless the
    host owns SIGALRM (a handler of its own) or has a timer armed; the host's disposition is always restored."""
    if not (threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")
            and signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, signal.SIG_IGN)
            and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)):
        return fn(*args)
    armed, cpu0, wall0 = [True], time.thread_time(), time.monotonic()

    def on_alarm(signum, frame):
        used = time.thread_time() - cpu0  # this thread's CPU time: a busy machine delays, it does not time out
        if armed[0] and used < HARD_TIMEOUT_S and time.monotonic() - wall0 < HARD_WALL_S:
            signal.setitimer(signal.ITIMER_REAL, HARD_TIMEOUT_S - used + 0.01)
        elif armed[0]:
            armed[0] = False
            raise _HardTimeout()

    previous = signal.signal(signal.SIGALRM, on_alarm)
    try:
        signal.setitimer(signal.ITIMER_REAL, HARD_TIMEOUT_S)
        return fn(*args)
    finally:
        armed[0] = False  # a plain store: no signal check between here and the line above
        try:
            signal.setitimer(signal.ITIMER_REAL, 0)
        finally:
            signal.signal(signal.SIGALRM, previous)


# ======================================================================================
# 5. Policy: what extra_info["question"] demands beyond the value, rule by rule with sources and examples in
#    docs/reward_policy.md; between a false negative and a false positive it takes the side GRPO cannot farm.
#: A task to rewrite the expression it states, in the problem or the response's restatement ("We need to expand");
#: "factor" as a verb only (not "factors", "factorial").
_TASK_RE = re.compile(r"\b(expand|factor(?=(?:ed|ing|i[sz](?:e|ation)\w*)?\b)|simplify|combine|rationali[sz]e|"
                      r"multiply\s+out|reduce|evaluate|compute|calculate|what\s+is|find|express|write|convert|"
                      r"rewrite)\w*", re.I)
_OWN_TASK_RE = re.compile(
    r"\b(?:to|we|let's|let\s+us)\s+(?:need\s+to\s+|want\s+to\s+|must\s+|have\s+to\s+)?"
    r"(expand|factor|simplify|combine|rationali[sz]e|multiply\s+out|reduce|evaluate|compute)\b", re.I)
_MATH_SPAN_RE = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.S)
_SENTENCE_END_RE = re.compile(r"[.!?](?:\s|$)|\n")
_SUM_GROUP_RE = re.compile(r"\([^()]*[\w}][^()]*?[+-][^()]*\)")
#: Question phrases that state a demand. "ordered", "normalised" and "list" change the comparison; the others name
#: forms, refused by _DEMAND_FORBIDS when the gold does not have them.
_DEMAND_RES = tuple((name, re.compile(rx, re.I)) for name, rx in (
    ("ordered", r"\bin\s+(?:increasing|decreasing|ascending|descending|numerical)\s+order|"
                r"\b(?:least|smallest|lowest)\s+to\s+(?:greatest|largest|highest)\b|"
                r"\b(?:greatest|largest|highest)\s+to\s+(?:least|smallest|lowest)\b|\bin\s+order\s+from\b|"
                r"\bin\s+the\s+form\s*\$\s*(?:\([^$()]*\)\s*){2,}\$\s*,?\s*(?:with|where)\s+\$\s*[a-z]\s*[<>]"),
    ("rationalised", r"\brationali[sz]|\b(?:integer|rational)\s+denominator"),
    ("radical form", r"\bsimplest\s+radical\s+form|\bin\s+the\s+form\s*\$[^$]{0,60}\\sqrt"),
    ("common fraction", r"\b(?:common|improper)\s+fractions?\b|\bfractions?\s+in\s+(?:simplest|lowest)|"
                        r"\bfractional\s+form\b|"
                        r"\bin\s+the\s+form\s*\$\s*-?\s*\\d?frac\s*\{?\s*[a-z]\s*\}?\s*\{?\s*[a-z]\s*\}?\s*\$|"
                        r"\b(?:express|expressed|give|convert|enter|leave|answer)\b(?:[^.?!$]|\$[^$]{0,60}\$){0,40}?"
                        r"\b(?:as|to|into)\s+(?:an?\s+)?(?:simple\s+|simplified\s+|proper\s+)?fractions?\b"),
    ("lowest terms", r"\blowest\s+terms|\bsimplest\s+form|\breduced\s+fraction"),
    ("mixed number", r"\bmixed\s+numbers?\b"),
    ("decimal", r"\b(?:as|to|in)\s+(?:an?\s+)?(?:terminating\s+)?decimals?\b"
                r"(?!\s+(?:point|places?|digits?|expansion|representation|equivalent|notation))|"
                r"\bdecimal\s+form\b|\(\s*as\s+a\s+decimal\s*\)"),
    ("exponential", r"\b(?:exponential|scientific)\s+notation|\bas\s+a\s+power\s+of\b"),
    ("normalised", r"\\gcd\s*\(|\bas\s+small\s+as\s+possible\b|\b(?:relatively\s+prime|coprime)\b"),
    ("list", r"\bseparated\s+by\s+commas|\bcomma[-\s]separated|\benter\s+all\b"),
    ("percent", r"\b(?:as|in)\s+(?:a\s+)?percent(?:age)?\b|\bwhat\s+percent"),
    ("simplified", r"\bsimplif(?:y|ied)\b"),
    ("solved for y", r"\bin\s+the\s+form\s*[\"'`]*\s*\$?\s*y\s*="),
    ("decreasing degree", r"\b(?:decreasing|descending)\s+(?:order\s+of\s+)?(?:degrees?|powers?|exponents?)\b"),
    ("interval", r"\binterval\s+notation|\b(?:as|in)\s+(?:an?\s+)?(?:interval|union\s+of\s+intervals)\b"),
))
#: Words in a demand's clause that undo it: "(not mixed numbers or decimals)".
_DEMAND_NEGATION_RE = re.compile(r"\b(?:not|no|nor|never|instead\s+of|rather\s+than|without)\b", re.I)
#: Form words: a clause that offers two of them joined by "or" demands neither.
_FORM_WORD_RE = re.compile(r"\b(?:fraction|decimal|mixed\s+number|integer|percent|radical|notation)", re.I)
_CLAUSE_END_RE = re.compile(r"[.?!;:()\n]")
#: A root of an integer times letters: ``\\sqrt{1260x}``, ``\\sqrt[3]{16}`` (index, integer factor).
_RADICAND_RE = re.compile(r"\\sqrt(?:\[(\d)\])?\{(\d{1,8})(?:[A-Za-z](?:\^\{?\d+\}?)?)*\}")
_SLASH_SQRT_RE = re.compile(r"/\s*(?:\([^()]*\\sqrt|[\d.]*\\sqrt)")
_INT_FRAC_RE = re.compile(r"\\frac\{-?(\d{1,12})\}\{(\d{1,12})\}|(?<![\d.}])(\d{1,12})/(\d{1,12})(?![\d.])")
#: A decimal with a fractional part (57.0 is the integer 57 written with a zero).
_DECIMAL_FORM_RE = re.compile(r"\d?\.(?=\d*[1-9]|\d*\\(?:overline|bar|dot))")
_MIXED_FORM_RE = re.compile(r"(?<![\w.}^_{])\d+\\frac\{(\d+)\}\{(\d+)\}")
_FRACTION_FORM_RE = re.compile(r"\\frac|\d\s*/\s*\d")
_QUESTION_MOD_RE = re.compile(r"(?:\\[pb]?mod(?![A-Za-z])|\bmod(?:ulo)?\b|\bdivided\s+by)\s*\$?\s*\{?\s*(\d+)")
_ASKED_UNIT_RE = re.compile(r"\b(?=(?:in|how\s+many)\s+((?:square\s+|cubic\s+)?[A-Za-z]+(?:\s+per\s+[A-Za-z]+)?))",
                            re.I)  # a lookahead: "in how many seconds" holds two phrases
#: Option labels: "(A)" (also in \\textbf{}, \\text{}, \\mathrm{}) or a letter opening a line ("A. 67.3", "B) f(0)=0").
_OPTION_LABEL_RES = (re.compile(r"(?:\\(?:textbf|text|mathrm|textrm)\s*\{\s*)?\(\s*([A-J])\s*\)\s*\}?"),
                     re.compile(r"(?m)^[ \t]*(?:\$?\\bullet\$?|[-*\u2022])?[ \t]*(?:\\textbf\{)?([A-J])[.):]\}?"
                                r"(?=[ \t$])"))
_OPTION_ASSIGN_RE = re.compile(r"(?<![A-Za-z\\])([A-J])\s*=\s*")
#: "Enter your answer as $A$, $B$, or $C$": the question demands the letter itself, not the value it names.
_LETTER_DEMAND_RE = re.compile(r"\benter\b[^.\n]{0,30}?(?:\$\(?[A-J]\)?\$|\bletters?\b)", re.IGNORECASE)
_OPTION_MEANING_RE = re.compile(r"[\"'`]{1,2}([A-Z])[\"'`]{1,2}\s+(?:for|if|means)\s+(?:an?\s+|the\s+)?"
                                r"([A-Za-z][A-Za-z -]*[A-Za-z])")  # 'Enter "C" for circle'
_OPTION_JUNK_RE = re.compile(r"\\q?quad(?![A-Za-z])|\\\\|\$|\\[ ,;!]|\\hspace\s*\{[^{}]*\}|~")
_OPTION_LETTER_RE = re.compile(r"^[(\[]?([A-Za-z])[)\]]?$")
_LETTER_SEP_RE = re.compile(r"\s*(?:,|;|\band\b|&)\s*|\s+")
_NAME_TUPLE_RE = re.compile(r"\(\s*(" + _SYMBOL + r"(?:\s*,\s*" + _SYMBOL + r")+)\s*\)")
_LIST_COMMA_RE = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_PAREN_FACTOR_RE = re.compile(r"\(([^()]*)\)")  # a factor in parentheses, none nested
#: One word in text before a value: "\\text{base } 7", "\\text{day 12}".
_WORD_LABEL_RE = re.compile(r"^\\(?:text|textrm|mathrm|mbox)\s*\{\s*(?P<w>[A-Za-z]+)\s*(?:\}\s*(?P<v>[^\s{].*)|"
                            r"\s(?P<v2>[^{}]*\d[^{}]*)\})$", re.S)


def _task_expressions(text: str, own: bool) -> Tuple[frozenset, Tuple[str, ...]]:
    """The normalised math spans of sentences with a task verb (``own``: the response's "we need to"), and the verbs."""
    verb_re, text = (_OWN_TASK_RE if own else _TASK_RE), text[:4000]
    exprs, verbs = set(), tuple(v.lower() for v in verb_re.findall(_MATH_SPAN_RE.sub(" ", text)))
    for m in _MATH_SPAN_RE.finditer(text) if verbs else ():
        lo = max(m.start() - 200, 0)  # "Simplify\n\\[...\\]": the line break leads into the maths
        before = lo + len(text[lo:m.start()].rstrip())
        start = max((e.end() for e in _SENTENCE_END_RE.finditer(text, lo, before)), default=lo)
        if verb_re.search(_MATH_SPAN_RE.sub(" ", text[start:m.start()])):
            span = next(g for g in m.groups() if g is not None)
            exprs.add(_normalise(strip_grouping_braces(span.strip(": \n\t").rstrip("?.,;: "))[:MAX_ANSWER_CHARS]).s)
    return frozenset(exprs), verbs


@lru_cache(maxsize=4096)
def _question_tasks(question: str) -> Tuple[frozenset, Tuple[str, ...]]:
    return _task_expressions(question, own=False)  # cached: a step scores n responses to a problem


def _restates_task(pred: str, gold: str, text: str, question: Optional[str], deadline: Optional[float] = None) -> bool:
    """Prompt echo: the answer is the task's own expression, or a factor / expand task not done; never the gold."""
    pn, gn = _normalise(pred).s, _normalise(gold).s
    if pn == gn:
        return False
    exprs, verbs = _question_tasks(question) if question else _task_expressions(text[:text.rfind("\\boxed")], own=True)
    if pn in exprs:
        return True
    if (any(v.startswith("factor") for v in verbs) and len(_split_top(gn.lstrip("+-"), "+-", False)) == 1 and "(" in gn
            and _structure(gn).kind == "scalar"):  # a product, not a tuple
        deadline = deadline or time.thread_time() + CAS_BUDGET_S
        return len(_split_top(pn.lstrip("+-"), "+-", False)) > 1 or (  # a sum of terms, or a factor left to split
            _factored_completely(gn, deadline) is True and _factored_completely(pn, deadline) is False)
    # a product of a sum answers no "expand" task; (2/x) is no sum
    return any(v.startswith(("expand", "multiply")) for v in verbs) and "(" not in gn and bool(_SUM_GROUP_RE.search(pn))


def _degree(e) -> float:
    """Total degree of an unevaluated polynomial tree (constants 0), inf for anything else."""
    sp = _sympy
    if isinstance(e, sp.Symbol):
        return 1
    if not e.free_symbols:
        return 0
    if isinstance(e, sp.Add):
        return max(_degree(a) for a in e.args)
    if isinstance(e, sp.Mul):
        return sum(_degree(a) for a in e.args)
    if isinstance(e, sp.Pow) and e.exp.is_Integer and e.exp >= 0:
        return int(e.exp) * _degree(e.base)
    return math.inf


def _factored_completely(s: str, deadline: float) -> Optional[bool]:
    """Whether the product s is factored completely over Z (up to order, signs, numbers); None: undecided."""
    e = _parse(s)
    if not isinstance(e, _sympy.Expr):
        return None
    todo = [e]
    try:
        while todo:
            f = todo.pop()
            if isinstance(f, _sympy.Mul):
                todo.extend(f.args)
            elif isinstance(f, _sympy.Pow) and f.exp.is_Integer and f.exp > 0:
                todo.append(f.base)
            elif f.free_symbols:  # a factor: irreducible over Z, once
                syms = sorted(f.free_symbols, key=str)
                if len(syms) > MAX_FACTOR_VARIABLES or _degree(f) > MAX_FACTOR_DEGREE or time.thread_time() > deadline:
                    return None
                poly = _sympy.Poly(f, *syms)
                if not poly.domain.is_ZZ:
                    return False  # a rational, radical or complex coefficient: not a factor over Z
                content, parts = poly.factor_list()
                if abs(content) != 1 or len(parts) != 1 or parts[0][1] != 1:
                    return False
        return True
    except Exception:  # noqa: BLE001 - sympy's failure leaves the question open
        return None


@lru_cache(maxsize=4096)
def question_demands(question: Optional[str]) -> frozenset:
    """The demands a problem states (_DEMAND_RES), each unless its clause negates it or offers another form too."""
    q = (question or "")[:6000]

    def stated(m) -> bool:
        start = max((e.end() for e in _CLAUSE_END_RE.finditer(q, max(m.start() - 80, 0), m.start())),
                    default=max(m.start() - 80, 0))
        clause = q[start:after.start() if (after := _CLAUSE_END_RE.search(q, m.end())) else len(q)]
        return not _DEMAND_NEGATION_RE.search(q[start:m.start()]) and not (
            re.search(r"\bor\b", clause) and len({w.lower() for w in _FORM_WORD_RE.findall(clause)}) > 1)
    return frozenset(name for name, rx in _DEMAND_RES if any(stated(m) for m in rx.finditer(q)))


def _radical_denominator(s: str) -> bool:
    """A radical in a denominator: ``\\frac{1}{\\sqrt{2}}``, ``3/\\sqrt{5}``, ``1/(2\\sqrt{3})``."""
    for m in re.finditer(r"\\frac\s*\{", s):
        num_end = _match_brace(s, m.end() - 1)
        den_end = _match_brace(s, num_end + 1) if num_end >= 0 and s[num_end + 1:num_end + 2] == "{" else -1
        if den_end > 0 and "\\sqrt" in s[num_end + 1:den_end]:
            return True
    return bool(_SLASH_SQRT_RE.search(s))


def _power_factor(s: str) -> bool:
    """A radicand with a power of the root's index as a factor: ``\\sqrt{8}``, ``\\sqrt{1260x}``, ``\\sqrt[3]{8}``."""
    for m in _RADICAND_RE.finditer(s):
        n, k = int(m.group(1) or 2), int(m.group(2))
        if n >= 2 and any(k % d ** n == 0 for d in range(2, int(k ** (1 / n)) + 2)):
            return True
    return False


def _int_fractions(s: str):
    """(numerator, denominator, match) of every integer fraction, ``\\frac{a}{b}`` or ``a/b``."""
    for m in _INT_FRAC_RE.finditer(s):
        yield (int(m.group(1)), int(m.group(2)), m) if m.group(1) else (int(m.group(3)), int(m.group(4)), m)


#: A power with a fractional exponent, ``x^{1/2}``, ``2^{\frac{3}{2}}``, ``x^{0.5}``: not a radical form.
_FRACTIONAL_EXPONENT_RE = re.compile(r"\^\s*\{?\s*-?\s*(?:\d+\s*/\s*\d|\\[dt]?frac|\d*\.\d)")
#: A ratio written with a colon, ``1:10``: not a fraction.
_RATIO_FORM_RE = re.compile(r"\d\s*:\s*\d")


def _degrees_rise(s: str) -> bool:
    """A polynomial whose top-level terms, left to right, rise in total degree somewhere (``-5+y+7y^2``); undecided
    (not a polynomial, no parse) is False."""
    terms = [] if "=" in s else re.split(r"(?<=[\w})])(?=[+-])", s.replace(" ", ""))
    degrees = []
    for t in terms if 1 < len(terms) <= 40 else ():
        try:
            expr = _parse(t)
            degrees.append(_sympy.Poly(expr, *sorted(expr.free_symbols, key=str)).total_degree() if expr.free_symbols
                           else 0)
        except Exception:
            return False
    return any(a < b for a, b in zip(degrees, degrees[1:]))


def _unsolved_for_y(s: str) -> bool:
    """An equation that is not y on one side and an expression without y on the other."""
    sides = _top_level_eq(s)
    return len(sides) == 2 and not any(a == "y" and "y" not in _letters(b) for a, b in (sides, sides[::-1]))

#: Form features of a normalised answer, by name.
_FORM_FEATURES = {
    "radical in a denominator": lambda n: _radical_denominator(n.s),
    "power factor under a root": lambda n: _power_factor(n.s),
    "unreduced fraction": lambda n: any(b > 1 and math.gcd(a, b) > 1 for a, b, _ in _int_fractions(n.s)),
    "decimal": lambda n: bool(_DECIMAL_FORM_RE.search(n.s)),
    "mixed number": lambda n: any(int(m.group(1)) < int(m.group(2)) for m in _MIXED_FORM_RE.finditer(n.s)),
    "improper fraction": lambda n: any(a > b > 1 for a, b, m in _int_fractions(n.s)  # not a mixed number's tail
                                       if not (m.group(1) and n.s[:m.start()][-1:].isdigit())),
    "fraction": lambda n: bool(_FRACTION_FORM_RE.search(n.s)),
    "percent": lambda n: n.pct,
    "no exponent": lambda n: "^" not in n.s and bool(n.s),
    "inequality": lambda n: bool(_INEQ_RE.search(n.s)),
    "equation not solved for y": lambda n: _unsolved_for_y(n.s),
    "fractional exponent": lambda n: bool(_FRACTIONAL_EXPONENT_RE.search(n.s)),
    "ratio": lambda n: bool(_RATIO_FORM_RE.search(n.s)),
    "negative exponent": lambda n: bool(re.search(r"\^\s*\{?\s*-", n.s)),  # z^{-1} for 1/z
    "terms not in decreasing degree": lambda n: _degrees_rise(n.s),
}
#: What each stated form forbids (MATH: the form the question asks for is the answer).
_DEMAND_FORBIDS = {
    "rationalised": ("radical in a denominator",),
    "radical form": ("radical in a denominator", "power factor under a root", "decimal", "fractional exponent"),
    "simplified": ("unreduced fraction", "power factor under a root", "radical in a denominator"),
    "interval": ("inequality",),
    "solved for y": ("equation not solved for y",),
    "common fraction": ("unreduced fraction", "decimal", "mixed number", "percent", "ratio", "negative exponent"),
    "lowest terms": ("unreduced fraction", "power factor under a root"),
    "mixed number": ("improper fraction", "decimal", "percent"),
    "decimal": ("fraction", "percent"),
    "exponential": ("no exponent",),
    "decreasing degree": ("terms not in decreasing degree",),
}


def _form_violation(pred: str, gold: str, demands: frozenset) -> Optional[str]:
    """"demand: feature" for a form of the answer that a demand forbids and the gold has not."""
    if not (names := sorted(demands & set(_DEMAND_FORBIDS))):
        return None
    pn, gn = _normalise(pred), _normalise(gold)
    return next((name + ": " + feature for name in names for feature in _DEMAND_FORBIDS[name]
                 if _FORM_FEATURES[feature](pn) and not _FORM_FEATURES[feature](gn)), None)


def _factors_reordered(pred: str, gold: str, deadline: float) -> bool:
    """An "ordered" product ("in the form $(ax^2+bx+c)(dx^2+ex+f)$, with $a<d$"): the gold's factors, reordered."""
    pf, gf = (_PAREN_FACTOR_RE.findall(n) if not _PAREN_FACTOR_RE.sub("", n).strip() else []
              for n in (_normalise(pred).s, _normalise(gold).s))
    return len(pf) == len(gf) > 1 and not all(answers_match(a, b, deadline) for a, b in zip(pf, gf))


def _foreign_modulus(pred: str, gold: str, question: Optional[str]) -> bool:
    """A congruence modulo another number than the gold's, the moduli the question names ("modulo 11", "divided by 6")
    and their least common multiples (a system solved by the Chinese remainder theorem)."""
    mod = _normalise(pred).mod if question and "mod" in pred else None
    if not (mod and mod.isdigit() and mod != _normalise(gold).mod):
        return False
    moduli = sorted({int(m) for m in _QUESTION_MOD_RE.findall(question[:6000]) if 0 < int(m) < 10 ** 9})[:6]
    combined = {math.lcm(*c) for k in range(1, len(moduli) + 1) for c in combinations(moduli, k)}  # CRT: 3, 5 -> 15
    return bool(combined) and int(mod) not in combined


def _foreign_unit(pred: str, gold: str, question: Optional[str]) -> bool:
    """A unit of measure neither the gold's nor one the question asks for (2.50 cents "in dollars"), or of a kind the
    question names in other units only ("41 days" when it speaks of years)."""
    unit = _normalise(pred).unit if question else None
    if not unit or unit.split()[-1] not in _MEASURES or unit == _normalise(gold).unit:
        return False
    asked = {k for k in (_unit_key(m.group(1)) for m in _ASKED_UNIT_RE.finditer(question[:6000]))
             if k.split()[-1] in _MEASURES}  # "in dollars", "how many seconds"
    if asked and unit not in asked | {a.split(" per ")[0] for a in asked}:
        return True
    base = unit.split()[-1] if " per " not in unit else ""  # the question's units of its kind, if any
    named = {u for m in _UNIT_WORD_RE.finditer(question[:6000]) if _UNIT_KINDS.get(u := _unit_key(m.group(1)), 0)
             == _UNIT_KINDS.get(base)}
    return bool(named) and base not in named


def _as_asked(answer: str, question: Optional[str]) -> str:
    """The answer in the question's terms: ``\\text{base } 7`` for "Find the base ..." is 7 (a noun of the question
    labels the value); ``p = 6, q = 31, r = -1`` for "the ordered triple $(p,q,r)$" is that tuple, in its order."""
    m = _WORD_LABEL_RE.match(answer.strip()) if question else None
    if m and re.search(r"\b(?:what|which|(?:find|determine|compute)\s+the)\s+(?:[a-z]+\s+)?%s\b" % m.group("w"),
                       question, re.I):  # the noun asked for, maybe after one adjective
        answer = (m.group("v") or m.group("v2")).strip()
    pairs = [_top_level_eq(it) for it in _split_top(answer, words=False)] if question and answer.count("=") > 1 else []
    named = {p[0].replace(" ", ""): p[1] for p in pairs if len(p) == 2 and _ASSIGN_LHS_RE.match(p[0].replace(" ", ""))}
    for m in _NAME_TUPLE_RE.finditer(question[:6000]) if len(pairs) > 1 and len(named) == len(pairs) else ():
        if sorted(names := m.group(1).replace(" ", "").split(",")) == sorted(named):
            return "(" + ", ".join(named[n] for n in names) + ")"
    return answer


@lru_cache(maxsize=4096)
def named_options(question: str) -> dict:
    """Letter -> value for 3 or more values a question names ("$A=\\sqrt{2}, B=\\sqrt[4]{4}, C=\\sqrt[8]{8}$") unless
    it demands the letter itself; {} otherwise (cached: do not modify)."""
    if _LETTER_DEMAND_RE.search(question):
        return {}
    out = _option_values(question[:6000], _OPTION_ASSIGN_RE)
    return out if len(out) >= 3 else {}


@lru_cache(maxsize=4096)
def question_options(question: Optional[str]) -> dict:
    """The options a problem lists, letter -> value (cached: do not modify), in any of three layouts."""
    if not question:
        return {}
    q = question[:6000]
    for rx in _OPTION_LABEL_RES:
        if len(out := _option_values(q, rx)) >= 3:
            return out
    meanings = {m.group(1): m.group(2).strip() for m in _OPTION_MEANING_RE.finditer(q)}
    return meanings if len(meanings) >= 2 else {}


def _option_values(q: str, rx) -> dict:
    """Letter -> the text after its label up to the next label (the last one: to the end of its line or math), for the
    last run of labels A, B, C, ... in order (at least three) that rx finds in q."""
    run: list = []
    for m in rx.finditer(q):
        if len(run) < 10 and m.group(1) == "ABCDEFGHIJ"[len(run)]:
            run.append(m)
        elif m.group(1) == "A":
            run = [m]
    run, out = run if len(run) >= 3 else [], {}
    for i, m in enumerate(run):
        chunk = q[m.end():run[i + 1].start() if i + 1 < len(run) else len(q)]
        if i + 1 == len(run):
            chunk = chunk.lstrip(" \t")
            chunk = chunk.split("\n", 1)[0] if chunk[:1] == "$" else re.split(r"\$|\n|\\\]", chunk, maxsplit=1)[0]
        value = _OPTION_JUNK_RE.sub(" ", chunk).strip().rstrip(".,;")
        if value and len(value) <= 200:
            out[m.group(1)] = value
    return out


def _option_letter(n: _Norm, options: dict) -> Optional[str]:
    """The option an answer names by its letter alone ("D", "(d)", "\\text{(D)}"), else None."""
    m = _OPTION_LETTER_RE.match(n.s)
    letter = n.choice if n.choice and not n.s else (m.group(1).upper() if m else None)
    return letter if letter in options else None


def _option_is_value(text: str) -> bool:
    """An option comparable with a value after its letter: not a number with a task in words."""
    n = _normalise(text)
    return n.text or not (re.search(r"\d", n.s) and re.search(r"[A-Za-z]{2,}", _COMMAND_RE.sub("", n.s)))


def _option_equal(pred: str, gold: str, options: dict, deadline: float) -> bool:
    """With the options known: an option's value for its letter, the letter for its value, a block of letters."""
    pn, gn = _normalise(pred), _normalise(gold)
    gl, pl = _option_letter(gn, options), _option_letter(pn, options)
    if gl:  # a letter against a letter is decided by answers_match
        return not (pl or pn.choice) and [k for k, v in sorted(options.items())
                                          if answers_match(pred, v, deadline)] == [gl]
    if pl:  # a letter of the options
        return answers_match(options[pl], gold, deadline)
    block = _LETTER_SEP_RE.sub("", gn.s).upper()  # "A,C,F" or "ACF"
    return (len(block) >= 2 and block.isalpha() and len(set(block)) == len(block) and set(block) <= set(options)
            and (letters := _LETTER_SEP_RE.sub("", pn.s)).isalpha() and letters.upper() == block)


# ======================================================================================
# 6. Format and reasoning credit (the reference's rules), paid only on a correct answer
_TAGS = (THINK_OPEN, THINK_CLOSE, ANSWER_OPEN, ANSWER_CLOSE)
_STEP_RE = re.compile(
    r"^[ \t>*#-]*(?:step[ \t]*(\d{1,3})[ \t]*[:.)]|(\d{1,3})\.(?!\d)|\((\d{1,3})\))\**[ \t]*(.*)$", re.I | re.M)
#: COT_KEYWORDS matched at word starts, inflected ("solving", "calculated", "sums").
_STEP_KEYWORD_RE = re.compile(r"\b(?:" + "|".join(k[:-1] if k.endswith("e") else k for k in COT_KEYWORDS) + r")\w*",
                              re.I)


def _layout(text: str) -> Tuple[List[int], bool, Optional[int], Optional[int]]:
    """The first position of each tag, whether in order, and the stray characters before ``<think>`` / after."""
    firsts = [text.find(t) for t in _TAGS]
    present = [p for p in firsts if p >= 0]
    in_order = present == sorted(present) and len(set(present)) == len(present)
    before = len(text[:firsts[0]].strip()) if firsts[0] >= 0 else None
    after = len(text[text.rfind(ANSWER_CLOSE) + len(ANSWER_CLOSE):].strip()) if firsts[3] >= 0 else None
    return firsts, in_order, before, after


def format_credit(text: str) -> float:
    """The layout (reference): FORMAT_TAG_CREDIT a marker present once, less stray text; 0 out of order."""
    _, in_order, before, after = _layout(text)
    if not in_order:
        return 0.0
    credit = sum(FORMAT_TAG_CREDIT for mk in FORMAT_MARKERS if text.count(mk) == 1)
    for stray in (before, after):
        if stray is not None:
            credit -= min(FORMAT_STRAY_COST_PER_CHAR * stray, FORMAT_STRAY_COST_MAX)
    return round(max(credit, 0.0), 6)


def contract_parts(text: str) -> dict:
    """Which CONTRACT_PARTS the response follows (name -> bool)."""
    _, in_order, before, after = _layout(text)
    parts = {name: in_order and text.count(tag) == 1 for name, tag in zip(CONTRACT_PARTS, _TAGS)}
    parts.update(boxed=extract_final_answer(text)[0] is not None, starts_with_think=before == 0,
                 ends_with_answer=after == 0)
    return parts


def reasoning_credit(text: str) -> float:
    """Numbered steps in ``<think>`` (reference): full or partial credit by the longest sequential run."""
    start = text.find(THINK_OPEN)
    end = text.find(THINK_CLOSE, start + 1)
    if start < 0 or end < 0:
        return 0.0
    seen, run, best, prev = set(), (0, 0), (0, 0), None  # runs: (steps, steps with a keyword)
    for m in _STEP_RE.finditer(text, start + len(THINK_OPEN), end):
        body = m.group(4).strip()
        if len(body) < COT_MIN_STEP_CHARS or body.lower() in seen:
            continue
        seen.add(body.lower())
        num, kw = int(m.group(1) or m.group(2) or m.group(3)), bool(_STEP_KEYWORD_RE.search(body))
        run = (run[0] + 1, run[1] + kw) if prev is not None and num == prev + 1 else (1, int(kw))
        best, prev = max(best, run), num
    for credit, steps, keyword_steps in ((COT_FULL_CREDIT, COT_FULL_MIN_STEPS, COT_FULL_MIN_KEYWORD_STEPS),
                                         (COT_PARTIAL_CREDIT, COT_PARTIAL_MIN_STEPS, COT_PARTIAL_MIN_KEYWORD_STEPS)):
        if best[0] >= steps and best[1] >= keyword_steps:
            return credit
    return 0.0


# ======================================================================================
# 7. Entry point
def _judge(text: str, gold: str, question: Optional[str] = None) -> Tuple[bool, str]:
    """Whether the response's final answer is right, and that answer: sections 2 to 5 in turn."""
    answers, unpayable = extract_final_answer(text)
    if answers is None:
        return False, ""
    first: dict = {}  # boxes that state the same answer are one
    for a in answers:
        first.setdefault(_norm_key(a), a)
    distinct = list(first.values())
    pred = ", ".join(a.strip() for a in distinct)
    if (unpayable and len(distinct) > 1) or len(distinct) > MAX_FINAL_BOXES:
        return False, pred
    answer = pred if len(distinct) > 1 else _as_asked(distinct[0], question)
    deadline, demands = time.thread_time() + CAS_BUDGET_S, question_demands(question)
    if "list" in demands:  # "Enter all the solutions, separated by commas": 70,110 is two numbers
        gold, answer = _LIST_COMMA_RE.sub(", ", gold), _LIST_COMMA_RE.sub(", ", answer)
    try:
        if len(distinct) > 1 and _item_kind(_normalise(gold[:MAX_ANSWER_CHARS])) in ("text", "choice"):
            # several boxes for one word or letter: each must state it
            ok = all(answers_match(a, gold, deadline, demands) for a in distinct)
            return ok and not _restates_task(answer, gold, text, question), pred
        ok = answers_match(answer, gold, deadline, demands)
        if not ok and question and len(answer) <= MAX_ANSWER_CHARS:
            options = question_options(question)
            ok = bool(options) and _option_equal(answer, gold, options, deadline)
            # values the question names "A=\\sqrt{2}, B=..., C=...": options for a gold letter only (else points, sets)
            named = {} if ok or options else named_options(question)
            if named and _option_letter(_normalise(gold), named):
                ok = _option_equal(answer, gold, named, deadline)
    except _Rejected:
        ok = False
    form = answer  # "exact \\approx rounded" has the form of the side that states the gold, the rounded one first
    if ok and "\\approx" in (n := _normalise(answer[:MAX_ANSWER_CHARS])).s:
        sides = n.s.split("\\approx")
        form = next((x for x in (sides[-1], sides[0]) if x and _restates(x, [gold], deadline)), answer)
    if ok and len(answer) <= MAX_ANSWER_CHARS and (
            _restates_task(answer, gold, text, question, deadline) or _form_violation(form, gold, demands)
            or ("ordered" in demands and _factors_reordered(answer, gold, deadline))
            or _foreign_modulus(answer, gold, question) or _foreign_unit(answer, gold, question)):
        ok = False
    if ok and question and len(answer) <= MAX_ANSWER_CHARS:  # "(B) 2/3": the letter's option must be the value
        n, options = _normalise(answer), question_options(question)
        try:
            ok = not (n.choice and n.s and n.choice in options and _option_is_value(options[n.choice])
                      and not answers_match(n.s, options[n.choice], deadline))
        except _Rejected:
            ok = False
    # each of several boxes must be an answer: none may restate the task
    return ok and not (len(distinct) > 1 and any(_restates_task(a, gold, text, question) for a in distinct)), pred


def _weight(name: str, value) -> float:
    """A weight from verl's reward_kwargs: a number >= 0, else one line naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
        raise ValueError(f"new_math_reward: reward_kwargs.{name}={value!r}; expected a number >= 0")
    return value


def compute_score(data_source, solution_str, ground_truth, extra_info=None, *, correct_weight: float = SCORE_CORRECT,
                  format_weight: float = FORMAT_CREDIT_MAX, reasoning_weight: float = COT_FULL_CREDIT,
                  format_only: bool = False) -> dict:
    """verl's reward for one response: extract the final answer (section 2), normalise it and the gold (3), judge
    them (4), apply what ``extra_info["question"]`` demands (5); a correct answer earns ``correct_weight`` plus the
    format and reasoning credit (6) scaled to ``format_weight`` and ``reasoning_weight``, a wrong one 0. ``format_only``
    (for a model too small for MATH): ``score`` is the share of CONTRACT_PARTS followed. Keywords: verl's reward_kwargs.
    Returns score, acc, format, cot, pred; raises ValueError for a bad data_source or keyword, never for model text."""
    correct_weight, format_weight = _weight("correct_weight", correct_weight), _weight("format_weight", format_weight)
    reasoning_weight = _weight("reasoning_weight", reasoning_weight)
    if not isinstance(format_only, bool):
        raise ValueError(f"new_math_reward: reward_kwargs.format_only={format_only!r}; expected True or False")
    if data_source not in SUPPORTED_DATA_SOURCES:
        raise ValueError(f"new_math_reward: unsupported data_source {data_source!r}; expected one of "
                         f"{sorted(SUPPORTED_DATA_SOURCES)}. Route other datasets to their own reward.")
    STATS["calls"] += 1
    acc, fmt, cot, pred = False, 0.0, 0.0, ""
    try:
        text = solution_str if isinstance(solution_str, str) else ("" if solution_str is None else str(solution_str))
        gold = ground_truth if isinstance(ground_truth, str) else str(ground_truth)
        question = extra_info.get("question") if isinstance(extra_info, dict) else None
        try:
            acc, pred = _run_guarded(_judge, text, gold, question if isinstance(question, str) else None)
        except _HardTimeout:
            STATS["hard_timeouts"] += 1
        if acc:
            fmt = format_credit(text) * (format_weight / FORMAT_CREDIT_MAX)
            cot = reasoning_credit(text) * (reasoning_weight / COT_FULL_CREDIT)
    except Exception:  # noqa: BLE001 - model text must never crash training
        STATS["internal_errors"] += 1
        acc, fmt, cot = False, 0.0, 0.0
    out = {"score": float(correct_weight + fmt + cot if acc else 0.0), "acc": 1.0 if acc else 0.0,
           "format": float(fmt), "cot": float(cot), "pred": pred[:PRED_MAX_CHARS]}
    if format_only:
        try:
            parts = contract_parts(solution_str if isinstance(solution_str, str) else "")
            share = round(sum(parts.values()) / len(CONTRACT_PARTS), 6)
        except Exception:  # noqa: BLE001 - model text must never crash training
            STATS["internal_errors"] += 1
            share = 0.0
        out.update(score=share, format=share)
    return out

for _warm in ("x^{2}+\\frac{1}{2}", "\\frac{\\sqrt{3}}{2}+\\pi", "3+4i"):
    _parse(_warm)  # warm the LaTeX parser and sympy at import (first calls cost ~0.2 s)
