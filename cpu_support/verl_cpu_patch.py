"""Make verl 0.6.0's ``main_ppo`` run GRPO on a machine with neither NPU nor GPU.

Targets **verl==0.6.0** (the recipe's pin, see requirements.txt); every patch checks what it
replaces and the whole module is a no-op when torch sees a CUDA or Ascend NPU device, so the
NPU and GPU profiles never run patched code.

How it is applied: the launcher's CPU profile exports ``PYTHONPATH=<repo>`` and passes
``+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=cpu_support.verl_cpu_patch.apply``,
so Ray runs :func:`apply` at the start of every worker process (TaskRunner, actor/ref
workers) before any task. verl itself is not edited.

What verl 0.6.0 does on CPU without this module, and the fix applied here:

==========================================  ===============================================
verl 0.6.0 behaviour on CPU                   patch
==========================================  ===============================================
``utils.device.get_nccl_backend`` raises      returns ``gloo``
``init_process_group("cpu:gloo,cpu:gloo")``   torch rejects a duplicate device type: the
                                              backend string is reduced to ``gloo``
``torch.cpu`` lacks ``get_rng_state``,        thin aliases to the global CPU generator and
``set_rng_state``, ``manual_seed``,            no-op / zero memory counters, added to
``empty_cache``, ``memory_*``, ...            ``torch.cpu`` (used via ``get_torch_device()``)
ref model forced to                           ``pin_memory`` forced off: pinning needs an
``CPUOffloadPolicy(pin_memory=True)``         accelerator
rollout ``hf`` is not registered and          :class:`CPUHFRollout` registered as
``HFRollout`` is abstract in 0.6.0            ``("hf", "sync")``
profiler ``all_gather`` of a 0-d tensor       the timing tensor is made 1-d
fails on gloo (``topk_reduce_ratio_min_max``)
==========================================  ===============================================

Settings that need no code and are therefore passed by the launcher instead (see
``run_qwen2_5_1_5b.sh``): one Ray GPU resource (``+ray_kwargs.ray_init.num_gpus=1``, as
verl only counts GPU/NPU resources), ``strategy=fsdp2`` (FSDP1 fails with
``sync_module_states`` on CPU), ``attn_implementation`` ``sdpa`` (flash-attention is
hard-coded), ``use_remove_padding=False``.
"""

from __future__ import annotations

import logging
import sys
from typing import Generator

import torch

logger = logging.getLogger(__name__)

TARGET_VERL_VERSION = "0.6.0"
_APPLIED = False


def accelerator_present() -> bool:
    """True when torch sees a CUDA GPU or an Ascend NPU (then nothing is patched)."""
    if torch.cuda.is_available():
        return True
    try:  # torch_npu registers torch.npu on import; the NPU image ships it
        import torch_npu  # noqa: F401

        return bool(torch.npu.is_available())
    except Exception:  # noqa: BLE001 - any import failure means no NPU
        return False


# --------------------------------------------------------------------------------------
# torch.cpu stand-ins for the torch.cuda calls verl makes through get_torch_device()
# --------------------------------------------------------------------------------------
def _zero(*_args, **_kwargs) -> int:
    return 0


def _noop(*_args, **_kwargs) -> None:
    return None


def _mem_get_info(*_args, **_kwargs) -> tuple[int, int]:
    """(free, total) host memory in bytes, like ``torch.cuda.mem_get_info``."""
    import psutil

    vm = psutil.virtual_memory()
    return vm.available, vm.total


_TORCH_CPU_ATTRS = {
    "get_rng_state": lambda *a, **k: torch.get_rng_state(),
    "set_rng_state": lambda state, *a, **k: torch.set_rng_state(state),
    "manual_seed": lambda seed: torch.manual_seed(seed),
    "manual_seed_all": lambda seed: torch.manual_seed(seed),
    "empty_cache": _noop,
    "reset_peak_memory_stats": _noop,
    "memory_allocated": _zero,
    "memory_reserved": _zero,
    "max_memory_allocated": _zero,
    "max_memory_reserved": _zero,
    "mem_get_info": _mem_get_info,
}


def _patch_torch_cpu() -> None:
    for name, fn in _TORCH_CPU_ATTRS.items():
        if not hasattr(torch.cpu, name):
            setattr(torch.cpu, name, fn)


