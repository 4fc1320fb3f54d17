#!/usr/bin/env python3
"""Evaluate a model on MATH: the recipe's protocol (with the reward's hacking gap) or OpenCompass's.

The manual (arguments with their types and units, data layouts, outputs, errors and the source
of every rule) is MANUAL below, printed by ``python evaluate.py --help``.
"""
from __future__ import annotations

MANUAL = """\
Usage
-----
    python evaluate.py --model MODEL_DIR --data DATA_FILE [--protocol recipe|opencompass]
        [--output-dir DIR] [--limit N]
        [--batch-size B] [--max-new-tokens T] [--temperature X] [--top-p P] [--n N] [--k 1,4]
        [--seed S] [--backend auto|vllm|hf] [--dtype auto|float32|bfloat16|float16]
        [--tensor-parallel-size TP] [--gpu-memory-utilization F] [--cpu-threads T] [--overwrite]
    python evaluate.py --rescore-opencompass PRED_DIR_OR_FILE [--output-dir DIR]

    # base model vs. the merged GRPO checkpoint (merge_checkpoint.sh), MATH-500, greedy
    python evaluate.py --model models/Qwen2.5-1.5B-Instruct --data /path/to/math500/test.jsonl
    python evaluate.py --model outputs/qwen2_5_1_5b_math/checkpoints/global_step_280/actor/huggingface \\
        --data data/math-lighteval/data/test-00000-of-00001.parquet
    # pass@k with sampling
    python evaluate.py --model M --data D --n 8 --k 1,4,8 --temperature 1.0
    # OpenCompass's MATH protocol without OpenCompass (4-shot, its judge), then re-judge a real
    # OpenCompass run's predictions with the same judge
    python evaluate.py --protocol opencompass --model M --data data/opencompass/math.json --limit 50
    python evaluate.py --rescore-opencompass outputs/opencompass/<abbr>/<timestamp>

Arguments
---------
--model DIR          path; a Hugging Face model directory (config.json, weights, tokenizer files with
                     a chat template). Required.
--protocol NAME      recipe (default) or opencompass; the two differ in everything but the model:
                     * recipe: 0-shot, the training prompt (problem + INSTRUCTION, the answer
                       contract), sampling knobs as below, judged by the training reward and a
                       strict math-verify check of the last box (see "What it does");
                     * opencompass: OpenCompass 0.5.4's math_gen_a58d9d as it really runs
                       (opencompass_math.py): the 4-shot Minerva-style turns exactly as sent
                       (their doubled braces included), the problem as "Problem:\n...\nSolution:\n",
                       the model's chat template; greedy decoding with the model's
                       generation_config.json otherwise in force (transformers; vLLM: temperature
                       0 only), cut at the EOS strings; reference = the solution's last \boxed{}
                       as OpenCompass's MATHDataset reads it (MATH-500 jsonl: ``answer``);
                       judged as MATHVerifyEvaluator judges (math-verify on the raw response,
                       first LaTeX match, boxed first). Needs greedy decoding (--temperature 0,
                       --n 1) and a layout with the problem text (not a verl parquet). Records:
                       id, level, type, sample_index, ground_truth, response, correct, status
                       (ok / skipped / error), pred and answer (math-verify's parses, as in
                       OpenCompass's results file), response_tokens, prompt_tokens, truncated.
--rescore-opencompass PATH
                     path; re-judge predictions a real OpenCompass run made, with this script's
                     opencompass-protocol judge, so both judges see identical generations. PATH is
                     a predictions file (``predictions/<abbr>/math.json``), or a folder holding
                     ``predictions/*/math.json`` (an OpenCompass output folder, or a parent of
                     one: the newest timestamped run is used). Per problem it compares the verdict
                     with OpenCompass's own (``results/<abbr>/math.json`` beside the predictions,
                     when present) and the sent turns (``origin_prompt``) with build_messages
                     (the problem is taken from the last turn). Writes rescore.jsonl and
                     summary.json to --output-dir (default outputs/eval/rescore-<abbr>); prints
                     the agreement and every disagreement. --model/--data are not used.
--data FILE          path; one of (detected by columns / fields, never by file name):
                     * MATH-lighteval parquet (``problem, level, type, solution``; e.g. the shipped
                       ``data/math-lighteval/data/test-00000-of-00001.parquet``); ground truth = the
                       last ``\\boxed{}`` of ``solution`` (new_math_reward.extract_last_boxed, as
                       prepare_math.py); id = ``{split}-{row}`` with split from the file name
                       (``test-00000-...`` -> ``test``), the same ids a verl parquet of that split gets;
                     * MATH-500-style JSON lines (``problem, answer`` and optional ``unique_id,
                       subject, level, solution``); ground truth = ``answer``; id = ``unique_id``;
                     * verl parquet from prepare_math.py (``data_source, prompt, reward_model,
                       extra_info``); ground truth = ``reward_model.ground_truth``; the prompt is
                       the row's ``prompt``; id = ``{extra_info.split}-{extra_info.index}``;
                     * OpenCompass's ``math.json`` (parquet2json.py: one JSON object whose values
                       are MATH-lighteval records), read as the MATH-lighteval layout in key
                       order; id = ``math-{row}``.
                     Anything else -> one-line error naming the file and the columns found.
--output-dir DIR     path; receives samples.jsonl, summary.json, run_config.json. Default, beside
                     this script: ``outputs/eval/<experiment>-global_step_N-<data file stem>`` for a
                     merged checkpoint ``.../<experiment>/checkpoints/global_step_N/actor/huggingface``,
                     else ``outputs/eval/<model dir name>-<data file stem>``.
--limit N            int >= 1; evaluate the first N problems of the file only.
--batch-size B       int >= 1; prompts per generate call. Default 8 (transformers), 256 (vLLM).
--max-new-tokens T   int >= 1; response budget in tokens. Default 1024 (the recipe's
                     data.max_response_length; OpenCompass's max_out_len in the reference).
--temperature X      float >= 0; 0 = greedy (default, verl's validation setting
                     rollout.val_kwargs: temperature 0, do_sample False, top_p 1, top_k -1).
--top-p P            float in (0, 1]; nucleus sampling, used when X > 0. Default 1.0.
--n N                int >= 1; samples per problem (N > 1 needs X > 0). Default 1.
--k LIST             comma-separated ints, each <= N; pass@k values to report. Default: 1 and N.
--seed S             int; torch / vLLM sampling seed. Default 0.
--backend NAME       auto (vLLM when importable and a CUDA or Ascend NPU device is present, else
                     transformers), vllm or hf. Default auto.
--dtype NAME         auto (float32 on CPU, bfloat16 on an accelerator), float32, bfloat16, float16.
--tensor-parallel-size TP, --gpu-memory-utilization F: vLLM engine settings (defaults 1, 0.8).
--cpu-threads T      int >= 0; torch.set_num_threads for the transformers backend; 0 (default)
                     keeps torch's default. On a shared CPU, 1 avoids thread oversubscription
                     (measured here: 2 threads on 2 busy cores ran 10x slower than 1).
--overwrite          start afresh: remove this output directory's samples.jsonl and summary.json.

What it does
------------
1. Prompts exactly as training builds them: the user turn is ``problem + " " + INSTRUCTION``
   (prepare_math.py; a verl parquet's own ``prompt`` is used as is), rendered with the model
   tokenizer's chat template (``apply_chat_template(messages, add_generation_prompt=True,
   tokenize=False)``) and encoded with ``add_special_tokens=False``, as verl 0.6.0's
   RLHFDataset does; the system prompt therefore comes from the model's chat template, i.e. the
   recipe's tokenizer_config.json for Qwen2.5 (merge_checkpoint.sh keeps it there).
2. Generates with vLLM or transformers (batched, left padding). Sampling parameters are passed
   explicitly with repetition_penalty 1.0 and no top-k, as verl's vLLM rollout does; the
   sampling defaults in the model's generation_config.json (Qwen2.5: top_k 20, repetition
   penalty 1.05) are not applied. Responses are decoded with ``skip_special_tokens=True``, as
   verl's reward manager decodes them.
3. Scores every response twice:
   * the training reward, ``new_math_reward.compute_score(data_source, response, ground_truth,
     extra_info)`` (data_source from the row, else ``DigitalLearningGmbH/MATH-lighteval``);
   * a strict, independent check: math-verify alone, ``verify(parse("\\boxed{gt}"),
     parse("\\boxed{last box of the response}"))``; no box -> wrong. math-verify's own
     timeouts (``parsing_timeout``, ``timeout_seconds``; SIGALRM based in math-verify 0.9.0) are
     used in the main thread and switched off elsewhere (they raise off the main thread);
     boxed answers over STRICT_MAX_ANSWER_CHARS characters are judged wrong without parsing.
4. Appends one JSON line per sample to samples.jsonl as it goes (resumable: samples already in
   the file are skipped; a partially written last line is dropped), then writes summary.json
   (temp file + rename) and prints a table.

Per-sample fields (samples.jsonl)
---------------------------------
id, level, type, sample_index, data_source, ground_truth, response, extracted_answer (the
reward's ``pred``), boxed_answer (last ``\\boxed{}`` content or null), reward (``score``),
reward_acc, reward_format, reward_cot, format_credit (the reward's format rule applied to every
response, correct or not), strict_correct (bool), response_tokens (generated tokens including
the EOS token, as verl's response mask counts them), prompt_tokens, truncated (no EOS within
--max-new-tokens).

Summary (summary.json)
----------------------
``protocol`` (recipe / opencompass) and, for the recipe protocol: accuracy by the reward (``acc``) and by the strict check, overall and by level and type; mean
reward; format compliance = share of responses whose format credit is the full
``len(FORMAT_MARKERS) * FORMAT_TAG_CREDIT`` (= 0.2: all four layout markers of SYSTEM_PROMPT
once each, no stray text; new_math_reward.format_credit); mean response length (tokens);
truncation rate; pass@k (reward and strict) with the unbiased estimator of Chen et al. 2021,
"Evaluating Large Language Models Trained on Code" (arXiv:2107.03374, section 2.1),
``1 - C(n-c, k) / C(n, k)`` averaged over problems; the hacking gap: samples rewarded as
correct but strictly wrong, and strictly right but not rewarded, with counts, rates (over all
samples) and up to 5 examples each. Neither judge is ground truth: math-verify misses some
equivalent forms the reward accepts, so read the examples before calling a gap hacking.
For the opencompass protocol: problems, correct, skipped, accuracy (correct / problems, as a
fraction) and accuracy_percent (OpenCompass's figure), by level and type, mean response length,
truncation rate.

Errors: bad arguments -> usage message, exit 2 (also --protocol opencompass with --temperature
> 0 or --n > 1, and a missing --model / --data without --rescore-opencompass).
--rescore-opencompass: a missing path, no predictions/<abbr>/math.json below it, a file that is
not OpenCompass's predictions JSON, or a results file with another number of details -> one line
naming the file, exit 1. A missing or unreadable file, an unknown data
layout, a row without problem or answer, a model directory without config.json or chat
template, an output directory holding samples of a different run -> one line on stderr naming
the file, the field and what was expected; exit 1; nothing in the output directory is
overwritten (summary.json and run_config.json are written to a temporary file and renamed).
The model directory is checked before anything is written: preflight.check_model_dir
(config.json parses, weights, tokenizer files, tokenizer_config.json), then its config must load
with transformers.AutoConfig. A chat template carrying Qwen's stock system prompt instead of
the recipe's gives one WARN line on stderr (preflight.check_chat_template) and the run goes on.
"""

