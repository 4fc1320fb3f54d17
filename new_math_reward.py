"""Rule-based MATH reward for verl GRPO (``custom_reward_function.path`` = this file).

``compute_score(data_source, solution_str, ground_truth, extra_info=None)`` returns a dict
with the same keys and types on every call (verl's naive reward manager logs every key but
``score`` into ``reward_extra_info``; validation averages the numeric ones, majority-votes on
``pred``):

    score   float  SCORE_CORRECT + format credit + reasoning credit if correct, else 0.0
    acc     float  1.0 if the final answer is correct, else 0.0
    format  float  format credit granted (0.0 unless correct)
    cot     float  reasoning credit granted (0.0 unless correct)
    pred    str    the extracted final answer ("" when there is none), at most PRED_MAX_CHARS

The file's sections follow the order data flows through ``compute_score``:

1. **Routing.** ``data_source`` must be one of SUPPORTED_DATA_SOURCES, else ``ValueError``
   (a configuration bug, never model text). Nothing that depends on model text raises: an
   internal failure scores 0 and is counted in ``STATS["internal_errors"]``.
2. **Extraction.** The final answer is the last ``\\boxed{}``/``\\fbox{}`` inside
   ``<answer>`` when that tag is present, else in the response (after ``</think>`` when
   that part has a box), together with the boxes of the same final statement.
3. **Hack-defence policy** (one section): hedges between boxes (or an unboxed alternative
   right after the last box), candidates cycled through
   one box after another, boxes of echoed worked examples or prompt placeholders, truncated
   boxes, hallucinated follow-up problems, and a final answer that merely restates the
   problem's own expression (or, for a "factor" task, factors it only in part). A response
   caught here is not paid. The same section holds the rules of the written policy for what
   a task demands beyond the value (forms the question names, read from
   ``extra_info["question"]`` into one table of forbidden features (_DEMAND_FORBIDS), the units
   and modulus it asks for, options in any layout, huge expressions; docs/reward_policy.md).
4. **Equivalence, one canonical pipeline** applied to the answer and the gold alike:
   (a) unicode maths to LaTeX (``√ π − × · ² ½ ∞ ≤ ∪``; first, because ``≤ − ∪`` decide the
   later splits); (b) wrappers, labels and units stripped in named steps, each recorded
   (percent, unit in any wrapper, base subscript or base in words, choice letter in any
   case, congruence modulus), number and fraction words read as numbers, remarks in words
   after a value, membership and congruence prefixes before a name (one name pattern,
   ``F(x)`` included) dropped; (c) relation chains split: the last side is the answer when the gold is
   not itself a relation (``\\approx``: the rounded value, or the exact side when its
   rounding is right; ``f(t) =``: the bound variable renamed to the gold's); (d) parse into a
   typed structure (matrix, union, tuple/interval, set-builder notation as its interval,
   set/list, a strict chain as an ordered list, or one item: choice, text, relation, value);
   (e) compare by type: exact
   rationals for numbers (repeating decimals in any notation), then a CAS
   (latex2sympy2_extended, math-verify's parser) evaluated at high precision; with the
   question's options, a letter for its option's value and back. Decimals are exact values:
   ``0.24999`` is not ``1/4``, ``3.14`` is not ``pi`` (MATH: "exact values, not approximations").
5. **Bounded time.** Cheap syntactic and tree guards refuse hostile inputs before sympy
   evaluates anything, CAS work has a soft deadline in CPU time of the calling thread (so
   that load on the machine does not change a judgement), and in the main thread a wall-clock
   SIGALRM guard cuts any overrun (unless the host owns SIGALRM). Model text never reaches
   ``eval``/``exec``/``sympify(str)``.
6. **Format and reasoning credit**, only on correct answers (the reference recipe's rules).

Rule sources are cited next to each rule: "reference" is the reference recipe's reward,
"MATH" the answer conventions of Hendrycks et al. 2021, "math-verify" Hugging Face's
verifier. Where this file departs from the reference rule, the docstring says why.
"""


from __future__ import annotations

import math
import re
import signal
import threading
import time
from array import array
from fractions import Fraction
from functools import lru_cache
from itertools import accumulate
from typing import List, Optional, Tuple

import sympy as _sympy
from latex2sympy2_extended import latex2sympy as _latex2sympy
from latex2sympy2_extended.math_normalization import NormalizationConfig as _NormalizationConfig
from latex2sympy2_extended.math_normalization import normalize_latex as _normalize_latex
from math_verify import verify as _mv_verify
from math_verify.grader import should_treat_as_complex as _complex_re

# --------------------------------------------------------------------------------------
# The answer contract, defined once. The system prompt in tokenizer_config.json, the
# instruction appended to every training/eval problem (prepare_math.py) and the format
# rules below all follow it.
# --------------------------------------------------------------------------------------
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"

#: Qwen2.5-Instruct's stock default system prompt (its tokenizer_config.json chat template).
QWEN_STOCK_SYSTEM_PROMPT = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

#: The recipe's default system prompt: Qwen's stock prompt plus the answer contract, with a
#: layout example whose line breaks are real newlines (the reference recipe escaped them
#: twice, showing the model a literal backslash-n).
SYSTEM_PROMPT = (
    QWEN_STOCK_SYSTEM_PROMPT
    + " First think through the problem step by step inside <think> </think> tags,"
    " then give the final answer inside <answer> </answer> tags, written as \\boxed{}."
    " Use exactly this layout:\n"
    "<think>\nStep 1: ...\nStep 2: ...\n</think>\n<answer>\n\\boxed{...}\n</answer>"
)

#: Appended (after one space) to every MATH problem by prepare_math.py; replaces verl's
#: MATH example instruction "Let's think step by step and output the final answer within
#: \\boxed{}." so that the user turn states the same contract as the system prompt.
INSTRUCTION = (
    "Let's think step by step inside <think> </think> tags, then give the final answer"
    " within \\boxed{} inside <answer> </answer> tags."
)

# --------------------------------------------------------------------------------------
# Weights and rules: every number the reward pays, in one place, with its source.
# --------------------------------------------------------------------------------------
#: Reward for a correct final answer (reference run). Wrong answers get 0 whatever the format.
SCORE_CORRECT = 0.7
#: Format credit per layout marker present exactly once (reference: 4 x 0.05 = 0.2).
FORMAT_TAG_CREDIT = 0.05
#: The four layout markers the reference rewards; they spell SYSTEM_PROMPT's layout.
FORMAT_MARKERS = (THINK_OPEN + "\n", "\n" + THINK_CLOSE + "\n", "\n" + ANSWER_OPEN + "\n", "\n" + ANSWER_CLOSE)
#: The parts of the answer contract that compute_format_score pays, an equal share each: every
#: contract tag once (tags out of order: none of the four), a final \boxed{} answer, nothing
#: before <think> and nothing after </answer> (the reference's stray-text rule, as a yes/no).
CONTRACT_PARTS = ("think_open", "think_close", "answer_open", "answer_close", "boxed", "starts_with_think",
                  "ends_with_answer")
#: Cost per character of text before <think> / after </answer> (reference), each side capped.
FORMAT_STRAY_COST_PER_CHAR = 0.001
FORMAT_STRAY_COST_MAX = 0.1
#: Reasoning credit (reference): >= 3 sequential steps with >= 2 keyword steps -> 0.1;
#: >= 2 steps with >= 1 keyword step -> 0.05.
COT_FULL_CREDIT = 0.1
COT_FULL_MIN_STEPS = 3
COT_FULL_MIN_KEYWORD_STEPS = 2
COT_PARTIAL_CREDIT = 0.05
COT_PARTIAL_MIN_STEPS = 2
COT_PARTIAL_MIN_KEYWORD_STEPS = 1
#: A step line needs more than 3 characters after its number (reference).
COT_MIN_STEP_CHARS = 4
#: Reference keyword list; matched at word starts, inflections allowed (see _STEP_KEYWORD_RE).
COT_KEYWORDS = ("solve", "equation", "calculate", "substitute", "therefore", "because", "thus",
                "sum", "product", "derivative", "integral")

#: data_source values this reward judges (MATH and its common hub copies / subsets). Any
#: other value raises ValueError: route other datasets to their own reward explicitly.
SUPPORTED_DATA_SOURCES = frozenset({
    "DigitalLearningGmbH/MATH-lighteval",  # the recipe's training data (verl's MATH example)
    "lighteval/MATH",                      # verl's default routing name for MATH
    "HuggingFaceH4/MATH-500",              # the recipe's validation subset
    "hendrycks/competition_math",          # the original hub name of the same data
    "EleutherAI/hendrycks_math",           # per-subject copy of the same data
})

# --------------------------------------------------------------------------------------
# Limits that keep every call bounded (section 5). Inputs over a limit are judged
# by exact string comparison only, or rejected (not correct).
# --------------------------------------------------------------------------------------
MAX_RESPONSE_CHARS = 400_000   # longer responses: only the tail is searched for the answer
MAX_ANSWER_CHARS = 2_000       # longer final answers: exact normalised string match only
MAX_CAS_CHARS = 400            # longest item handed to the CAS
MAX_NESTING = 40               # deepest {[( nesting handed to the CAS (deep nesting: recursion)
MAX_LIST_ITEMS = 16            # longer answer lists: exact item strings only (no CAS)
MAX_FINAL_BOXES = 16           # more distinct boxes in the final statement: an enumeration hack
MAX_INT_DIGITS = 4_000         # integer literals longer than this: string compare only
MAX_POWER_DEPTH = 2           # a^{b^{c}} is parsed; deeper symbolic towers are refused
MAX_FACTORIAL_ARG = 10_000     # n! and binomial(n, k) evaluated only for integers up to this
MAX_POWER_BITS = 200_000       # integer powers up to this size are evaluated exactly
MAX_LOG10_MAGNITUDE = 20_000   # CAS input whose value may exceed 10**this is rejected
CAS_BUDGET_S = 0.5             # soft deadline for CAS work in one call, CPU seconds of the calling thread
HARD_TIMEOUT_S = 1.5           # SIGALRM guard (main thread only) for the whole comparison, wall-clock seconds
NUMERIC_DIGITS = 50            # precision of the sample-point evaluation
NUMERIC_SLACK_DIGITS = 20      # values must agree to all evaluated digits but these (exactness)
MAX_EVAL_EXTRA_DIGITS = 2_000  # extra digits for large magnitudes (2^{200}+1 vs 2^{200})
PRED_MAX_CHARS = 300           # longest ``pred`` string returned

#: The clock of the soft deadline: CPU time of the calling thread, not wall-clock. A judgement
#: is then a function of the work it takes, not of the machine's load: on a busy machine (a
#: CI runner, the rollout sharing the cores, other reward threads holding the GIL) a case
#: near the budget would otherwise flip from paid to refused, a noisy reward for the same
#: response. The SIGALRM guard stays wall-clock (it must also cut C-level work that never
#: checks the soft deadline), at 3 x CAS_BUDGET_S, so that it only decides when the thread
#: gets less than a third of a core.
_cpu_clock = time.thread_time

#: Counters for failures and guards; read them with reward_stats().
STATS = {"calls": 0, "internal_errors": 0, "guard_rejections": 0, "cas_deadline": 0,
         "hard_timeouts": 0}


def reward_stats() -> dict:
    """Return a copy of the module counters (calls, internal errors, guard hits)."""
    return dict(STATS)


class _Rejected(Exception):
    """An answer (or a step) refused by a size/time guard: judged not correct."""


class _HardTimeout(BaseException):
    """Raised by the SIGALRM guard (a BaseException, so that no library's ``except
    Exception`` swallows it)."""

