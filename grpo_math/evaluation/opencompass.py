r"""opencompass: OpenCompass 0.5.4's math_gen_a58d9d as it really runs, without OpenCompass: the
4-shot Minerva-style turns exactly as sent (their doubled braces included), the problem as
"Problem:\n...\nSolution:\n", the model's chat template; greedy decoding with the model's
generation_config.json otherwise in force (transformers; vLLM: temperature 0 only), cut at the
EOS strings; the reference is the solution's last \boxed{} as OpenCompass's MATHDataset reads it
(MATH-500: its answer field); judged as MATHVerifyEvaluator judges (math-verify on the raw response,
first LaTeX match, boxed first); reported: accuracy % = correct / problems, by level and type.

The doubled braces are the config's: OpenCompass replaces the text ``{problem}`` (then
``{solution}`` by nothing) and leaves every other brace alone. Every user turn gains a newline: the
default meta-template's empty SYSTEM slot, mapped to the human role, is merged into it (seen in
``origin_prompt``). Sources, in the opencompass 0.5.4 package: ``configs/datasets/math/math_gen_a58d9d.py``
(turns, dataset, evaluator, no post-processor), ``datasets/math.py`` (``MATHDataset.load``),
``models/huggingface_above_v4_33.py`` (roles HUMAN -> user, BOT -> assistant, stop words, greedy
decoding), ``evaluator/math_evaluator.py`` (math-verify settings, 10 s limit, accuracy).
"""
from __future__ import annotations

import logging
import threading
from typing import Optional, Sequence

from grpo_math.evaluation.summary import by_group, mean, render

#: The dataset config's name in OpenCompass.
CONFIG_NAME = "math_gen_a58d9d"
#: The problem slot of the last user turn.
PROBLEM_TEMPLATE = "Problem:\n{problem}\nSolution:\n"
#: The few-shot turns exactly as sent (role, text); braces doubled as in OpenCompass's config.
FEW_SHOT_TURNS: tuple[tuple[str, str], ...] = (
    ("user", "Problem:\nFind the domain of the expression "
             "$\\frac{{\\sqrt{{x-2}}}}{{\\sqrt{{5-x}}}}$.}}\nSolution:"),
    ("assistant", "The expressions inside each square root must be non-negative. Therefore, "
                  "$x-2 \\ge 0$, so $x\\ge2$, and $5 - x \\ge 0$, so $x \\le 5$. Also, the denominator "
                  "cannot be equal to zero, so $5-x>0$, which gives $x<5$. Therefore, the domain of "
                  "the expression is $\\boxed{{[2,5)}}$.\nFinal Answer: The final answer is $[2,5)$. "
                  "I hope it is correct.\n"),
    ("user", "Problem:\nIf $\\det \\mathbf{{A}} = 2$ and $\\det \\mathbf{{B}} = 12,$ then find "
             "$\\det (\\mathbf{{A}} \\mathbf{{B}}).$\nSolution:"),
    ("assistant", "We have that $\\det (\\mathbf{{A}} \\mathbf{{B}}) = (\\det \\mathbf{{A}})"
                  "(\\det \\mathbf{{B}}) = (2)(12) = \\boxed{{24}}.$\nFinal Answer: The final answer "
                  "is $24$. I hope it is correct.\n"),
    ("user", "Problem:\nTerrell usually lifts two 20-pound weights 12 times. If he uses two 15-pound "
             "weights instead, how many times must Terrell lift them in order to lift the same total "
             "weight?\nSolution:"),
    ("assistant", "If Terrell lifts two 20-pound weights 12 times, he lifts a total of "
                  "$2\\cdot 12\\cdot20=480$ pounds of weight. If he lifts two 15-pound weights instead "
                  "for $n$ times, he will lift a total of $2\\cdot15\\cdot n=30n$ pounds of weight. "
                  "Equating this to 480 pounds, we can solve for $n$: \\begin{{align*}} 30n&=480\\\\ "
                  "\\Rightarrow\\qquad n&=480/30=\\boxed{{16}} \\end{{align*}}\nFinal Answer: The final "
                  "answer is $16$. I hope it is correct.\n"),
    ("user", "Problem:\nIf the system of equations: \\begin{{align*}} 6x-4y&=a,\\\\ 6y-9x &=b. "
             "\\end{{align*}}has a solution $(x, y)$ where $x$ and $y$ are both nonzero, find "
             "$\\frac{{a}}{{b}},$ assuming $b$ is nonzero.\nSolution:"),
    ("assistant", "If we multiply the first equation by $-\\frac{{3}}{{2}}$, we obtain "
                  "$$6y-9x=-\\frac{{3}}{{2}}a.$$Since we also know that $6y-9x=b$, we have "
                  "$$-\\frac{{3}}{{2}}a=b\\Rightarrow\\frac{{a}}{{b}}=\\boxed{{-\\frac{{2}}{{3}}}}.$$\n"
                  "Final Answer: The final answer is $-\\frac{{2}}{{3}}$. I hope it is correct.\n"),
)
#: What every user turn gains on its way out (the merged empty SYSTEM slot).
USER_TURN_END = "\n"
#: OpenCompass's role names for chat roles (origin_prompt uses them).
OC_ROLES = {"user": "HUMAN", "assistant": "BOT", "system": "SYSTEM"}
#: math-verify's parse / verify time limits in the main thread, seconds (none off it, where its SIGALRM
#: timer cannot run); OpenCompass instead kills each judgement's child process after 10 s.
TIMEOUT_S = 5