import argparse
import importlib.util
import json
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Iterable, Optional, Sequence

import new_math_reward as nmr
import opencompass_math as ocm
from grpo_math.io import DataError, one_line, positive_int, write_json_atomic, write_text_atomic

HERE = Path(__file__).resolve().parent

#: data_source given to the reward for rows that carry none (verl's name for MATH-lighteval).
DEFAULT_DATA_SOURCE = "DigitalLearningGmbH/MATH-lighteval"
#: The recipe's data.max_response_length (run_qwen2_5_1_5b.sh), tokens.
DEFAULT_MAX_NEW_TOKENS = 1024
DEFAULT_BATCH_SIZE = {"hf": 8, "vllm": 256}
#: math-verify timeouts in the main thread, whole seconds (signal.alarm takes integers).
STRICT_TIMEOUT_S = 5
#: Longer boxed answers are judged strictly wrong without parsing (bounded work).
STRICT_MAX_ANSWER_CHARS = 1000
#: Examples kept per direction of the hacking gap.
GAP_EXAMPLES = 5
#: Characters of the response kept in a gap example (its tail, where the answer is).
EXAMPLE_TAIL_CHARS = 400
SAMPLES_FILE = "samples.jsonl"
SUMMARY_FILE = "summary.json"
RUN_CONFIG_FILE = "run_config.json"
#: run_config.json keys that must match for samples to be resumed.
RESUME_KEYS = ("model", "data", "protocol", "n", "temperature", "top_p", "max_new_tokens")
PROTOCOLS = ("recipe", "opencompass")
RESCORE_FILE = "rescore.jsonl"
#: Full format credit: the four layout markers, each FORMAT_TAG_CREDIT (new_math_reward).
FULL_FORMAT_CREDIT = round(len(nmr.FORMAT_MARKERS) * nmr.FORMAT_TAG_CREDIT, 6)

FORMATS = {
    "lighteval": ("problem", "level", "type", "solution"),
    "math500": ("problem", "answer"),
    "verl": ("data_source", "prompt", "reward_model", "extra_info"),
}


def _plural(count: int, noun: str) -> str:
    """``1 problem``, ``2 problems``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


# ==========================================================================================
# Data
# ==========================================================================================
def detect_format(fields: Iterable[str]) -> Optional[str]:
    """Name of the MATH layout whose required fields are all in ``fields``, else None.

    Order of precedence: verl parquet, MATH-lighteval, MATH-500 (see FORMATS).
    """
    have = set(fields)
    for name in ("verl", "lighteval", "math500"):
        if set(FORMATS[name]) <= have:
            return name
    return None


def _expected_layouts() -> str:
    return "; ".join(f"{name} ({', '.join(cols)})" for name, cols in FORMATS.items())


def _level_name(value: object) -> str:
    """``3`` / ``"3"`` / ``"Level 3"`` -> ``"Level 3"``; anything else as a string."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and float(value).is_integer():
        return f"Level {int(value)}"
    s = "" if value is None else str(value).strip()
    return f"Level {s}" if s.isdigit() else s


