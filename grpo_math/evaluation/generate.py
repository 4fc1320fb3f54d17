"""Generation with vLLM (CUDA, or Ascend NPU through vllm-ascend) or transformers, batched.

As verl's vLLM rollout: the sampling parameters given, repetition_penalty 1.0, no top-k (not
generation_config.json's defaults, e.g. Qwen2.5's top_k 20, repetition penalty 1.05), responses
decoded with ``skip_special_tokens=True`` as verl's reward manager does.
``generate(prompts, n, temperature, top_p, max_new_tokens)`` gives, per prompt (token ids), ``n``
results ``(text, response tokens counting the EOS as verl's response mask does, truncated = no EOS
within the budget)``.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Optional

from grpo_math.io import DataError

#: Prompts per generate call when --batch-size is not given.
DEFAULT_BATCH_SIZE = {"hf": 8, "vllm": 256}


def accelerator() -> Optional[str]:
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
    """'vllm' or 'hf' for ``requested`` (auto: vLLM when importable and an accelerator is there)."""
    has_vllm = importlib.util.find_spec("vllm") is not None
    if requested == "vllm" and not has_vllm:
        raise DataError("--backend vllm: the vllm package is not importable; expected vllm installed "
                        "(NPU: vllm-ascend) or --backend hf")
    if requested != "auto":
        return requested
    return "vllm" if has_vllm and accelerator() is not None else "hf"


class HFGenerator:
    """transformers generation: batched, left padded."""

    def __init__(self, model_dir: Path, tokenizer, dtype: str, seed: int, cpu_threads: int = 0):
        import torch
        from transformers import AutoModelForCausalLM

        if cpu_threads:
            torch.set_num_threads(cpu_threads)
        self.device = accelerator() or "cpu"
        dtype = ("float32" if self.device == "cpu" else "bfloat16") if dtype == "auto" else dtype
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype)).to(self.device).eval()
        self.tokenizer = tokenizer
        eos = self.model.generation_config.eos_token_id
        eos = set(eos if isinstance(eos, list) else [] if eos is None else [eos])
        self.eos_ids = sorted(eos | ({tokenizer.eos_token_id} - {None}))
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (self.eos_ids or [0])[0]
        torch.manual_seed(seed)

    def generate(self, prompts: list[list[int]], n: int, temperature: float, top_p: float,
                 max_new_tokens: int) -> list[list[tuple[str, int, bool]]]:
        import torch
        from transformers import GenerationConfig

        width = max(len(p) for p in prompts)
        ids = torch.tensor([[self.pad_id] * (width - len(p)) + p for p in prompts], dtype=torch.long)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], dtype=torch.long)
        knobs = dict(temperature=temperature, top_p=top_p, top_k=0) if temperature > 0 else {}
        cfg = GenerationConfig(max_new_tokens=max_new_tokens, do_sample=temperature > 0, num_return_sequences=n,
                               repetition_penalty=1.0, eos_token_id=self.eos_ids, pad_token_id=self.pad_id, **knobs)
        with torch.no_grad():
            out = self.model.generate(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                                      generation_config=cfg)[:, width:].cpu()
        results: list[list[tuple[str, int, bool]]] = [[] for _ in prompts]
        for row, toks in enumerate(out):
            hits = torch.nonzero(torch.isin(toks, torch.tensor(self.eos_ids))).flatten()
            length = int(hits[0]) + 1 if len(hits) else len(toks)
            text = self.tokenizer.decode(toks[:length].tolist(), skip_special_tokens=True)
            results[row // n].append((text, length, not len(hits)))
        return results


class VLLMGenerator:
    """vLLM offline generation."""

    def __init__(self, model_dir: Path, dtype: str, seed: int, tp: int, gpu_mem: float):
        from vllm import LLM

        self.seed = seed
        self.llm = LLM(model=str(model_dir), tensor_parallel_size=tp, gpu_memory_utilization=gpu_mem,
                       dtype=dtype, seed=seed)

    def generate(self, prompts: list[list[int]], n: int, temperature: float, top_p: float,
                 max_new_tokens: int) -> list[list[tuple[str, int, bool]]]:
        from vllm import SamplingParams

        params = SamplingParams(n=n, temperature=temperature, top_p=top_p if temperature > 0 else 1.0,
                                top_k=-1, repetition_penalty=1.0, max_tokens=max_new_tokens,
                                seed=self.seed if temperature > 0 else None, skip_special_tokens=True)
        outs = self.llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        return [[(o.text, len(o.token_ids), o.finish_reason == "length") for o in req.outputs] for req in outs]