# --------------------------------------------------------------------------------------
# distributed: gloo only
# --------------------------------------------------------------------------------------
def _patch_process_group() -> None:
    import torch.distributed as dist

    original = dist.init_process_group
    if getattr(original, "_cpu_patched", False):
        return

    def init_process_group(*args, backend=None, **kwargs):
        # verl builds "cpu:gloo,<device>:<backend>"; on CPU that is "cpu:gloo,cpu:gloo",
        # which torch rejects as a duplicate device type.
        if isinstance(backend, str) and "gloo" in backend:
            backend = "gloo"
        return original(*args, backend=backend, **kwargs)

    init_process_group._cpu_patched = True
    dist.init_process_group = init_process_group


def _replace_everywhere(module_prefix: str, name: str, old: object, new: object) -> None:
    """Rebind ``name`` from ``old`` to ``new`` in every loaded module under ``module_prefix``
    (covers ``from x import name`` copies made before the patch)."""
    for mod_name, mod in list(sys.modules.items()):
        if mod is not None and mod_name.startswith(module_prefix) and getattr(mod, name, None) is old:
            setattr(mod, name, new)


def _patch_verl_device() -> None:
    import verl.utils.device as device

    original = device.get_nccl_backend

    def get_nccl_backend() -> str:
        return "gloo"

    _replace_everywhere("verl", "get_nccl_backend", original, get_nccl_backend)


def _patch_cpu_offload_policy() -> None:
    """verl 0.6.0 ``fsdp_workers`` builds the ref model with ``CPUOffloadPolicy(pin_memory=True)``."""
    import torch.distributed.fsdp as fsdp

    original = fsdp.CPUOffloadPolicy
    if getattr(original, "_cpu_patched", False):
        return

    class CPUOffloadPolicy(original):  # type: ignore[misc, valid-type]
        _cpu_patched = True

        def __init__(self, pin_memory: bool = False):
            super().__init__(pin_memory=False)

    fsdp.CPUOffloadPolicy = CPUOffloadPolicy
    _replace_everywhere("verl", "CPUOffloadPolicy", original, CPUOffloadPolicy)


def _patch_profiler() -> None:
    import torch.distributed as dist
    import verl.utils.profiler.performance as performance

    original = performance.topk_reduce_ratio_min_max

    def topk_reduce_ratio_min_max(timing: float, k: int = 10) -> tuple[float, float, float]:
        """As verl's, but gathers 1-d tensors (gloo rejects 0-d ones)."""
        if not dist.is_initialized():
            return -1.0, -1.0, -1.0
        value = torch.tensor([timing], dtype=torch.float32)
        gathered = [torch.zeros(1, dtype=torch.float32) for _ in range(dist.get_world_size())]
        dist.all_gather(gathered, value)
        stacked = torch.cat(gathered)
        threshold = torch.quantile(stacked, 1 - k / 100)
        tail_ratio = torch.mean((stacked > threshold).float()).item()
        return tail_ratio, stacked.min().item(), stacked.max().item()

    _replace_everywhere("verl", "topk_reduce_ratio_min_max", original, topk_reduce_ratio_min_max)


def _register_hf_rollout() -> None:
    from verl.workers.rollout import base

    base._ROLLOUT_REGISTRY[("hf", "sync")] = f"{__name__}.CPUHFRollout"


def apply() -> None:
    """Apply every CPU patch once in this process; a no-op when an accelerator is present.

    Raises RuntimeError when the installed verl is not :data:`TARGET_VERL_VERSION`.
    """
    global _APPLIED
    if _APPLIED or accelerator_present():
        return
    import verl

    if verl.__version__ != TARGET_VERL_VERSION:
        raise RuntimeError(
            f"cpu_support.verl_cpu_patch targets verl=={TARGET_VERL_VERSION}, found {verl.__version__}"
        )
    _patch_torch_cpu()
    _patch_process_group()
    _patch_verl_device()
    _patch_cpu_offload_policy()
    _patch_profiler()
    _register_hf_rollout()
    _APPLIED = True


# --------------------------------------------------------------------------------------
# HF-transformers rollout for CPU
# --------------------------------------------------------------------------------------
from verl.workers.rollout.base import BaseRollout  # noqa: E402  (verl is a hard dependency)