# ======================================================================================
# 2. Extraction: the final boxed answer
# ======================================================================================
# One token regex drives a single linear pass: box commands (with or without a brace),
# escaped braces (ignored: LaTeX literals, not groups) and plain braces.
_BOX_TOKEN_RE = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])[ \t]*(\{)?|\\[{}]|[{}]")
_BARE_BOX_ARG_RE = re.compile(r"[^\s$]+")
_BARE_BOX_STOP_RE = re.compile(r"\\[\]\)]")


def _scan_boxes(text: str) -> Tuple[List[Tuple[int, int, int, int]], int]:
    """All complete boxes as (start, end, content start, content end), ordered by start,
    and the start of the last box left unclosed (-1 if none). One linear pass whatever the
    nesting; contents are sliced later by _box_content, only for the boxes that matter.
    A brace-less box (``\\boxed 5``) has content start -1 and its token span as end."""
    boxes: List[Tuple[int, int, int, int]] = []
    open_boxes: List[Tuple[int, int, int]] = []  # (depth, content start, box start)
    depth = 0
    for m in _BOX_TOKEN_RE.finditer(text):
        tok = m.group(0)
        if tok[0] == "\\" and len(tok) > 2:  # \boxed / \fbox
            if m.group(1):
                depth += 1
                open_boxes.append((depth, m.end(), m.start()))
            else:  # brace-less form: "\boxed 5"
                arg = _BARE_BOX_ARG_RE.match(text, m.end())
                if arg:
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
    boxes.sort()
    unclosed = open_boxes[-1][2] if open_boxes else -1
    return boxes, unclosed


def _box_content(text: str, box: Tuple[int, int, int, int]) -> str:
    """The content of a box found by _scan_boxes (brace-less: the token, no trailing
    punctuation, e.g. ``\\boxed 5.`` -> ``5``)."""
    start, end, cstart, cend = box
    if cstart >= 0:
        return text[cstart:cend]
    return _BARE_BOX_STOP_RE.split(text[cend:end], 1)[0].rstrip(".,;:")


def extract_last_boxed(text: str) -> Optional[str]:
    """Return the content of the last ``\\boxed{...}`` / ``\\fbox{...}`` in ``text``.

    Nested braces are kept intact (``\\boxed{\\frac{1}{2}}`` -> ``\\frac{1}{2}``); the
    brace-less form ``\\boxed 5.`` yields the token after the space without trailing
    punctuation (``5``). Returns None when there is no complete box, or when the last box
    is left unclosed (a truncated answer). Linear in ``len(text)``.
    """
    boxes, unclosed = _scan_boxes(text)
    boxes = [b for b in boxes if b[2] >= 0 or _box_content(text, b)]
    if not boxes:
        return None
    last = boxes[-1]
    if unclosed > last[0]:
        return None
    return _box_content(text, last)


def _final_statement(region: str, cut_continuation: bool) -> Tuple[Optional[List[str]], bool]:
    """Boxed answers of the region's final statement and whether they are not payable
    (hedged or cycled: section 3).

    Returns (None, False) when there is no usable final box (none, only placeholders copied
    from the prompt or boxes of an echoed example, or a truncated last box). With
    ``cut_continuation`` the region ends at a hallucinated next problem/turn that starts
    after the first complete box."""
    boxes, unclosed = _scan_boxes(region)
    if cut_continuation and boxes:
        m = _CONTINUATION_RE.search(region, min(b[1] for b in boxes))
        if m:
            boxes = [b for b in boxes if b[1] <= m.start()]
            unclosed = unclosed if unclosed < m.start() else -1
    # keep outermost boxes only, drop placeholders (echoed "\boxed{}" / "\boxed{...}")
    outer: List[Tuple[int, int, int, int]] = []
    for b in boxes:
        if outer and b[0] < outer[-1][1]:
            continue
        outer.append(b)
    if unclosed >= 0 and (not outer or unclosed > outer[-1][0]):
        return None, False  # the last box is truncated: no final answer
    outer = [b for b in outer if b[3] - b[2] > MAX_ANSWER_CHARS or
             _box_content(region, b).strip() not in _PLACEHOLDER_BOXES]
    outer = _drop_echoed_examples(region, outer)
    if not outer:
        return None, False
    first = len(outer) - 1
    hedged = False
    while first > 0 and len(outer) - first <= MAX_FINAL_BOXES:
        kind = _gap_kind(region[outer[first - 1][1]:outer[first][0]])
        if kind in ("separate", "correction"):
            break
        hedged = hedged or kind == "hedge"
        first -= 1
    group = outer[first:]
    if first > 0 and _cycles_candidates(region, outer, first, [_box_content(region, b).strip() for b in group]):
        group, hedged = outer[-(MAX_FINAL_BOXES + 1):], True  # report every candidate
    # whole-answer brace groups go before the length cut ({{...{4}...}} is the answer 4)
    answers = [strip_grouping_braces(_box_content(region, b))[:MAX_ANSWER_CHARS + 1] for b in group]
    alternative = _trailing_alternative(region, group[-1][1])
    if alternative is not None:
        return answers + [alternative], True
    return answers, hedged


#: An unboxed alternative offered right after the final box, in the same sentence:
#: "$\\boxed{3}$ (or maybe 4)", "$\\boxed{3}$, or possibly $4$".
_TRAILING_HEDGE_RE = re.compile(
    r"^[\s$).,;:*]{0,8}(?:\(\s*)?(?:or|maybe|perhaps|possibly|alternatively|otherwise)\b(?:\s+(?:maybe|perhaps|possibly|"
    r"else|also|even|just))?[\s,]*(?:\$(?P<span>[^$]{1,300})\$|(?P<alt>[-+]?(?:\d|\\(?:frac|sqrt|pi|dfrac))"
    r"[^\n.;!?)$]{0,60}?)[\s]*(?:[.;!?)]|\n|$))", re.I)


def _trailing_alternative(region: str, end: int) -> Optional[str]:
    """Hedge after the last box: the value an "or maybe ..." clause right after it offers."""
    m = _TRAILING_HEDGE_RE.match(region[end:end + 400])
    return (m.group("span") or m.group("alt")).strip() if m else None


def extract_final_answer(text: str) -> Tuple[Optional[List[str]], bool]:
    """The response's final boxed answer(s) and whether they are not payable (section 3).

    Inside ``<answer>`` blocks when present after the reasoning (several blocks must agree,
    else it is a hedge); otherwise after ``</think>`` when that part has a box, else the
    whole response, cut at a hallucinated continuation."""
    if len(text) > MAX_RESPONSE_CHARS:
        text = text[-MAX_RESPONSE_CHARS:]
    region = text
    if THINK_CLOSE in text:
        tail = text.rsplit(THINK_CLOSE, 1)[1]
        if ANSWER_OPEN in tail or "\\boxed" in tail or "\\fbox" in tail:
            region = tail
    if ANSWER_OPEN in region:
        finals: List[List[str]] = []
        hedged = False
        for block in region.split(ANSWER_OPEN)[1:]:
            ans, h = _final_statement(block.split(ANSWER_CLOSE, 1)[0], cut_continuation=False)
            if ans is not None:
                finals.append(ans)
                hedged = hedged or h
        if not finals:
            return None, False
        if len({tuple(_norm_key(a) for a in f) for f in finals}) > 1:
            return [a for f in finals for a in f], True  # blocks disagree: a hedge
        return finals[-1], hedged
    return _final_statement(region, cut_continuation=True)



# ======================================================================================
# 3. Hack-defence policy: what is never paid, in one place
# ======================================================================================
# Each rule answers one way a response can look right without answering; a test in
# tests/test_reward.py reproduces each hack. Extraction (section 2) applies the first five;
# _judge applies the last one after normalisation.
#
#   placeholder box   a box copied from the prompt (empty, "...", "answer") is no answer
#   truncation        a final box left unclosed means there is no final answer
#   continuation      a hallucinated next problem/turn after the answer is not the model's
#   hedge             boxes joined by "or"/"maybe"/... , or disagreeing <answer> blocks
#   candidate cycling three or more superseding boxed answers with no retraction between
#   echoed example    boxes of a worked example followed by "now let's solve the problem"
#   restated task     the final answer is the problem's own expression, written as given
_PLACEHOLDER_BOXES = frozenset({"", "...", "\\ldots", "\\cdots", "\\dots", "answer", "\\text{answer}", "?"})
# Gap between two boxes: what decides whether they belong to one statement.
_MATH_DELIMS_RE = re.compile(r"\\[()\[\]]|\$+|\*\*")
#: Words that announce a retraction: the later box supersedes the earlier (self-correction).
_CORRECTION_RE = re.compile(
    r"\b(?:wait|wrong|mistake|incorrect|actually|correct(?:s|ed|ing|ion)?|instead|re-?check|oops|"
    r"sorry|error|redo|scratch|revis\w*|reconsider\w*)\b", re.I)
#: Words that offer alternatives: boxes joined by them are hedging, never a final answer.
_HEDGE_RE = re.compile(r"\b(?:or|either|maybe|perhaps|possibly|might|could|alternatively|also|otherwise)\b", re.I)
#: A hallucinated follow-up turn/problem (base-model continuation) ends the response.
_CONTINUATION_RE = re.compile(
    r"(?m)^[ \t#*]*(?:Problem|Question|Human|User)\s*\d*\s*[:.]|<\|im_start\|>|<\|endoftext\|>|<\|im_end\|>")
#: The response turns from an echoed worked example to its own task: boxes before it are
#: the example's ("Now let's solve the given problem", "Following the same approach").
_NEW_TASK_RE = re.compile(
    r"\b(?:now|next)\b[^\n.]{0,30}?\b(?:the|our|this)\s+(?:given|real|actual|original|current|own|"
    r"problem|question|one)\b|\b(?:following|using|with)\s+the\s+same\s+(?:approach|method|steps|idea)\b", re.I)
_GAP_LONG = 150
#: Distinct superseding boxed answers, none retracted, that amount to cycling candidates.
MAX_SUPERSEDED_CANDIDATES = 2


def _gap_kind(gap: str) -> str:
    """Classify the text between two boxes: 'separate' (different statements: the later box
    supersedes), 'correction' (a separate statement that retracts the earlier), 'hedge'
    (alternatives offered) or 'join' (one statement listing several boxes, e.g.
    "$\\boxed{3}$, $\\boxed{5}$ and $\\boxed{7}$")."""
    g = _MATH_DELIMS_RE.sub(" ", gap)
    if _CORRECTION_RE.search(g):
        return "correction"
    if _HEDGE_RE.search(g):
        return "hedge"
    stripped = g.strip()
    if len(stripped) > _GAP_LONG or ("\n" in g and re.search(r"[A-Za-z]{2,}", stripped)):
        return "separate"
    return "join"


def _drop_echoed_examples(region: str, boxes: list) -> list:
    """Echoed example: boxes that come before the response turns to its own task
    ("Example: ... \\boxed{9}. Now let's solve the given problem ...") are the example's."""
    if not boxes:
        return boxes
    turns = [m.start() for m in _NEW_TASK_RE.finditer(region, boxes[0][1])]
    return [b for b in boxes if not any(b[1] <= t for t in turns)] if turns else boxes


def _cycles_candidates(region: str, outer: list, first: int, values: List[str]) -> bool:
    """Candidate cycling: before the final statement (which starts at outer[first]) stand
    at least MAX_SUPERSEDED_CANDIDATES separate statements ending in other boxed values, with
    no retraction anywhere between them: "if 21 and 22, \\boxed{43}. ... If 22 and 23,
    \\boxed{45}" offers candidates one after another. A retracted box is self-correction; a
    row of boxes in one statement (options copied from the prompt) is one statement."""
    statements = 0
    for k in range(first - 1, -1, -1):
        kind = _gap_kind(region[outer[k][1]:outer[k + 1][0]])
        if kind == "correction":
            return False
        if kind == "separate" and _box_content(region, outer[k]).strip() not in values:
            statements += 1
    return statements >= MAX_SUPERSEDED_CANDIDATES


#: A task that asks to rewrite the expression it states, in the problem or in the response's
#: own restatement of it ("We need to expand ...", "To factor, ...", "Simplify $...$"); "factor"
#: as a verb only (not "its factors", "factorial").
_TASK_RE = re.compile(r"\b(expand|factor(?=(?:ed|ing|i[sz](?:e|ation)\w*)?\b)|simplify|combine|rationali[sz]e|"
                      r"multiply\s+out|reduce|evaluate|compute|calculate|what\s+is|find|express|write|convert|"
                      r"rewrite)\w*", re.I)
_OWN_TASK_RE = re.compile(
    r"\b(?:to|we|let's|let\s+us)\s+(?:need\s+to\s+|want\s+to\s+|must\s+|have\s+to\s+)?"
    r"(expand|factor|simplify|combine|rationali[sz]e|multiply\s+out|reduce|evaluate|compute)\b", re.I)
_MATH_SPAN_RE = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.S)
_SENTENCE_END_RE = re.compile(r"[.!?](?:\s|$)|\n")


def _task_expressions(text: str, own: bool) -> Tuple[frozenset, Tuple[str, ...]]:
    """The expressions a task names, normalised, and its verbs (lower case): every math span
    in a sentence whose text before the span has a task verb (``own``: the response's own
    "we need to expand ..."; else the problem's "Expand ...")."""
    verb_re = _OWN_TASK_RE if own else _TASK_RE
    text = text[:4000]
    exprs, verbs = set(), tuple(v.lower() for v in verb_re.findall(_MATH_SPAN_RE.sub(" ", text)))
    for m in _MATH_SPAN_RE.finditer(text) if verbs else ():
        start = max((e.end() for e in _SENTENCE_END_RE.finditer(text, max(m.start() - 200, 0), m.start())),
                    default=max(m.start() - 200, 0))
        if verb_re.search(_MATH_SPAN_RE.sub(" ", text[start:m.start()])):
            span = next(g for g in m.groups() if g is not None)
            exprs.add(_normalise(strip_grouping_braces(span.strip().rstrip("?.,;: "))[:MAX_ANSWER_CHARS]).s)
    return frozenset(exprs), verbs


@lru_cache(maxsize=4096)
def _question_tasks(question: str) -> Tuple[frozenset, Tuple[str, ...]]:
    """_task_expressions of a problem (cached: a step scores n responses to each problem)."""
    return _task_expressions(question, own=False)


def _restates_task(pred: str, gold: str, text: str, question: Optional[str],
                   deadline: Optional[float] = None) -> bool:
    """Restated task: the final answer is the problem's own expression (``Expand (x+3)(x-8)``
    answered ``(x+3)(x-8)``, ``Simplify \\sqrt{245}`` answered ``\\sqrt{245}``), or a
    "factor" task answered with a sum or an incomplete factorisation (_incompletely_factored) /
    an "expand" task with a product. The task is read
    from ``extra_info["question"]`` when the data carries it, else from the response's own
    statement of it before the final box. Equal in value to the gold, such an answer does
    no work the problem asked for (MATH's answers are the simplified, requested form)."""
    pn, gn = _normalise(pred).s, _normalise(gold).s
    if pn == gn:
        return False
    exprs, verbs = _question_tasks(question) if question else (frozenset(), ())
    if not question:
        exprs, verbs = _task_expressions(text[:text.rfind("\\boxed")], own=True)
    if pn in exprs:
        return True
    if any(v.startswith("factor") for v in verbs) and _top_terms(gn) == 1 and "(" in gn:
        # a sum answers no "factor" task, nor a product with a factor left to split
        return _top_terms(pn) > 1 or _incompletely_factored(pn, gn, deadline or _cpu_clock() + CAS_BUDGET_S)
    if any(v.startswith("expand") or v.startswith("multiply") for v in verbs) and "(" not in gn:
        return bool(_SUM_GROUP_RE.search(pn))  # a product of a sum answers no "expand" task; (2/x) is no sum
    return False


_SUM_GROUP_RE = re.compile(r"\([^()]*[\w}][^()]*?[+-][^()]*\)")
#: Largest total degree and number of variables of a factor whose irreducibility is decided
#: (sympy factors such polynomials in milliseconds; the dense form grows with the variables).
MAX_FACTOR_DEGREE = 24
MAX_FACTOR_VARIABLES = 3


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
    """Whether the product s (as written: the parse is unevaluated) is factored completely over
    the integers, up to order, signs and numeric factors: every non-constant factor, powers
    peeled, a primitive polynomial with integer coefficients (content +-1) that is irreducible
    over Z. None when undecided: not a polynomial, too large, out of time, or sympy fails."""
    e = _parse(s)
    if not isinstance(e, _sympy.Expr):
        return None
    todo, factors = [e], []
    while todo:
        f = todo.pop()
        if isinstance(f, _sympy.Mul):
            todo.extend(f.args)
        elif isinstance(f, _sympy.Pow) and f.exp.is_Integer and f.exp > 0:
            todo.append(f.base)
        elif f.free_symbols:
            factors.append(f)
    try:
        for f in factors:
            syms = sorted(f.free_symbols, key=str)
            if len(syms) > MAX_FACTOR_VARIABLES or _degree(f) > MAX_FACTOR_DEGREE or _cpu_clock() > deadline:
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


def _incompletely_factored(pred: str, gold: str, deadline: float) -> bool:
    """A "factor" task's answer equal to the gold that leaves a factor to split (``4(9-x^2)``,
    ``z^{96}(28z+7)``, ``(6-2x)(6+2x)`` for ``4(3-x)(3+x)``). Only when the gold itself is
    factored completely over Z (a gold with radicals, or no polynomial, is left alone), and
    never when undecided."""
    return _factored_completely(gold, deadline) is True and _factored_completely(pred, deadline) is False


def _top_terms(s: str) -> int:
    """Number of top-level terms of an expression (``x(x+2)+(x+2)`` has 2, ``(x+1)(x+2)`` 1)."""
    return len(_split_top(s.lstrip("+-"), seps="+-", words=False))


# --------------------------------------------------------------------------------------
# What the task demands: forms the question requires (docs/reward_policy.md, tools/reward_policy.py)
# --------------------------------------------------------------------------------------
#: Question phrases that require a form, by demand. "ordered" and "normalised" change the
#: comparison (answers_match); the others name forms: an answer of the right value is refused
#: when it has a feature the demand forbids (_DEMAND_FORBIDS) and the gold has not.
_DEMAND_RES = (
    ("ordered", re.compile(
        r"\bin\s+(?:increasing|decreasing|ascending|descending|numerical)\s+order|"
        r"\b(?:least|smallest|lowest)\s+to\s+(?:greatest|largest|highest)\b|"
        r"\b(?:greatest|largest|highest)\s+to\s+(?:least|smallest|lowest)\b|\bin\s+order\s+from\b", re.I)),
    ("rationalised", re.compile(r"\brationali[sz]|\b(?:integer|rational)\s+denominator", re.I)),
    ("radical form", re.compile(r"\bsimplest\s+radical\s+form|\bin\s+the\s+form\s*\$[^$]{0,60}\\sqrt", re.I)),
    ("common fraction", re.compile(r"\b(?:common|improper)\s+fractions?\b|\bfractions?\s+in\s+(?:simplest|lowest)|"
                                   r"\bin\s+the\s+form\s*\$\s*-?\s*\\d?frac\s*\{?\s*[a-z]\s*\}?\s*\{?\s*[a-z]\s*\}?\s*\$|"
                                   r"\b(?:express|expressed|give|convert|enter|leave|answer)\b[^.?!$]{0,40}?"
                                   r"\b(?:as|to|into)\s+(?:an?\s+)?(?:simple\s+|proper\s+)?fractions?\b", re.I)),
    ("lowest terms", re.compile(r"\blowest\s+terms|\bsimplest\s+form|\breduced\s+fraction", re.I)),
    ("mixed number", re.compile(r"\bmixed\s+numbers?\b", re.I)),
    ("decimal", re.compile(r"\b(?:as|to|in)\s+(?:an?\s+)?(?:terminating\s+)?decimals?\b"
                           r"(?!\s+(?:point|places?|digits?|expansion|representation|equivalent|notation))|"
                           r"\bdecimal\s+form\b|\(\s*as\s+a\s+decimal\s*\)", re.I)),
    ("exponential", re.compile(r"\b(?:exponential|scientific)\s+notation|\bas\s+a\s+power\s+of\b", re.I)),
    ("normalised", re.compile(r"\\gcd\s*\(\s*\|\s*A\s*\|", re.I)),
    ("list", re.compile(r"\bseparated\s+by\s+commas|\bcomma[-\s]separated|\benter\s+all\b", re.I)),
    ("percent", re.compile(r"\b(?:as|in)\s+(?:a\s+)?percent(?:age)?\b|\bwhat\s+percent", re.I)),
    ("simplified", re.compile(r"\bsimplif(?:y|ied)\b", re.I)),
    ("solved for y", re.compile(r"\bin\s+the\s+form\s*[\"'`]*\s*\$?\s*y\s*=", re.I)),
    ("interval", re.compile(r"\binterval\s+notation|\b(?:as|in)\s+(?:an?\s+)?(?:interval|union\s+of\s+intervals)\b",
                            re.I)),
)
#: Words in a demand's clause that undo it: "(not mixed numbers or decimals)".
_DEMAND_NEGATION_RE = re.compile(r"\b(?:not|no|nor|never|instead\s+of|rather\s+than|without)\b", re.I)
#: Form words: a clause that offers two of them joined by "or" demands neither ("as a decimal or a fraction").
_FORM_WORD_RE = re.compile(r"\b(?:fraction|decimal|mixed\s+number|integer|percent|radical|notation)", re.I)
_CLAUSE_END_RE = re.compile(r"[.?!;:()\n]")


def _demand_stated(q: str, m) -> bool:
    """A demand phrase found in a question is a demand unless its clause negates it or offers
    another form as an alternative."""
    start = max((e.end() for e in _CLAUSE_END_RE.finditer(q, max(m.start() - 80, 0), m.start())),
                default=max(m.start() - 80, 0))
    after = _CLAUSE_END_RE.search(q, m.end())
    clause = q[start:after.start() if after else len(q)]
    if _DEMAND_NEGATION_RE.search(q[start:m.start()]):
        return False
    return not (re.search(r"\bor\b", clause) and len({w.lower() for w in _FORM_WORD_RE.findall(clause)}) > 1)


@lru_cache(maxsize=4096)
def question_demands(question: Optional[str]) -> frozenset:
    """The required forms a problem states (names of _DEMAND_RES), read from its text (cached:
    a step scores n responses to each problem)."""
    if not question:
        return frozenset()
    q = question[:6000]
    return frozenset(name for name, rx in _DEMAND_RES if any(_demand_stated(q, m) for m in rx.finditer(q)))


_FRAC_OPEN_RE = re.compile(r"\\frac\s*\{")
_SLASH_SQRT_RE = re.compile(r"/\s*(?:\([^()]*\\sqrt|[\d.]*\\sqrt)")
_SQRT_INT_RE = re.compile(r"\\sqrt\{(\d{1,8})\}")
_INT_FRAC_RE = re.compile(r"\\frac\{-?(\d{1,12})\}\{(\d{1,12})\}|(?<![\d.}])(\d{1,12})/(\d{1,12})(?![\d.])")
#: A decimal with a fractional part (57.0 is the integer 57 written with a zero, not a decimal form).
_DECIMAL_FORM_RE = re.compile(r"\d?\.(?=\d*[1-9]|\d*\\(?:overline|bar|dot))")
_MIXED_FORM_RE = re.compile(r"(?<![\w.}^_{])\d+\\frac\{(\d+)\}\{(\d+)\}")
_FRACTION_FORM_RE = re.compile(r"\\frac|\d\s*/\s*\d")