def _read_rows(path: Path) -> list[dict]:
    """Rows of a parquet file or a JSON-lines file as dicts. Raises DataError."""
    if not path.is_file():
        raise DataError(f"{path}: file not found (expected a MATH parquet or JSON-lines file)")
    if path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            return pq.read_table(path).to_pylist()
        except (OSError, pa.ArrowException) as exc:
            raise DataError(f"{path}: not a readable parquet file ({one_line(exc)})") from None
    if path.suffix == ".json" and path.read_bytes().lstrip()[:1] == b"{":
        try:
            obj = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            obj = None  # one JSON object per line, read below
        if isinstance(obj, dict) and obj and all(isinstance(v, dict) for v in obj.values()):
            return list(obj.values())  # OpenCompass's math.json: records in key order
    if path.suffix in (".jsonl", ".json"):
        rows = []
        with open(path, encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DataError(f"{path}: line {lineno}: not valid JSON ({exc.msg}); expected one "
                                    "JSON object per line") from None
                if not isinstance(obj, dict):
                    raise DataError(f"{path}: line {lineno}: expected a JSON object, found "
                                    f"{type(obj).__name__}")
                rows.append(obj)
        return rows
    raise DataError(f"{path}: unsupported file type '{path.suffix}'; expected .parquet or .jsonl")


def _require_str(path: Path, where: str, field: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise DataError(f"{path}: {where}: field '{field}': expected a non-empty string, found "
                        f"{one_line(repr(value), 60)}")
    return value


def load_problems(path: Path, protocol: str = "recipe") -> tuple[str, list[dict], list[str]]:
    """Read MATH problems from ``path`` in any of the layouts (module docstring).

    ``protocol`` opencompass: ``messages`` are OpenCompass's 4-shot turns and ``ground_truth`` its
    reference (``opencompass_math.reference_answer`` of the solution, or MATH-500's ``answer``;
    None when OpenCompass would read none); a verl parquet is refused (no problem text).

    Returns ``(format, problems, dropped)``: ``problems`` in file order, each a dict with
    ``id, problem, level, type, ground_truth, data_source, messages`` (chat messages: list of
    {role, content}) and ``extra_info``; ``dropped`` lists the ids of rows whose solution ends in
    an empty box (no ground truth; prepare_math.py drops them too).
    Raises DataError for an unknown layout, a missing field, an empty problem or answer, a
    solution without a complete box, an unsupported data_source or duplicate ids.
    """
    rows = _read_rows(path)
    if not rows:
        raise DataError(f"{path}: no rows; expected at least one MATH problem")
    fmt = detect_format(rows[0].keys())
    if fmt is None:
        raise DataError(f"{path}: unknown MATH data layout: fields {sorted(rows[0].keys())}; expected "
                        f"{_expected_layouts()}")
    if protocol == "opencompass" and fmt == "verl":
        raise DataError(f"{path}: --protocol opencompass needs the problem text; expected a MATH-lighteval "
                        "parquet, OpenCompass's math.json or a MATH-500 jsonl, not a verl parquet")
    split = path.name.split("-")[0] if path.name.split("-")[0] in ("train", "test") else path.stem
    problems: list[dict] = []
    dropped: list[str] = []
    for i, row in enumerate(rows):
        where = f"row {i}"
        missing = [f for f in FORMATS[fmt] if f not in row]
        if missing:
            raise DataError(f"{path}: {where}: field '{missing[0]}' missing (expected {fmt} fields "
                            f"{', '.join(FORMATS[fmt])})")
        extra_info = None
        if fmt == "verl":
            prompt = row["prompt"]
            if (not isinstance(prompt, (list, tuple)) or not prompt
                    or not all(isinstance(m, dict) and {"role", "content"} <= set(m) for m in prompt)):
                raise DataError(f"{path}: {where}: field 'prompt': expected a list of {{role, content}} "
                                f"messages, found {one_line(repr(prompt), 60)}")
            messages = [{"role": m["role"], "content": m["content"]} for m in prompt]
            user = [m["content"] for m in messages if m["role"] == "user"]
            problem = user[-1] if user else messages[-1]["content"]
            rm, info = row["reward_model"] or {}, row["extra_info"] or {}
            gt = _require_str(path, where, "reward_model.ground_truth", rm.get("ground_truth"))
            data_source = _require_str(path, where, "data_source", row["data_source"])
            pid = f"{info.get('split', split)}-{info.get('index', i)}"
            level, subject = _level_name(info.get("level")), str(info.get("type") or "")
            extra_info = {k: info.get(k) for k in ("split", "index", "level", "type")}
        else:
            problem = _require_str(path, where, "problem", row["problem"])
            data_source = DEFAULT_DATA_SOURCE
            if fmt == "lighteval":
                solution = _require_str(path, where, "solution", row["solution"])
                gt = nmr.extract_last_boxed(solution)
                if gt is None:
                    raise DataError(f"{path}: {where}: field 'solution': expected a complete \\boxed{{...}} "
                                    f"answer, found ...{one_line(solution[-60:], 60)}")
                pid = f"{split}-{i}"
                level, subject = _level_name(row["level"]), str(row["type"] or "")
                if not gt.strip() and protocol == "recipe":
                    dropped.append(pid)
                    continue
            else:
                ans = row["answer"]
                gt = _require_str(path, where, "answer", ans if not isinstance(ans, (int, float)) else str(ans))
                pid = str(row.get("unique_id") or f"{split}-{i}")
                level = _level_name(row.get("level"))
                subject = str(row.get("subject") or row.get("type") or "")
            messages = [{"role": "user", "content": problem + " " + nmr.INSTRUCTION}]
            if protocol == "opencompass":
                messages = ocm.build_messages(problem)
                if fmt == "lighteval":
                    gt = ocm.reference_answer(row["solution"])
        if data_source not in nmr.SUPPORTED_DATA_SOURCES:
            raise DataError(f"{path}: {where}: field 'data_source': {data_source!r} is not judged by "
                            f"new_math_reward; expected one of {sorted(nmr.SUPPORTED_DATA_SOURCES)}")
        problems.append({"id": pid, "problem": problem, "level": level, "type": subject,
                         "ground_truth": gt, "data_source": data_source, "messages": messages,
                         "extra_info": extra_info})
    seen: set[str] = set()
    for p in problems:
        if p["id"] in seen:
            raise DataError(f"{path}: field 'id': duplicate problem id {p['id']!r}; expected unique "
                            "ids (unique_id / extra_info.split+index)")
        seen.add(p["id"])
    return fmt, problems, dropped


# ==========================================================================================
# Scoring
# ==========================================================================================
def strict_verdict(response: str, ground_truth: str) -> tuple[bool, Optional[str]]:
    """math-verify alone: is the response's last boxed answer equal to ``ground_truth``?

    Returns ``(correct, boxed_answer)``; no box (or an empty one) -> ``(False, None or "")``.
    Both sides are parsed as ``\\boxed{...}`` with math-verify's default extraction, compared with
    ``verify(gold, pred)``. Timeouts: math-verify 0.9.0's ``parsing_timeout`` / ``timeout_seconds``
    (STRICT_TIMEOUT_S seconds) in the main thread; None off it (math-verify's SIGALRM timer
    raises there). Never raises; a math-verify failure counts as wrong.
    """
    from math_verify import parse, verify

    box = nmr.extract_last_boxed(response or "")
    if box is None or not box.strip() or len(box) > STRICT_MAX_ANSWER_CHARS:
        return False, box
    timeout = STRICT_TIMEOUT_S if threading.current_thread() is threading.main_thread() else None
    try:
        gold = parse("\\boxed{" + ground_truth + "}", parsing_timeout=timeout)
        pred = parse("\\boxed{" + box + "}", parsing_timeout=timeout)
        if not gold or not pred:
            return False, box
        return bool(verify(gold, pred, timeout_seconds=timeout)), box
    except Exception:  # noqa: BLE001 - a judge failure is a wrong answer, not a crash
        return False, box


def score_sample(problem: dict, sample_index: int, response: str, response_tokens: int,
                 prompt_tokens: int, truncated: bool) -> dict:
    """One samples.jsonl record: the training reward and the strict verdict of ``response``."""
    res = nmr.compute_score(problem["data_source"], response, problem["ground_truth"],
                            problem.get("extra_info"))
    strict, box = strict_verdict(response, problem["ground_truth"])
    fmt_fn = getattr(nmr, "format_credit", None)
    return {
        "id": problem["id"], "level": problem["level"], "type": problem["type"],
        "sample_index": sample_index, "data_source": problem["data_source"],
        "ground_truth": problem["ground_truth"], "response": response,
        "extracted_answer": res.get("pred", ""), "boxed_answer": box,
        "reward": float(res["score"]), "reward_acc": float(res["acc"]),
        "reward_format": float(res.get("format", 0.0)), "reward_cot": float(res.get("cot", 0.0)),
        "format_credit": float(fmt_fn(response)) if fmt_fn else float(res.get("format", 0.0)),
        "strict_correct": bool(strict), "response_tokens": int(response_tokens),
        "prompt_tokens": int(prompt_tokens), "truncated": bool(truncated),
    }


def score_sample_opencompass(problem: dict, sample_index: int, response: str, response_tokens: int,
                             prompt_tokens: int, truncated: bool) -> dict:
    """One samples.jsonl record of the opencompass protocol: MATHVerifyEvaluator's verdict."""
    verdict = ocm.score(response, problem["ground_truth"])
    return {
        "id": problem["id"], "level": problem["level"], "type": problem["type"],
        "sample_index": sample_index, "ground_truth": problem["ground_truth"], "response": response,
        "correct": verdict["correct"], "status": verdict["status"], "pred": verdict["pred"],
        "answer": verdict["answer"], "response_tokens": int(response_tokens),
        "prompt_tokens": int(prompt_tokens), "truncated": bool(truncated),
    }


# ==========================================================================================
# Summary (pure functions)
# ==========================================================================================
def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one problem with ``n`` samples of which ``c`` are correct.

    ``1 - C(n-c, k) / C(n, k)`` (Chen et al. 2021, arXiv:2107.03374, section 2.1), computed as the
    numerically stable product ``1 - prod_{i=n-c+1..n} (1 - k/i)``. Requires 0 <= c <= n and
    1 <= k <= n; raises ValueError otherwise.
    """
    if not (0 <= c <= n) or not (1 <= k <= n):
        raise ValueError(f"pass_at_k: need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def _example(r: dict) -> dict:
    resp = r.get("response", "")
    return {"id": r["id"], "sample_index": r["sample_index"], "ground_truth": r["ground_truth"],
            "extracted_answer": r.get("extracted_answer"), "boxed_answer": r.get("boxed_answer"),
            "reward": r["reward"],
            "response_tail": resp if len(resp) <= EXAMPLE_TAIL_CHARS else "..." + resp[-EXAMPLE_TAIL_CHARS:]}


def hacking_gap(records: Sequence[dict], max_examples: int = GAP_EXAMPLES) -> dict:
    """Where the training reward and the strict check disagree.

    ``reward_only``: rewarded as correct (reward_acc == 1) but strictly wrong (possible reward
    hacking or a reward false positive); ``strict_only``: strictly right but not rewarded (reward
    false negative). Each: ``count``, ``rate`` (over all samples; 0.0 when there are none) and
    up to ``max_examples`` examples in record order.
    """
    total = len(records)
    out = {}
    for name, pick in (("reward_only", lambda r: r["reward_acc"] >= 1.0 and not r["strict_correct"]),
                       ("strict_only", lambda r: r["reward_acc"] < 1.0 and r["strict_correct"])):
        hits = [r for r in records if pick(r)]
        out[name] = {"count": len(hits), "rate": len(hits) / total if total else 0.0,
                     "examples": [_example(r) for r in hits[:max_examples]]}
    return out


def _mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values)) if values else 0.0


def _group(records: Sequence[dict], key: str) -> dict:
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        groups[r[key] or "(none)"].append(r)
    return {name: {"samples": len(rs), "accuracy": _mean([r["reward_acc"] for r in rs]),
                   "strict_accuracy": _mean([float(r["strict_correct"]) for r in rs])}
            for name, rs in sorted(groups.items())}


def summarize(records: Sequence[dict], ks: Sequence[int], n: int) -> dict:
    """Aggregate samples.jsonl records (see the module docstring for every field).

    ``records``: dicts with at least id, level, type, sample_index, reward, reward_acc,
    format_credit, strict_correct, response_tokens, truncated. ``n``: samples per problem;
    pass@k uses problems with exactly ``n`` records, for each k in ``ks`` (1 <= k <= n).
    Accuracies and rates are fractions in [0, 1] over samples; lengths are tokens.
    """
    by_problem: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        by_problem[r["id"]].append(r)
    complete = {pid: rs for pid, rs in by_problem.items() if len(rs) == n}
    pass_k: dict[str, dict[str, float]] = {"reward": {}, "strict": {}}
    for k in ks:
        for judge, ok in (("reward", lambda r: r["reward_acc"] >= 1.0), ("strict", lambda r: r["strict_correct"])):
            vals = [pass_at_k(n, sum(1 for r in rs if ok(r)), k) for rs in complete.values()]
            pass_k[judge][str(k)] = _mean(vals)
    return {
        "problems": len(by_problem),
        "samples": len(records),
        "samples_per_problem": n,
        "accuracy": _mean([r["reward_acc"] for r in records]),
        "strict_accuracy": _mean([float(r["strict_correct"]) for r in records]),
        "mean_reward": _mean([r["reward"] for r in records]),
        "format_compliance": _mean([float(r["format_credit"] >= FULL_FORMAT_CREDIT - 1e-9) for r in records]),
        "format_full_credit": FULL_FORMAT_CREDIT,
        "mean_response_tokens": _mean([r["response_tokens"] for r in records]),
        "truncated_rate": _mean([float(r["truncated"]) for r in records]),
        "pass_at_k": pass_k,
        "pass_at_k_problems": len(complete),
        "by_level": _group(records, "level"),
        "by_type": _group(records, "type"),
        "hacking_gap": hacking_gap(records),
    }


def summarize_opencompass(records: Sequence[dict]) -> dict:
    """Aggregate opencompass-protocol records (fields of score_sample_opencompass).

    accuracy = correct / problems (a fraction; ``accuracy_percent`` is OpenCompass's figure);
    skipped problems (reference unparsable) count in the denominator, as in OpenCompass.
    """
    def group(key: str) -> dict:
        groups: dict[str, list[dict]] = defaultdict(list)
        for r in records:
            groups[r.get(key) or "(none)"].append(r)
        return {g: {"samples": len(rs), "accuracy": _mean([float(r["correct"]) for r in rs])}
                for g, rs in sorted(groups.items())}

    return {
        "protocol": "opencompass",
        "problems": len(records),
        "correct": sum(1 for r in records if r["correct"]),
        "skipped": sum(1 for r in records if r.get("status") == "skipped"),
        "errors": sum(1 for r in records if r.get("status") == "error"),
        "accuracy": _mean([float(r["correct"]) for r in records]),
        "accuracy_percent": ocm.accuracy_percent(list(records)),
        "mean_response_tokens": _mean([r["response_tokens"] for r in records]),
        "truncated_rate": _mean([float(r["truncated"]) for r in records]),
        "by_level": group("level"),
        "by_type": group("type"),
    }


def format_table_opencompass(summary: dict) -> str:
    """The printed report of an opencompass-protocol summary."""
    s = summary
    run = s.get("run", {})
    lines = [f"protocol opencompass ({ocm.CONFIG_NAME})"
             + (f"  model {run.get('model')}  data {run.get('data')}  backend {run.get('backend')}" if run else "")]
    rows = [("problems / correct / skipped / errors", f"{s['problems']} / {s['correct']} / {s['skipped']} / {s['errors']}"),
            ("accuracy (OpenCompass %)", f"{s['accuracy_percent']:.2f}"),
            ("mean response length (tokens)", f"{s['mean_response_tokens']:.1f}"),
            ("truncated (no EOS)", f"{s['truncated_rate']:.4f}")]
    width = max(len(a) for a, _ in rows)
    lines += [f"{a:<{width}}  {b}" for a, b in rows]
    for title, key in (("level", "by_level"), ("type", "by_type")):
        groups = s[key]
        if groups:
            w = max(len(title), *(len(g) for g in groups))
            lines.append(f"{title:<{w}}  samples  acc")
            lines += [f"{g:<{w}}  {v['samples']:>7}  {v['accuracy']:.4f}" for g, v in groups.items()]
    return "\n".join(lines)


def format_table(summary: dict) -> str:
    """The printed report of ``summary`` (the dict from summarize plus optional 'run')."""
    s = summary
    lines = []
    run = s.get("run", {})
    if run:
        lines.append(f"model {run.get('model')}  data {run.get('data')} ({run.get('format')})  "
                     f"backend {run.get('backend')}")
    gap = s["hacking_gap"]
    rows = [
        ("problems / samples", f"{s['problems']} / {s['samples']}"),
        ("accuracy (reward acc)", f"{s['accuracy']:.4f}"),
        ("accuracy (strict math-verify)", f"{s['strict_accuracy']:.4f}"),
        ("mean reward", f"{s['mean_reward']:.4f}"),
        (f"format compliance (full {s['format_full_credit']:g} format credit)", f"{s['format_compliance']:.4f}"),
        ("mean response length (tokens)", f"{s['mean_response_tokens']:.1f}"),
        ("truncated (no EOS)", f"{s['truncated_rate']:.4f}"),
    ]
    for k in s["pass_at_k"]["reward"]:
        rows.append((f"pass@{k} reward / strict",
                     f"{s['pass_at_k']['reward'][k]:.4f} / {s['pass_at_k']['strict'][k]:.4f}"))
    rows.append(("rewarded, strictly wrong", f"{gap['reward_only']['count']} ({gap['reward_only']['rate']:.2%})"))
    rows.append(("strictly right, not rewarded", f"{gap['strict_only']['count']} ({gap['strict_only']['rate']:.2%})"))
    width = max(len(a) for a, _ in rows)
    lines += [f"{a:<{width}}  {b}" for a, b in rows]
    for title, key in (("level", "by_level"), ("type", "by_type")):
        groups = s[key]
        if not groups:
            continue
        w = max(len(title), *(len(g) for g in groups))
        lines.append(f"{title:<{w}}  samples  acc     strict")
        for g, v in groups.items():
            lines.append(f"{g:<{w}}  {v['samples']:>7}  {v['accuracy']:.4f}  {v['strict_accuracy']:.4f}")
    for name, label in (("reward_only", "rewarded but strictly wrong"), ("strict_only", "strictly right but not rewarded")):
        for ex in gap[name]["examples"]:
            lines.append(f"[{label}] {ex['id']}#{ex['sample_index']}: gt={one_line(ex['ground_truth'], 40)!s} "
                         f"pred={one_line(ex['extracted_answer'], 40)!s} box={one_line(ex['boxed_answer'], 40)!s}")
    return "\n".join(lines)


# ==========================================================================================
# Output files
# ==========================================================================================
def read_samples(path: Path) -> list[dict]:
    """Records of samples.jsonl. A last line without its newline that is not valid JSON (an
    interrupted write) is cut off the file; any other bad line raises DataError."""
    if not path.exists():
        return []
    data = path.read_bytes()
    records, offset = [], 0
    lines = data.split(b"\n")
    for lineno, raw in enumerate(lines, 1):
        is_last = lineno == len(lines)
        if raw.strip():
            try:
                rec = json.loads(raw)
                if not isinstance(rec, dict) or "id" not in rec or "sample_index" not in rec:
                    raise ValueError("not a sample record")
            except ValueError as exc:
                if is_last:  # partially written tail: drop it
                    with open(path, "r+b") as fh:
                        fh.truncate(offset)
                    break
                raise DataError(f"{path}: line {lineno}: not a sample record ({one_line(exc, 60)}); "
                                "expected one JSON object per line with id and sample_index") from None
            records.append(rec)
        offset += len(raw) + 1
    else:
        if data and not data.endswith(b"\n"):  # complete last record without newline
            with open(path, "ab") as fh:
                fh.write(b"\n")
    return records


# ==========================================================================================
# Generation
# ==========================================================================================
def _accelerator() -> Optional[str]:
    """'cuda' or 'npu' when such a device is usable, else None (imports torch)."""
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if importlib.util.find_spec("torch_npu") is not None:
        import torch_npu  # noqa: F401

        if torch.npu.is_available():  # type: ignore[attr-defined]
            return "npu"
    return None


def choose_backend(requested: str) -> str:
    """'vllm' or 'hf' for ``requested`` in auto/vllm/hf. Raises DataError when vllm is asked for
    but not importable."""
    has_vllm = importlib.util.find_spec("vllm") is not None
    if requested == "vllm":
        if not has_vllm:
            raise DataError("--backend vllm: the vllm package is not importable; expected vllm installed "
                            "(NPU: vllm-ascend) or --backend hf")
        return "vllm"
    if requested == "hf":
        return "hf"
    return "vllm" if has_vllm and _accelerator() is not None else "hf"


class HFGenerator:
    """transformers generation: batched, left padded, explicit sampling parameters."""

    def __init__(self, model_dir: Path, tokenizer, dtype: str, seed: int, cpu_threads: int = 0):
        import torch
        from transformers import AutoModelForCausalLM

        self.torch = torch
        if cpu_threads:
            torch.set_num_threads(cpu_threads)
        self.device = _accelerator() or "cpu"
        if dtype == "auto":
            dtype = "float32" if self.device == "cpu" else "bfloat16"
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype))
        self.model.to(self.device).eval()
        self.tokenizer = tokenizer
        eos = self.model.generation_config.eos_token_id
        eos = eos if isinstance(eos, list) else ([] if eos is None else [eos])
        self.eos_ids = sorted(set(eos) | ({tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()))
        pad = tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else (self.eos_ids[0] if self.eos_ids else 0)
        self.stop_words = stop_words(tokenizer, self.model.generation_config)
        torch.manual_seed(seed)

    def generate(self, prompts: list[list[int]], n: int, temperature: float, top_p: float,
                 max_new_tokens: int, protocol: str = "recipe") -> list[list[tuple[str, int, bool]]]:
        """For each prompt (token ids), ``n`` results ``(text, response tokens, truncated)``.

        ``protocol`` opencompass: greedy with the model's generation_config otherwise in force,
        special tokens kept in the text and the text cut at the stop words (OpenCompass's
        HuggingFacewithChatTemplate)."""
        import copy

        from transformers import GenerationConfig

        torch = self.torch
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
            mask[i, width - len(p):] = 1
        sample = temperature > 0
        knobs = dict(temperature=temperature, top_p=top_p, top_k=0) if sample else {}
        cfg = GenerationConfig(max_new_tokens=max_new_tokens, do_sample=sample, num_return_sequences=n,
                               repetition_penalty=1.0, eos_token_id=self.eos_ids, pad_token_id=self.pad_id,
                               **knobs)
        if protocol == "opencompass":
            cfg = copy.deepcopy(self.model.generation_config)
            cfg.update(do_sample=False, max_new_tokens=max_new_tokens, pad_token_id=self.pad_id)
        with torch.no_grad():
            out = self.model.generate(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                                      generation_config=cfg)
        gen = out[:, width:].cpu()
        results: list[list[tuple[str, int, bool]]] = [[] for _ in prompts]
        eos = torch.tensor(self.eos_ids, dtype=torch.long)
        for row in range(gen.shape[0]):
            toks = gen[row]
            hits = torch.nonzero(torch.isin(toks, eos)).flatten()
            length = int(hits[0]) + 1 if len(hits) else int(toks.shape[0])
            if protocol == "opencompass":
                text = ocm.cut_at_stop_words(self.tokenizer.decode(toks.tolist()), self.stop_words)
            else:
                text = self.tokenizer.decode(toks[:length].tolist(), skip_special_tokens=True)
            results[row // n].append((text, length, not len(hits)))
        return results


class VLLMGenerator:
    """vLLM offline generation (CUDA, or Ascend NPU through vllm-ascend)."""

    def __init__(self, model_dir: Path, dtype: str, seed: int, tp: int, gpu_mem: float):
        from vllm import LLM

        self.seed = seed
        self.llm = LLM(model=str(model_dir), tensor_parallel_size=tp, gpu_memory_utilization=gpu_mem,
                       dtype=dtype, seed=seed)

    def generate(self, prompts: list[list[int]], n: int, temperature: float, top_p: float,
                 max_new_tokens: int, protocol: str = "recipe") -> list[list[tuple[str, int, bool]]]:
        """As HFGenerator.generate; ``protocol`` opencompass: temperature 0, the stop words, other
        parameters vLLM's defaults (OpenCompass's VLLMwithChatTemplate)."""
        from vllm import SamplingParams

        if protocol == "opencompass":
            stops = stop_words(self.llm.get_tokenizer(), None)
            params = SamplingParams(temperature=0, max_tokens=max_new_tokens, stop=stops)
            outs = self.llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
            return [[(o.text, len(o.token_ids), o.finish_reason == "length") for o in req.outputs]
                    for req in outs]
        params = SamplingParams(n=n, temperature=temperature, top_p=top_p if temperature > 0 else 1.0,
                                top_k=-1, repetition_penalty=1.0, max_tokens=max_new_tokens,
                                seed=self.seed if temperature > 0 else None, skip_special_tokens=True)
        outs = self.llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        return [[(o.text, len(o.token_ids), o.finish_reason == "length") for o in req.outputs] for req in outs]


def stop_words(tokenizer, generation_config) -> list[str]:
    """OpenCompass's stop words for a chat model: the decoded EOS ids of generation_config (the
    model folder's generation_config.json when None is given) and the tokenizer's EOS token."""
    if generation_config is None:
        from transformers import GenerationConfig

        try:
            generation_config = GenerationConfig.from_pretrained(tokenizer.name_or_path)
        except OSError:
            generation_config = None
    eos = getattr(generation_config, "eos_token_id", None)
    ids = [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))
    words = {tokenizer.decode(i) for i in ids}
    if tokenizer.eos_token:
        words.add(tokenizer.eos_token)
    return sorted(w for w in words if w)


def check_model(model_dir: Path) -> None:
    """Validate the model directory before anything is written: preflight.check_model_dir
    (config.json parses, weights, tokenizer files), then transformers.AutoConfig loads it.
    Raises DataError (one line, the first failure); prints a WARN line when the chat template's
    default system prompt is Qwen's stock one (preflight.check_chat_template)."""
    import preflight as pf

    failures = [p.message for p in pf.check_model_dir(model_dir) if p.level == "FAIL"]
    if failures:
        more = f" (+{len(failures) - 1} more problem(s))" if len(failures) > 1 else ""
        message = failures[0].replace(f"MODEL_PATH={model_dir}", f"--model {model_dir}", 1)
        raise DataError(f"{message}{more}")
    from transformers import AutoConfig

    try:
        AutoConfig.from_pretrained(model_dir)
    except Exception as exc:  # noqa: BLE001 - one line for any config failure
        raise DataError(f"--model {model_dir}: config.json does not load as a transformers model config "
                        f"({one_line(exc)}); expected the config.json of a Hugging Face causal LM") from None
    try:
        system_prompt, stock_prompt = pf.recipe_prompts()
    except Exception:  # noqa: BLE001 - the reward import fails later with its own error
        return
    for p in pf.check_chat_template(model_dir, "cpu", system_prompt, stock_prompt):
        if pf.STOCK_PROMPT_NOTE in p.message:
            print(f"evaluate.py: WARN {p.message.replace(f'MODEL_PATH={model_dir}', f'--model {model_dir}', 1)}",
                  file=sys.stderr)


def default_output_name(model: Path, data: Path) -> str:
    """``<experiment>-global_step_N-<data stem>`` for ``.../<experiment>/checkpoints/global_step_N/
    actor/huggingface`` (merge_checkpoint.sh's layout), else ``<model dir name>-<data stem>``."""
    parts = model.resolve().parts
    if (len(parts) >= 5 and parts[-1] == "huggingface" and parts[-2] == "actor"
            and parts[-3].startswith("global_step_") and parts[-4] == "checkpoints"):
        return f"{parts[-5]}-{parts[-3]}-{data.stem}"
    return f"{model.resolve().name}-{data.stem}"


def load_tokenizer(model_dir: Path):
    """The model's tokenizer (left padding). Raises DataError without config.json or chat template."""
    if not (model_dir / "config.json").is_file():
        raise DataError(f"{model_dir}: no config.json; expected a Hugging Face model directory "
                        "(merge a verl checkpoint with merge_checkpoint.sh first)")
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(model_dir)
    except Exception as exc:  # noqa: BLE001 - one line for any tokenizer failure
        raise DataError(f"{model_dir}: tokenizer does not load ({one_line(exc)})") from None
    if not tok.chat_template:
        raise DataError(f"{model_dir}: field 'chat_template': missing in tokenizer_config.json / "
                        "chat_template.jinja; expected the chat template training used")
    tok.padding_side = "left"
    return tok


# ==========================================================================================
# CLI
# ==========================================================================================
def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Parse and cross-check the command line (exit 2 with a message on bad values)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0], epilog=MANUAL,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, default=None, help="Hugging Face model directory (required)")
    p.add_argument("--data", type=Path, default=None,
                   help="MATH-lighteval parquet, OpenCompass math.json, MATH-500 jsonl or verl parquet (required)")
    p.add_argument("--protocol", choices=PROTOCOLS, default="recipe",
                   help="recipe (0-shot training prompt, reward + strict check) or opencompass (math_gen_a58d9d)")
    p.add_argument("--rescore-opencompass", type=Path, default=None, metavar="PATH",
                   help="re-judge an OpenCompass run's predictions (file or folder); no generation")
    p.add_argument("--output-dir", type=Path, default=None, metavar="DIR",
                   help="samples.jsonl, summary.json, run_config.json; default outputs/eval/<model>-<data>")
    p.add_argument("--limit", type=positive_int, default=None, metavar="N", help="first N problems only (int >= 1)")
    p.add_argument("--batch-size", type=positive_int, default=None, metavar="B",
                   help="prompts per generate call (int >= 1; default 8 transformers, 256 vLLM)")
    p.add_argument("--max-new-tokens", type=positive_int, default=DEFAULT_MAX_NEW_TOKENS, metavar="T",
                   help="response budget, tokens (default 1024, the recipe's data.max_response_length)")
    p.add_argument("--temperature", type=float, default=0.0, metavar="X",
                   help="float >= 0; 0 = greedy (default, verl's rollout.val_kwargs)")
    p.add_argument("--top-p", type=float, default=1.0, metavar="P", help="float in (0, 1], used when X > 0")
    p.add_argument("--n", type=positive_int, default=1, metavar="N",
                   help="samples per problem (int >= 1; N > 1 needs X > 0)")
    p.add_argument("--k", type=str, default=None, help="comma-separated pass@k values, each <= n")
    p.add_argument("--seed", type=int, default=0, help="torch / vLLM sampling seed")
    p.add_argument("--backend", choices=("auto", "vllm", "hf"), default="auto")
    p.add_argument("--dtype", choices=("auto", "float32", "bfloat16", "float16"), default="auto")
    p.add_argument("--tensor-parallel-size", type=positive_int, default=1)
    p.add_argument("--gpu-memory-utilization", type=float, default=0.8, metavar="F", help="vLLM's, fraction of memory")
    p.add_argument("--cpu-threads", type=int, default=0, metavar="T",
                   help="torch CPU threads for transformers (int >= 0; 0 = torch's default)")
    p.add_argument("--overwrite", action="store_true", help="discard this output dir's samples")
    args = p.parse_args(argv)
    if args.rescore_opencompass is not None:
        return args
    for name in ("model", "data"):
        if getattr(args, name) is None:
            p.error(f"--{name} is required (or --rescore-opencompass PATH)")
    if args.protocol == "opencompass" and (args.temperature != 0 or args.n != 1):
        p.error("--protocol opencompass decodes greedily: expected --temperature 0 and --n 1")
    if args.cpu_threads < 0:
        p.error(f"--cpu-threads {args.cpu_threads}: expected >= 0")
    if args.temperature < 0:
        p.error(f"--temperature {args.temperature}: expected >= 0")
    if not 0 < args.top_p <= 1:
        p.error(f"--top-p {args.top_p}: expected 0 < p <= 1")
    if args.n > 1 and args.temperature == 0:
        p.error(f"--n {args.n} needs --temperature > 0 (greedy decoding gives {args.n} identical samples)")
    try:
        ks = sorted({int(x) for x in args.k.split(",") if x.strip()}) if args.k else sorted({1, args.n})
    except ValueError:
        p.error(f"--k {args.k}: expected comma-separated integers")
    if not ks or any(k < 1 or k > args.n for k in ks):
        p.error(f"--k {args.k}: each k must satisfy 1 <= k <= n = {args.n}")
    args.ks = ks
    if args.output_dir is None:
        suffix = "" if args.protocol == "recipe" else f"-{args.protocol}"
        args.output_dir = HERE / "outputs" / "eval" / (default_output_name(args.model, args.data) + suffix)
    return args