def reference_answer(solution: str) -> Optional[str]:
    """The answer OpenCompass's MATHDataset keeps from ``solution``: what lies inside the last
    ``\\boxed{...}``, braces balanced. None when there is no ``\\boxed``, the last is not followed by
    a brace (``\\boxed 5``) or never closes. (OpenCompass falls back to the last ``\\fbox`` when there
    is no ``\\boxed``, but then refuses it for not starting with ``\\boxed{``.)"""
    start = solution.rfind("\\boxed")
    if start < 0 or not solution.startswith("\\boxed{", start):
        return None
    depth = 0
    for i in range(start + len("\\boxed"), len(solution)):
        depth += {"{": 1, "}": -1}.get(solution[i], 0)
        if depth == 0:
            return solution[start + len("\\boxed{"):i]
    return None


def build_messages(problem: str) -> list[dict]:
    """The chat messages OpenCompass sends for ``problem``: the eight few-shot turns, then the
    problem turn, each user turn ending in one extra newline (module docstring)."""
    turns = [*FEW_SHOT_TURNS, ("user", PROBLEM_TEMPLATE.replace("{problem}", problem))]
    return [{"role": role, "content": text.replace("{solution}", "") + (USER_TURN_END if role == "user" else "")}
            for role, text in turns]


def messages_from_origin_prompt(origin_prompt: object) -> list[dict]:
    """OpenCompass's ``origin_prompt`` (a list of ``{role: HUMAN|BOT|SYSTEM, prompt}``) as chat
    messages, so it can be compared with ``build_messages``. Raises ValueError on another shape."""
    if not isinstance(origin_prompt, list):
        raise ValueError(f"expected a list of {{role, prompt}} turns, found {type(origin_prompt).__name__}")
    back = {v: k for k, v in OC_ROLES.items()}
    out = []
    for turn in origin_prompt:
        if not isinstance(turn, dict) or turn.get("role") not in back or not isinstance(turn.get("prompt"), str):
            raise ValueError(f"expected a turn {{role: HUMAN|BOT|SYSTEM, prompt: str}}, found {turn!r:.80}")
        out.append({"role": back[turn["role"]], "content": turn["prompt"]})
    return out


def problem_from_messages(messages: list[dict]) -> Optional[str]:
    """The problem inside the last user turn of messages built as ``build_messages`` builds them
    (e.g. OpenCompass's ``origin_prompt``), or None when that turn does not have the shape."""
    head, tail = (PROBLEM_TEMPLATE + USER_TURN_END).split("{problem}")
    last = messages[-1]["content"] if messages and messages[-1].get("role") == "user" else ""
    if not (last.startswith(head) and last.endswith(tail) and len(last) >= len(head) + len(tail)):
        return None
    return last[len(head):len(last) - len(tail)]


def cut_at_stop_words(text: str, stop_words: list[str]) -> str:
    """The prediction OpenCompass keeps: ``text`` cut before each stop word in turn."""
    for stop in stop_words:
        text = text.split(stop)[0]
    return text