def _radical_denominator(s: str) -> bool:
    """A radical in a denominator: ``\\frac{1}{\\sqrt{2}}``, ``3/\\sqrt{5}``, ``1/(2\\sqrt{3})``."""
    if _SLASH_SQRT_RE.search(s):
        return True
    for m in _FRAC_OPEN_RE.finditer(s):
        num_end = _match_brace(s, m.end() - 1)
        if num_end < 0 or s[num_end + 1:num_end + 2] != "{":
            continue
        den_end = _match_brace(s, num_end + 1)
        if den_end > 0 and "\\sqrt" in s[num_end + 1:den_end]:
            return True
    return False


def _square_factor(s: str) -> bool:
    """A square root of an integer with a square factor: ``\\sqrt{8}``, ``\\sqrt{9}``."""
    for m in _SQRT_INT_RE.finditer(s):
        n, k = int(m.group(1)), 2
        while k * k <= n:
            if n % (k * k) == 0:
                return True
            k += 1
    return False


def _unreduced_fraction(s: str) -> bool:
    """An integer fraction not in lowest terms: ``\\frac{6}{8}``, ``6/8``."""
    for m in _INT_FRAC_RE.finditer(s):
        a, b = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
        if int(b) > 1 and math.gcd(int(a), int(b)) > 1:
            return True
    return False


def _mixed_number(s: str) -> bool:
    """A mixed number: an integer before a proper integer fraction, ``6\\frac{1}{5}``."""
    return any(int(m.group(1)) < int(m.group(2)) for m in _MIXED_FORM_RE.finditer(s))


def _improper_fraction(s: str) -> bool:
    """An integer fraction of absolute value above 1 that is not the tail of a mixed number."""
    for m in _INT_FRAC_RE.finditer(s):
        if m.group(1) and s[:m.start()][-1:].isdigit():
            continue  # 6\\frac{1}{5}: part of a mixed number
        a, b = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
        if int(a) > int(b) > 1:
            return True
    return False


def _unsolved_for_y(s: str) -> bool:
    """An equation that is not y on one side and an expression without y on the other:
    ``2x + y = 0`` (``-2x = y`` is solved, read right to left)."""
    sides = _top_level_eq(s)
    return len(sides) == 2 and not any(a == "y" and "y" not in _letters(b) for a, b in (sides, sides[::-1]))


#: Form features of a normalised answer, by name (each a yes/no on the canonical string and
#: its recorded percent sign).
_FORM_FEATURES = {
    "radical in a denominator": lambda n: _radical_denominator(n.s),
    "square factor under a root": lambda n: _square_factor(n.s),
    "unreduced fraction": lambda n: _unreduced_fraction(n.s),
    "decimal": lambda n: bool(_DECIMAL_FORM_RE.search(n.s)),
    "mixed number": lambda n: _mixed_number(n.s),
    "improper fraction": lambda n: _improper_fraction(n.s),
    "fraction": lambda n: bool(_FRACTION_FORM_RE.search(n.s)),
    "percent": lambda n: n.pct,
    "no exponent": lambda n: "^" not in n.s and bool(n.s),
    "inequality": lambda n: bool(_INEQ_RE.search(n.s)),
    "equation not solved for y": lambda n: _unsolved_for_y(n.s),
}
#: What each stated form forbids. Source: MATH (the form the question asks for is the answer;
#: its graders refuse 0.28 for "a common fraction" 7/25 and 31/5 for "a mixed number" 6 1/5).
_DEMAND_FORBIDS = {
    "rationalised": ("radical in a denominator",),
    "radical form": ("radical in a denominator", "square factor under a root", "decimal"),
    "simplified": ("unreduced fraction", "square factor under a root", "radical in a denominator"),
    "interval": ("inequality",),
    "solved for y": ("equation not solved for y",),
    "common fraction": ("unreduced fraction", "decimal", "mixed number", "percent"),
    "lowest terms": ("unreduced fraction",),
    "mixed number": ("improper fraction", "decimal", "percent"),
    "decimal": ("fraction", "percent"),
    "exponential": ("no exponent",),
}


def _form_violation(pred: str, gold: str, demands: frozenset) -> Optional[str]:
    """The form an answer of the right value has and a demand of the question forbids (the
    gold has not), as "demand: feature"; else None."""
    names = sorted(demands & set(_DEMAND_FORBIDS))
    if not names:
        return None
    pn, gn = _normalise(pred), _normalise(gold)
    for name in names:
        for feature in _DEMAND_FORBIDS[name]:
            check = _FORM_FEATURES[feature]
            if check(pn) and not check(gn):
                return name + ": " + feature
    return None


_QUESTION_MOD_RE = re.compile(r"(?:\\[pb]?mod(?![A-Za-z])|\bmod(?:ulo)?\b)\s*\{?\s*(\d+)")


@lru_cache(maxsize=4096)
def _question_modulus(question: str) -> Optional[str]:
    """The one modulus a problem works with ("$3n \\equiv 2 \\pmod{11}$", "modulo 11"), else None
    (none, or several: a system of congruences may be answered modulo their product)."""
    moduli = set(_QUESTION_MOD_RE.findall(question[:6000]))
    return moduli.pop() if len(moduli) == 1 else None


def _foreign_modulus(pred: str, gold: str, question: Optional[str]) -> bool:
    """A congruence answered modulo another number than the question's one modulus (and the gold's)."""
    mod = _normalise(pred).mod if question and "mod" in pred else None
    return bool(mod and mod.isdigit() and mod != _normalise(gold).mod
                and _question_modulus(question) not in (None, mod))


_ASKED_UNIT_RE = re.compile(r"\b(?=(?:in|how\s+many)\s+((?:square\s+|cubic\s+)?[A-Za-z]+(?:\s+per\s+[A-Za-z]+)?))",
                            re.I)  # a lookahead: "in how many seconds" holds two phrases


@lru_cache(maxsize=4096)
def _question_units(question: str) -> frozenset:
    """The units of measure a problem asks its answer in ("How much, in dollars, ...", "the
    height in centimeters", "how many seconds"), canonical (_unit_key)."""
    keys = {_unit_key(m.group(1)) for m in _ASKED_UNIT_RE.finditer(question[:6000])}
    return frozenset(k for k in keys if k.split()[-1] in _MEASURES)


def _foreign_unit(pred: str, gold: str, question: Optional[str]) -> bool:
    """An answer in a unit of measure that is neither the gold's nor one the question asks
    for, when the question asks for one: 2.50 cents for "how much, in dollars". A rate's unit
    may lose its "per ..." ("12 hours" for "how many hours per week")."""
    unit = _normalise(pred).unit if question else None
    if not unit or unit.split()[-1] not in _MEASURES or unit == _normalise(gold).unit:
        return False
    asked = _question_units(question)
    return bool(asked) and unit not in asked | {a.split(" per ")[0] for a in asked}


#: Option labels in a problem, three layouts: "(A)" (also in \\textbf{}, \\text{}, \\mathrm{}),
#: a letter opening a line ("A. 67.332", "B) $f(0)=0$", "$\\bullet$ C. $34$ dollars") and a
#: letter given a meaning ('Enter "C" for circle, "P" for parabola').
_OPTION_LABEL_RES = (
    re.compile(r"(?:\\(?:textbf|text|mathrm|textrm)\s*\{\s*)?\(\s*([A-J])\s*\)\s*\}?"),
    re.compile(r"(?m)^[ \t]*(?:\$?\\bullet\$?|[-*\u2022])?[ \t]*(?:\\textbf\{)?([A-J])[.):]\}?(?=[ \t$])"),
)
_OPTION_MEANING_RE = re.compile(r"[\"'`]{1,2}([A-Z])[\"'`]{1,2}\s+(?:for|if|means)\s+(?:an?\s+|the\s+)?"
                                r"([A-Za-z][A-Za-z -]*[A-Za-z])")
_OPTION_JUNK_RE = re.compile(r"\\q?quad(?![A-Za-z])|\\\\|\$|\\[ ,;!]|\\hspace\s*\{[^{}]*\}|~")


def _option_run(q: str, rx) -> list:
    """The last run of labels A, B, C, ... in order (at least three) that rx finds in q."""
    run: list = []
    for m in rx.finditer(q):
        if len(run) < 10 and m.group(1) == "ABCDEFGHIJ"[len(run)]:
            run.append(m)
        elif m.group(1) == "A":
            run = [m]
    return run if len(run) >= 3 else []


@lru_cache(maxsize=4096)
def question_options(question: Optional[str]) -> dict:
    """The options a problem lists, letter -> value text: a run of at least three labels
    A, B, C, ... in order in one of _OPTION_LABEL_RES's layouts (the value runs to the next
    label; the last one to the end of its line or math span), or at least two letters given a
    meaning (_OPTION_MEANING_RE). Empty when the problem lists none. Cached: do not modify
    the result."""
    if not question:
        return {}
    q = question[:6000]
    out = {}
    for rx in _OPTION_LABEL_RES:
        run = _option_run(q, rx)
        for i, m in enumerate(run):
            chunk = q[m.end():run[i + 1].start() if i + 1 < len(run) else len(q)]
            if i + 1 == len(run):
                chunk = chunk.lstrip(" \t")  # the last value: its line, or its math span
                chunk = chunk.split("\n", 1)[0] if chunk[:1] == "$" else re.split(r"\$|\n|\\\]", chunk, maxsplit=1)[0]
            value = _OPTION_JUNK_RE.sub(" ", chunk).strip().rstrip(".,;")
            if value and len(value) <= 200:
                out[m.group(1)] = value
        if len(out) >= 3:
            return out
        out = {}
    meanings = {m.group(1): m.group(2).strip() for m in _OPTION_MEANING_RE.finditer(q)}
    return meanings if len(meanings) >= 2 else {}


_OPTION_LETTER_RE = re.compile(r"^[(\[]?([A-Za-z])[)\]]?$")
_LETTER_SEP_RE = re.compile(r"\s*(?:,|;|\band\b|&)\s*|\s+")


def _option_letter(n: "_Norm", options: dict) -> Optional[str]:
    """The option an answer names by its letter alone ("D", "(d)", "\\text{(D)}"), else None."""
    if n.choice and not n.s:
        return n.choice if n.choice in options else None
    m = _OPTION_LETTER_RE.match(n.s)
    return m.group(1).upper() if m and m.group(1).upper() in options else None


def _option_is_value(text: str) -> bool:
    """An option the reward can compare with a value written after its letter: a value or a
    word answer, not a number with a task in words ("14.45001 rounded to the nearest tenth",
    whose value the letter's follower computes)."""
    n = _normalise(text)
    return n.text or not (re.search(r"\d", n.s) and re.search(r"[A-Za-z]{2,}", _COMMAND_RE.sub("", n.s)))


def _option_equal(pred: str, gold: str, options: dict, deadline: float) -> bool:
    """Multiple choice with the options known (question_options): the option's value for its
    letter (gold a letter: exactly the gold's option has the answer's value), the letter for
    its value (gold a value: the answered letter's option equals the gold), and a block of
    option letters in any separation ("A, C, F" for "ACF", order kept)."""
    pn, gn = _normalise(pred), _normalise(gold)
    gl, pl = _option_letter(gn, options), _option_letter(pn, options)
    if gl:
        if pl or pn.choice:
            return False  # a letter against a letter: decided by answers_match
        letters = [k for k, v in sorted(options.items()) if answers_match(pred, v, deadline)]
        return letters == [gl]
    if pl:
        value = options.get(pl)
        return value is not None and answers_match(value, gold, deadline)
    block = gn.s.upper()
    if len(block) >= 2 and block.isalpha() and len(set(block)) == len(block) and set(block) <= set(options):
        letters = _LETTER_SEP_RE.sub("", pn.s)
        return letters.isalpha() and letters.upper() == block
    return False


# ======================================================================================
# 4. Equivalence pipeline. Steps (a) unicode and (b) wrappers, labels and units: one
#    answer string -> its canonical string plus the decorations it carried
# ======================================================================================
class _Norm:
    """A normalised answer: ``s`` the canonical string; ``pct`` it carried a percent sign;
    ``unit`` a trailing unit (canonical words, e.g. "square inch", "pm") or None; ``text`` it
    was one \\text{...} phrase; ``base`` a base subscript; ``choice`` a leading "(A)" label;
    ``mod`` the modulus of a congruence (``\\equiv 8 \\pmod{13}``)."""

    __slots__ = ("s", "pct", "unit", "text", "base", "choice", "mod")

    def __init__(self, s: str, pct: bool = False, unit: Optional[str] = None, text: bool = False,
                 base: Optional[str] = None, choice: Optional[str] = None, mod: Optional[str] = None):
        self.s, self.pct, self.unit, self.text, self.base, self.choice = s, pct, unit, text, base, choice
        self.mod = mod

    def same(self, other: "_Norm") -> bool:
        """Identical canonical strings with compatible decorations."""
        return self.s == other.s and self.pct == other.pct and _decorations_compatible(self, other)


def _decorations_compatible(p: "_Norm", g: "_Norm") -> bool:
    """Units, base subscripts and a congruence's modulus are optional (MATH graders accept "5"
    for "5 cm", "1011" for "1011_2", "8" for "\\equiv 8 \\pmod{13}"), but two different ones
    are a different answer."""
    if p.unit and g.unit and p.unit != g.unit and not ({p.unit, g.unit} & _GENERIC_UNITS):
        return False
    return not (p.base and g.base and p.base != g.base) and not (p.mod and g.mod and p.mod != g.mod)


# (a) Unicode maths as models write it -> LaTeX. Hand-written: latex2sympy2_extended's
# normaliser knows none of these characters, and this runs on every answer (a table).
_UNICODE = {"π": "\\pi ", "∞": "\\infty ", "−": "-", "–": "-", "×": "\\times ", "·": "\\cdot ", "⋅": "\\cdot ",
            "∙": "\\cdot ", "÷": "\\div ", "≤": "\\leq ", "≥": "\\geq ", "≠": "\\ne ", "∪": "\\cup ", "∩": "\\cap ",
            "±": "\\pm ", "∓": "\\mp ", "∈": "\\in ", "≈": "\\approx ", "≡": "\\equiv ", "λ": "\\lambda ", "…": "\\ldots ", "θ": "\\theta ", "α": "\\alpha ",
            "β": "\\beta ", "°": "^\\circ ", "\u00a0": " ", "\u2009": " ", "\u202f": " "}
_UNICODE_CHAR_RE = re.compile("[" + "".join(_UNICODE) + "]")
_SUPERSCRIPT = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻", "0123456789+-")
_SUPERSCRIPT_RE = re.compile("[⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻]+")
_VULGAR = {"½": "1}{2", "⅓": "1}{3", "⅔": "2}{3", "¼": "1}{4", "¾": "3}{4", "⅕": "1}{5", "⅖": "2}{5", "⅗": "3}{5",
           "⅘": "4}{5", "⅙": "1}{6", "⅚": "5}{6", "⅛": "1}{8", "⅜": "3}{8", "⅝": "5}{8", "⅞": "7}{8"}
_VULGAR_RE = re.compile("[" + "".join(_VULGAR) + "]")
#: √ takes the next group, number, command or letter: √21/14 -> \sqrt{21}/14, ∜8 -> \sqrt[4]{8}
_ROOT_RE = re.compile(r"([√∛∜])\s*(?:\(([^()]*)\)|\{([^{}]*)\}|(\d+(?:\.\d+)?|\\[A-Za-z]+|[A-Za-z]))")
_ROOT_INDEX = {"√": "", "∛": "[3]", "∜": "[4]"}
_NON_ASCII_RE = re.compile(r"[^\x00-\x7f]")


def _unicode_to_latex(s: str) -> str:
    """Step (a): ``7√5`` -> ``7\\sqrt{5}``, ``5π/3 − 2√3`` -> ``5\\pi/3 - 2\\sqrt{3}``, ``8x⁹`` ->
    ``8x^{9}``, ``1¼`` -> ``1\\frac{1}{4}`` (a mixed number), ``(−∞, 8) ∪ ...`` -> LaTeX."""
    if not _NON_ASCII_RE.search(s):
        return s
    s = _UNICODE_CHAR_RE.sub(lambda m: _UNICODE[m.group(0)], s)
    s = _ROOT_RE.sub(lambda m: "\\sqrt%s{%s}" % (_ROOT_INDEX[m.group(1)], next(
        g for g in m.groups()[1:] if g is not None).strip()), s)
    s = _SUPERSCRIPT_RE.sub(lambda m: "^{%s}" % m.group(0).translate(_SUPERSCRIPT), s)
    return _VULGAR_RE.sub(lambda m: "\\frac{%s}" % _VULGAR[m.group(0)], s)


# (b) Wrappers, labels and units.
_SUBS = (
    ("\\!", ""), ("{,}", ","), ("\\dfrac", "\\frac"), ("\\tfrac", "\\frac"), ("\\cfrac", "\\frac"),
    ("\\dbinom", "\\binom"), ("\\tbinom", "\\binom"), ("\\le ", "\\leq "), ("\\ge ", "\\geq "),
    ("\\leqslant", "\\leq"), ("\\geqslant", "\\geq"), ("\\lt", "<"), ("\\gt", ">"), ("\\cdotp", "\\cdot"),
    ("\\dots", "\\ldots"), ("\\cdots", "\\ldots"), ("...", "\\ldots"), ("\\neq", "\\ne"), ("\\infin", "\\infty"),
    ("{:}", ":"), ("\\langle", "("), ("\\rangle", ")"), ("\\varnothing", "\\emptyset"),
)
_BRACELESS_FRAC_RE = re.compile(r"\\frac\s*(\d|\\[A-Za-z]+)\s*(\d|\\[A-Za-z]+)")  # \frac12, \frac\pi3
_BRACELESS_FRAC2_RE = re.compile(r"\\frac\s*\{([^{}]*)\}\s*(\d)")
_BRACELESS_FRAC3_RE = re.compile(r"\\frac\s*(\d)\s*\{")  # \frac 1{72}
_BRACELESS_SQRT_RE = re.compile(r"\\sqrt\s*(\d|[A-Za-z](?![A-Za-z]))")
_ONE_TOKEN_EXP_RE = re.compile(r"\^\s*\{\s*(\w)\s*\}")  # x^{2} -> x^2
_STYLE_RE = re.compile(
    r"\\(?:displaystyle|textstyle|scriptstyle|left|right|bigl|bigr|Bigl|Bigr|big|Big|bigg|Bigg)(?![A-Za-z])\s*|"
    r"\\(?:text)?color\s*\{[^{}]*\}\s*")  # colours: \\color{red}5, \\textcolor{blue}{5}