def _prepare_output(args: argparse.Namespace, fmt: str) -> tuple[Path, list[dict]]:
    """Create the output dir, check/record run_config.json, return (samples path, old records)."""
    out = args.output_dir
    out.mkdir(parents=True, exist_ok=True)
    samples_path = out / SAMPLES_FILE
    config = {"model": str(args.model.resolve()), "data": str(args.data.resolve()), "format": fmt,
              "protocol": args.protocol, "n": args.n, "temperature": args.temperature, "top_p": args.top_p,
              "max_new_tokens": args.max_new_tokens, "seed": args.seed}
    cfg_path = out / RUN_CONFIG_FILE
    if args.overwrite:
        for name in (SAMPLES_FILE, SUMMARY_FILE):
            if (out / name).exists():
                (out / name).unlink()
    elif samples_path.exists() and cfg_path.exists():
        try:
            old = json.loads(cfg_path.read_text(encoding="utf-8"))
        except ValueError:
            raise DataError(f"{cfg_path}: not valid JSON; expected the run_config.json this script "
                            "writes (use --overwrite or a new --output-dir)") from None
        for key in RESUME_KEYS:
            if old.get(key, "recipe" if key == "protocol" else None) != config[key]:
                raise DataError(f"{cfg_path}: field '{key}': the samples here were made with "
                                f"{old.get(key)!r}, this run asks for {config[key]!r}; expected the same "
                                "settings to resume (use --overwrite or a new --output-dir)")
    write_json_atomic(cfg_path, config)
    return samples_path, read_samples(samples_path)