def _once(record, _seen=set()) -> bool:  # noqa: B006 - the set is the memory of this filter
    """A logging filter that lets each distinct message through once."""
    key = record.getMessage()
    if key in _seen:
        return False
    _seen.add(key)
    return True


def score(prediction: str, reference: Optional[str]) -> dict:
    """Judge one prediction as MATHVerifyEvaluator does (evaluator/math_evaluator.py, its math-verify settings):
    ``{"status", "correct", "pred", "answer"}``, status ``ok`` (pred / answer: the parses as strings, as in
    OpenCompass's results file), ``skipped`` (the reference parses to nothing: a problem, never correct, no detail
    in OpenCompass) or ``error`` (math-verify raised or timed out: wrong). Never raises."""
    from math_verify import verify

    timeout = TIMEOUT_S if threading.current_thread() is threading.main_thread() else None
    try:
        from latex2sympy2_extended import NormalizationConfig
        from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse

        gold = parse(f"${reference}$", extraction_mode="first_match",
                     extraction_config=[LatexExtractionConfig(), ExprExtractionConfig()], parsing_timeout=timeout)
        if len(gold) == 0:
            return {"status": "skipped", "correct": False, "pred": None, "answer": None}
        # equations=True (OpenCompass's setting) logs a deprecation line on every parse; keep it once
        logging.getLogger("latex2sympy2_extended.math_normalization").addFilter(_once)
        config = LatexExtractionConfig(
            normalization_config=NormalizationConfig(nits=False, malformed_operators=False, basic_latex=True,
                                                     equations=True, boxed="all", units=True),
            boxed_match_priority=0, try_extract_without_anchor=False)
        pred = parse(prediction, extraction_config=[config], extraction_mode="first_match", parsing_timeout=timeout)
        ok = bool(float(verify(pred, gold, timeout_seconds=timeout)))
        return {"status": "ok", "correct": ok, "pred": str(pred), "answer": str(gold)}
    except Exception as exc:  # noqa: BLE001 - a judge failure is a wrong answer, as in OpenCompass
        return {"status": "error", "correct": False, "pred": str(exc), "answer": reference}


def accuracy_percent(verdicts: list[dict]) -> float:
    """OpenCompass's accuracy: 100 * correct / problems (skipped ones count as problems)."""
    return 100.0 * sum(v["correct"] for v in verdicts) / len(verdicts) if verdicts else 0.0


def judge(problem: dict, response: str) -> dict:
    """A sample's verdicts (:func:`score`): ``correct``, ``status``, ``pred`` and ``answer``."""
    return score(response, problem["ground_truth"])


JUDGES = {"accuracy": lambda r: r["correct"]}


def summarize(records: Sequence[dict], ks: Sequence[int] = (1,), n: int = 1) -> dict:
    """summary.json; skipped problems count as problems, as OpenCompass does. ``ks`` and ``n`` are 1 (greedy)."""
    return {
        "protocol": "opencompass", "problems": len(records), "correct": sum(1 for r in records if r["correct"]),
        "skipped": sum(1 for r in records if r.get("status") == "skipped"),
        "errors": sum(1 for r in records if r.get("status") == "error"),
        "accuracy": mean([float(r["correct"]) for r in records]), "accuracy_percent": accuracy_percent(list(records)),
        "mean_response_tokens": mean([r["response_tokens"] for r in records]),
        "truncated_rate": mean([float(r["truncated"]) for r in records]),
        "by_level": by_group(records, "level", JUDGES), "by_type": by_group(records, "type", JUDGES),
    }


def format_table(summary: dict) -> str:
    """The printed report of an opencompass-protocol summary."""
    s, run = summary, summary.get("run", {})
    head = f"protocol opencompass ({CONFIG_NAME})" + (
        f"  model {run.get('model')}  data {run.get('data')}  backend {run.get('backend')}" if run else "")
    counts = f"{s['problems']} / {s['correct']} / {s['skipped']} / {s['errors']}"
    rows = [("problems / correct / skipped / errors", counts),
            ("accuracy (OpenCompass %)", f"{s['accuracy_percent']:.2f}"),
            ("mean response length (tokens)", f"{s['mean_response_tokens']:.1f}"),
            ("truncated (no EOS)", f"{s['truncated_rate']:.4f}")]
    return "\n".join(render(head, rows, s, {"acc": "accuracy"}))