_SPACE_CMD_RE = re.compile(r"(?<!\\)\\[,;: ]|\\q?quad(?![A-Za-z])|~")
_LE_GE_RE = re.compile(r"\\(le|ge)(?![A-Za-z])")
_BRACKETED_MATRIX_RE = re.compile(r"^[\[(]\s*(\\begin\{([a-zA-Z]*matrix|array)\}.*\\end\{\2\})\s*[\])]$", re.S)
_PCT_RE = re.compile(r"\\?%")
_DEG_RE = re.compile(r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|\\circ|\\degree(?![A-Za-z])|\^\s*\{\s*o\s*\}")
_DOLLAR_RE = re.compile(r"\\\$|\$")
_WRAP_RE = re.compile(r"\\(text|textbf|textit|textrm|textnormal|mathrm|mathbf|mathit|mathsf|mathnormal|"
                      r"mbox|boxed|fbox|bm|boldsymbol|emph)\s*\{")
_TEXTISH = frozenset({"text", "textbf", "textit", "textrm", "textnormal", "mbox", "mathrm", "emph"})
#: One or more trailing text pieces, then an optional power: "32\text{ cm}^2", "5\text{ sq}\text{ in}".
_TRAIL_TEXT_UNIT_RE = re.compile(
    r"^(?P<v>.*?[^\s{(\[])\s*(?P<u>(?:\\(?:text|mbox|mathrm|textrm|textnormal|textit|operatorname|rm)\s*\{[^{}]*\}\s*)+)"
    r"(?:\^\s*\{?\s*(?P<p>[23])\s*\}?)?\s*\.?$")
_UNIT_WORDS_RE = re.compile(r"^[A-Za-z][A-Za-z .]*$")
_TRAIL_WORD_UNIT_RE = re.compile(
    r"^(?P<l>(?:[A-Za-z]|\\[A-Za-z]+)(?:_\{?\w+\}?)?\s*=\s*)?(?P<v>[-+]?[\d.,]*\d)\s+"
    r"(?P<u>[A-Za-z]{2,}(?: [A-Za-z]+)*)(?:\^\{?(?P<p>[23])\}?)?\.?$")
#: Number words: a cardinal in words (step b7) becomes digits ("twenty-one" -> 21).
_SMALL_NUMBERS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
                  "sixteen seventeen eighteen nineteen").split()
_NUMBER_WORDS = {w: i for i, w in enumerate(_SMALL_NUMBERS)}
_NUMBER_WORDS.update({w: 10 * (i + 2) for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split())})
_NUMBER_SCALES = {"hundred": 100, "thousand": 1000, "million": 10 ** 6, "billion": 10 ** 9}
_NUMBER_WORD_RE = re.compile(r"^(?:(?:" + "|".join(list(_NUMBER_WORDS) + list(_NUMBER_SCALES)) +
                             r"|and|a)(?:[\s-]+|$))+", re.I)
#: A sentence that states a count: "There are five digits", "The answer is 12 cm" (one text phrase).
_COUNT_SENTENCE_RE = re.compile(r"^(?:[A-Za-z][A-Za-z ,'-]*\s)?(?:is|are|was|were|equals?)\s+(?P<rest>[A-Za-z0-9][A-Za-z0-9 .-]*?)\.?$",
                                re.I)
_COUNT_RE = re.compile(r"^\d+(?: [A-Za-z]+){0,2}$")
#: Words after a cardinal that make it something else than a count ("one of them", "two less").
_NOT_A_UNIT_RE = re.compile(r"\b(?:of|less|more|than|or|and|not|times|per|over|out|plus|minus|half|third|"
                            r"quarter|fifths?|sixths?|eighths?|tenths?|hundredths?|thousandths?)\b", re.I)
#: A leading label: "\text{The sum is } 45", "\text{Directrix: } y = 3", "Remainder: 7".
_LABEL_RE = re.compile(
    r"^(?:\\(?:text|textbf|mbox|textrm|mathrm)\s*\{\s*(?P<t>[A-Za-z][A-Za-z ,'-]*?(?:\sis|\sare|\sequals?|"
    r"\swas|\swere|:|=))\s*\}|(?P<w>[A-Za-z][A-Za-z ]+):)\s*(?P<rest>\S.*)$", re.S)
#: A choice label before a value: "(A) 12", "[B] 7"; lower case only before a space ("(a)(a+1)" is a product).
_CHOICE_LABEL_RE = re.compile(r"^(?:[(\[]([A-E])[)\]]\s*|[(\[]([a-e])[)\]]\s+|([A-E])(?::\s*|[.)]\s+))"
                              r"(?!.*\([A-Ea-e]\)|.*\b(?:and|or)\b)(?P<rest>\S.*)$",
                              re.S)
#: "Option E", "choice (b)": the word before an option letter.
_OPTION_WORD_RE = re.compile(r"^(?:option|choice|answer)\s*:?\s*(?=[(\[]?[A-Ea-e][)\]]?$)", re.I)
_THOUSANDS_SEP_RE = re.compile(r"(?<=\d),\s*\\!\s*(?=\d)")  # MATH's "11,\! 111" is one number
#: A remark in words in brackets after a value ("5 (the smallest)", "x = 5 (only positive root)").
_REMARK_RE = re.compile(r"^(?P<v>.*[\d}\])])\s+\((?P<r>[A-Za-z]{2,}(?:[ ,'-]+[A-Za-z]+){0,7})\)\.?$")
#: Words that make such a remark a hedge or an approximation, not a comment.
_HEDGE_REMARK_RE = re.compile(r"\b(?:approx\w*|about|roughly|around|nearly|estimat\w*|round\w*|or|maybe|perhaps|possibly|"
                              r"if|unless|assum\w*|when|not|either|guess\w*|likely|probably|hundreds?|thousands?|"
                              r"millions?|billions?|dozens?|percent|times|squared|cubed|per|units?\s+of)\b", re.I)
_ORDINAL_RE = re.compile(r"(\d)\s*(?:\^\s*\{?\s*)?(?:st|nd|rd|th)\b\}?")
_TIME_RE = re.compile(r"^(\d{1,2}(?::\d{2}){1,2})\s*(?:([ap])\s*\.?\s*m\.?)?$", re.I)
#: The zero vector in bold or with an arrow (``\\mathbf{0}``, ``\\vec 0``): canonical ``\\vec{0}``.
_ZERO_VECTOR_RE = re.compile(r"^\\(?:mathbf|boldsymbol|bm|vec|overrightarrow)\s*(?:\{\s*0\s*\}|0)$")
_ZERO_VECTOR = "\\vec{0}"
_REALS_RE = re.compile(r"^(?:\\mathbb\{R\}|\\mathbb R|\\R|\\text\{all real numbers\}|all real numbers|\\reals)$")
#: A membership prefix: "x \\in", "\\lambda \\in", "a_1 \\in" before a set or interval.
#: A name: a letter or command, a subscript, primes, arguments: ``x``, ``a_1``, ``f'``, ``F(x)``,
#: ``\\lambda``. One pattern for every step that tells a name from a value (membership and
#: relation prefixes, the variable of an inequality, the left side of an assignment).
_NAME = r"(?:[A-Za-z]|\\[A-Za-z]+)(?:_\{?\w+\}?)?'*(?:\([A-Za-z](?:,[A-Za-z])*\))?"
_IN_PREFIX_RE = re.compile(r"^" + _NAME + r"\s*\\in(?![A-Za-z])\s*")
#: A congruence: "x \\equiv 8 \\pmod{13}", "8 \\pmod{13}", "8 (mod 13)", "8 \\bmod 13".
_EQUIV_RE = re.compile(r"^.*?\\equiv(?![A-Za-z])\s*", re.S)
_MOD_RE = re.compile(r"\s*(?:\\pmod\s*\{?\s*(\d+|[A-Za-z])\s*\}?|\(\s*(?:\\bmod|\\mod|mod)(?![A-Za-z])\s*\{?\s*(\d+|[A-Za-z])\s*\}?\s*\)|"
                     r"\\bmod\s*\{?\s*(\d+|[A-Za-z])\s*\}?|\\mod\s*\{?\s*(\d+|[A-Za-z])\s*\}?)$")
#: A base subscript in any brace style: 1011_2, 1011_{2}, (1011)_{(2)}, 1011_{\\text{two}} (wrappers gone).
_BASE_SUB_RE = re.compile(r"^\(?([0-9A-Za-z]+(?:\.[0-9A-Za-z]+)?)\)?_\{?\(?(\d{1,2}|[a-z]{3,9})\)?\}?$")
#: A base named in words after the numeral: "141 in base 13", "1112112 (base 3)", "7602 base-8".
_BASE_WORDS_RE = re.compile(r"^(?P<v>[0-9A-Za-z]+(?:\.[0-9A-Za-z]+)?)\s*(?P<o>\()?\s*(?:in\s+)?base[\s-]*"
                            r"(?P<b>\d{1,2}|[a-z]{3,9})\s*(?(o)\))$", re.I)
_BASE_WORDS = {"two": "2", "three": "3", "four": "4", "five": "5", "six": "6", "seven": "7", "eight": "8",
               "nine": "9", "ten": "10", "eleven": "11", "twelve": "12", "sixteen": "16"}
