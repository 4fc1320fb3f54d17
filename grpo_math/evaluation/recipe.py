"""The recipe's protocol: 0-shot, the training prompt (problem + INSTRUCTION, one user turn, the chat
template's system prompt, as verl's RLHFDataset renders it), decoded with the sampling knobs
given; every response judged by the training reward and by a strict math-verify check of its
last box; reported: both accuracies by level and type, format compliance, pass@k and the hacking
gap between the two judges.

The strict check is independent of the reward: math-verify alone, ``verify(parse("\\boxed{gt}"),
parse("\\boxed{last box of the response}"))``, no box is wrong. Neither judge is ground truth
(math-verify misses some equivalent forms the reward accepts): read the hacking gap's examples
before calling it hacking.
"""
from __future__ import annotations

import threading
from collections import defaultdict
from typing import Callable, Mapping, Optional, Sequence

import new_math_reward as nmr
from grpo_math.io import one_line

#: data_source given to the reward for rows that carry none (verl's name for MATH-lighteval).
DEFAULT_DATA_SOURCE = "DigitalLearningGmbH/MATH-lighteval"
#: math-verify's parse / verify time limits in the main thread, whole seconds (its SIGALRM timer
#: takes integers and raises off the main thread, where none is set).
STRICT_TIMEOUT_S = 5
#: Longer boxed answers are judged strictly wrong without parsing (bounded work).
STRICT_MAX_ANSWER_CHARS = 1000
#: Examples kept per direction of the hacking gap, and the characters of each response's tail.
GAP_EXAMPLES = 5
EXAMPLE_TAIL_CHARS = 400
#: Full format credit: the four layout markers of SYSTEM_PROMPT once each, FORMAT_TAG_CREDIT each.
FULL_FORMAT_CREDIT = round(len(nmr.FORMAT_MARKERS) * nmr.FORMAT_TAG_CREDIT, 6)


def messages(problem: str) -> list[dict]:
    """The training prompt's turns (prepare_math.py's)."""
    return [{"role": "user", "content": problem + " " + nmr.INSTRUCTION}]


def strict_verdict(response: str, ground_truth: str) -> tuple[bool, Optional[str]]:
    """``(correct, boxed_answer)``: math-verify alone on the response's last box against ``ground_truth``;
    no box (or an empty one) is ``(False, None or "")``, a math-verify failure wrong. Never raises."""
    from math_verify import parse, verify

    box = nmr.extract_last_boxed(response or "")
    if box is None or not box.strip() or len(box) > STRICT_MAX_ANSWER_CHARS:
        return False, box
    timeout = STRICT_TIMEOUT_S if threading.current_thread() is threading.main_thread() else None
    try:
        gold = parse("\\boxed{" + ground_truth + "}", parsing_timeout=timeout)
        pred = parse("\\boxed{" + box + "}", parsing_timeout=timeout)
        return bool(gold and pred and verify(gold, pred, timeout_seconds=timeout)), box
    except Exception:  # noqa: BLE001 - a judge failure is a wrong answer, not a crash
        return False, box


def judge(problem: dict, response: str) -> dict:
    """A sample's verdicts: the reward's (``extracted_answer`` is its ``pred``), ``format_credit`` (the reward's
    format rule on any response, right or wrong) and the strict one with the box it judged."""
    res = nmr.compute_score(problem["data_source"], response, problem["ground_truth"], problem.get("extra_info"))
    strict, box = strict_verdict(response, problem["ground_truth"])
    return {"data_source": problem["data_source"], "extracted_answer": res.get("pred", ""), "boxed_answer": box,
            "reward": float(res["score"]), "reward_acc": float(res["acc"]),
            "reward_format": float(res.get("format", 0.0)), "reward_cot": float(res.get("cot", 0.0)),
            "format_credit": float(nmr.format_credit(response)), "strict_correct": bool(strict)}


def mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values)) if values else 0.0


