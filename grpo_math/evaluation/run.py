"""evaluate.py's run: check the model, read the problems, generate what samples.jsonl lacks, judge
and append each sample as it comes, then summarize. Output folder: ``run_config.json`` (the settings;
a relaunch with others that change the samples is refused), ``samples.jsonl`` (a record per sample,
appended: a relaunch skips the samples there, and drops a partially written last line),
``summary.json`` (written last, atomically).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from tqdm import tqdm

from grpo_math.evaluation import recipe
from grpo_math.evaluation.data import load_problems
from grpo_math.evaluation.generate import DEFAULT_BATCH_SIZE, HFGenerator, VLLMGenerator, choose_backend
from grpo_math.io import DataError, one_line, write_json_atomic

SAMPLES_FILE, SUMMARY_FILE, RUN_CONFIG_FILE = "samples.jsonl", "summary.json", "run_config.json"
#: run_config.json keys that must match for samples to be resumed ("protocol": always "recipe" now; a folder
#: an older evaluate.py filled with --protocol opencompass is refused).
RESUME_KEYS = ("model", "data", "protocol", "n", "temperature", "top_p", "max_new_tokens")


def check_model(model_dir: Path) -> None:
    """The model directory, before anything is written: model_checks.check_model_dir, then
    transformers.AutoConfig. DataError (one line, the first failure); one WARN line on stderr when the
    chat template's default system prompt is Qwen's stock one (model_checks.check_chat_template)."""
    from grpo_math import model_checks as pf

    def ours(message: str) -> str:
        return message.replace(f"MODEL_PATH={model_dir}", f"--model {model_dir}", 1)

    failures = [p.message for p in pf.check_model_dir(model_dir) if p.level == "FAIL"]
    if failures:
        more = f" (+{len(failures) - 1} more problem(s))" if len(failures) > 1 else ""
        raise DataError(ours(failures[0]) + more)
    from transformers import AutoConfig

    try:
        AutoConfig.from_pretrained(model_dir)
    except Exception as exc:  # noqa: BLE001 - one line for any config failure
        raise DataError(f"--model {model_dir}: config.json does not load as a transformers model config "
                        f"({one_line(exc)}); expected the config.json of a Hugging Face causal LM") from None
    for p in pf.check_chat_template(model_dir, "cpu", *pf.recipe_prompts()):  # new_math_reward: imported by data
        if pf.STOCK_PROMPT_NOTE in p.message:
            print(f"evaluate.py: WARN {ours(p.message)}", file=sys.stderr)


def load_tokenizer(model_dir: Path):
    """The model's tokenizer, left padding. Raises DataError when it does not load or has no chat template."""
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


def read_samples(path: Path) -> list[dict]:
    """Records of samples.jsonl. A last line without its newline that is not valid JSON (an
    interrupted write) is cut off the file; any other bad line raises DataError."""
    if not path.exists():
        return []
    data = path.read_bytes()
    records: list[dict] = []
    lines = data.split(b"\n")
    for lineno, raw in enumerate(lines, 1):
        if raw.strip():
            try:
                rec = json.loads(raw)
                if not isinstance(rec, dict) or "id" not in rec or "sample_index" not in rec:
                    raise ValueError("not a sample record")
            except ValueError as exc:
                if lineno == len(lines):  # partially written tail: drop it
                    with open(path, "r+b") as fh:
                        fh.truncate(len(data) - len(raw))
                    return records
                raise DataError(f"{path}: line {lineno}: not a sample record ({one_line(exc, 60)}); "
                                "expected one JSON object per line with id and sample_index") from None
            records.append(rec)
    if data and not data.endswith(b"\n"):  # complete last record without its newline
        with open(path, "ab") as fh:
            fh.write(b"\n")
    return records


def prepare_output(args: argparse.Namespace, fmt: str) -> tuple[Path, list[dict]]:
    """Create the output folder, check and record run_config.json; return (samples path, its records)."""
    out = args.output_dir
    out.mkdir(parents=True, exist_ok=True)
    config = {"model": str(args.model.resolve()), "data": str(args.data.resolve()), "format": fmt,
              "protocol": "recipe", "n": args.n, "temperature": args.temperature, "top_p": args.top_p,
              "max_new_tokens": args.max_new_tokens, "seed": args.seed}
    cfg_path = out / RUN_CONFIG_FILE
    if args.overwrite:
        for name in (SAMPLES_FILE, SUMMARY_FILE):
            (out / name).unlink(missing_ok=True)
    elif (out / SAMPLES_FILE).exists() and cfg_path.exists():
        try:
            old = json.loads(cfg_path.read_text(encoding="utf-8"))
        except ValueError:
            raise DataError(f"{cfg_path}: not valid JSON; expected the run_config.json this script writes "
                            "(use --overwrite or a new --output-dir)") from None
        for key in RESUME_KEYS:
            if old.get(key, "recipe" if key == "protocol" else None) != config[key]:
                raise DataError(f"{cfg_path}: field '{key}': the samples here were made with {old.get(key)!r}, "
                                f"this run asks for {config[key]!r}; expected the same settings to resume "
                                "(use --overwrite or a new --output-dir)")
    write_json_atomic(cfg_path, config)
    return out / SAMPLES_FILE, read_samples(out / SAMPLES_FILE)


