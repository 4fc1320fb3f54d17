"""Tests for merge_checkpoint.sh: one-line errors for bad checkpoints (fast, no merge runs), the
temporary-folder swap, the Qwen2 tokenizer-config policy on a tiny synthetic FSDP checkpoint.
A real checkpoint of the CPU GRPO run, merged, loaded and evaluated, is
tests/e2e/test_merge_real_checkpoint.py (slow).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_math.stacks import stack_python
from conftest import REPO, json_from_stack, stack_environment
from helpers.merge_script import PYTHON, SCRIPT, leftovers, run_merge

TOKENIZER = REPO.parent / "shared" / "data" / "qwen2_5_tokenizer"
SMOLLM2 = REPO / "models" / "SmolLM2-135M-Instruct"  # setup.sh --device cpu converts it


def fake_checkpoint(root: Path, step: int = 2, world_size: int = 1, shards: int | None = None,
                    hf_config: dict | None = None, fsdp_config: bool = True, tracker: bool = True) -> Path:
    """A checkpoint root with the files the script checks (shards are dummy bytes)."""
    actor = root / f"global_step_{step}" / "actor"
    actor.mkdir(parents=True)
    if fsdp_config:
        (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": world_size}))
    for rank in range(world_size if shards is None else shards):
        (actor / f"model_world_size_{world_size}_rank_{rank}.pt").write_bytes(b"shard")
    if hf_config is not None:
        (actor / "huggingface").mkdir()
        (actor / "huggingface" / "config.json").write_text(json.dumps(hf_config))
    if tracker:
        (root / "latest_checkpointed_iteration.txt").write_text(str(step))
    return actor


def assert_one_line_error(proc: subprocess.CompletedProcess, needle: str, rc: int = 1):
    err = proc.stderr.strip()
    assert proc.returncode == rc, (proc.returncode, proc.stdout, proc.stderr)
    assert len(err.splitlines()) == 1 and err.startswith("merge_checkpoint.sh: "), err
    assert needle in err, err


# ------------------------------------------------------------------------------------------
# error paths (no merge runs)
# ------------------------------------------------------------------------------------------
def test_shellcheck_clean():
    shellcheck = shutil.which("shellcheck") or str(Path(sys.executable).parent / "shellcheck")
    if not Path(shellcheck).exists():
        pytest.skip("shellcheck not installed")
    proc = subprocess.run([shellcheck, str(SCRIPT)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


def test_missing_root(tmp_path):
    assert_one_line_error(run_merge(str(tmp_path / "nope")), "checkpoint root not found")
    assert_one_line_error(run_merge(CKPT_DIR=str(tmp_path / "nope2")), "nope2: checkpoint root not found")


def test_no_step_folder(tmp_path):
    assert_one_line_error(run_merge(str(tmp_path)), "no global_step_N/ folder")
    step = tmp_path / "out" / "checkpoints" / "global_step_2"
    step.mkdir(parents=True)
    assert_one_line_error(run_merge(str(tmp_path / "out")),
                          f"expected the checkpoint root holding them (the launcher's are in {tmp_path}/out/checkpoints)")
    assert_one_line_error(run_merge(str(step)), f"(it is one: bash merge_checkpoint.sh {step.parent} 2)")


def test_missing_step(tmp_path):
    fake_checkpoint(tmp_path, step=2, hf_config={"model_type": "llama"})
    assert_one_line_error(run_merge(str(tmp_path), "5"), "global_step_5: step 5 not found; expected one of: global_step_2")
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("3\n")
    assert_one_line_error(run_merge(str(tmp_path)), "step 3 not found")
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("x")
    assert_one_line_error(run_merge(str(tmp_path)), "expected a step number")


def test_highest_step_without_tracker(tmp_path):
    fake_checkpoint(tmp_path, step=2, tracker=False, hf_config={"model_type": "llama"})
    actor = fake_checkpoint(tmp_path, step=10, tracker=False, shards=0, hf_config={"model_type": "llama"})
    # step 10 is the highest (numeric, not lexical order) and is partial: the error names it
    assert_one_line_error(run_merge(str(tmp_path)), f"{actor}: no model_world_size_*_rank_*.pt shard")


@pytest.mark.parametrize("kwargs,needle", [
    (dict(fsdp_config=False, hf_config={"model_type": "llama"}), "fsdp_config.json: missing"),
    (dict(shards=0, hf_config={"model_type": "llama"}), "no model_world_size_*_rank_*.pt shard"),
    (dict(world_size=2, shards=1, hf_config={"model_type": "llama"}), "model_world_size_2_rank_1.pt: missing"),
    (dict(hf_config=None), "huggingface/config.json: missing"),
])
def test_partial_checkpoint(tmp_path, kwargs, needle):
    fake_checkpoint(tmp_path, **kwargs)
    assert_one_line_error(run_merge(str(tmp_path)), needle)
    assert leftovers(tmp_path) == []


def test_qwen2_needs_the_recipe_tokenizer_config(tmp_path):
    fake_checkpoint(tmp_path, hf_config={"model_type": "qwen2"})
    proc = run_merge(str(tmp_path), RECIPE_TOKENIZER_CONFIG=str(tmp_path / "absent.json"))
    assert_one_line_error(proc, "absent.json: missing; expected the recipe's tokenizer_config.json")


@pytest.mark.parametrize("args,env,needle", [
    (["x", "abc"], {}, "STEP=abc"),
    (["x", "1", "extra"], {}, "too many arguments"),
    (["x"], {"TOKENIZER_POLICY": "maybe"}, "TOKENIZER_POLICY=maybe"),
    (["x"], {"FORCE": "yes"}, "FORCE=yes"),
])
def test_bad_arguments_exit_2(args, env, needle):
    assert_one_line_error(run_merge(*args, **env), needle, rc=2)


def test_already_merged_is_left_alone(tmp_path):
    actor = fake_checkpoint(tmp_path, hf_config={"model_type": "llama"})
    (actor / "huggingface" / "model.safetensors").write_bytes(b"weights")
    proc = run_merge(str(tmp_path))
    assert proc.returncode == 0 and "already holds merged weights" in proc.stdout
    assert (actor / "huggingface" / "model.safetensors").read_bytes() == b"weights"


def test_failed_merge_leaves_the_target_untouched(tmp_path):
    """A merger that dies after writing part of its output: no half-written folder remains."""
    actor = fake_checkpoint(tmp_path, hf_config={"model_type": "llama"})
    before = sorted(p.name for p in (actor / "huggingface").iterdir())
    fake = tmp_path / "fakepython"
    fake.write_text(
        "#!/usr/bin/env bash\n"
        'if [[ $1 == -m ]]; then\n'
        '  while [[ $# -gt 0 ]]; do [[ $1 == --target_dir ]] && t=$2; shift; done\n'
        '  echo partial > "$t/model-00001-of-00002.safetensors"; exit 1\n'
        "fi\n"
        f'exec "{PYTHON}" "$@"\n')
    fake.chmod(0o755)
    proc = run_merge(str(tmp_path), PYTHON=str(fake))
    assert_one_line_error(proc, "verl.model_merger merge failed")
    assert sorted(p.name for p in (actor / "huggingface").iterdir()) == before
    assert leftovers(tmp_path) == []


# ------------------------------------------------------------------------------------------
# a real merge of a tiny synthetic Qwen2 FSDP checkpoint (tokenizer policy "recipe")
# ------------------------------------------------------------------------------------------
def synthetic_checkpoint(root: Path, tokenizer_dir: Path = TOKENIZER, architecture: str = "Qwen2", plant=None):
    """A one-step FSDP checkpoint of a 2-layer model (Qwen2 or Llama) with the tokenizer of
    tokenizer_dir, saved as verl saves one (world size 1); ``plant(state_dict)`` edits the saved
    shard first. Returns the huggingface/ folder and the model."""
    if not (tokenizer_dir / "tokenizer.json").exists():
        pytest.skip(f"{tokenizer_dir}: no tokenizer.json")
    import torch
    import transformers
    from transformers import AutoTokenizer

    config_class = getattr(transformers, f"{architecture}Config")
    model_class = getattr(transformers, f"{architecture}ForCausalLM")

    actor = root / "global_step_3" / "actor"
    hf = actor / "huggingface"
    hf.mkdir(parents=True)
    (root / "latest_checkpointed_iteration.txt").write_text("3")
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    tok.save_pretrained(hf)  # as verl's checkpoint manager does: writes chat_template.jinja too
    assert (hf / "chat_template.jinja").exists()
    torch.manual_seed(0)
    cfg = config_class(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                       num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True,
                       bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    cfg.architectures = [model_class.__name__]  # verl's merger picks the model class from it
    model = model_class(cfg)
    cfg.save_pretrained(hf)
    state = model.state_dict()
    if plant is not None:
        plant(state)
    torch.save(state, actor / "model_world_size_1_rank_0.pt")
    (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 1}))
    return hf, model


def test_qwen2_merge_carries_the_recipe_tokenizer_config(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root = tmp_path / "checkpoints"
    hf, model = synthetic_checkpoint(root)
    # a recipe tokenizer config whose default system prompt is recognisable
    recipe = json.loads((TOKENIZER / "tokenizer_config.json").read_text())
    recipe["chat_template"] = recipe["chat_template"].replace(
        "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.", "RECIPE MARKER PROMPT")
    recipe_path = tmp_path / "recipe_tokenizer_config.json"
    recipe_path.write_text(json.dumps(recipe))

    proc = run_merge(str(root), RECIPE_TOKENIZER_CONFIG=str(recipe_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "model_type qwen2" in proc.stdout and "tokenizer config: recipe" in proc.stdout
    assert list(hf.glob("*.safetensors")) and not (hf / "chat_template.jinja").exists()
    assert (hf / "tokenizer_config.json").read_bytes() == recipe_path.read_bytes()
    assert leftovers(root) == []
    merged_tok = AutoTokenizer.from_pretrained(hf)
    text = merged_tok.apply_chat_template([{"role": "user", "content": "1+1?"}], add_generation_prompt=True,
                                          tokenize=False)
    assert "RECIPE MARKER PROMPT" in text
    merged = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32)
    for key, value in model.state_dict().items():  # the merger stores bfloat16
        assert torch.equal(merged.state_dict()[key], value.to(torch.bfloat16).float()), key


#: the token ids of sys.argv[2] by the tokenizer of each folder in sys.argv[1], as JSON
ENCODE = ("import json, sys; from transformers import AutoTokenizer; "
          "print(json.dumps([AutoTokenizer.from_pretrained(d).encode(sys.argv[2]) for d in sys.argv[1].split(',')]))")


def test_transformers5_tokenizer_class_is_renamed_for_the_evaluators(tmp_path):
    """The current stack's merger (transformers 5) saves a tokenizer without a model-specific
    class, such as SmolLM2's PreTrainedTokenizerFast, as "TokenizersBackend", a name the
    evaluators' transformers 4.56 (the reference stack's and OpenCompass's environments) cannot
    load. The merged copy must load there and encode as the original does."""
    current_python = stack_environment("current")
    root = tmp_path / "checkpoints"
    hf, _ = synthetic_checkpoint(root, SMOLLM2, "Llama")
    assert json.loads((SMOLLM2 / "tokenizer_config.json").read_text())["tokenizer_class"] == "PreTrainedTokenizerFast"
    proc = run_merge(str(root), TOKENIZER_POLICY="keep", PYTHON=str(current_python))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((hf / "tokenizer_config.json").read_text())["tokenizer_class"] == "PreTrainedTokenizerFast"
    merged, original = json_from_stack("reference", ENCODE, f"{hf},{SMOLLM2}", "Solve $x^2 = 4$: \\boxed{2}")
    assert merged == original


@pytest.mark.parametrize("stack", ["reference", "current"])
def test_the_interpreter_is_that_of_the_runs_stack(tmp_path, stack):
    """Without PYTHON, the merger runs in the environment of the stack named in the launcher's
    launch_settings.json (each verl writes its own checkpoint layout)."""
    fake_checkpoint(tmp_path, hf_config={"model_type": "llama"})
    (tmp_path / "launch_settings.json").write_text(json.dumps({"knobs": {"STACK": stack}}))
    env = {k: v for k, v in os.environ.items() if k != "PYTHON"}
    proc = subprocess.run(["bash", str(SCRIPT), str(tmp_path)], env=env, capture_output=True, text=True, timeout=600)
    venv_python = stack_python(stack)
    expected = str(venv_python) if venv_python.exists() else "python3"
    assert f"; python: {expected}\n" in proc.stdout, proc.stdout + proc.stderr


def test_unknown_stack_in_launch_settings(tmp_path):
    fake_checkpoint(tmp_path, hf_config={"model_type": "llama"})
    (tmp_path / "launch_settings.json").write_text(json.dumps({"knobs": {"STACK": "nightly"}}))
    env = {k: v for k, v in os.environ.items() if k != "PYTHON"}
    proc = subprocess.run(["bash", str(SCRIPT), str(tmp_path)], env=env, capture_output=True, text=True, timeout=600)
    assert_one_line_error(proc, "launch_settings.json: knob STACK=nightly; expected reference or current")


# ------------------------------------------------------------------------------------------
# the merged model checked against its config.json before it replaces the target
# ------------------------------------------------------------------------------------------
def tiny_model_dir(path: Path, tie: bool = True, edit=None) -> Path:
    """A 2-layer Qwen2 model (vocabulary 64, hidden size 8) saved in bfloat16 as verl's merger
    saves one; ``edit(tensors)`` then changes the safetensors file's tensors."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=64, hidden_size=8, intermediate_size=12, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=tie)
    Qwen2ForCausalLM(cfg).to(torch.bfloat16).save_pretrained(path)
    if edit is not None:
        tensors = load_file(path / "model.safetensors")
        edit(tensors)
        save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})
    return path


