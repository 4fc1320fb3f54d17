"""merge_checkpoint.sh on a real checkpoint: the CPU GRPO run's, which must load and generate
after merging, then evaluate.py on it (slow; CI runs it). The fast tests of the script are
tests/unit/test_merge_checkpoint.py.

The test reads the checkpoint root (trainer.default_local_dir, holding global_step_N/) of the
session's CPU run (tests/conftest.py ``cpu_run``); it never modifies that folder (it merges a copy
whose large shard is a symlink).
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from grpo_math.stacks import stack_python
from conftest import REPO
from helpers.merge_script import leftovers, run_merge


@pytest.mark.slow
def test_real_cpu_checkpoint_merges_loads_and_generates(cpu_run, tmp_path):
    """The chain prepare -> train (CPU) -> merge -> evaluate: the shared CPU run's checkpoint
    (tests/conftest.py ``cpu_run``) merged by merge_checkpoint.sh, then evaluate.py on 10
    MATH test problems; the summary holds every field."""
    assert cpu_run.returncode == 0, cpu_run.log[-3000:]
    src = cpu_run.ckpt_dir
    step = (src / "latest_checkpointed_iteration.txt").read_text().strip()
    src_actor = src / f"global_step_{step}" / "actor"
    root = tmp_path / "checkpoints"
    actor = root / f"global_step_{step}" / "actor"
    actor.mkdir(parents=True)
    for name in ("latest_checkpointed_iteration.txt", "launch_settings.json"):
        shutil.copy(src / name, root)
    shutil.copy(src_actor / "fsdp_config.json", actor)
    shutil.copytree(src_actor / "huggingface", actor / "huggingface")
    for shard in src_actor.glob("model_world_size_*_rank_*.pt"):
        (actor / shard.name).symlink_to(shard)
    proc = run_merge(str(root), PYTHON="")  # no PYTHON: the script takes the run's stack from launch_settings.json
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"; python: {stack_python(cpu_run.stack)}\n" in proc.stdout, proc.stdout
    hf = actor / "huggingface"
    assert list(hf.glob("*.safetensors")) and leftovers(root) == []
    model_type = json.loads((hf / "config.json").read_text())["model_type"]
    if model_type != "qwen2":  # tokenizer files kept as verl saved them, but for transformers 5's class name
        saved = src_actor / "huggingface"
        if (saved / "chat_template.jinja").exists():
            assert (hf / "chat_template.jinja").read_bytes() == (saved / "chat_template.jinja").read_bytes()
        config = json.loads((saved / "tokenizer_config.json").read_text())
        if config.get("tokenizer_class") == "TokenizersBackend":
            config["tokenizer_class"] = "PreTrainedTokenizerFast"
        assert json.loads((hf / "tokenizer_config.json").read_text()) == config

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(hf)
    model = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32).eval()
    prompt = tok.apply_chat_template([{"role": "user", "content": "What is 1+1?"}], add_generation_prompt=True,
                                     tokenize=False)
    ids = tok(prompt, return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=5, do_sample=False)
    assert out.shape[1] > ids["input_ids"].shape[1]
    assert isinstance(tok.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True), str)

    # evaluate the merged model on 10 MATH test problems, from the copy this repository ships, in the
    # run's own environment as the README has it (short responses keep CI fast)
    out = tmp_path / "eval"
    math_test = REPO / "data" / "math-lighteval" / "data" / "test-00000-of-00001.parquet"
    proc = subprocess.run(
        [str(stack_python(cpu_run.stack)), str(REPO / "evaluate.py"), "--model", str(hf), "--data", str(math_test),
         "--limit", "10", "--max-new-tokens", "48", "--batch-size", "10", "--output-dir", str(out)],
        capture_output=True, text=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["problems"] == 10 and summary["samples"] == 10
    for field in ("accuracy", "strict_accuracy", "mean_reward", "format_compliance", "mean_response_tokens",
                  "pass_at_k", "by_level", "by_type", "hacking_gap"):
        assert field in summary, field
    assert len((out / "samples.jsonl").read_text().splitlines()) == 10