class CPUHFRollout(BaseRollout):
    """Rollout with a plain Hugging Face copy of the policy, for CPU runs.

    verl 0.6.0's ``HFRollout`` predates the ``BaseRollout`` interface (``resume`` /
    ``release`` / ``update_weights``) and cannot be built by ``_build_rollout``. This class
    keeps its own ``AutoModelForCausalLM`` (fp32, SDPA attention), receives the actor's full
    weights before every rollout through :meth:`update_weights`, and generates with
    ``model.generate``.

    Speed: verl's dataset left-pads every prompt to ``data.max_prompt_length``; before
    generating, the columns that are padding in every row are cut (and put back in the
    output), so decoding runs on the batch's longest real prompt rather than the maximum.

    Output layout (as verl's vLLM rollout): ``prompts`` (bs, prompt_length), ``responses``
    (bs, response_length) padded with ``pad_token_id``, ``input_ids`` / ``attention_mask`` /
    ``position_ids`` (bs, prompt_length + response_length).
    """

    def __init__(self, config, model_config, device_mesh):
        super().__init__(config=config, model_config=model_config, device_mesh=device_mesh)
        from transformers import AutoModelForCausalLM

        self.module = AutoModelForCausalLM.from_pretrained(
            model_config.local_path, torch_dtype=torch.float32, attn_implementation="sdpa"
        )
        self.module.eval()

    async def resume(self, tags: list[str]):
        """Weights and KV cache live in host memory: nothing to resume."""

    async def release(self):
        """Nothing to release on CPU."""

    async def update_weights(self, weights: Generator[tuple[str, torch.Tensor], None, None], **kwargs):
        """Load the actor's full weights (HF names) into the rollout copy."""
        state = {name: tensor.detach().to("cpu", torch.float32) for name, tensor in weights}
        missing, unexpected = self.module.load_state_dict(state, strict=False)
        tied = {"lm_head.weight"} if self.module.config.tie_word_embeddings else set()
        if unexpected or set(missing) - tied:
            raise RuntimeError(f"rollout weight sync: missing {missing[:5]}, unexpected {unexpected[:5]}")

    def _sampling_kwargs(self, meta_info: dict) -> dict:
        cfg = self.config
        if not meta_info.get("do_sample", cfg.do_sample):
            return {"do_sample": False}
        if meta_info.get("validate", False):
            val = cfg.val_kwargs
            if not val.do_sample:
                return {"do_sample": False}
            return {"do_sample": True, "temperature": val.temperature, "top_p": val.top_p, "top_k": max(0, val.top_k)}
        return {
            "do_sample": True,
            "temperature": meta_info.get("temperature", cfg.temperature),
            "top_p": meta_info.get("top_p", cfg.top_p),
            "top_k": max(0, meta_info.get("top_k", cfg.top_k)),
        }

    @torch.no_grad()
    def generate_sequences(self, prompts):
        from tensordict import TensorDict
        from transformers import GenerationConfig
        from verl import DataProto
        from verl.utils.torch_functional import get_response_mask

        input_ids = prompts.batch["input_ids"]  # (bs, prompt_length), left-padded
        attention_mask = prompts.batch["attention_mask"]
        position_ids = prompts.batch["position_ids"]
        eos_token_id = prompts.meta_info["eos_token_id"]
        pad_token_id = prompts.meta_info["pad_token_id"]
        response_length = self.config.response_length
        batch_size, prompt_length = input_ids.shape

        # cut the left-padding columns shared by every row
        real_columns = attention_mask.bool().any(dim=0).nonzero()
        start = int(real_columns[0]) if len(real_columns) else 0
        generation_config = GenerationConfig(
            max_new_tokens=response_length,
            eos_token_id=eos_token_id,
            pad_token_id=pad_token_id,
            num_beams=1,
            **self._sampling_kwargs(prompts.meta_info),
        )
        output = self.module.generate(
            input_ids=input_ids[:, start:],
            attention_mask=attention_mask[:, start:],
            generation_config=generation_config,
            use_cache=True,
        )
        responses = output[:, prompt_length - start:]
        if responses.size(1) < response_length:  # every row stopped early: pad to the fixed length
            fill = responses.new_full((batch_size, response_length - responses.size(1)), pad_token_id)
            responses = torch.cat([responses, fill], dim=1)
        responses = responses[:, :response_length]

        response_mask = get_response_mask(response_id=responses, eos_token=eos_token_id, dtype=attention_mask.dtype)
        offsets = torch.arange(1, response_length + 1, dtype=position_ids.dtype).unsqueeze(0)
        batch = TensorDict(
            {
                "prompts": input_ids,
                "responses": responses,
                "input_ids": torch.cat([input_ids, responses], dim=1),
                "attention_mask": torch.cat([attention_mask, response_mask], dim=1),
                "position_ids": torch.cat([position_ids, position_ids[:, -1:] + offsets], dim=1),
            },
            batch_size=batch_size,
        )
        return DataProto(batch=batch, non_tensor_batch=dict(prompts.non_tensor_batch))