def run(args: argparse.Namespace) -> dict:
    """Evaluate as described in the module docstring; return the summary dict."""
    fmt, problems, dropped = load_problems(args.data, args.protocol)
    if args.limit:
        problems = problems[: args.limit]
    model_dir = args.model
    check_model(model_dir)
    tokenizer = load_tokenizer(model_dir)
    samples_path, old = _prepare_output(args, fmt)
    wanted = {p["id"] for p in problems}
    have: dict[str, set[int]] = defaultdict(set)
    for r in old:
        have[r["id"]].add(int(r["sample_index"]))
    todo = [p for p in problems if not set(range(args.n)) <= have[p["id"]]]
    print(f"evaluate.py: {args.data} ({fmt} layout): {_plural(len(problems), 'problem')}"
          f"{f', {len(dropped)} dropped (empty boxed answer)' if dropped else ''}; "
          f"{len(problems) - len(todo)} already in {samples_path}", file=sys.stderr)

    backend = choose_backend(args.backend)
    timing = {"generate_s": 0.0, "samples_generated": 0}
    if todo:
        prompt_ids = {}
        for p in todo:
            text = tokenizer.apply_chat_template(p["messages"], add_generation_prompt=True, tokenize=False)
            prompt_ids[p["id"]] = tokenizer(text, add_special_tokens=False)["input_ids"]
        try:
            if backend == "vllm":
                gen = VLLMGenerator(model_dir, args.dtype, args.seed, args.tensor_parallel_size,
                                    args.gpu_memory_utilization)
            else:
                gen = HFGenerator(model_dir, tokenizer, args.dtype, args.seed, args.cpu_threads)
        except (OSError, ValueError, RuntimeError, KeyError) as exc:  # bad weights: one line
            raise DataError(f"--model {model_dir}: the model does not load ({one_line(exc)}); expected "
                            "readable weights matching config.json") from None
        batch = args.batch_size or DEFAULT_BATCH_SIZE[backend]
        scorer = score_sample_opencompass if args.protocol == "opencompass" else score_sample
        order = sorted(todo, key=lambda p: len(prompt_ids[p["id"]]))  # less padding per batch
        bar = tqdm_bar(total=len(order) * args.n)
        with open(samples_path, "a", encoding="utf-8") as fh:
            for start in range(0, len(order), batch):
                chunk = order[start:start + batch]
                t0 = time.perf_counter()
                outs = gen.generate([prompt_ids[p["id"]] for p in chunk], args.n, args.temperature,
                                    args.top_p, args.max_new_tokens, args.protocol)
                timing["generate_s"] += time.perf_counter() - t0
                for p, samples in zip(chunk, outs):
                    for j, (text, ntok, truncated) in enumerate(samples):
                        if j in have[p["id"]]:
                            continue
                        rec = scorer(p, j, text, ntok, len(prompt_ids[p["id"]]), truncated)
                        fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
                        old.append(rec)
                        timing["samples_generated"] += 1
                    fh.flush()
                    bar.update(len(samples))
        bar.close()
    timing["s_per_sample"] = (timing["generate_s"] / timing["samples_generated"]
                              if timing["samples_generated"] else None)
    seen_keys: set[tuple[str, int]] = set()
    records = []
    for r in old:  # the first record of each (id, sample) counts
        key = (r["id"], int(r["sample_index"]))
        if r["id"] in wanted and key[1] < args.n and key not in seen_keys:
            seen_keys.add(key)
            records.append(r)
    if args.protocol == "opencompass":
        summary = summarize_opencompass(records)
    else:
        summary = {"protocol": "recipe", **summarize(records, args.ks, args.n)}
    summary["run"] = {"model": str(model_dir), "data": str(args.data), "format": fmt, "backend": backend,
                      "protocol": args.protocol,
                      "limit": args.limit, "dropped_rows": dropped, "temperature": args.temperature,
                      "top_p": args.top_p, "max_new_tokens": args.max_new_tokens, "seed": args.seed,
                      "timing": timing}
    write_json_atomic(args.output_dir / SUMMARY_FILE, summary)
    print(format_table_opencompass(summary) if args.protocol == "opencompass" else format_table(summary))
    return summary


