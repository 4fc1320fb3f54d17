"""The least time this machine could take for a CPU GRPO step's work, with its arithmetic.

Measures two ceilings on this machine, with the run's torch threads and compute dtype:
  * matmul throughput: the best of several large square matmuls (FLOP/s);
  * memory bandwidth: the best of several copies of a 512 MiB tensor (bytes read + written per s).
Then bounds each phase of a global step by the work it must do, read from the run's own metrics
(``prompt_length/mean``, ``response_length/mean`` and ``response_length/max``, with the step's
prompt and response counts) and the model's parameter count N:
  * ref: one forward over each distinct prompt and every response token, 2·N FLOP a token (plus
    attention, 4·layers·hidden·context): a group's responses share their prompt's computation;
  * update_actor: a forward and a backward, 3x the forward;
  * gen: each prompt prefilled once (vLLM's prefix cache shares a group's prompt), then one decode
    step per generated position, each reading every weight once (bandwidth) or computing the
    batch's tokens (FLOPs), whichever is slower;
  * testing (the steps that validate): the same for the validation prompts, one response each;
  * save_checkpoint: the actor's fp32 parameters and Adam's two fp32 moments (12 bytes a
    parameter) written once, into the page cache, at memory bandwidth;
  * old_log_prob: zero, since an on-policy update needs no recomputation of the rollout's log-probs.
Nothing here is a promise a real step can meet: kernels, Python and Ray add their own time.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import torch


@dataclass
class Machine:
    flops: float      # matmul FLOP/s
    bandwidth: float  # bytes/s
    dtype: torch.dtype
    threads: int


def measure(dtype: torch.dtype, threads: int, size: int = 2048, repeats: int = 5) -> Machine:
    torch.set_num_threads(threads)
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    torch.mm(a, b)  # warm-up: oneDNN picks its kernel on the first call
    best = min(_timed(lambda: torch.mm(a, b)) for _ in range(repeats))
    flops = 2 * size**3 / best
    src = torch.empty(2**29 // 4, dtype=torch.float32).fill_(1.0)
    dst = torch.empty_like(src)
    dst.copy_(src)
    copy = min(_timed(lambda: dst.copy_(src)) for _ in range(repeats))
    return Machine(flops, 2 * src.numel() * 4 / copy, dtype, threads)


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


@dataclass
class Model:
    params: int
    layers: int
    hidden: int
    bytes_per_param: int


def model_facts(model_dir: Path, dtype: torch.dtype) -> Model:
    """Parameter count from the safetensors headers, shapes from config.json."""
    from safetensors import safe_open

    params = 0
    for path in sorted(model_dir.glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():
                shape = f.get_slice(name).get_shape()
                n = 1
                for d in shape:
                    n *= d
                params += n
    cfg = json.loads((model_dir / "config.json").read_text())
    return Model(params, cfg["num_hidden_layers"], cfg["hidden_size"], torch.finfo(dtype).bits // 8)


def forward_flops(model: Model, tokens: float, context: float) -> float:
    """FLOPs of one forward over ``tokens`` tokens whose mean attended context is ``context``."""
    return tokens * (2 * model.params + 4 * model.layers * model.hidden * context)


def generation_seconds(machine: Machine, model: Model, prompts: float, prompt_len: float,
                       responses: float, max_response: float) -> float:
    """Prefill every distinct prompt once, then ``max_response`` decode steps, each bounded by
    reading the weights once or by computing its tokens."""
    prefill = forward_flops(model, prompts * prompt_len, prompt_len / 2) / machine.flops
    per_step_read = model.params * model.bytes_per_param / machine.bandwidth
    per_step_compute = forward_flops(model, responses, prompt_len + max_response / 2) / machine.flops
    return prefill + max_response * max(per_step_read, per_step_compute)


def step_limits(machine: Machine, model: Model, m: dict[str, float], prompts: int, responses: int,
                val_prompts: int, val_response_max: float | None, saved: bool) -> dict[str, tuple[float, str]]:
    """{phase: (seconds, arithmetic)} for one global step whose metrics are ``m``."""
    prompt_len, resp_len = m["prompt_length/mean"], m["response_length/mean"]
    resp_max = m.get("response_length/max", resp_len)
    # each distinct prompt once, then every response attending to its prompt: the least work that
    # gives every response token its log-prob (verl's own forward runs each prompt once per response)
    tokens = prompts * prompt_len + responses * resp_len
    ctx = (prompts * prompt_len * prompt_len / 2 + responses * resp_len * (prompt_len + resp_len / 2)) / tokens
    fwd = forward_flops(model, tokens, ctx)
    tf = 1e12
    out = {
        "ref": (fwd / machine.flops, f"{prompts} prompts x {prompt_len:.0f} + {responses} responses x "
                                     f"{resp_len:.0f} = {tokens:.0f} tokens x {fwd / tokens / 1e6:.0f} MFLOP "
                                     f"= {fwd / tf:.2f} TFLOP"),
        "old_log_prob": (0.0, "none needed on-policy"),
        "update_actor": (3 * fwd / machine.flops, f"3 x {fwd / tf:.2f} TFLOP (forward + backward)"),
        "gen": (generation_seconds(machine, model, prompts, prompt_len, responses, resp_max),
                f"{prompts} prompts x {prompt_len:.0f} tokens prefilled, {resp_max:.0f} decode steps of "
                f"{responses} responses, each max(weights read, tokens computed)"),
    }
    if val_response_max is not None:
        out["testing"] = (generation_seconds(machine, model, val_prompts, prompt_len, val_prompts, val_response_max),
                          f"{val_prompts} prompts, {val_response_max:.0f} decode steps")
    if saved:
        state = 12 * model.params  # fp32 weights and Adam's two fp32 moments
        out["save_checkpoint"] = (state / machine.bandwidth, f"{state / 2**30:.1f} GiB of state at memory bandwidth")
    return out
