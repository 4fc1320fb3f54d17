"""The CPU engine's shared-prompt forward (cpu_support/shared_prompt_engine.py) against the plain
forward verl's engine runs: the same response log-probs, entropies and gradients, in verl's layout.

A tiny random Llama (tied embeddings, grouped-query attention, as SmolLM2) in the current stack's
environment, in a fresh interpreter: no weights are downloaded. The micro-batch interleaves two
prompts' responses of unequal lengths, one of a single token, at temperature 0.7.
"""

from __future__ import annotations

import json
import os
import textwrap

from conftest import REPO, run_in_stack

SCRIPT = """
import json, os, types
import torch
from tensordict import TensorDict
from transformers import LlamaConfig, LlamaForCausalLM
from verl.utils import tensordict_utils as tu
from verl.workers.utils.padding import no_padding_2_padding
from cpu_support.shared_prompt_engine import SharedPromptEngine, shared_prompt_outputs

torch.manual_seed(0)
config = LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                     max_position_embeddings=64, attn_implementation="sdpa")
model = LlamaForCausalLM(config).float()
prompt_a, prompt_b = torch.randint(0, 97, (7,)), torch.randint(0, 97, (5,))
order = [(prompt_a, 4), (prompt_b, 3), (prompt_a, 6), (prompt_a, 1), (prompt_b, 5)]
prompts = [p for p, _ in order]
responses = [torch.randint(0, 97, (n,)) for _, n in order]
sequences = [torch.cat([p, r]) for p, r in zip(prompts, responses)]
nested = lambda ts: torch.nested.as_nested_tensor(ts, layout=torch.jagged)
temperature = torch.full((len(order),), 0.7)
micro_batch = TensorDict({
    "input_ids": nested(sequences), "prompts": nested(prompts), "responses": nested(responses),
    "position_ids": nested([torch.arange(len(s)) for s in sequences]), "temperature": temperature,
}, batch_size=[len(order)])
weights = torch.randn(len(order), 6)

def plain(model):
    # verl's layout: position t holds log p(token t + 1), over the whole sequence
    values, ents = [], []
    for seq, temp in zip(sequences, temperature):
        logits = model(input_ids=seq[None]).logits[0] / temp
        lp = torch.log_softmax(logits.float(), -1)
        values.append(lp.gather(-1, torch.roll(seq, -1)[:, None])[:, 0])
        ents.append(-(lp.exp() * lp).sum(-1))
    offsets = micro_batch["input_ids"].offsets()
    return {"log_probs": torch.nested.nested_tensor_from_jagged(torch.cat(values), offsets),
            "entropy": torch.nested.nested_tensor_from_jagged(torch.cat(ents), offsets)}

def response_values(output, key):
    return no_padding_2_padding(output[key], micro_batch)   # what verl's loss reads

def grads(model, forward):
    model.zero_grad()
    lp = response_values(forward(model), "log_probs")
    (lp * weights[:, : lp.shape[1]]).sum().backward()
    return {n: p.grad.clone() for n, p in model.named_parameters()}

def max_diff(a, b):
    return max(float((a[k] - b[k]).abs().max()) for k in a)

shared = lambda m: shared_prompt_outputs(m, micro_batch, calculate_entropy=True)
ref_out, got_out = plain(model), shared(model)
ref_grads, got_grads = grads(model, plain), grads(model, shared)

# the same under FSDP2 (fully_shard on one gloo rank), as verl wraps the actor
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29611", RANK="0", WORLD_SIZE="1")
torch.distributed.init_process_group("gloo")
from torch.distributed.fsdp import fully_shard
for layer in model.model.layers:
    fully_shard(layer)
fully_shard(model)
fsdp_grads = grads(model, shared)
torch.distributed.destroy_process_group()

engine = types.SimpleNamespace(ulysses_sequence_parallel_size=1)
fused = micro_batch.clone(); tu.assign_non_tensor(fused, use_fused_kernels=True)
print(json.dumps({
    "log_probs": float((response_values(ref_out, "log_probs") - response_values(got_out, "log_probs")).abs().max()),
    "entropy": float((response_values(ref_out, "entropy") - response_values(got_out, "entropy")).abs().max()),
    "grad_scale": max(float(g.abs().max()) for g in ref_grads.values()),
    "grads": max_diff(ref_grads, got_grads),
    "fsdp_grads": max_diff(ref_grads, {k: v.full_tensor() if hasattr(v, "full_tensor") else v for k, v in fsdp_grads.items()}),
    "shares": SharedPromptEngine.can_share(engine, micro_batch),
    "shares_fused": SharedPromptEngine.can_share(engine, fused),
    "shares_sp2": SharedPromptEngine.can_share(types.SimpleNamespace(ulysses_sequence_parallel_size=2), micro_batch),
}))
"""


def run(**env: str) -> dict:
    proc = run_in_stack("current", ["-c", textwrap.dedent(SCRIPT)], env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_shared_prompt_forward_matches_the_plain_forward():
    got = run()
    assert got["log_probs"] < 1e-5, got
    assert got["entropy"] < 1e-5, got
    assert got["grad_scale"] > 1e-2, got  # the gradients compared are not all zero
    assert got["grads"] < 1e-5, got
    assert got["fsdp_grads"] < 1e-5, got


def test_the_engine_takes_what_it_implements_and_leaves_the_rest_to_verl():
    got = run()
    assert (got["shares"], got["shares_fused"], got["shares_sp2"]) == (True, False, False)


def test_it_can_be_switched_off():
    assert run(VERL_CPU_SHARED_PROMPT="0")["shares"] is False


def test_a_wrong_layout_would_be_caught(tmp_path):
    """The comparison can fail: the engine with the response's log-probs one position late."""
    source = (REPO / "cpu_support" / "shared_prompt_engine.py").read_text()
    right = "torch.cat([zeros(prompt_len - 1), values[:response_len], zeros(1)])"
    assert right in source
    (tmp_path / "shifted_engine.py").write_text(
        source.replace(right, "torch.cat([zeros(prompt_len), values[:response_len]])"))
    script = textwrap.dedent(SCRIPT).replace("from cpu_support.shared_prompt_engine import", "from shifted_engine import")
    proc = run_in_stack("current", ["-c", script], env={"PYTHONPATH": os.pathsep.join((str(REPO), str(tmp_path)))})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1])["log_probs"] > 1e-3