# ==========================================================================================
# Re-judging a real OpenCompass run
# ==========================================================================================
def find_opencompass_predictions(path: Path) -> Path:
    """The predictions file under ``path`` (see --rescore-opencompass). Raises DataError."""
    if path.is_file():
        return path
    if not path.is_dir():
        raise DataError(f"{path}: not found; expected an OpenCompass predictions file or output folder")
    hits = sorted(path.glob("predictions/*/math.json")) or sorted(path.glob("*/predictions/*/math.json"))
    if not hits:
        raise DataError(f"{path}: no predictions/<abbr>/math.json below it; expected an OpenCompass output "
                        "folder (evaluate_opencompass.sh prints it)")
    return hits[-1]  # timestamps sort in time order


def _load_json_object(path: Path, what: str) -> dict:
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: not readable JSON ({one_line(exc, 80)}); expected {what}") from None
    if not isinstance(obj, dict):
        raise DataError(f"{path}: expected a JSON object ({what}), found {type(obj).__name__}")
    return obj


def load_opencompass_predictions(path: Path) -> list[dict]:
    """Rows of an OpenCompass predictions file: ``{"0": {origin_prompt, prediction, gold}, ...}``
    in index order, each returned as ``{index, origin_prompt, prediction, gold}``. Raises DataError."""
    obj = _load_json_object(path, "OpenCompass predictions {index: {origin_prompt, prediction, gold}}")
    rows = []
    for key in sorted(obj, key=lambda k: int(k) if str(k).isdigit() else -1):
        rec = obj[key]
        if not str(key).isdigit() or not isinstance(rec, dict) or not isinstance(rec.get("prediction"), str):
            raise DataError(f"{path}: entry {key!r}: field 'prediction': expected a string under a numeric key")
        rows.append({"index": int(key), "origin_prompt": rec.get("origin_prompt"),
                     "prediction": rec["prediction"], "gold": rec.get("gold")})
    if not rows:
        raise DataError(f"{path}: no predictions; expected at least one")
    return rows