def run(args: argparse.Namespace) -> dict:
    """Evaluate (module docstring); return the summary."""
    fmt, problems, dropped = load_problems(args.data)
    problems = problems[: args.limit]
    check_model(args.model)
    tokenizer = load_tokenizer(args.model)
    samples_path, old = prepare_output(args, fmt)
    first: dict[tuple[str, int], dict] = {}  # the first record of each (id, sample) counts
    for r in old:
        first.setdefault((r["id"], int(r["sample_index"])), r)
    todo = [p for p in problems if any((p["id"], j) not in first for j in range(args.n))]
    print(f"evaluate.py: {args.data} ({fmt} layout): {len(problems)} problem{'s' * (len(problems) != 1)}"
          f"{f', {len(dropped)} dropped (empty boxed answer)' if dropped else ''}; "
          f"{len(problems) - len(todo)} already in {samples_path}", file=sys.stderr)

    backend = choose_backend(args.backend)
    timing = {"generate_s": 0.0, "samples_generated": 0}
    if todo:
        prompt_ids = {p["id"]: tokenizer(tokenizer.apply_chat_template(p["messages"], add_generation_prompt=True,
                                                                       tokenize=False),
                                         add_special_tokens=False)["input_ids"] for p in todo}
        try:
            gen = (VLLMGenerator(args.model, args.dtype, args.seed, args.tensor_parallel_size,
                                 args.gpu_memory_utilization) if backend == "vllm"
                   else HFGenerator(args.model, tokenizer, args.dtype, args.seed, args.cpu_threads))
        except (OSError, ValueError, RuntimeError, KeyError) as exc:  # bad weights: one line
            raise DataError(f"--model {args.model}: the model does not load ({one_line(exc)}); expected "
                            "readable weights matching config.json") from None
        batch = args.batch_size or DEFAULT_BATCH_SIZE[backend]
        order = sorted(todo, key=lambda p: len(prompt_ids[p["id"]]))  # less padding per batch
        with open(samples_path, "a", encoding="utf-8") as fh, \
                tqdm(total=len(order) * args.n, desc="samples", unit="sample", dynamic_ncols=True) as bar:
            for start in range(0, len(order), batch):
                chunk = order[start:start + batch]
                t0 = time.perf_counter()
                outs = gen.generate([prompt_ids[p["id"]] for p in chunk], args.n, args.temperature, args.top_p,
                                    args.max_new_tokens)
                timing["generate_s"] += time.perf_counter() - t0
                for p, samples in zip(chunk, outs):
                    for j, (text, ntok, truncated) in enumerate(samples):
                        if (p["id"], j) not in first:
                            rec = {**{k: p[k] for k in ("id", "level", "type", "ground_truth")}, "sample_index": j,
                                   "response": text, **recipe.judge(p, text), "response_tokens": int(ntok),
                                   "prompt_tokens": len(prompt_ids[p["id"]]), "truncated": bool(truncated)}
                            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
                            first[(p["id"], j)] = rec
                            timing["samples_generated"] += 1
                    fh.flush()
                    bar.update(len(samples))
    timing["s_per_sample"] = timing["generate_s"] / timing["samples_generated"] if timing["samples_generated"] else None
    wanted = {p["id"] for p in problems}
    records = [r for (pid, j), r in first.items() if pid in wanted and j < args.n]
    summary = recipe.summarize(records, args.ks, args.n)
    summary["run"] = {"model": str(args.model), "data": str(args.data), "format": fmt, "backend": backend,
                      "limit": args.limit, "dropped_rows": dropped,
                      "temperature": args.temperature, "top_p": args.top_p, "max_new_tokens": args.max_new_tokens,
                      "seed": args.seed, "timing": timing}
    write_json_atomic(args.output_dir / SUMMARY_FILE, summary)
    print(recipe.format_table(summary))
    return summary