_THOUSANDS_RE = re.compile(r"^[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
_NAME_EQ_RE = re.compile(r"^[A-Za-z]\s*=\s*")  # "N = 14,916": the number after a name
_GROUP_THOUSANDS_RE = re.compile(r"\{(\d{1,3}(?:,\d{3})+(?:\.\d+)?)\}")
_WS_RE = re.compile(r"\s+")
_SPACE_DROP_RE = re.compile(r"(?<![A-Za-z]) | (?![A-Za-z])")
_GENERIC_UNITS = frozenset({"unit", "square unit", "cubic unit"})
def _match_brace(s: str, i: int) -> int:
    """Index of the brace closing the group opened at s[i] == '{', or -1."""
    depth = 0
    j = i
    n = len(s)
    while j < n:
        c = s[j]
        if c == "\\":
            j += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return j
        j += 1
    return -1


_ESCAPED_RE = re.compile(r"\\.", re.S)
_NOT_BRACE_RE = re.compile(r"[^{}]+")
_BRACE_STEP = bytes.maketrans(b"{}", b"\x01\xff")  # +1 / -1 as signed bytes
_WS_CHARS = " \t\n\r\f\v"


def strip_grouping_braces(s: str) -> str:
    """Remove braces that wrap the whole answer, any number of layers: ``{{{4}}}`` -> ``4``
    (MATH convention: a brace group is grouping only, never a set; sets are ``\\{...\\}``).

    With ``k`` opening braces in front, ``k'`` closing braces at the end and the depth walk
    of the core between them (lowest prefix depth ``m`` <= 0, final depth ``f``), the core
    plus both runs is one balanced unit iff ``k + f == k'``, and then exactly the outer
    ``k + m`` layers enclose the whole answer. The walk is C-level (regex, bytes.translate,
    itertools.accumulate), so 200,000 nested braces cost milliseconds, with no recursion.
    Escaped braces ``\\{ \\}`` are not groups; whitespace between layers is dropped; an
    unbalanced string comes back stripped of surrounding whitespace only. Source: the held-out
    review (timeout_bomb-h004: braces around an answer do not change its value)."""
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
        if k_open != k_close:
            return t
        return ""
    braces = _NOT_BRACE_RE.sub("", _ESCAPED_RE.sub("", core)).encode("ascii").translate(_BRACE_STEP)
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
    """Remove formatting wrappers (\\text{..}, \\mathbf{..}, \\boxed{..}, ...) keeping their
    content; also report whether the whole answer was one text wrapper (a word answer)."""
    whole_text = False
    m0 = _WRAP_RE.match(s)
    if m0 and m0.group(1) in _TEXTISH:
        close = _match_brace(s, m0.end() - 1)
        whole_text = close == len(s) - 1
    for _ in range(32):
        m = _WRAP_RE.search(s)
        if not m:
            break
        close = _match_brace(s, m.end() - 1)
        if close < 0:
            break
        s = s[:m.start()] + s[m.end():close] + s[close + 1:]
    return s, whole_text

_UNIT_ALIASES = {
    "inches": "inch", "in": "inch", "feet": "foot", "ft": "foot", "yd": "yard", "mi": "mile",
    "centimeter": "cm", "centimetre": "cm", "meter": "m", "metre": "m", "kilometer": "km",
    "millimeter": "mm", "hr": "hour", "hrs": "hour", "h": "hour",
    "min": "minute", "mins": "minute", "sec": "second", "secs": "second", "s": "second",
    "lb": "pound", "lbs": "pound", "oz": "ounce", "mph": "mile per hour", "kg": "kilogram", "g": "gram",
}
_UNIT_POWERS = {"sq": "2", "square": "2", "squared": "2", "cu": "3", "cubic": "3", "cubed": "3"}
#: Units of measure (canonical, without a power): a question that asks "in dollars" or "in
#: centimeters" names one, and an answer in another one of them states another quantity.
_MEASURES = frozenset(_UNIT_ALIASES.values()) | frozenset(
    "dollar cent degree radian day week month year liter gallon".split())


def _unit_key(u: str, power: Optional[str] = None) -> str:
    """Canonical unit: lower case, singular, abbreviations expanded, the power as a word
    ("in^2", "sq in", "square inches", "inches squared" -> "square inch"; "p.m." -> "pm")."""
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
    """Steps (a) and (b): the canonical form of one answer under MATH's conventions (cached:
    golds repeat n times). Drops presentation only and records what it drops, in order:

    (a) unicode to LaTeX; (b1) presentation: grouping braces, \\dfrac/\\tfrac, \\left/\\right,
    colours, spacing commands, angle brackets, brackets around a matrix environment; (b2)
    percent and dollar signs, the zero vector in any notation (``\\mathbf{0}``, ``\\vec 0``);
    (b3) trailing units in any wrapper (\\text, \\mathrm, \\operatorname, after ``\\ `` or
    ``\\,``), several text pieces and a power allowed, also
    after a name (``r = 3 \\text{ units}``) and on every item of a list; (b4) text and font
    wrappers (a whole \\text{...} phrase is recorded as text), then a remark in words in
    brackets after the value (``5 (the smallest)``; not one that hedges or approximates) and
    ordinal suffixes (``June 20th``); (b5) leading labels ("The sum is", "Directrix:",
    "Option") and a choice letter "(A)"/"[a]" in front of a value; (b7) number words
    (``twenty-one digits`` -> ``21`` with the unit word, ``one half`` -> ``\\frac{1}{2}``); (b6)
    degree signs (a unit), a time of day's a.m./p.m. (a unit; ``4 p.m.`` is ``4:00``), a
    membership prefix before a name (``\\lambda \\in``, ``F(x) \\in``), a congruence
    (``x \\equiv 8 \\pmod{13}`` -> ``8``, modulus 13 or a letter), spaces, trailing periods,
    thousands separators, base subscripts in any brace style and with a radix point
    (``1011_2``, ``(1011)_{(2)}``, ``1011_{\\text{two}}``, ``141 in base 13`` -> digits and
    base), parentheses around one whole item (``(4x-7)`` -> ``4x-7``)."""
    s = _unicode_to_latex(raw.strip())
    if "\\!" in s:
        s = _THOUSANDS_SEP_RE.sub(",", s)
    if s.startswith("{"):
        s = strip_grouping_braces(s)
    for a, b in _SUBS:
        if a in s:
            s = s.replace(a, b)
    s = _STYLE_RE.sub("", s)
    if "\\frac" in s:
        s = _BRACELESS_FRAC2_RE.sub(r"\\frac{\1}{\2}", _BRACELESS_FRAC_RE.sub(r"\\frac{\1}{\2}", s))
        s = _BRACELESS_FRAC3_RE.sub(r"\\frac{\1}{", s)
    if "\\sqrt" in s:
        s = _BRACELESS_SQRT_RE.sub(r"\\sqrt{\1}", s)
    if "^" in s:
        s = _ONE_TOKEN_EXP_RE.sub(r"^\1", s)
    s = _LE_GE_RE.sub(lambda m: "\\" + m.group(1) + "q", _SPACE_CMD_RE.sub(" ", s)).strip()
    if "\\begin" in s:
        m = _BRACKETED_MATRIX_RE.match(s)
        s = m.group(1) if m else s
    pct = False
    if "%" in s:
        s2 = _PCT_RE.sub("", s)
        pct, s = s2 != s, s2
    s = _DOLLAR_RE.sub("", s).strip()
    if _ZERO_VECTOR_RE.match(s):  # before the font wrappers go: bold 0 is a vector, not the number
        return _Norm(_ZERO_VECTOR)
    unit = None
    m = _TRAIL_TEXT_UNIT_RE.match(s) if "{" in s else None
    last_side = m.group("v").rsplit("=", 1)[-1] if m else ""  # "r = 3 \\text{ units}": the unit is 3's
    if m and re.search(r"\d", last_side) and not re.search(r"[<>]|\\[lg]eq", m.group("v")):
        u = " ".join(re.findall(r"\{([^{}]*)\}", m.group("u"))).strip()
        if _UNIT_WORDS_RE.match(u) and len(u.split()) <= 3 and u.lower() not in ("or", "and", "i", "e") and "base" not in u:
            s, unit = m.group("v"), _unit_key(u, m.group("p"))
            if "," in s:  # a list with the unit on every item: "6\\text{ cm}, 8\\text{ cm}"
                s = s.replace(m.group("u").strip(), "")
    label = _LABEL_RE.match(s) if s[:1] == "\\" or ":" in s else None
    if label:
        s = label.group("rest")
    s, is_text = _unwrap(s)
    if s.endswith(")") and " (" in s:
        m = _REMARK_RE.match(s)  # "5 (the smallest)": a remark in words after the value
        if m and not _HEDGE_REMARK_RE.search(m.group("r")):
            s = m.group("v")
    if "th" in s or "st" in s or "nd" in s or "rd" in s:
        s = _ORDINAL_RE.sub(r"\1", s)  # "June 20th", "20^{\\text{th}}" -> "June 20"
    s = _WS_RE.sub(" ", s).strip()
    if s[:1].isalpha():
        s = _OPTION_WORD_RE.sub("", s)
        words = _number_words(s)
        m = _COUNT_SENTENCE_RE.match(s) if words is None and is_text else None
        if m:  # "\text{There are five digits}": the count the sentence states
            words = _number_words(m.group("rest")) or (m.group("rest") if _COUNT_RE.match(m.group("rest")) else None)
        if words is not None:
            s, is_text = words, False
    choice = None
    m = _CHOICE_LABEL_RE.match(s) if s[:1] in "([" or (s[:1] in "ABCDE" and s[1:2] in ":.)") else None
    if m:
        choice, s = (m.group(1) or m.group(2) or m.group(3)).upper(), m.group("rest")
    if unit is None:
        m = _TRAIL_WORD_UNIT_RE.match(s)
        if m and not _NOT_A_UNIT_RE.search(m.group("u")):
            s, unit = (m.group("l") or "") + m.group("v"), _unit_key(m.group("u"), m.group("p"))
        elif ":" in s:
            m = _TIME_RE.match(s)
            if m:
                s, unit = m.group(1), (m.group(2).lower() + "m" if m.group(2) else None)
    s2 = _DEG_RE.sub("", s)
    thousands = "," in s2 and _THOUSANDS_RE.match(_NAME_EQ_RE.sub("", s2)) and all(  # "60^\circ,120^\circ" is a list
        d.start() > s.rfind(",") for d in _DEG_RE.finditer(s))
    if s2 != s and unit is None:
        unit = "degree"
    s = s2
    if _REALS_RE.match(s):
        s = "(-\\infty,\\infty)"
    elif s.replace(" ", "") == "\\{\\}":
        s = "\\emptyset"  # the empty set written as braces
    s = _IN_PREFIX_RE.sub("", s)
    if "base" in s:
        m = _BASE_WORDS_RE.match(s)
        s = "%s_{%s}" % (m.group("v"), m.group("b").lower()) if m else s
    mod = None
    if "mod" in s:
        m = _MOD_RE.search(s)
        if m:
            s, mod = s[:m.start()], next(g for g in m.groups() if g)
    if "\\equiv" in s:
        s = _EQUIV_RE.sub("", s)
    s = _SPACE_DROP_RE.sub("", s).rstrip(".,;: ").lstrip("+")
    if thousands:
        s = s.replace(",", "")
    elif "," in s and "{" in s:  # inside a group a comma cannot separate answers: \frac{1}{29,322,216}
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


#: Denominators in words: "one half", "two thirds", "three quarters", "a fifth", "seven tenths".
_FRACTION_WORDS = {"half": 2, "halve": 2, "third": 3, "quarter": 4, "fourth": 4, "fifth": 5, "sixth": 6,
                   "seventh": 7, "eighth": 8, "ninth": 9, "tenth": 10, "eleventh": 11, "twelfth": 12,
                   "hundredth": 100, "thousandth": 1000}
_FRACTION_WORD_RE = re.compile(r"^(?P<n>.+?|an?)[\s-]+(?P<d>" + "|".join(_FRACTION_WORDS) + r")s?$", re.I)


def _number_words(s: str) -> Optional[str]:
    """Step (b7): a cardinal written in words, alone or before a unit word, as digits:
    ``five`` -> ``5``, ``twenty-one digits`` -> ``21 digits``, ``one hundred and five`` ->
    ``105``; a fraction in words as a fraction: ``one half`` -> ``\\frac{1}{2}``, ``three
    quarters`` -> ``\\frac{3}{4}``. None when s does not start with a whole cardinal (``a
    circle``, ``one-to-one``)."""
    m = _FRACTION_WORD_RE.match(s)
    if m:
        n = "1" if m.group("n").lower() in ("a", "an") else _number_words(m.group("n"))
        if n is None or not n.isdigit():
            return None
        return "\\frac{%s}{%d}" % (n, _FRACTION_WORDS[m.group("d").lower()])
    m = _NUMBER_WORD_RE.match(s)
    if not m:
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
    n = _normalise(raw[:MAX_ANSWER_CHARS])
    return (n.s + ("%" if n.pct else "") + ("_" + n.base if n.base else "") + ("mod" + n.mod if n.mod else "")
            + ("(%s)" % n.choice if n.choice else ""))


# ======================================================================================
# 4 (c)-(e). Relation chains, the typed parse, the comparison by type
# ======================================================================================
_LETTER_RE = re.compile(r"^\(?([A-E])\)?$")
_LETTER_PRED_RE = re.compile(r"^[(\[]?([A-Ea-e])[)\]](?:\S.*)?$|^([A-Ea-e])$")
_WORD_RE = re.compile(r"^[A-Za-z][A-Za-z' -]*[A-Za-z]$")
#: Words that make a sentence around a text answer something else than that answer.
_NOT_THE_ANSWER_RE = re.compile(r"\b(?:not|no|neither|nor|or|either|never|except|unless|and|but|maybe)\b", re.I)
_COMMAND_RE = re.compile(r"\\[A-Za-z]+")
_VARIABLE_RE = re.compile(r"[A-DF-HJ-Za-df-hj-z]")  # letters other than e and i (constants)


def _has_variables(s: str) -> bool:
    """Cheap syntactic test: does s name a variable (a letter outside LaTeX commands)?"""
    return bool(_VARIABLE_RE.search(_COMMAND_RE.sub("", s)))


def _answer_sides(p: _Norm, g: _Norm, ctx) -> Optional[Tuple[_Norm, _Norm]]:
    """Step (c), relation chains. When the gold is not itself an equation, a predicted
    chain ``DA = 2 \\cdot 5\\sqrt{3} = 10\\sqrt{3}`` or ``(x, y) = (2, -3)`` states its last
    side; sides with variables or words are labels, and a side without any must equal the
    last (``5 = 8`` is a false statement, not the answer 8: None, not paid). A gold
    ``x = 7`` against a bare value compares its value. Lists are split first (step d:
    ``x = 3, y = 4``), so only single items reach here."""
    pe, ge = _top_level_eq(p.s), _top_level_eq(g.s)
    if len(pe) > 1 and len(ge) == 1:
        if any(not _has_variables(side) and not _plain_equal(side, pe[-1], False, False, ctx) for side in pe[:-1]):
            return None
        return _Norm(_bound_renamed(pe[0], pe[-1], g.s), p.pct, p.unit, False, p.base), g
    if len(ge) == 2 and len(pe) == 1 and _ASSIGN_LHS_RE.match(ge[0]):
        return p, _Norm(ge[1], g.pct, g.unit, False, g.base)
    return p, g


_FUNC_LABEL_RE = re.compile(r"^(?:[A-Za-z]|\\[A-Za-z]+)(?:_\{?\w+\}?)?'*\((?P<v>[A-Za-z])\)$")


def _letters(s: str) -> set:
    return set(_VARIABLE_RE.findall(_COMMAND_RE.sub("", s)))


def _bound_renamed(label: str, expr: str, gold: str) -> str:
    """``f(t) = t^2 - 7t + 12`` for a gold in x: the label binds t, and a bound variable's name
    is no part of the function, so t becomes the gold's one variable. Only when t is the
    expression's one variable and the gold has one other; a bare expression in t binds nothing."""
    m = _FUNC_LABEL_RE.match(label)
    if not m or _letters(expr) != {m.group("v")}:
        return expr
    theirs = _letters(gold)
    if len(theirs) != 1 or theirs == {m.group("v")}:
        return expr
    return re.sub(r"(?<![A-Za-z\\])%s(?![A-Za-z])" % m.group("v"), theirs.pop(), expr)


#: A label for a structured answer names one: a tuple of names "(x, y) =", a capital "M =",
#: an arrow "\\vec{v} =" (a plain "x =" names a number, not a vector).
_STRUCT_LABEL_RE = re.compile(r"^(?:\((?:[A-Za-z\\]+,)+[A-Za-z\\]+\)|[A-Z]\w*|\\(?:vec|overrightarrow)\{\w+\})=")


def _item_kind(n: _Norm) -> str:
    """Step (d) for one item: 'choice' (a letter A-E), 'text' (a word answer), 'relation'
    (an equation), or 'value' (a number or an expression)."""
    if _LETTER_RE.match(n.s) and (n.text or n.s.startswith("(") or len(n.s) == 1):
        return "choice"
    if _WORD_RE.match(n.s) and (n.text or (len(n.s) > 3 and " " not in n.s)):
        return "text"
    return "relation" if len(_top_level_eq(n.s)) > 1 else "value"


def _text_equal(p: _Norm, g: _Norm) -> bool:
    """A word answer: the same words in any case, or a short sentence stating it
    (``January 1, 1960 was a Friday`` for ``Friday``; ``f is an odd function`` for ``odd``):
    the gold right after a copula, once, and no negation or alternative in the sentence."""
    gw = [w.lower() for w in re.findall(r"[A-Za-z]+", g.s)]
    pw = [w.lower() for w in re.findall(r"[A-Za-z]+", p.s)]
    if pw[1:] and pw[0] in _ARTICLES:  # "a circle" for "circle" (an article is no word of the answer)
        pw = pw[1:]
    if gw[1:] and gw[0] in _ARTICLES:
        gw = gw[1:]
    if pw == gw:
        return True
    if gw == ["neither"] and len(pw) in (4, 5) and pw[0] == "neither" and pw[2] == "nor":
        return True  # "neither even nor odd" (a trailing noun allowed: "... nor odd function")
    if not gw or len(pw) > 12 or _NOT_THE_ANSWER_RE.search(p.s):
        return False
    if len(pw) == len(gw) + 1 and pw[:len(gw)] == gw and pw[-1] not in _COPULAS:
        return True  # the answer word with its noun: "an even function" for "even"
    hits = [i for i in range(len(pw) - len(gw) + 1) if pw[i:i + len(gw)] == gw]
    if len(hits) != 1 or len(pw) - hits[0] - len(gw) > 2:
        return False
    before = pw[max(hits[0] - 2, 0):hits[0]]
    return bool(before) and (before[-1] in _COPULAS or (before[-1] in ("a", "an", "the") and before[0] in _COPULAS))


_COPULAS = frozenset({"is", "was", "are", "were", "be"})
_ARTICLES = frozenset({"a", "an", "the"})


def _values_equal(p: _Norm, g: _Norm, ctx) -> bool:
    """Step (e) for one item against one item, by the gold's kind."""
    if not _decorations_compatible(p, g):
        return False
    if p.s == g.s and p.pct == g.pct:
        return True
    sides = _answer_sides(p, g, ctx)
    if sides is None:
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
    pi, gi = _INEQ_SPLIT_RE.split(p.s), _INEQ_SPLIT_RE.split(g.s)
    if len(pi) == 3 or len(gi) == 3:  # "s^2 \\leq 8r^2": the same relation, sides compared
        (a, op, b), (c, gop, d) = _oriented(pi), _oriented(gi)
        return op == gop and _plain_equal(a, c, False, False, ctx) and _plain_equal(b, d, False, False, ctx)
    return _plain_equal(p.s, g.s, p.pct, g.pct, ctx)


_INEQ_SPLIT_RE = re.compile(r"(\\leq|\\geq|<|>)")


def _oriented(parts: List[str]) -> Tuple[str, str, str]:
    """An inequality as (smaller side, "<" or "\\leq", larger side); other shapes never match."""
    if len(parts) != 3:
        return ("", "?", "")
    a, op, b = parts
    return (b, {">": "<", "\\geq": "\\leq"}[op], a) if op in (">", "\\geq") else (a, op, b)


def _plain_equal(ps: str, gs: str, ppct: bool, gpct: bool, ctx) -> bool:
    """Numbers exactly (fast path), then expressions by the CAS."""
    if ps == gs and ppct == gpct:
        return True
    pv, gv = _exact_number(ps), _exact_number(gs)
    if pv is not None and gv is not None:
        if isinstance(pv, _BigPow) or isinstance(gv, _BigPow):
            return pv == gv and pv.e is not None
        if ppct == gpct:
            return pv == gv
        # a percent sign on one side only: "10\%" == "10" (MATH) and == "0.1", but not when
        # the question asks for a percent (0.1 is then the wrong number)
        if "percent" in ctx["demands"]:
            return pv == gv
        if gpct:
            return pv == gv or pv * 100 == gv
        return pv == gv or pv == gv * 100
    if isinstance(pv, _BigPow) or isinstance(gv, _BigPow):
        return False
    if ps == gs:
        return True
    if _has_variables(ps) != _has_variables(gs):
        return False  # a number never equals an expression in variables: skip the parser
    if _cpu_clock() > ctx["deadline"]:
        STATS["cas_deadline"] += 1
        raise _Rejected("deadline")
    ok = _cas_equal(ps, gs, ctx["deadline"])
    if not ok and ppct != gpct and "percent" not in ctx["demands"]:
        ok = _cas_equal(ps + "/100" if ppct else ps, gs + "/100" if gpct else gs, ctx["deadline"])
    return ok


def _items_equal(p_items: List[str], g_items: List[str], ordered: bool, ctx) -> bool:
    if len(p_items) != len(g_items):
        return False
    pn = [_normalise(x) for x in p_items]
    gn = [_normalise(x) for x in g_items]
    if ordered:
        if len(p_items) > MAX_LIST_ITEMS:
            return [x.s for x in pn] == [x.s for x in gn]
        return all(_match(pi, gi, ctx) for pi, gi in zip(pn, gn))
    pk, gk = sorted(x.s for x in pn), sorted(x.s for x in gn)
    if pk == gk:
        return True
    if len(p_items) > MAX_LIST_ITEMS:
        return False
    return _matched_unordered(pn, gn, lambda a, b: _match(a, b, ctx))


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
    """A tuple ``(7, -13)`` is the vector ``\\begin{pmatrix} 7 \\\\ -13 \\end{pmatrix}``: a
    column, or a row when the other side is one row (MATH writes vectors both ways)."""
    if st.kind != "tuple" or st.brackets != "()":
        return st
    if other.kind == "matrix" and len(other.items) == 1:
        return _Struct("matrix", items=[list(st.items)])
    return _Struct("matrix", items=[[x] for x in st.items])


def _match(p: _Norm, g: _Norm, ctx) -> bool:
    """Step (e): compare two normalised answers by the type of their parse (step d)."""
    if p.same(g):
        return True
    if "\\approx" in p.s and "\\approx" not in g.s and len(_split_top(p.s)) == 1:
        return _approx_equal(p, g, ctx)
    if _item_kind(g) == "text":  # a word answer has no structure: "Friday" vs a sentence
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
    if gs.kind == "scalar" and ps.kind == "scalar":
        return _values_equal(p, g, ctx)
    if ps.kind == "scalar" and _STRUCT_LABEL_RE.match(p.s):  # "(x, y) = (2, -3)": step (c)
        sides = _answer_sides(p, g, ctx)
        return sides is not None and sides[0].s != p.s and _match(sides[0], g, ctx)
    if gs.kind == "matrix" or ps.kind == "matrix":
        ps, gs = _as_matrix(ps, gs), _as_matrix(gs, ps)
        if gs.kind != ps.kind or len(gs.items) != len(ps.items):
            return False
        if any(len(r1) != len(r2) for r1, r2 in zip(gs.items, ps.items)):
            return False
        return all(_match(_normalise(a), _normalise(b), ctx)
                   for r1, r2 in zip(ps.items, gs.items) for a, b in zip(r1, r2))
    if gs.kind == "union" or ps.kind == "union":
        if gs.kind != ps.kind or len(gs.items) != len(ps.items):
            return False
        return _matched_unordered(ps.items, gs.items, lambda a, b: _piece_equal(a, b, ctx))
    if gs.kind == "tuple":
        if ps.kind == "tuple":
            return _tuple_equal(ps, gs, ctx)
        if ps.kind == "list" and len(gs.items) > 2:
            return _items_equal(ps.items, gs.items, True, ctx)  # "1, 2, 3" for "(1, 2, 3)"
        return False
    if gs.kind == "list":
        if ps.kind == "list":
            return _items_equal(ps.items, gs.items, gs.ordered or ps.ordered or "ordered" in ctx["demands"], ctx)
        # "1, 2, 3" written "(1, 2, 3)", or labelled values "n_1 = 19, n_2 = 22" (a 2-tuple in
        # brackets is an interval, not a list)
        if ps.kind == "tuple" and not gs.ordered and ps.brackets == "()" and (len(ps.items) > 2 or "=" in p.s):
            return _items_equal(ps.items, gs.items, True, ctx)
        return False
    # gold scalar, prediction a list: several answers for one (hedging) unless all state it
    # ("\\boxed{\\frac12} = \\boxed{0.5}": one value in two notations)
    if ps.kind == "list" and not ps.ordered and len(ps.items) <= MAX_FINAL_BOXES:
        return all(_match(_normalise(x), g, ctx) for x in ps.items)
    return False


def _order_chain(s: str) -> Optional[Tuple[str, List[str]]]:
    """A strict chain of three or more terms in one direction, none of them a bare name
    (``f(2) < f(1) < f(4)``, ``b > a > c``... an ordering; ``1 < x < 3`` is an interval):
    (direction, terms as written), else None."""
    if "<" not in s and ">" not in s:
        return None
    parts = [x.strip() for x in re.split(r"([<>])", s)]
    if len(parts) < 5 or "=" in s or "\\leq" in s or "\\geq" in s:
        return None
    terms, ops = parts[0::2], set(parts[1::2])
    if len(ops) != 1 or not all(terms) or _inequality_interval(s) is not None:
        return None
    return ops.pop(), terms


def _approx_equal(p: _Norm, g: _Norm, ctx) -> bool:
    """Step (c) for an approximation: ``x \\approx 3.14`` states 3.14 (what a problem that asks
    to round wants); ``\\frac{1}{3} \\approx 0.33`` states the exact 1/3 when its rounded value
    agrees with it to the last digit written, rounded or truncated (a wrong rounding makes the
    statement false)."""
    sides = [x.strip() for x in p.s.split("\\approx")]
    last = _Norm(sides[-1], p.pct, p.unit, False, p.base)
    if last.s and _match(last, g, ctx):
        return True
    first = _Norm(sides[0], p.pct, p.unit, False, p.base)
    approx = _exact_number(sides[-1])
    if len(sides) != 2 or not first.s or not isinstance(approx, Fraction) or not _match(first, g, ctx):
        return False
    digits = sides[-1].partition(".")[2]
    tol = Fraction(1, 10 ** len(digits))
    gv = _exact_number(g.s)
    if not isinstance(gv, Fraction):
        e = _parse(g.s)
        try:
            gv = Fraction(str(_sympy.N(e, 30))) if isinstance(e, _sympy.Expr) and e.is_real else None
        except Exception:
            gv = None
    if gv is None:
        return False
    # rounded (within half a unit of the last digit) or truncated toward zero
    return abs(gv - approx) <= tol / 2 or (gv * approx >= 0 and 0 <= abs(gv) - abs(approx) < tol)


def _piece_equal(p: _Struct, g: _Struct, ctx) -> bool:
    """One piece of a union: an interval (ordered, brackets count) or a finite set."""
    if p.kind != g.kind:
        return False
    if p.kind == "list":
        return _items_equal(p.items, g.items, False, ctx)
    return _tuple_equal(p, g, ctx)


def _tuple_equal(p: _Struct, g: _Struct, ctx) -> bool:
    if p.brackets != g.brackets or len(p.items) != len(g.items):
        return False
    return _items_equal(p.items, g.items, True, ctx)


def answers_match(pred: str, gold: str, deadline: Optional[float] = None, demands: frozenset = frozenset()) -> bool:
    """True when the extracted answer ``pred`` states the same value as ``gold`` (both
    LaTeX fragments without ``\\boxed``): steps (a)-(e) of section 4. ``demands`` are the
    question's required forms that change the comparison itself (:func:`question_demands`:
    "ordered" lists, a "normalised" equation)."""
    if len(pred) > MAX_ANSWER_CHARS or len(gold) > MAX_ANSWER_CHARS:
        return pred.strip() == gold.strip()  # too long to normalise or compare: verbatim only
    if deadline is None:
        deadline = _cpu_clock() + CAS_BUDGET_S
    pn, gn = _normalise(pred), _normalise(gold)
    if pn.same(gn):
        return True
    if not pn.s or not gn.s:
        return False
    return _match(pn, gn, {"deadline": deadline, "demands": demands})


# ======================================================================================
# 4 (d). Typed parse: matrix, union, tuple/interval, set/list, or one item
# ======================================================================================
_OPEN = "([{"
_CLOSE = ")]}"
_WORD_SEP_RE = re.compile(r"(?<![A-Za-z\\])(?:and|or)(?![A-Za-z])")
_MATRIX_RE = re.compile(r"^\\begin\{([pbBvV]?matrix|array)\}(?:\{[lcr|]*\})?(.*)\\end\{\1\}$", re.S)
_INEQ_RE = re.compile(r"\\leq|\\geq|<|>")
_ASSIGN_LHS_RE = re.compile(r"^(?:" + _NAME + r"|[A-Za-z]{1,3})$")
_VAR_RE = re.compile(r"^" + _NAME + r"$")


def _depth_ok(s: str) -> bool:
    depth = 0
    for c in s:
        if c in _OPEN:
            depth += 1
            if depth > MAX_NESTING:
                return False
        elif c in _CLOSE:
            depth -= 1
    return True


def _split_top(s: str, seps: str = ",;", words: bool = True) -> List[str]:
    """Split at top-level separators (not inside any bracket or brace)."""
    if words and ("and" in s or "or" in s):
        s = _WORD_SEP_RE.sub(";", s)
    parts, depth, last = [], 0, 0
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c == "\\" and i + 1 < n and s[i + 1] in "{}":
            depth += 1 if s[i + 1] == "{" else -1
            i += 2
            continue
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
        elif depth == 0 and c in seps:
            parts.append(s[last:i])
            last = i + 1
        i += 1
    parts.append(s[last:])
    return [p for p in (q.strip() for q in parts) if p]


def _is_set_literal(s: str) -> bool:
    """s is ``\\{...\\}`` with the opening ``\\{`` closed by the final ``\\}``."""
    if not (s.startswith("\\{") and s.endswith("\\}")):
        return False
    depth = 0
    for m in re.finditer(r"\\[{}]", s[2:-2]):
        depth += 1 if m.group(0) == "\\{" else -1
        if depth < 0:
            return False
    return depth == 0


def _top_level_eq(s: str) -> List[str]:
    """Split at top-level '=' signs (not inside brackets; a string with <=, >=, != or an
    inequality command is not split)."""
    if "=" not in s or re.search(r"[<>!]=|=[<>]|\\[lg]eq|\\ne", s):
        return [s]
    return _split_top(s, seps="=", words=False)


class _Struct:
    """kind: 'scalar' (s), 'list' (items; unordered unless ``ordered``), 'tuple' (items,
    ``brackets`` e.g. "(]": ordered pairs, vectors and intervals), 'union' (items: 2-tuples),
    'matrix' (items: rows of entries)."""

    __slots__ = ("kind", "s", "items", "ordered", "brackets")

    def __init__(self, kind, s="", items=None, ordered=False, brackets=""):
        self.kind, self.s, self.items, self.ordered, self.brackets = kind, s, items or [], ordered, brackets


def _inequality_interval(s: str) -> Optional[_Struct]:
    """``x > 1`` -> (1,\\infty); ``-2 \\leq x \\leq 7`` -> [-2,7] (one variable only)."""
    parts = [x.strip() for x in re.split(r"(\\leq|\\geq|<|>)", s)]
    if len(parts) not in (3, 5):
        return None
    terms, ops = parts[0::2], parts[1::2]
    if not all(terms) or sum(bool(_VAR_RE.match(t)) for t in terms) != 1:
        return None
    if len(parts) == 3:
        a, op, b = terms[0], ops[0], terms[1]
        if _VAR_RE.match(b):  # "1 < x"  ->  "x > 1"
            a, b = b, a
            op = {"<": ">", ">": "<", "\\leq": "\\geq", "\\geq": "\\leq"}[op]
        if not _VAR_RE.match(a):
            return None
        if op in (">", "\\geq"):
            return _Struct("tuple", items=[b, "\\infty"], brackets=("[" if op == "\\geq" else "(") + ")")
        return _Struct("tuple", items=["-\\infty", b], brackets="(" + ("]" if op == "\\leq" else ")"))
    lo, o1, var, o2, hi = parts
    if not _VAR_RE.match(var) or not ({o1, o2} <= {"<", "\\leq"} or {o1, o2} <= {">", "\\geq"}):
        return None
    if o1 in (">", "\\geq"):  # "7 >= x >= -2"  ->  "-2 <= x <= 7"
        flip = {">": "<", "\\geq": "\\leq"}
        lo, hi, o1, o2 = hi, lo, flip[o2], flip[o1]
    return _Struct("tuple", items=[lo, hi], brackets=("[" if o1 == "\\leq" else "(") + ("]" if o2 == "\\leq" else ")"))


def _expand_pm(item: str) -> List[str]:
    """``a \\pm b`` -> [a+b, a-b]; ``\\pm b`` -> [b, -b] (one \\pm per item)."""
    if "\\pm" not in item or item.count("\\pm") > 1:
        return [item]
    a, b = item.split("\\pm", 1)
    if not b:
        return [item]
    return [a + "+" + b, a + "-" + b] if a else [b, "-" + b]


def _matrix_rows(body: str) -> List[List[str]]:
    rows = [r for r in body.split("\\\\") if r.strip()]
    return [[c.strip() for c in r.split("&")] for r in rows]


_SCALED_MATRIX_RE = re.compile(
    r"^(?P<c>.*?)(?:\\cdot|\\times|\*)?(?P<m>\\begin\{(?P<env>[bB]?matrix|pmatrix)\}.*\\end\{(?P=env)\})$", re.S)
#: A factor in front of a matrix that is not one scalar (a relation, a list, another matrix).
_NOT_SCALAR_RE = re.compile(r"[=<>,;&]|\\\\|\\begin|\\end|\\[lg]eq|\\ne(?![A-Za-z])")


def _scaled_matrix(s: str) -> Optional[_Struct]:
    """``c\\begin{pmatrix}...\\end{pmatrix}`` (a scalar times a matrix or vector) -> the matrix
    of products, evaluated elementwise: ``\\frac{1}{50}\\begin{pmatrix}1 & 7\\end{pmatrix}`` is
    ``\\begin{pmatrix}1/50 & 7/50\\end{pmatrix}``. Exact numbers multiply exactly (fast path);
    any other scalar must parse as an expression and is kept as ``(c)\\cdot(entry)`` for the
    CAS. Only p/b/B-matrix and plain ``matrix`` environments: a scalar before a determinant
    (vmatrix) is not elementwise. Source: held-out review (matrix-h004); MATH writes
    both forms (e.g. projection matrices as a fraction times an integer matrix)."""
    m = _SCALED_MATRIX_RE.match(s)
    if not m or m.group("m").count("\\begin{") != 1:
        return None
    c = m.group("c").strip()
    if not c or c == "+" or _NOT_SCALAR_RE.search(c):
        return None
    cv = Fraction(-1) if c == "-" else _exact_number(c)
    if not isinstance(cv, Fraction):
        cv = None
        if not isinstance(_parse(c), _sympy.Expr):
            return None  # not a scalar (e.g. \\det): no elementwise reading
    inner = _MATRIX_RE.match(m.group("m"))
    if not inner:
        return None
    rows = []
    for row in _matrix_rows(inner.group(2)):
        out = []
        for e in row:
            ev = _exact_number(_normalise(e).s) if cv is not None else None
            out.append(str(cv * ev) if isinstance(ev, Fraction) else "(%s)\\cdot(%s)" % (c, e))
        rows.append(out)
    return _Struct("matrix", items=rows)


_SETMINUS_RE = re.compile(r"^(?P<a>.+?)(?:\\setminus|\\backslash)(?P<b>\\\{.*\\\})$", re.S)


def _reals_minus_points(s: str) -> Optional[_Struct]:
    """``\\mathbb{R} \\setminus \\{a, b\\}`` (the reals without finitely many exact numbers)
    -> the union of open intervals ``(-\\infty,a) \\cup (a,b) \\cup (b,\\infty)``, so that it
    compares with the interval form MATH uses. Points must be exact numbers (they are
    sorted exactly); anything else is left to the plain comparison. Source: the held-out
    review (interval-h008)."""
    m = _SETMINUS_RE.match(s)
    if not m or not (_REALS_RE.match(m.group("a")) or m.group("a") == "(-\\infty,\\infty)"):
        return None
    if not _is_set_literal(m.group("b")):
        return None
    pts = {}
    for x in _structure(m.group("b")).items:
        xs = _normalise(x).s
        v = _exact_number(xs)
        if not isinstance(v, Fraction):
            return None
        pts.setdefault(v, xs)
    bounds = ["-\\infty"] + [pts[v] for v in sorted(pts)] + ["\\infty"]
    ivs = [_Struct("tuple", items=[bounds[i], bounds[i + 1]], brackets="()") for i in range(len(bounds) - 1)]
    return ivs[0] if len(ivs) == 1 else _Struct("union", items=ivs)


_SET_BUILDER_RE = re.compile(r"^\\\{\s*(?P<v>" + _NAME + r")\s*(?:\\in\s*(?:\\mathbb\{R\}|\\mathbb R|\\R|\\reals))?"
                             r"\s*(?:\\mid|\||:)\s*(?P<c>.+)\\\}$", re.S)


def _set_builder(s: str) -> Optional[_Struct]:
    """``\\{x \\mid x \\leq 0\\}``, ``\\{x|0<x<1\\}``, ``\\{x : x<0 \\text{ or } x>1\\}``: the set of one
    name whose condition is an inequality, a chain or inequalities joined by "or", as that
    interval or union (step d reads the same condition written bare); else None."""
    m = _SET_BUILDER_RE.match(s)
    if not m or not _INEQ_RE.search(m.group("c")) or re.search(r"\band\b|,", m.group("c")):
        return None
    names = {t.strip() for it in _split_top(m.group("c")) for t in _INEQ_SPLIT_RE.split(it)[0::2]
             if _VAR_RE.match(t.strip())}
    st = _structure(m.group("c"))
    return st if names == {m.group("v")} and st.kind in ("tuple", "union") else None


def _union(s: str) -> _Struct:
    """``A \\cup B \\cup ...`` of intervals and finite sets -> 'union' whose items are the
    intervals plus one set holding every listed point (unions are unordered, and
    ``\\{-1\\} \\cup \\{3\\}`` is ``\\{-1, 3\\}``); a union of finite sets only is that set. Any
    other piece: a scalar (no structure). Source: MATH (answers like ``\\{-1\\} \\cup [0,7)``)."""
    intervals, points = [], []
    has_set = False
    for piece in s.split("\\cup"):
        st = _structure(piece)
        if st.kind == "tuple" and len(st.items) == 2:
            intervals.append(st)
        elif st.kind == "list" and st.brackets == "{}":
            has_set = True
            points.extend(st.items)
        else:
            return _Struct("scalar", s=s)
    if not intervals:
        return _Struct("list", items=points, ordered=False, brackets="{}")
    if has_set and points:
        intervals.append(_Struct("list", items=points, ordered=False, brackets="{}"))
    return _Struct("union", items=intervals)


def _structure(s: str) -> _Struct:
    """Parse a normalised answer into the structure the comparison works on."""
    m = _MATRIX_RE.match(s)
    if m:
        return _Struct("matrix", items=_matrix_rows(m.group(2)))
    if "\\begin" in s:
        st = _scaled_matrix(s)
        if st is not None:
            return st
    if "\\setminus" in s or "\\backslash" in s:
        st = _reals_minus_points(s)
        if st is not None:
            return st
    if "\\cup" in s:
        return _union(s)
    if _is_set_literal(s):
        st = _set_builder(s)
        if st is not None:
            return st
        inner = s[2:-2]
        items = [x for it in _split_top(inner) for x in _expand_pm(it)]
        return _Struct("list", items=items, ordered=False, brackets="{}")
    if s[:1] in "([" and s[-1:] in ")]" and _bracket_pair_ok(s):
        inner = s[1:-1]
        items = _split_top(inner, words=False)
        if len(items) >= 2:
            return _Struct("tuple", items=items, brackets=s[0] + s[-1])
    items = _split_top(s)
    if len(items) >= 2 and all(_INEQ_RE.search(it) for it in items):
        ivs = [_inequality_interval(it) for it in items]  # "x < -1 or x > 1": a union
        if all(iv is not None for iv in ivs):
            return _Struct("union", items=ivs)
    if len(items) >= 2:
        items = [x for it in items for x in _expand_pm(it)]
        ordered = any("\\ldots" in it for it in items)
        return _assignments(_Struct("list", items=items, ordered=ordered))
    if "\\pm" in s:
        ex = _expand_pm(s)
        if len(ex) == 2:
            return _Struct("list", items=ex, ordered=False)
    if _INEQ_RE.search(s) and "=" not in s.replace("\\leq", "").replace("\\geq", ""):
        iv = _inequality_interval(s)
        if iv is not None:
            return iv
    return _Struct("scalar", s=s)


def _bracket_pair_ok(s: str) -> bool:
    """s = (...) / [...] / (...] / [...) whose first bracket closes at the end."""
    depth = 0
    for i, c in enumerate(s):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0 and i != len(s) - 1:
                return False
    return depth == 0


def _assignments(st: _Struct) -> _Struct:
    """``x=1, y=-2`` -> ordered tuple by variable name; ``a=1 or a=-2`` -> values;
    ``n=1, 2, 3`` -> the values (leading name dropped)."""
    lhs, vals = [], []
    for it in st.items:
        parts = _top_level_eq(it)
        if len(parts) == 2 and _ASSIGN_LHS_RE.match(parts[0]):
            lhs.append(parts[0])
            vals.append(parts[1])
        else:
            lhs.append(None)
            vals.append(it)
    named = [l for l in lhs if l is not None]
    if not named:
        return st
    if len(named) == len(lhs) and len(set(named)) == len(named) and len(named) > 1:
        order = sorted(range(len(lhs)), key=lambda i: lhs[i])
        return _Struct("tuple", items=[vals[i] for i in order], brackets="()")
    if len(named) == len(lhs) and len(set(named)) == 1 or (lhs[0] is not None and len(named) == 1):
        return _Struct("list", items=vals, ordered=st.ordered)
    return st

# ======================================================================================
# 4 (e1). Exact numbers (fast path of the comparison): Fraction or a big integer power
# ======================================================================================
class _BigPow:
    """An integer power too large to evaluate: r**e with r not a perfect power (canonical),
    or an unresolvable tower (``e`` None, ``key`` its literal shape)."""

    __slots__ = ("r", "e", "key")

    def __init__(self, r: int, e: Optional[int], key: str = ""):
        self.r, self.e, self.key = r, e, key

    def __eq__(self, other):
        return isinstance(other, _BigPow) and (self.r, self.e, self.key) == (other.r, other.e, other.key)

    def __hash__(self):
        return hash((self.r, self.e, self.key))


_INT_RE = re.compile(r"^[-+]?\d+$")
_DEC_RE = re.compile(r"^([-+]?)(\d*)\.(\d*)$")
_FRAC_RE = re.compile(r"^([-+]?)\\frac\{([-+]?)(\d+(?:\.\d+)?)\}\{(\d+(?:\.\d+)?)\}$")
_SLASH_RE = re.compile(r"^([-+]?)(\d+(?:\.\d+)?)/(\d+(?:\.\d+)?)$")
_MIXED_RE = re.compile(r"^([-+]?)(\d+)\\frac\{(\d+)\}\{(\d+)\}$")
_SCI_RE = re.compile(r"^([-+]?\d*\.?\d+)(?:\\times|\\cdot|\*|x)10\^\{?([-+]?\d+)\}?$")
_E_RE = re.compile(r"^([-+]?\d*\.?\d+)[eE]([-+]?\d+)$")
#: 0.\\overline{36}, 0.1\\bar{6}, 0.(142857) (period in parentheses), a trailing \\ldots allowed.
_REPEAT_RE = re.compile(r"^([-+]?)(\d*)\.(\d*)(?:\\(?:overline|bar|dot)\{?(\d+)\}?|\((\d+)\))(?:\\ldots)?$")
#: Dot notation over the first and last digit of the period: 0.\\dot{1}4285\\dot{7}.
_DOT_PAIR_RE = re.compile(r"^([-+]?)(\d*)\.(\d*)\\dot\{?(\d)\}?(\d*)\\dot\{?(\d)\}?$")
_ELLIPSIS_RE = re.compile(r"^([-+]?)(\d*)\.(\d+)(?:\\ldots|\.\.\.)$")
_TOWER_RE = re.compile(r"^[-+]?\d+(?:\^\{?[-+]?\d+\}?)+$|^[-+]?\d+\^(?:\{\d+\^)+\{?\d+\}?\}+$")


def _dec(s: str) -> Optional[Fraction]:
    if len(s) > MAX_INT_DIGITS:
        return None
    return Fraction(s)


def _perfect_root(n: int) -> Tuple[int, int]:
    """(r, k) with n == r**k and k maximal (n small enough for float roots)."""
    if n < 4 or n.bit_length() > 62:
        return n, 1
    for k in range(n.bit_length(), 1, -1):
        r = round(n ** (1.0 / k))
        for c in (r - 1, r, r + 1):
            if c > 1 and c ** k == n:
                return c, k
    return n, 1


def _tower(s: str):
    """Right-associated integer power tower ``a^{b^{c}}`` / ``a^b`` -> Fraction or _BigPow.
    Evaluates exactly while the result stays under MAX_POWER_BITS; beyond that keeps the
    canonical (root, exponent) pair so that 2^{2^{20}} == 2^{1048576} is still decided."""
    sign = -1 if s.startswith("-") else 1
    nums = [int(t) for t in re.findall(r"[-+]?\d+", s.lstrip("+-"))]
    if len(nums) > 8 or any(len(str(abs(x))) > 18 for x in nums):
        return None
    val: object = nums[-1]
    for base in reversed(nums[:-1]):
        if isinstance(val, _BigPow):
            return _BigPow(0, None, s)
        if val.denominator != 1 if isinstance(val, Fraction) else False:
            return None  # fractional exponent: a radical, for the CAS
        e = int(val)
        if base in (0, 1):
            val = Fraction(base) if e > 0 or base == 1 else None
            if val is None:
                return None
            continue
        if e < 0:
            if -e * abs(base).bit_length() > MAX_POWER_BITS:
                return _BigPow(0, None, s)
            val = Fraction(1, base ** (-e))
            continue
        if e * abs(base).bit_length() <= MAX_POWER_BITS:
            val = Fraction(base) ** e
        elif base > 0:
            r, k = _perfect_root(base)
            val = _BigPow(r, k * e)
        else:
            return None
    if isinstance(val, Fraction):
        return sign * val
    if isinstance(val, int):
        return Fraction(sign * val)
    return val if sign == 1 else _BigPow(-1, None, s)


@lru_cache(maxsize=16384)
def _exact_number(s: str):
    """Exact value of a plain number written in a MATH style, else None.

    Integers, decimals, ``\\frac{a}{b}``, ``a/b``, mixed numbers ``2\\frac{1}{2}`` (proper
    fraction after an integer, MATH's convention), scientific notation (``3.2\\times10^5``,
    ``3.2e5``), repeating decimals (``0.\\overline{36}``, ``0.1\\overline{6}``, ``0.333\\ldots``)
    and integer power towers. Own code rather than the CAS because these forms are most
    answers (speed) and math-verify misreads several (repeating decimals, towers)."""
    if len(s) > MAX_INT_DIGITS:
        return None
    if _INT_RE.match(s):
        return Fraction(int(s))
    m = _DEC_RE.match(s)
    if m and (m.group(2) or m.group(3)):
        return _dec(s if m.group(3) else s + "0")
    m = _FRAC_RE.match(s)
    if m:
        num, den = _dec(m.group(3)), _dec(m.group(4))
        if den == 0:
            return None
        neg = (m.group(1) == "-") != (m.group(2) == "-")
        return (-1 if neg else 1) * num / den
    m = _SLASH_RE.match(s)
    if m:
        num, den = _dec(m.group(2)), _dec(m.group(3))
        if den == 0:
            return None
        return (-1 if m.group(1) == "-" else 1) * num / den
    m = _MIXED_RE.match(s)
    if m:
        whole, num, den = int(m.group(2)), int(m.group(3)), int(m.group(4))
        if den == 0 or num >= den:
            return None  # not a proper mixed number: let the CAS read it as a product
        return (-1 if m.group(1) == "-" else 1) * (whole + Fraction(num, den))
    m = _SCI_RE.match(s) or _E_RE.match(s)
    if m:
        e = int(m.group(2))
        if abs(e) > 1000:
            return None
        return Fraction(m.group(1)) * Fraction(10) ** e
    m = _REPEAT_RE.match(s) if "." in s else None
    if m:
        sign, whole, pre, rep, rep2 = m.groups()
        return (-1 if sign == "-" else 1) * _repeating(whole, pre, rep or rep2)
    m = _DOT_PAIR_RE.match(s) if "\\dot" in s else None
    if m:
        sign, whole, pre, first, mid, last = m.groups()
        return (-1 if sign == "-" else 1) * _repeating(whole, pre, first + mid + last)
    m = _ELLIPSIS_RE.match(s)
    if m:
        sign, whole, digits = m.groups()
        for p in range(1, len(digits) // 2 + 1):
            block = digits[-p:]
            if digits[-2 * p:-p] == block:
                pre = digits[:-p]
                while pre.endswith(block):
                    pre = pre[:-p]
                return (-1 if sign == "-" else 1) * _repeating(whole, pre, block)
        return None
    if "^" in s and _TOWER_RE.match(s):
        return _tower(s)
    return None


def _repeating(whole: str, pre: str, rep: str) -> Fraction:
    base = Fraction(int(whole or "0"))
    if pre:
        base += Fraction(int(pre), 10 ** len(pre))
    return base + Fraction(int(rep), (10 ** len(rep) - 1) * 10 ** len(pre))

# ======================================================================================
# 4 (e2). CAS comparison (latex2sympy2_extended + sympy evaluation; math-verify as last resort)
# ======================================================================================
_NORM_CFG = _NormalizationConfig(basic_latex=True, units=False, malformed_operators=True, nits=False,
                                 boxed="none")
_CAS_BANNED_RE = re.compile(r"\\(?:sum|prod|int|iint|oint|lim|infty|begin|text|mbox|cup|cap|in|sim|approx)(?![A-Za-z])")
_BIG_INT_RE = re.compile(r"\d{40,}")
_BINOM_ARGS_RE = re.compile(r"\\binom\{([^{}]*)\}\{([^{}]*)\}|\\choose")
_FACT_ARG_RE = re.compile(r"(\d+)\s*!")
_IMAG_UNIT_RE = re.compile(r"(?<![A-Za-z\\_])(?<!_\{)i(?![A-Za-z])")  # "4i+3", "-1i" (math-verify misses "1i")
_DECIMAL_RE = re.compile(r"(?<![\d.])(\d*)\.(\d+)(?![\d.])")
#: An integer-valued factor written next to another factor. The parser reads any integer next
#: to a positive rational as a mixed number (``2(3)`` is 5, ``2\binom{10}{8}`` 47), so such
#: products get an explicit ``\cdot``; digits before an integer fraction with nothing
#: multiplied on stay a mixed number (MATH's ``6\frac{1}{5}``). Sub- and superscript digits
#: are no factor (``\log_2(8)``, ``\sin^2(x)``).
_JUXTAPOSED_RE = re.compile(r"(\\(?:frac|binom)\{[^{}]*\}\{[^{}]*\}|\\sqrt\{[^{}]*\}|\([^()]*\)|"
                            r"(?<![\^_\d])(?<![\^_]\{)\d+(?!\d))\s*(?=\(|\\(?:binom|frac|sqrt)(?![A-Za-z])|\d)")
_MIXED_TAIL_RE = re.compile(r"\s*\\frac\{\d+\}\{\d+\}(?![\w\\({^])")


def _power_depth(s: str) -> int:
    """Deepest superscript nesting: ``a^b`` is 1, ``a^{b^c}`` 2, ``a^{b^{c^d}}`` 3."""
    stack: List[bool] = []
    level = best = 0
    prev = ""
    for c in s:
        if c == "{":
            stack.append(prev == "^")
            level += prev == "^"
        elif c == "}" and stack:
            level -= stack.pop()
        elif c == "^":
            best = max(best, level + 1)
        prev = c
    return best


def _guard_text(s: str) -> None:
    """Cheap syntactic refusals before any parsing (magnitudes of powers, factorials and
    binomials are decided on the parsed, unevaluated tree by _magnitude). Deep superscript
    nesting is refused here because the LaTeX parser itself takes time exponential in it."""
    if len(s) > MAX_CAS_CHARS or not _depth_ok(s) or _CAS_BANNED_RE.search(s) or _BIG_INT_RE.search(s):
        raise _Rejected(s[:40])
    if "^" in s and _power_depth(s) > MAX_POWER_DEPTH:
        raise _Rejected("power tower")
    if "!" in s:
        for m in _FACT_ARG_RE.finditer(s):
            if int(m.group(1)) > MAX_FACTORIAL_ARG:
                raise _Rejected("factorial")
    if "binom" in s or "choose" in s:
        for m in _BINOM_ARGS_RE.finditer(s):  # the parser evaluates integer binomials at once
            args = [g or "" for g in m.groups()]
            if m.group(0) == "\\choose" or any("^" in a or "!" in a or any(
                    int(d) > MAX_FACTORIAL_ARG for d in re.findall(r"\d+", a)) for a in args):
                raise _Rejected("binomial")


def _explicit_products(s: str) -> str:
    """``2(3)`` -> ``2\\cdot (3)``, ``\\binom{5}{4}\\binom{10}{8}`` -> with a ``\\cdot``: see _JUXTAPOSED_RE."""
    def product(m) -> str:
        if m.group(1)[0].isdigit() and _MIXED_TAIL_RE.match(s, m.end()):
            return m.group(0)  # a mixed number
        return m.group(1) + "\\cdot "
    return _JUXTAPOSED_RE.sub(product, s)


def _decimals_to_fractions(s: str) -> str:
    """0.25 -> \\frac{25}{100}: decimals are exact values (MATH), never floats."""
    return _DECIMAL_RE.sub(lambda m: "\\frac{%s}{1%s}" % ((m.group(1) or "") + m.group(2), "0" * len(m.group(2))), s)


@lru_cache(maxsize=8192)
def _parse(s: str):
    """latex -> unevaluated sympy object (None when unparsable or refused). Cached."""
    try:
        _guard_text(s)
        t = _normalize_latex(s, _NORM_CFG)
        t = _explicit_products(_decimals_to_fractions(t))
        _guard_text(t)
        is_complex = bool(_complex_re(t) or _IMAG_UNIT_RE.search(t))
        e = _latex2sympy(t, is_real=not is_complex, normalization_config=None)
        _magnitude(e)
        if is_complex and hasattr(e, "free_symbols"):
            isym = [x for x in e.free_symbols if x.name == "i"]
            if isym:
                e = e.xreplace({isym[0]: _sympy.I})
        return e
    except _Rejected:
        STATS["guard_rejections"] += 1
        return None
    except Exception:
        return None


#: Functions the evaluation may meet (MATH answers use no others); anything else, e.g.
#: gamma or zeta at 50+ digits (seconds in mpmath), is refused.
_ALLOWED_FUNCS = frozenset({
    "sin", "cos", "tan", "cot", "sec", "csc", "asin", "acos", "atan", "acot", "asec", "acsc",
    "sinh", "cosh", "tanh", "coth", "asinh", "acosh", "atanh", "exp", "log", "Abs", "floor",
    "ceiling", "sign", "re", "im", "conjugate", "arg", "Max", "Min", "factorial", "binomial"})


def _integer_arg(a) -> int:
    """The value of a factorial/binomial argument: a small non-negative integer, else refused."""
    v = _rational_value(a)
    if v is None or v.denominator != 1 or not 0 <= v <= MAX_FACTORIAL_ARG:
        raise _Rejected("factorial argument")
    return int(v)


def _magnitude(e, depth: int = 0) -> float:
    """Upper bound of log10|value| of an unevaluated sympy tree (a symbol counts as 1).
    Raises _Rejected when it exceeds MAX_LOG10_MAGNITUDE or the tree holds what evaluation
    cannot do quickly (unknown functions, non-integer or huge factorials), so that no
    evaluation ever meets a power tower or a giant factorial/binomial (C-level big-int work
    ignores signals, sympy#24187)."""
    sp = _sympy
    if depth > 60:
        raise _Rejected("deep")
    if isinstance(e, sp.Rational):
        return max(int(e.p).bit_length(), int(e.q).bit_length()) * 0.30103
    if isinstance(e, sp.Float):
        return 20.0
    args = getattr(e, "args", None)
    if not args:
        return 1.0
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
            lx = _magnitude(args[0], depth + 1)
            if lx > 7:
                raise _Rejected("exponent")
            out = 0.4343 * 10 ** lx
        else:
            out = max(_magnitude(a, depth + 1) for a in args) + 1
    elif isinstance(e, sp.Pow):
        lb = max(_magnitude(args[0], depth + 1), 0.5)
        lx = _magnitude(args[1], depth + 1)
        if lx > 7:
            raise _Rejected("exponent")
        out = lb * 10 ** lx
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


_SAMPLE_POINTS = ((Fraction(7, 5), Fraction(9, 4), Fraction(13, 7), Fraction(5, 3), Fraction(11, 6), Fraction(17, 9)),
                  (Fraction(8, 3), Fraction(6, 5), Fraction(19, 11), Fraction(23, 10), Fraction(3, 7), Fraction(29, 13)),
                  (Fraction(2, 9), Fraction(31, 12), Fraction(10, 7), Fraction(37, 15), Fraction(41, 16), Fraction(4, 11)))


def _points(syms):
    order = sorted(syms, key=lambda x: x.name)
    for pt in _SAMPLE_POINTS:
        yield {x: _sympy.Rational(pt[i % len(pt)].numerator, pt[i % len(pt)].denominator) + i // len(pt)
               for i, x in enumerate(order)}


def _num(e, subs, digits: int):
    """(re, im) of e at the sample point as ``digits``-digit Floats, or None."""
    v = e.evalf(digits, subs=subs) if subs else e.evalf(digits)
    if not v.is_number or v.has(_sympy.nan, _sympy.zoo, _sympy.oo, -_sympy.oo):
        return None
    re_, im_ = v.as_real_imag()
    if not (re_.is_Number and im_.is_Number):
        return None
    return re_, im_


def _close(a, b, digits: int) -> bool:
    """Relative agreement to all but NUMERIC_SLACK_DIGITS of the evaluated digits."""
    (ar, ai), (br, bi) = a, b
    d = abs(ar - br) + abs(ai - bi)
    m = max(abs(ar) + abs(ai), abs(br) + abs(bi))
    if m == 0:
        return True
    return bool(d <= _sympy.Float(10, digits) ** (NUMERIC_SLACK_DIGITS - digits) * m)


def _rational_value(e) -> Optional[Fraction]:
    """Exact value of a symbol-free rational expression (+, x, integer powers), else None.
    Evaluation at finite precision cannot tell 2^{200}+1 from 2^{200}; this can."""
    sp = _sympy
    if isinstance(e, sp.Rational):
        return Fraction(int(e.p), int(e.q))
    if isinstance(e, (sp.Add, sp.Mul)):
        vals = [_rational_value(x) for x in e.args]
        if any(v is None for v in vals):
            return None
        out = Fraction(0) if isinstance(e, sp.Add) else Fraction(1)
        for v in vals:
            out = out + v if isinstance(e, sp.Add) else out * v
        return out
    if isinstance(e, (sp.factorial, sp.binomial)):  # arguments checked by _magnitude
        vals = [_rational_value(x) for x in e.args]
        if any(v is None or v.denominator != 1 or not 0 <= v <= MAX_FACTORIAL_ARG for v in vals):
            return None
        return Fraction(math.factorial(int(vals[0])) if len(vals) == 1 else math.comb(int(vals[0]), int(vals[1])))
    if isinstance(e, sp.Pow) and isinstance(e.args[1], sp.Integer):
        base = _rational_value(e.args[0])
        if base is None or (base == 0 and e.args[1] < 0):
            return None
        return base ** int(e.args[1])
    return None


def _numeric_equal(a, b, deadline: float) -> Optional[bool]:
    """Exact-by-evaluation: rational expressions compare exactly; otherwise equal iff the
    values agree relatively to all but NUMERIC_SLACK_DIGITS digits, evaluated with
    NUMERIC_DIGITS digits plus the magnitude's, at every sample point. No absolute
    tolerance, so 1/2^99 != 1/2^98 (math-verify's chop accepts it). None when evaluation
    cannot decide."""
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
        if _cpu_clock() > deadline:
            STATS["cas_deadline"] += 1
            raise _Rejected("deadline")
        va, vb = _num(a, pt, digits), _num(b, pt, digits)
        if va is None or vb is None:
            continue
        if not _close(va, vb, digits):
            return False
        decided += 1
        if not a.free_symbols:
            break
    if decided == 0:
        return None
    return True


def _cas_equal(p: str, g: str, deadline: float) -> bool:
    a, b = _parse(p), _parse(g)
    if a is None or b is None:
        return False
    sp = _sympy
    if isinstance(a, sp.Equality) or isinstance(b, sp.Equality):
        return False  # equations are compared by _equations_equal
    r = _numeric_equal(a, b, deadline)
    if r is not None:
        return r
    if _cpu_clock() > deadline:
        return False
    try:  # relations, sets, matrices the evaluation could not decide: math-verify decides
        return bool(_mv_verify(b, a, timeout_seconds=None, strict=True))
    except Exception:
        return False


def _equations_equal(p: str, g: str, deadline: float, same_scale: bool = False) -> bool:
    """Two equations describe the same relation: (lhs - rhs) proportional by a nonzero
    constant at every sample point (``2x+4y-3=0`` == ``y = -x/2 + 3/4``). With ``same_scale``
    (the question fixes the normalisation, e.g. "A > 0 and gcd(|A|,|B|,|C|,|D|) = 1") the
    constant must be 1: ``-2x - 4y + 6z - 2 = 0`` is not ``x + 2y - 3z + 1 = 0``."""
    pp, gp = _top_level_eq(p), _top_level_eq(g)
    if len(pp) != 2 or len(gp) != 2:
        return False
    parts = [_parse(x) for x in (pp[0], pp[1], gp[0], gp[1])]
    if any(x is None or not isinstance(x, _sympy.Expr) for x in parts):
        return False
    e1, e2 = parts[0] - parts[1], parts[2] - parts[3]
    if e1.free_symbols != e2.free_symbols or not e1.free_symbols:
        return False
    ratio = None
    n = 0
    for pt in _points(e1.free_symbols):
        if _cpu_clock() > deadline:
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
    # sides swapped ("0 = x + 2y - 3z + 1"): the same normalised equation, read right to left
    return abs(ratio + 1) < 1e-12 and not parts[0].free_symbols and bool(parts[2].free_symbols)

# ======================================================================================
# 5. Bounded time: the hard guard (main thread only)
# ======================================================================================
def _alarm_usable() -> bool:
    """Whether the SIGALRM guard may be armed for this call.

    Only in the main thread (signals are delivered there; elsewhere signal.signal raises),
    only where setitimer exists (not on Windows), only while no ITIMER_REAL timer is armed
    (the host's own deadline, e.g. verl's ``timeout_limit``, must neither be cancelled nor
    pre-empted) and only while SIGALRM has its default or ignore disposition. Decision: a
    host that installed its own SIGALRM handler owns the signal, even with no timer armed
    right now (it may arm one from another handler, or rely on a pending alarm); swapping
    it out could call it with our alarm or lose its own, so the guard stands down and the
    input guards plus the CAS soft deadline (CAS_BUDGET_S) bound the work, as off the main
    thread. A handler set from C code (getsignal() is None) cannot be restored: stand down.
    verl 0.6.0's naive reward manager installs no SIGALRM handler, so in a Ray TaskRunner
    the guard is active."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        return False
    if signal.getsignal(signal.SIGALRM) not in (signal.SIG_DFL, signal.SIG_IGN):
        return False
    return signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def _run_guarded(fn, *args):
    """Run fn(*args) under a SIGALRM wall-clock limit (HARD_TIMEOUT_S) when _alarm_usable();
    elsewhere the input guards and the soft deadline bound the work. math-verify's own
    alarm-based timeouts are never used.

    Guarantees: the timer is cancelled and the previous disposition restored on every exit
    (return, exception, KeyboardInterrupt, or the alarm itself, including an alarm that lands
    inside the clean-up: the restore runs in an inner ``finally``); the handler raises at most
    once and only while fn runs (it is disarmed before the clean-up starts, so an alarm that
    was already pending when the timer was cancelled is consumed by our no-op handler, which
    is still installed: signal.signal() runs pending handlers before it swaps); nothing fires
    after this function returns (one-shot timer, cancelled; no interval)."""
    if not _alarm_usable():
        return fn(*args)
    armed = [True]

    def on_alarm(signum, frame):
        if armed[0]:
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
# 6. Format and reasoning credit (reference rules), paid only on correct answers
# ======================================================================================
_TAGS = (THINK_OPEN, THINK_CLOSE, ANSWER_OPEN, ANSWER_CLOSE)


def _layout(text: str) -> Tuple[List[int], bool, Optional[int], Optional[int]]:
    """The contract layout as the format rules read it: the first position of each of
    ``<think> </think> <answer> </answer>`` (-1 when absent), whether the present ones are in
    that order, and the number of non-whitespace characters before ``<think>`` / after the
    last ``</answer>`` (None when that tag is absent). Surrounding whitespace is not stray
    text: the decoded response often ends with a newline, which is not content the model added."""
    firsts = [text.find(t) for t in _TAGS]
    present = [p for p in firsts if p >= 0]
    in_order = present == sorted(present) and len(set(present)) == len(present)
    before = len(text[:firsts[0]].strip()) if firsts[0] >= 0 else None
    after = len(text[text.rfind(ANSWER_CLOSE) + len(ANSWER_CLOSE):].strip()) if firsts[3] >= 0 else None
    return firsts, in_order, before, after


def format_credit(text: str) -> float:
    """Pay for the contract's layout (reference rule, at most 4 x FORMAT_TAG_CREDIT = 0.2).

    +FORMAT_TAG_CREDIT for each of ``<think>\\n``, ``\\n</think>\\n``, ``\\n<answer>\\n``,
    ``\\n</answer>`` present exactly once; text before ``<think>`` and after ``</answer>``
    each cost FORMAT_STRAY_COST_PER_CHAR per character, capped at FORMAT_STRAY_COST_MAX;
    floored at 0; tags out of order (first occurrences) -> 0.
    Departure from the reference: surrounding whitespace is not counted as stray text
    (:func:`_layout`).
    """
    _, in_order, before, after = _layout(text)
    if not in_order:
        return 0.0
    credit = sum(FORMAT_TAG_CREDIT for mk in FORMAT_MARKERS if text.count(mk) == 1)
    for stray in (before, after):
        if stray is not None:
            credit -= min(FORMAT_STRAY_COST_PER_CHAR * stray, FORMAT_STRAY_COST_MAX)
    return round(max(credit, 0.0), 6)


def contract_parts(text: str) -> dict:
    """Which CONTRACT_PARTS the response follows (name -> bool), read from the same layout as
    :func:`format_credit`: a tag counts when it appears exactly once and the tags present are
    in the contract's order; ``boxed`` when the response has a final boxed answer
    (:func:`extract_final_answer`); ``starts_with_think`` / ``ends_with_answer`` when there is
    no stray text before ``<think>`` / after ``</answer>``."""
    _, in_order, before, after = _layout(text)
    parts = {name: in_order and text.count(tag) == 1 for name, tag in zip(CONTRACT_PARTS, _TAGS)}
    parts["boxed"] = extract_final_answer(text)[0] is not None
    parts["starts_with_think"] = before == 0
    parts["ends_with_answer"] = after == 0
    return parts


_STEP_RE = re.compile(
    r"^[ \t>*#-]*(?:step[ \t]*(\d{1,3})[ \t]*[:.)]|(\d{1,3})\.(?!\d)|\((\d{1,3})\))\**[ \t]*(.*)$",
    re.I | re.M)
#: COT_KEYWORDS matched at word starts, inflected ("solving", "calculated", "sums").
_STEP_KEYWORD_RE = re.compile(
    r"\b(?:" + "|".join(k[:-1] if k.endswith("e") else k for k in COT_KEYWORDS) + r")\w*", re.I)


def reasoning_credit(text: str) -> float:
    """Pay for numbered reasoning steps inside ``<think>`` (reference rule, at most 0.1).

    Step lines: "Step 1: ...", "1. ...", "(1) ..." with more than 3 characters after the
    number. Over the longest run of sequentially numbered steps: >= 3 steps of which >= 2
    contain a keyword -> COT_FULL_CREDIT; >= 2 steps with >= 1 keyword -> COT_PARTIAL_CREDIT.
    Departures from the reference: keywords match at word starts ("sum" no longer matches
    "assume"; "solving" counts as "solve"), and a step repeated verbatim counts once (a
    copy-pasted step is not reasoning).
    """
    start = text.find(THINK_OPEN)
    end = text.find(THINK_CLOSE, start + 1)
    if start < 0 or end < 0:
        return 0.0
    steps = []
    seen = set()
    for m in _STEP_RE.finditer(text, start + len(THINK_OPEN), end):
        body = m.group(4).strip()
        if len(body) < COT_MIN_STEP_CHARS or body.lower() in seen:
            continue
        seen.add(body.lower())
        num = int(m.group(1) or m.group(2) or m.group(3))
        steps.append((num, bool(_STEP_KEYWORD_RE.search(body))))
    best_len, best_kw, run_len, run_kw, prev = 0, 0, 0, 0, None
    for num, kw in steps:
        if prev is not None and num == prev + 1:
            run_len, run_kw = run_len + 1, run_kw + kw
        else:
            run_len, run_kw = 1, int(kw)
        prev = num
        if (run_len, run_kw) > (best_len, best_kw):
            best_len, best_kw = run_len, run_kw
    if best_len >= COT_FULL_MIN_STEPS and best_kw >= COT_FULL_MIN_KEYWORD_STEPS:
        return COT_FULL_CREDIT
    if best_len >= COT_PARTIAL_MIN_STEPS and best_kw >= COT_PARTIAL_MIN_KEYWORD_STEPS:
        return COT_PARTIAL_CREDIT
    return 0.0

# ======================================================================================
# 7. Entry point: extraction -> policy -> equivalence -> credit
# ======================================================================================
_LIST_COMMA_RE = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
#: One word in text before a value: "\\text{base } 7", "\\text{day 12}".
_WORD_LABEL_RE = re.compile(r"^\\(?:text|textrm|mathrm|mbox)\s*\{\s*(?P<w>[A-Za-z]+)\s*(?:\}\s*(?P<v>[^\s{].*)|"
                            r"\s(?P<v2>[^{}]*\d[^{}]*)\})$", re.S)


def _asked_noun_dropped(answer: str, question: Optional[str]) -> str:
    """``\\text{base } 7`` for "In what base ...?": a word before the value that repeats the noun
    the question asks for ("what base", "which day") labels the value."""
    m = _WORD_LABEL_RE.match(answer.strip()) if question else None
    if m and re.search(r"\b(?:what|which)\s+%s\b" % m.group("w"), question, re.I):
        return (m.group("v") or m.group("v2")).strip()
    return answer


def _judge(text: str, gold: str, question: Optional[str] = None) -> Tuple[bool, str]:
    """Whether the response's final answer is right (sections 2-4), and that answer."""
    answers, unpayable = extract_final_answer(text)
    if answers is None:
        return False, ""
    distinct = []
    seen = set()
    for a in answers:
        k = _norm_key(a)
        if k not in seen:
            seen.add(k)
            distinct.append(a)
    pred = ", ".join(a.strip() for a in distinct)
    if (unpayable and len(distinct) > 1) or len(distinct) > MAX_FINAL_BOXES:
        return False, pred
    answer = pred if len(distinct) > 1 else _asked_noun_dropped(distinct[0], question)
    deadline = _cpu_clock() + CAS_BUDGET_S
    demands = question_demands(question)
    if "list" in demands:  # "Enter all the solutions, separated by commas": 70,110 is two numbers
        gold, answer = _LIST_COMMA_RE.sub(", ", gold), _LIST_COMMA_RE.sub(", ", answer)
    try:
        if len(distinct) > 1 and _item_kind(_normalise(gold[:MAX_ANSWER_CHARS])) in ("text", "choice"):
            # several boxes for one word or letter: each must state it (a sentence around a
            # word would otherwise swallow the other boxes)
            ok = all(answers_match(a, gold, deadline, demands) for a in distinct)
            return ok and not _restates_task(answer, gold, text, question), pred
        ok = answers_match(answer, gold, deadline, demands)
        if not ok and question and len(answer) <= MAX_ANSWER_CHARS:
            options = question_options(question)
            ok = bool(options) and _option_equal(answer, gold, options, deadline)
    except _Rejected:
        ok = False
    if ok and len(answer) <= MAX_ANSWER_CHARS and (_restates_task(answer, gold, text, question, deadline)
                                                   or _form_violation(answer, gold, demands)
                                                   or _foreign_modulus(answer, gold, question)
                                                   or _foreign_unit(answer, gold, question)):
        ok = False
    if ok and question and len(answer) <= MAX_ANSWER_CHARS:  # "(B) 2/3": the letter's option must be the value
        n, options = _normalise(answer), question_options(question)
        try:
            if (n.choice and n.s and n.choice in options and _option_is_value(options[n.choice])
                    and not answers_match(n.s, options[n.choice], deadline)):
                ok = False
        except _Rejected:
            ok = False
    if ok and len(distinct) > 1 and any(_restates_task(a, gold, text, question) for a in distinct):
        ok = False  # one of several boxes restates the task (each box must be an answer)
    return ok, pred


def compute_score(data_source, solution_str, ground_truth, extra_info=None) -> dict:
    """verl reward: see the module docstring for the returned keys and the rules.

    ``extra_info["question"]`` (the problem text, written by prepare_math.py) is optional:
    the restated-task defence reads the task from it when present. Raises ValueError for a
    data_source outside SUPPORTED_DATA_SOURCES (a configuration error); never raises for
    anything in the model's text."""
    if data_source not in SUPPORTED_DATA_SOURCES:
        raise ValueError(
            f"new_math_reward: unsupported data_source {data_source!r}; expected one of "
            f"{sorted(SUPPORTED_DATA_SOURCES)}. Route other datasets to their own reward.")
    STATS["calls"] += 1
    acc, fmt, cot, pred = False, 0.0, 0.0, ""
    try:
        text = solution_str if isinstance(solution_str, str) else ("" if solution_str is None else str(solution_str))
        gold = ground_truth if isinstance(ground_truth, str) else str(ground_truth)
        question = extra_info.get("question") if isinstance(extra_info, dict) else None
        args = (text, gold) if not isinstance(question, str) else (text, gold, question)
        try:
            acc, pred = _run_guarded(_judge, *args)
        except _HardTimeout:
            STATS["hard_timeouts"] += 1
            acc = False
        if acc:
            fmt = format_credit(text)
            cot = reasoning_credit(text)
    except Exception:  # noqa: BLE001 - model text must never crash training
        STATS["internal_errors"] += 1
        acc, fmt, cot = False, 0.0, 0.0
    score = SCORE_CORRECT + fmt + cot if acc else 0.0
    return {"score": float(min(score, 1.0)), "acc": 1.0 if acc else 0.0, "format": float(fmt),
            "cot": float(cot), "pred": pred[:PRED_MAX_CHARS]}


def compute_format_score(data_source, solution_str, ground_truth, extra_info=None) -> dict:
    """The answer contract's format alone, paid whatever the answer: a learnable reward for
    a model too small to solve MATH (the CPU learning profile, ``REWARD_NAME`` in the
    launcher). Never use it to train a model meant to solve problems.

    ``score`` is the share of the contract followed, in [0, 1]: the fraction of CONTRACT_PARTS
    that :func:`contract_parts` finds (each tag once and in order, a final ``\\boxed{}``
    answer, no text before ``<think>`` or after ``</answer>``). Each part pays on its own, so a
    response that follows some of the contract earns some reward: a 135M model rarely follows
    all of it, and a reward that paid only the reference's newline-exact layout was measured
    non-zero on 3 of 128 SmolLM2-135M responses. ``acc`` is still judged (the same keys as
    :func:`compute_score`), so a run with this reward logs how often the answer happens to be
    right; ``format`` is ``score``.
    """
    out = compute_score(data_source, solution_str, ground_truth, extra_info)
    text = solution_str if isinstance(solution_str, str) else ""
    try:
        share = sum(contract_parts(text).values()) / len(CONTRACT_PARTS)
    except Exception:  # noqa: BLE001 - model text must never crash training
        STATS["internal_errors"] += 1
        share = 0.0
    share = round(min(max(share, 0.0), 1.0), 6)
    out.update(score=share, format=share)
    return out


for _warm in ("x^{2}+\\frac{1}{2}", "\\frac{\\sqrt{3}}{2}+\\pi", "3+4i"):
    _parse(_warm)  # warm the LaTeX parser and sympy at import (first calls cost ~0.2 s)
