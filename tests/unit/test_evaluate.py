"""Tests for evaluate.py and grpo_math/evaluation: pass@k, the hacking gap and the summary on
crafted samples; data layout detection and its errors; resumable output; one tiny end-to-end
generation on CPU.

The generation test builds a random 2-layer Qwen2ForCausalLM (hidden size 32) over the real
Qwen2.5 tokenizer (shared/data/qwen2_5_tokenizer, plus the repo's tokenizer_config.json when
present), so it checks the plumbing, not the answers.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import evaluate as ev
import new_math_reward as nmr
from conftest import REPO
from grpo_math.evaluation import data, recipe, run
from grpo_math.io import DataError

TOKENIZER = REPO.parent / "shared" / "data" / "qwen2_5_tokenizer"
LIGHTEVAL_TEST = REPO / "data" / "math-lighteval" / "data" / "test-00000-of-00001.parquet"
MATH500 = REPO.parent / "shared" / "data" / "math500" / "test.jsonl"


def rec(pid, idx=0, acc=0.0, strict=False, level="Level 1", typ="Algebra", fmt=0.0, tokens=10,
        truncated=False, reward=None):
    """A samples.jsonl record with the fields summarize() reads."""
    return {"id": pid, "sample_index": idx, "level": level, "type": typ, "reward_acc": acc,
            "strict_correct": strict, "reward": acc * 0.7 if reward is None else reward,
            "format_credit": fmt, "response_tokens": tokens, "truncated": truncated,
            "ground_truth": "1", "extracted_answer": "1" if acc else "", "boxed_answer": None,
            "response": f"response of {pid}#{idx}"}


# ------------------------------------------------------------------------------------------
# pass@k
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 5, 10])
def test_pass_at_k_matches_the_combinatorial_formula(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            expected = 1.0 - math.comb(n - c, k) / math.comb(n, k)
            assert recipe.pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_known_values_and_errors():
    assert recipe.pass_at_k(5, 2, 1) == pytest.approx(0.4)
    assert recipe.pass_at_k(4, 1, 2) == pytest.approx(0.5)
    assert recipe.pass_at_k(3, 0, 3) == 0.0 and recipe.pass_at_k(3, 3, 1) == 1.0
    for bad in [(3, 4, 1), (3, 1, 4), (3, 1, 0), (3, -1, 1)]:
        with pytest.raises(ValueError):
            recipe.pass_at_k(*bad)


# ------------------------------------------------------------------------------------------
# hacking gap and summary
# ------------------------------------------------------------------------------------------
def test_hacking_gap_counts_both_directions_and_caps_examples():
    records = ([rec("agree-right", acc=1.0, strict=True), rec("agree-wrong")]
               + [rec(f"hack{i}", acc=1.0, strict=False) for i in range(7)]
               + [rec("missed", acc=0.0, strict=True)])
    gap = recipe.hacking_gap(records)
    assert gap["reward_only"]["count"] == 7 and gap["reward_only"]["rate"] == pytest.approx(0.7)
    assert [e["id"] for e in gap["reward_only"]["examples"]] == [f"hack{i}" for i in range(5)]
    assert gap["strict_only"]["count"] == 1 and gap["strict_only"]["rate"] == pytest.approx(0.1)
    ex = gap["strict_only"]["examples"][0]
    assert ex["id"] == "missed" and {"ground_truth", "extracted_answer", "boxed_answer", "response_tail"} <= set(ex)
    assert recipe.hacking_gap([]) == {"reward_only": {"count": 0, "rate": 0.0, "examples": []},
                                  "strict_only": {"count": 0, "rate": 0.0, "examples": []}}


def test_real_reward_and_strict_check_disagree_on_crafted_responses():
    """The reward reads the <answer> block, the strict check the last box of the response."""
    prob = {"id": "p", "level": "Level 2", "type": "Algebra", "ground_truth": "2",
            "data_source": recipe.DEFAULT_DATA_SOURCE, "extra_info": None}
    layout = "<think>\nStep 1: solve.\n</think>\n<answer>\n\\boxed{%s}\n</answer>"
    # the same value restated after </answer> in words: the reward pays it, the strict check reads the words
    rewarded_only = recipe.judge(prob, layout % "2" + " In words: \\boxed{\\text{two}}.")
    strict_only = recipe.judge(prob, layout % "5" + "\nActually \\boxed{2}")
    both = recipe.judge(prob, layout % "2")
    assert (rewarded_only["reward_acc"], rewarded_only["strict_correct"]) == (1.0, False)
    assert (strict_only["reward_acc"], strict_only["strict_correct"]) == (0.0, True)
    assert (both["reward_acc"], both["strict_correct"], both["boxed_answer"]) == (1.0, True, "2")
    assert both["format_credit"] == pytest.approx(recipe.FULL_FORMAT_CREDIT) == pytest.approx(0.2)
    gap = recipe.hacking_gap([rewarded_only, strict_only, both])
    assert gap["reward_only"]["count"] == 1 and gap["strict_only"]["count"] == 1


def test_strict_verdict_edge_cases():
    assert recipe.strict_verdict("so \\boxed{\\dfrac12}", "\\frac{1}{2}") == (True, "\\dfrac12")
    assert recipe.strict_verdict("no box at all", "1") == (False, None)
    assert recipe.strict_verdict("\\boxed{}", "1") == (False, "")
    huge = "1" * (recipe.STRICT_MAX_ANSWER_CHARS + 1)
    assert recipe.strict_verdict("\\boxed{%s}" % huge, huge)[0] is False


def test_strict_verdict_works_off_the_main_thread():
    import threading

    out = []
    t = threading.Thread(target=lambda: out.append(recipe.strict_verdict("\\boxed{0.5}", "\\frac{1}{2}")))
    t.start()
    t.join()
    assert out == [(True, "0.5")]


def test_summarize_fields_groups_and_pass_at_k():
    records = [
        rec("a", 0, acc=1.0, strict=True, level="Level 1", typ="Algebra", fmt=0.2, tokens=10),
        rec("a", 1, acc=0.0, strict=True, level="Level 1", typ="Algebra", fmt=0.15, tokens=20),
        rec("b", 0, acc=0.0, strict=False, level="Level 3", typ="Geometry", fmt=0.2, tokens=30, truncated=True),
        rec("b", 1, acc=0.0, strict=False, level="Level 3", typ="Geometry", fmt=0.0, tokens=40),
        rec("c", 0, acc=1.0, strict=False, level="Level 3", typ="Algebra", fmt=0.2, tokens=50),  # incomplete
    ]
    s = recipe.summarize(records, ks=[1, 2], n=2)
    assert (s["problems"], s["samples"], s["samples_per_problem"]) == (3, 5, 2)
    assert s["accuracy"] == pytest.approx(2 / 5) and s["strict_accuracy"] == pytest.approx(2 / 5)
    assert s["format_compliance"] == pytest.approx(3 / 5) and s["format_full_credit"] == pytest.approx(0.2)
    assert s["mean_response_tokens"] == pytest.approx(30.0) and s["truncated_rate"] == pytest.approx(0.2)
    # pass@k over the problems with n samples (a, b): reward a=[1,0], b=[0,0]; strict a=[1,1], b=[0,0]
    assert s["pass_at_k_problems"] == 2
    assert s["pass_at_k"]["reward"] == {"1": pytest.approx(0.25), "2": pytest.approx(0.5)}
    assert s["pass_at_k"]["strict"] == {"1": pytest.approx(0.5), "2": pytest.approx(0.5)}
    assert s["by_level"]["Level 1"] == {"samples": 2, "accuracy": 0.5, "strict_accuracy": 1.0}
    assert s["by_level"]["Level 3"]["samples"] == 3
    assert s["by_type"]["Geometry"] == {"samples": 2, "accuracy": 0.0, "strict_accuracy": 0.0}
    assert s["hacking_gap"]["reward_only"]["count"] == 1 and s["hacking_gap"]["strict_only"]["count"] == 1
    table = recipe.format_table(s)
    assert "pass@2 reward / strict" in table and "Geometry" in table and "rewarded, strictly wrong" in table


def test_summarize_empty():
    s = recipe.summarize([], ks=[1], n=1)
    assert s["samples"] == 0 and s["accuracy"] == 0.0 and s["pass_at_k"]["reward"] == {"1": 0.0}


# ------------------------------------------------------------------------------------------
# data layouts
# ------------------------------------------------------------------------------------------
def test_detect_format():
    assert data.detect_format(["problem", "level", "type", "solution"]) == "lighteval"
    assert data.detect_format(["problem", "solution", "answer", "subject", "level", "unique_id"]) == "math500"
    assert data.detect_format(["data_source", "prompt", "ability", "reward_model", "extra_info"]) == "verl"
    assert data.detect_format(["question", "answer"]) is None


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_math500_jsonl_fields(tmp_path):
    rows = [{"problem": "1+1?", "answer": "2", "subject": "Prealgebra", "level": 1, "unique_id": "test/x/1.json"},
            {"problem": "2+2?", "answer": 4, "level": "3"}]
    fmt, probs, dropped = data.load_problems(write_jsonl(tmp_path / "m.jsonl", rows))
    assert fmt == "math500" and dropped == []
    assert probs[0]["id"] == "test/x/1.json" and probs[0]["level"] == "Level 1" and probs[0]["type"] == "Prealgebra"
    assert probs[1]["id"] == "m-1" and probs[1]["ground_truth"] == "4" and probs[1]["level"] == "Level 3"
    assert probs[0]["messages"] == [{"role": "user", "content": "1+1? " + nmr.INSTRUCTION}]
    assert probs[0]["data_source"] == "DigitalLearningGmbH/MATH-lighteval"


@pytest.mark.skipif(not MATH500.exists(), reason="shared MATH-500 copy not present")
def test_shared_math500():
    fmt, probs, _ = data.load_problems(MATH500)
    assert fmt == "math500" and len(probs) == 500 and probs[0]["id"].startswith("test/")


@pytest.mark.skipif(not LIGHTEVAL_TEST.exists(), reason="shipped MATH test split not present")
def test_shipped_lighteval_test_split():
    fmt, probs, dropped = data.load_problems(LIGHTEVAL_TEST)
    assert fmt == "lighteval" and len(probs) == 5000 and dropped == []
    assert probs[0]["id"] == "test-0" and probs[0]["level"].startswith("Level ")


def test_lighteval_parquet_ids_ground_truth_and_empty_box(tmp_path):
    table = pa.table({"problem": ["p0", "p1", "p2"], "level": ["Level 1", "Level 2", "Level 5"],
                      "type": ["Algebra", "Geometry", "Number Theory"],
                      "solution": ["so \\boxed{\\frac{1}{2}}.", "\\boxed{}", "first \\boxed{1} then \\boxed{7}"]})
    path = tmp_path / "test-00000-of-00001.parquet"
    pq.write_table(table, path)
    fmt, probs, dropped = data.load_problems(path)
    assert fmt == "lighteval" and dropped == ["test-1"]
    assert [(p["id"], p["ground_truth"]) for p in probs] == [("test-0", "\\frac{1}{2}"), ("test-2", "7")]


def test_verl_parquet_from_prepare_math(tmp_path):
    import prepare_math

    recs = [prepare_math.to_record("What is 1+1?", "Level 1", "Algebra", "2", "test", 17)]
    path = tmp_path / "test.parquet"
    pq.write_table(pa.Table.from_pylist(recs, schema=prepare_math.OUTPUT_SCHEMA), path)
    fmt, probs, _ = data.load_problems(path)
    assert fmt == "verl"
    p = probs[0]
    assert p["id"] == "test-17" and p["ground_truth"] == "2" and p["level"] == "Level 1"
    assert p["messages"] == recs[0]["prompt"] and p["extra_info"]["index"] == 17


@pytest.mark.parametrize("name,content,needle", [
    ("x.csv", "problem,answer\n", "unsupported file type '.csv'"),
    ("x.jsonl", '{"question": "q", "answer": "1"}\n', "unknown MATH data layout"),
    ("x.jsonl", '{"problem": "q", "answer": "1"}\n{"problem": "q2"}\n', "row 1: field 'answer' missing"),
    ("x.jsonl", '{"problem": "q", "answer": "1"}\nnot json\n', "line 2: not valid JSON"),
    ("x.jsonl", '{"problem": "", "answer": "1"}\n', "field 'problem': expected a non-empty string"),
    ("x.jsonl", '{"problem": "q", "answer": " "}\n', "field 'answer': expected a non-empty string"),
    ("x.jsonl", '{"problem": "q", "answer": "1", "unique_id": "a"}\n{"problem": "r", "answer": "2", "unique_id": "a"}\n',
     "duplicate problem id 'a'"),
    ("x.jsonl", "", "no rows"),
])
def test_data_errors_name_the_file_and_field(tmp_path, name, content, needle):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DataError) as err:
        data.load_problems(path)
    msg = str(err.value)
    assert str(path) in msg and needle in msg and "\n" not in msg


def test_data_errors_parquet(tmp_path):
    path = tmp_path / "weird.parquet"
    pq.write_table(pa.table({"question": ["q"], "answer": ["1"]}), path)
    with pytest.raises(DataError, match="unknown MATH data layout.*expected verl .*; lighteval .*; math500 "):
        data.load_problems(path)
    nobox = tmp_path / "test-1.parquet"
    pq.write_table(pa.table({"problem": ["q"], "level": ["Level 1"], "type": ["Algebra"], "solution": ["no box"]}), nobox)
    with pytest.raises(DataError, match="row 0: field 'solution': expected a complete"):
        data.load_problems(nobox)
    with pytest.raises(DataError, match="file not found"):
        data.load_problems(tmp_path / "missing.parquet")


def test_cli_bad_input_is_one_line_exit_1(tmp_path, capsys):
    bad = tmp_path / "x.jsonl"
    bad.write_text('{"question": "q"}\n')
    rc = ev.main(["--model", str(tmp_path), "--data", str(bad), "--output-dir", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert rc == 1 and err.startswith("evaluate.py: ") and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("extra", [["--n", "2"], ["--n", "2", "--temperature", "1", "--k", "3"],
                                   ["--top-p", "0"], ["--temperature", "-1"], ["--limit", "0"]])
def test_cli_bad_arguments_exit_2(extra):
    with pytest.raises(SystemExit) as exc:
        ev.parse_args(["--model", "m", "--data", "d.jsonl", *extra])
    assert exc.value.code == 2


@pytest.mark.parametrize("argv, missing", [(["--data", "d.json"], "--model"), (["--model", "m"], "--data"),
                                           ([], "--model, --data")])
def test_model_and_data_are_required(capsys, argv, missing):
    with pytest.raises(SystemExit) as exc:
        ev.parse_args(argv)
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and len(err.splitlines()) == 1
    assert err.endswith(f"the following arguments are required: {missing}")


def test_default_ks():
    args = ev.parse_args(["--model", "m", "--data", "d.jsonl", "--n", "4", "--temperature", "0.7"])
    assert args.ks == [1, 4]


# ------------------------------------------------------------------------------------------
# resumable output
# ------------------------------------------------------------------------------------------
def test_read_samples_drops_a_partial_last_line(tmp_path):
    path = tmp_path / "samples.jsonl"
    good = json.dumps(rec("a")) + "\n" + json.dumps(rec("b")) + "\n"
    path.write_text(good + '{"id": "c", "sample_ind', encoding="utf-8")
    assert [r["id"] for r in run.read_samples(path)] == ["a", "b"]
    assert path.read_text(encoding="utf-8") == good  # ready for appending
    path.write_text(good.rstrip("\n"), encoding="utf-8")  # complete record, newline lost
    assert len(run.read_samples(path)) == 2 and path.read_text(encoding="utf-8") == good


def test_read_samples_rejects_a_bad_middle_line(tmp_path):
    path = tmp_path / "samples.jsonl"
    path.write_text(json.dumps(rec("a")) + "\ngarbage\n" + json.dumps(rec("b")) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match="line 2: not a sample record"):
        run.read_samples(path)


def test_resume_refuses_samples_of_a_different_run(tmp_path):
    out = tmp_path / "out"
    args = ev.parse_args(["--model", str(tmp_path), "--data", str(tmp_path / "d.jsonl"), "--output-dir", str(out)])
    run.prepare_output(args, "math500")
    (out / run.SAMPLES_FILE).write_text(json.dumps(rec("a")) + "\n")
    args.max_new_tokens = 256
    with pytest.raises(DataError, match="field 'max_new_tokens'.*1024.*256"):
        run.prepare_output(args, "math500")
    assert (out / run.SAMPLES_FILE).exists()  # nothing overwritten
    args.overwrite = True
    _, old = run.prepare_output(args, "math500")
    assert old == [] and not (out / run.SAMPLES_FILE).exists()


def test_resume_refuses_samples_of_another_protocol(tmp_path):
    """An output folder an older evaluate.py filled under --protocol opencompass is not resumed."""
    out = tmp_path / "out"
    args = ev.parse_args(["--model", str(tmp_path), "--data", str(tmp_path / "d.jsonl"), "--output-dir", str(out)])
    run.prepare_output(args, "math500")
    cfg = out / run.RUN_CONFIG_FILE
    cfg.write_text(cfg.read_text().replace('"protocol": "recipe"', '"protocol": "opencompass"'))
    (out / run.SAMPLES_FILE).write_text(json.dumps(rec("a")) + "\n")
    with pytest.raises(DataError, match="field 'protocol'.*'opencompass'.*'recipe'"):
        run.prepare_output(args, "math500")


# ------------------------------------------------------------------------------------------
# tiny end-to-end generation
# ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_qwen(tmp_path_factory) -> Path:
    """A random 2-layer Qwen2ForCausalLM (hidden 32) with the real Qwen2.5 tokenizer files."""
    if not (TOKENIZER / "tokenizer.json").exists():
        pytest.skip("shared Qwen2.5 tokenizer not present")
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    out = tmp_path_factory.mktemp("tiny_qwen")
    for f in TOKENIZER.iterdir():
        shutil.copy(f, out / f.name)
    if (REPO / "tokenizer_config.json").exists():
        shutil.copy(REPO / "tokenizer_config.json", out / "tokenizer_config.json")
    tok = AutoTokenizer.from_pretrained(out)
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=2048,
                      tie_word_embeddings=True, bos_token_id=151643, eos_token_id=151645, pad_token_id=151643)
    Qwen2ForCausalLM(cfg).save_pretrained(out)
    return out


def test_tiny_generation_files_summary_and_resume(tiny_qwen, tmp_path, capsys):
    data = write_jsonl(tmp_path / "m.jsonl", [
        {"problem": "What is $1+1$?", "answer": "2", "subject": "Prealgebra", "level": 1, "unique_id": "u1"},
        {"problem": "Solve $2x=6$.", "answer": "3", "subject": "Algebra", "level": 2, "unique_id": "u2"},
        {"problem": "What is $\\frac{1}{2}+\\frac{1}{2}$?", "answer": "1", "subject": "Prealgebra", "level": 1,
         "unique_id": "u3"},
        {"problem": "Not evaluated (--limit 3).", "answer": "0", "unique_id": "u4"},
    ])
    out = tmp_path / "out"
    argv = ["--model", str(tiny_qwen), "--data", str(data), "--output-dir", str(out), "--limit", "3",
            "--max-new-tokens", "8", "--batch-size", "2", "--backend", "hf"]
    assert ev.main(argv) == 0
    lines = (out / "samples.jsonl").read_text(encoding="utf-8").splitlines()
    samples = [json.loads(x) for x in lines]
    assert sorted(s["id"] for s in samples) == ["u1", "u2", "u3"]
    fields = {"id", "level", "type", "sample_index", "response", "extracted_answer", "boxed_answer", "reward",
              "reward_acc", "strict_correct", "response_tokens", "format_credit", "truncated", "ground_truth"}
    for s in samples:
        assert fields <= set(s) and 1 <= s["response_tokens"] <= 8 and s["sample_index"] == 0
        assert isinstance(s["response"], str) and (not s["truncated"] or s["response_tokens"] == 8)
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    for key in ("accuracy", "strict_accuracy", "mean_reward", "format_compliance", "mean_response_tokens",
                "pass_at_k", "by_level", "by_type", "hacking_gap", "run"):
        assert key in summary, key
    assert summary["problems"] == 3 and summary["samples"] == 3
    assert set(summary["by_level"]) == {"Level 1", "Level 2"}
    assert summary["run"]["backend"] == "hf" and summary["run"]["timing"]["samples_generated"] == 3
    assert "accuracy (reward acc)" in capsys.readouterr().out
    # a second run resumes: nothing generated, the same samples
    assert ev.main(argv) == 0
    assert (out / "samples.jsonl").read_text(encoding="utf-8").splitlines() == lines
    assert json.loads((out / "summary.json").read_text())["run"]["timing"]["samples_generated"] == 0


def test_tiny_sampling_pass_at_k(tiny_qwen, tmp_path):
    data = write_jsonl(tmp_path / "m.jsonl", [{"problem": "What is $1+1$?", "answer": "2", "unique_id": "u1"},
                                              {"problem": "What is $2+2$?", "answer": "4", "unique_id": "u2"}])
    out = tmp_path / "out"
    argv = ["--model", str(tiny_qwen), "--data", str(data), "--output-dir", str(out), "--max-new-tokens", "4",
            "--n", "3", "--k", "1,3", "--temperature", "1.0", "--top-p", "0.9", "--backend", "hf"]
    assert ev.main(argv) == 0
    samples = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert sorted((s["id"], s["sample_index"]) for s in samples) == [(u, j) for u in ("u1", "u2") for j in range(3)]
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["pass_at_k"]["reward"]) == {"1", "3"} and summary["pass_at_k_problems"] == 2


def test_prompt_is_the_training_prompt(tiny_qwen, tmp_path):
    """The user turn carries the instruction; with the repo's tokenizer_config.json the chat
    template supplies the recipe's system prompt (as verl's RLHFDataset renders it)."""
    _, probs, _ = data.load_problems(write_jsonl(tmp_path / "m.jsonl", [{"problem": "What is $1+1$?", "answer": "2"}]))
    tok = run.load_tokenizer(tiny_qwen)
    text = tok.apply_chat_template(probs[0]["messages"], add_generation_prompt=True, tokenize=False)
    assert "What is $1+1$? " + nmr.INSTRUCTION in text and text.endswith("<|im_start|>assistant\n")
    if (REPO / "tokenizer_config.json").exists():
        assert nmr.SYSTEM_PROMPT in text


# ------------------------------------------------------------------------------------------
# model directory checked before anything is written; default output dir; wording
# ------------------------------------------------------------------------------------------
def _model_dir(tmp_path: Path, config: str | None = '{"model_type": "qwen2"}', weights: bool = True,
               tokenizer_config: Path = REPO / "tokenizer_config.json") -> Path:
    if not (TOKENIZER / "tokenizer.json").exists():
        pytest.skip("shared Qwen2.5 tokenizer not present")
    model = tmp_path / "model"
    shutil.copytree(TOKENIZER, model)
    shutil.copy(tokenizer_config, model / "tokenizer_config.json")
    if config is not None:
        (model / "config.json").write_text(config)
    if weights:
        import numpy as np
        from safetensors.numpy import save_file

        save_file({"w": np.zeros((2, 2), dtype=np.float32)}, str(model / "model.safetensors"))
    return model


@pytest.mark.parametrize("config,weights,needle", [
    ('{"model_type": "qwen2"}', False, "no weights (*.safetensors or pytorch_model*.bin)"),
    ("{not json", True, "config.json is not valid JSON"),
    ('{"hidden_size": 8}', True, "config.json does not load as a transformers model config"),
])
def test_cli_bad_model_dir_is_one_line_and_writes_nothing(tmp_path, capsys, config, weights, needle):
    model = _model_dir(tmp_path, config, weights)
    data = write_jsonl(tmp_path / "m.jsonl", [{"problem": "What is 1+1?", "answer": "2"}])
    out = tmp_path / "out"
    rc = ev.main(["--model", str(model), "--data", str(data), "--output-dir", str(out)])
    err = capsys.readouterr().err.strip()
    assert rc == 1 and len(err.splitlines()) == 1, err
    assert err.startswith(f"evaluate.py: --model {model}: ") and needle in err
    assert not out.exists()


def test_stock_qwen_prompt_warns_in_one_line(tmp_path, capsys):
    model = _model_dir(tmp_path, tokenizer_config=TOKENIZER / "tokenizer_config.json")
    run.check_model(model)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"evaluate.py: WARN --model {model}: the chat template's default system prompt is Qwen's stock one")


def test_recipe_prompt_gives_no_warning(tmp_path, capsys):
    run.check_model(_model_dir(tmp_path))
    assert capsys.readouterr().err == ""


def test_default_output_dir_is_unique_per_checkpoint(tmp_path):
    ckpt = tmp_path / "qwen_math" / "checkpoints" / "global_step_280" / "actor" / "huggingface"
    args = ev.parse_args(["--model", str(ckpt), "--data", "x/test.jsonl"])
    assert args.output_dir == REPO / "outputs" / "eval" / "qwen_math-global_step_280-test"
    other = ev.parse_args(["--model", str(ckpt).replace("280", "140"), "--data", "x/test.jsonl"])
    assert other.output_dir != args.output_dir
    plain = ev.parse_args(["--model", "models/Qwen2.5-1.5B-Instruct", "--data", "x/test.jsonl"])
    assert plain.output_dir == REPO / "outputs" / "eval" / "Qwen2.5-1.5B-Instruct-test"


def test_table_wording():
    table = recipe.format_table(recipe.summarize([rec("a", fmt=0.2)], ks=[1], n=1))
    assert "format compliance (full 0.2 format credit)" in table