def check(model_dir: Path, capsys) -> tuple[int, str]:
    from tools.check_merged_model import main

    capsys.readouterr()  # what saving the model printed
    rc = main([str(model_dir)])
    return rc, capsys.readouterr().err.strip()


@pytest.mark.parametrize("tie", [True, False], ids=["tied-lm-head-absent", "own-lm-head"])
def test_check_passes_a_good_model(tmp_path, capsys, tie):
    from tools.check_merged_model import safetensors_header

    model_dir = tiny_model_dir(tmp_path / "m", tie=tie)
    assert ("lm_head.weight" in safetensors_header(model_dir / "model.safetensors")) is not tie
    assert check(model_dir, capsys) == (0, "")


def _set(name, value):
    def edit(tensors):
        tensors[name] = value(tensors[name]) if callable(value) else value
    return edit


def _nan(t):
    t = t.clone()
    t[0] = float("nan")
    return t


@pytest.mark.parametrize("tie,edit,needle", [
    (True, _set("model.layers.0.mlp.up_proj.weight", lambda t: t[:10]),
     "model.safetensors: model.layers.0.mlp.up_proj.weight has shape (10, 8), config.json expects (12, 8)"),
    (True, _set("model.norm.weight", lambda t: t.repeat(2)),  # a replicated tensor concatenated over 2 ranks
     "model.safetensors: model.norm.weight has shape (16,), config.json expects (8,)"),
    (True, _set("model.norm.weight", lambda t: t.float()), "model.norm.weight has dtype F32, the merger writes BF16"),
    (True, _set("model.layers.0.extra", lambda t: t), "model.layers.0.extra has shape (), config.json expects no such"),
    (False, lambda tensors: tensors.pop("lm_head.weight"), "lm_head.weight missing, config.json expects shape (64, 8)"),
    (True, _set("model.norm.weight", _nan), "model.safetensors: a forward pass on 8 tokens gives NaN logits"),
], ids=["shape", "replicated-buffer", "dtype", "unexpected", "missing-lm-head", "nan-weight"])
def test_check_refuses_with_one_line(tmp_path, capsys, tie, edit, needle):
    import torch

    if needle.startswith("model.layers.0.extra"):
        edit = _set("model.layers.0.extra", torch.tensor(1.0, dtype=torch.bfloat16))
    model_dir = tiny_model_dir(tmp_path / "m", tie=tie, edit=edit)
    rc, err = check(model_dir, capsys)
    assert rc == 1 and len(err.splitlines()) == 1, err
    assert err.startswith(f"check_merged_model.py: {model_dir}: ") and needle in err, err