def opencompass_verdicts(pred_file: Path) -> Optional[list[dict]]:
    """OpenCompass's own per-problem details (results/<abbr>/math.json beside predictions/), or None."""
    results = pred_file.parent.parent.parent / "results" / pred_file.parent.name / pred_file.name
    if not results.is_file():
        return None
    details = _load_json_object(results, "OpenCompass results with 'details'").get("details")
    if isinstance(details, dict):
        details = [details[k] for k in sorted(details, key=lambda k: int(k) if str(k).isdigit() else -1)]
    if not isinstance(details, list) or not all(isinstance(d, dict) for d in details):
        raise DataError(f"{results}: field 'details': expected per-problem results (run with details dumped)")

    def one(value):  # OpenCompass 0.5.4 stores each detail field as a one-element list
        return value[0] if isinstance(value, list) and len(value) == 1 else value

    return [{k: one(v) for k, v in d.items()} for d in details]


def rescore_opencompass(path: Path, output_dir: Optional[Path]) -> dict:
    """Re-judge an OpenCompass run's predictions with opencompass_math.score (module docstring)."""
    pred_file = find_opencompass_predictions(path)
    rows = load_opencompass_predictions(pred_file)
    theirs = opencompass_verdicts(pred_file)
    if theirs is not None and len(theirs) != len(rows):
        raise DataError(f"{pred_file.parent.parent.parent / 'results'}: {len(theirs)} details for {len(rows)} "
                        "predictions; expected one per prediction (a skipped reference has no detail)")
    records, disagreements, prompt_mismatch = [], [], []
    for i, row in enumerate(rows):
        verdict = ocm.score(row["prediction"], row["gold"])
        try:
            sent = ocm.messages_from_origin_prompt(row["origin_prompt"])
        except ValueError:
            sent = []
        problem = ocm.problem_from_messages(sent)
        prompt_ok = problem is not None and sent == ocm.build_messages(problem)
        rec = {"index": row["index"], "gold": row["gold"], "prediction": row["prediction"],
               "correct": verdict["correct"], "status": verdict["status"], "pred": verdict["pred"],
               "answer": verdict["answer"], "prompt_matches": prompt_ok}
        if theirs is not None:
            rec["opencompass_correct"] = bool(theirs[i].get("correct"))
            rec["opencompass_pred"] = theirs[i].get("pred")
            if rec["opencompass_correct"] != rec["correct"]:
                disagreements.append(rec)
        if not prompt_ok:
            prompt_mismatch.append(row["index"])
        records.append(rec)
    abbr = pred_file.parent.name
    out = output_dir or HERE / "outputs" / "eval" / f"rescore-{abbr}"
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / RESCORE_FILE, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    summary = {
        "protocol": "opencompass", "mode": "rescore", "predictions": str(pred_file),
        "problems": len(records), "correct": sum(r["correct"] for r in records),
        "accuracy_percent": ocm.accuracy_percent(records),
        "opencompass_correct": None if theirs is None else sum(r["opencompass_correct"] for r in records),
        "agreement": None if theirs is None else (len(records) - len(disagreements)) / len(records),
        "disagreements": [{k: r[k] for k in ("index", "gold", "pred", "opencompass_pred", "correct",
                                             "opencompass_correct")} for r in disagreements],
        "prompt_mismatches": prompt_mismatch,
    }
    write_json_atomic(out / SUMMARY_FILE, summary)
    agree = ("OpenCompass's verdicts not found (results/<abbr>/math.json)" if theirs is None else
             f"agrees with OpenCompass on {len(records) - len(disagreements)}/{len(records)} problems "
             f"(OpenCompass {summary['opencompass_correct']} correct)")
    print(f"protocol opencompass (rescore of {pred_file}): {summary['correct']}/{len(records)} correct "
          f"({summary['accuracy_percent']:.2f} %); {agree}; prompts equal to build_messages: "
          f"{len(records) - len(prompt_mismatch)}/{len(records)}; -> {out}")
    for r in disagreements:
        print(f"  disagreement #{r['index']}: gold={one_line(r['gold'], 40)} ours={r['correct']} "
              f"({one_line(r['pred'], 60)}) opencompass={r['opencompass_correct']} "
              f"({one_line(r['opencompass_pred'], 60)})")
    return summary


def tqdm_bar(total: int):
    """A tqdm progress bar over samples (to stderr)."""
    from tqdm import tqdm

    return tqdm(total=total, desc="samples", unit="sample", dynamic_ncols=True)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """CLI entry point: 0 on success, 1 on bad input (one line on stderr), 2 on bad arguments."""
    args = parse_args(argv)
    try:
        if args.rescore_opencompass is not None:
            rescore_opencompass(args.rescore_opencompass, args.output_dir)
        else:
            run(args)
    except DataError as exc:
        print(f"evaluate.py: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