def by_group(records: Sequence[dict], key: str, judges: Mapping[str, Callable[[dict], float]]) -> dict:
    """{group: {"samples": n, name: mean of judge over the group's records}} for the values of
    ``key`` (level, type; empty ones as "(none)"), sorted."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        groups[r.get(key) or "(none)"].append(r)
    return {name: {"samples": len(rs), **{j: mean([float(f(r)) for r in rs]) for j, f in judges.items()}}
            for name, rs in sorted(groups.items())}


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of a problem with ``n`` samples, ``c`` correct: ``1 - C(n-c, k) / C(n, k)`` (Chen et
    al. 2021, arXiv:2107.03374, section 2.1) as the numerically stable ``1 - prod_{i=n-c+1..n} (1 - k/i)``.
    ValueError unless 0 <= c <= n and 1 <= k <= n."""
    if not (0 <= c <= n) or not (1 <= k <= n):
        raise ValueError(f"pass_at_k: need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def hacking_gap(records: Sequence[dict], max_examples: int = GAP_EXAMPLES) -> dict:
    """Where the two judges disagree: ``reward_only``, rewarded as correct (reward_acc 1) but strictly wrong
    (hacking or a reward false positive); ``strict_only``, strictly right but not rewarded (a reward false
    negative). Each: ``count``, ``rate`` (over all samples), up to ``max_examples`` examples in order."""
    def example(r: dict) -> dict:
        tail = r.get("response", "")
        return {**{k: r.get(k) for k in ("id", "sample_index", "ground_truth", "extracted_answer", "boxed_answer",
                                         "reward")},
                "response_tail": tail if len(tail) <= EXAMPLE_TAIL_CHARS else "..." + tail[-EXAMPLE_TAIL_CHARS:]}

    out = {}
    for name, pick in (("reward_only", lambda r: r["reward_acc"] >= 1.0 and not r["strict_correct"]),
                       ("strict_only", lambda r: r["reward_acc"] < 1.0 and r["strict_correct"])):
        hits = [r for r in records if pick(r)]
        out[name] = {"count": len(hits), "rate": len(hits) / len(records) if records else 0.0,
                     "examples": [example(r) for r in hits[:max_examples]]}
    return out


JUDGES = {"accuracy": lambda r: r["reward_acc"] >= 1.0, "strict_accuracy": lambda r: r["strict_correct"]}


def summarize(records: Sequence[dict], ks: Sequence[int], n: int) -> dict:
    """summary.json: accuracies and rates are fractions of samples, lengths tokens; pass_at_k for each k in ``ks``
    over the problems with ``n`` samples."""
    by_problem: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        by_problem[r["id"]].append(r)
    complete = [rs for rs in by_problem.values() if len(rs) == n]
    pass_k = {judge: {str(k): mean([pass_at_k(n, sum(1 for r in rs if ok(r)), k) for rs in complete]) for k in ks}
              for judge, ok in zip(("reward", "strict"), JUDGES.values())}
    return {
        "protocol": "recipe", "problems": len(by_problem), "samples": len(records), "samples_per_problem": n,
        **{name: mean([float(ok(r)) for r in records]) for name, ok in JUDGES.items()},
        "mean_reward": mean([r["reward"] for r in records]),
        "format_compliance": mean([float(r["format_credit"] >= FULL_FORMAT_CREDIT - 1e-9) for r in records]),
        "format_full_credit": FULL_FORMAT_CREDIT,
        "mean_response_tokens": mean([r["response_tokens"] for r in records]),
        "truncated_rate": mean([float(r["truncated"]) for r in records]),
        "pass_at_k": pass_k, "pass_at_k_problems": len(complete),
        "by_level": by_group(records, "level", JUDGES), "by_type": by_group(records, "type", JUDGES),
        "hacking_gap": hacking_gap(records),
    }


def render(head: str, rows: Sequence[tuple[str, str]], summary: dict, columns: Mapping[str, str]) -> list[str]:
    """The printed report: ``head``, the ``rows`` (label, value) aligned, then a table per level and
    per type with ``columns`` (header: field of by_group's entries)."""
    width = max(len(a) for a, _ in rows)
    lines = [head] + [f"{a:<{width}}  {b}" for a, b in rows]
    for title, key in (("level", "by_level"), ("type", "by_type")):
        groups = summary[key]
        if groups:
            w = max(len(title), *(len(g) for g in groups))
            lines.append(f"{title:<{w}}  samples  " + "  ".join(f"{c:<6}" for c in columns).rstrip())
            lines += [f"{g:<{w}}  {v['samples']:>7}  " + "  ".join(f"{v[f]:.4f}" for f in columns.values())
                      for g, v in groups.items()]
    return lines


def format_table(summary: dict) -> str:
    """The printed report of ``summary`` (summarize's dict, with 'run' when evaluate.py made it)."""
    s, gap, run = summary, summary["hacking_gap"], summary.get("run", {})
    rows = [("problems / samples", f"{s['problems']} / {s['samples']}"),
            ("accuracy (reward acc)", f"{s['accuracy']:.4f}"),
            ("accuracy (strict math-verify)", f"{s['strict_accuracy']:.4f}"),
            ("mean reward", f"{s['mean_reward']:.4f}"),
            (f"format compliance (full {s['format_full_credit']:g} format credit)", f"{s['format_compliance']:.4f}"),
            ("mean response length (tokens)", f"{s['mean_response_tokens']:.1f}"),
            ("truncated (no EOS)", f"{s['truncated_rate']:.4f}")]
    rows += [(f"pass@{k} reward / strict", f"{s['pass_at_k']['reward'][k]:.4f} / {s['pass_at_k']['strict'][k]:.4f}")
             for k in s["pass_at_k"]["reward"]]
    rows += [("rewarded, strictly wrong", f"{gap['reward_only']['count']} ({gap['reward_only']['rate']:.2%})"),
             ("strictly right, not rewarded", f"{gap['strict_only']['count']} ({gap['strict_only']['rate']:.2%})")]
    head = (f"model {run.get('model')}  data {run.get('data')} ({run.get('format')})  backend {run.get('backend')}"
            if run else "protocol recipe")
    lines = render(head, rows, s, {"acc": "accuracy", "strict": "strict_accuracy"})
    for name, label in (("reward_only", "rewarded but strictly wrong"),
                        ("strict_only", "strictly right but not rewarded")):
        lines += [f"[{label}] {ex['id']}#{ex['sample_index']}: gt={one_line(ex['ground_truth'], 40)} "
                  f"pred={one_line(ex['extracted_answer'], 40)} box={one_line(ex['boxed_answer'], 40)}"
                  for ex in gap[name]["examples"]]
    return "\n".join(lines)