def test_check_refuses_a_folder_without_weights(tmp_path, capsys):
    rc, err = check(tmp_path, capsys)
    assert (rc, err) == (1, f"check_merged_model.py: {tmp_path}: no *.safetensors file; expected the merged weights")


@pytest.mark.parametrize("name,plant,needle", [
    ("shape", lambda sd: sd.__setitem__("model.layers.0.mlp.up_proj.weight", sd["model.layers.0.mlp.up_proj.weight"][:10]),
     "merged model.safetensors: model.layers.0.mlp.up_proj.weight has shape (10, 32), config.json expects (64, 32)"),
    ("nan", lambda sd: sd["model.norm.weight"].fill_(float("nan")),
     "merged model.safetensors: a forward pass on 8 tokens gives NaN logits; expected finite ones"),
])
def test_a_merge_failing_the_check_leaves_the_previous_target(tmp_path, name, plant, needle):
    """verl's real merger on a checkpoint whose shard has a planted wrong shape or NaN weight:
    the merge itself succeeds, the check refuses it, and the earlier merged model stays."""
    root = tmp_path / "checkpoints"
    hf, _ = synthetic_checkpoint(root, plant=plant)
    (hf / "model.safetensors").write_bytes(b"previous weights")
    before = {p.name: p.read_bytes() for p in hf.iterdir()}
    proc = run_merge(str(root), FORCE="1", TOKENIZER_POLICY="keep")
    assert proc.returncode == 1, proc.stderr[-3000:]
    # the merger's progress bars come first; the script's own message is one line, the last
    assert proc.stderr.strip().splitlines()[-1] == f"merge_checkpoint.sh: {needle}", proc.stderr[-3000:]
    assert proc.stderr.count("merge_checkpoint.sh") == 1
    assert {p.name: p.read_bytes() for p in hf.iterdir()} == before
    assert leftovers(root) == []
