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
Ray workers run torch on one thread           ``torch.set_num_threads(CPU_THREADS)``
(``OMP_NUM_THREADS=1``)
actor/ref forward on every padding column,    columns that are padding in every row of the
LM-head logits for every prompt position,     micro-batch are cut; a prompt shared by rows
and a GRPO group's prompt once per response   is computed once and its KV cache read by
(no remove-padding without flash-attention)   each row, else only the response positions'
                                              logits are computed (:func:`_patch_actor_padding`)
hard-coded bf16 autocast in the actor/ref      disabled when ``CPU_DTYPE=fp32`` (CPUs without
forward (emulated bf16 is ~8x slower)         native bf16 matmuls)
rollout-vs-actor metrics give probability     absolute log-prob difference added
differences only                              (``training/rollout_log_prob_absdiff_*``)
transformers' SDPA attention copies the KV    torch's SDPA is called with ``enable_gqa``
heads to every query head whenever a mask     (:func:`enable_sdpa_gqa`)
is given (GQA is used on CUDA only)
the actor's ``torch.optim.AdamW`` takes       ``fused=True`` unless verl asks for an
torch's per-tensor loop on CPU                implementation (:func:`_patch_optimizer`)
``aggressive_empty_cache`` (entering rollout  a no-op wherever verl imported it: no device
mode) runs a full ``gc.collect()``            cache exists (:func:`_patch_empty_cache`)
a separate old log-prob pass every step,      skipped where the update is on-policy; its two
which an on-policy update ignores             metrics come from the update's forward pass
                                              (:func:`_patch_old_log_probs_in_update`)
full (positions, vocab) logits, a per-row     the LM head returns log-probs and entropy,
log-softmax loop and copies (no flash-        computed in fp32 row chunks
attention cross-entropy on CPU)               (:class:`_LinearLogProbs`)
rollout decode through the HF module stack    a lean Llama decode step on joined, oneDNN-
                                              prepacked products (:class:`LeanLlamaDecode`)
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


def _patch_optimizer() -> None:
    """The actor's optimizer with torch's fused CPU AdamW kernel.

    verl 0.6.0 ``fsdp_workers`` builds ``torch.optim.AdamW(params, lr, betas, weight_decay)``
    with no implementation named, and on CPU torch then takes its per-tensor Python loop
    (``_single_tensor_adamw``). Same update rule, one fused kernel: for SmolLM2-135M's
    parameters (fp32, random gradients, 2 threads, a 2-core Intel Xeon with AMX) one step took
    0.43 s per-tensor and 0.13 s fused. Works on FSDP2's DTensor parameters
    (world size 1: the same weights as the per-tensor loop within 1.5e-8 after 3 steps). An
    explicit ``fused`` or ``foreach`` is kept.

    The step is also given the local shards of FSDP2's DTensors (:func:`local_shards`): AdamW
    is elementwise, so the local update of each shard is the sharded update, whereas through the
    DTensor dispatcher the first step propagates the shardings of the fused kernel's tensor
    arguments (py-spy on the quick start: 1.1 s of its 2.6 s in ``_optimizer_step`` over 2
    steps). SmolLM2-135M under FSDP2 at world size 1, random gradients, 2 threads, the 2-core
    AMD EPYC (AVX512-BF16), 6 alternating steps: the first step 0.97 s on DTensors, 0.40 s on
    local shards; later steps 0.095 / 0.090 s (best)."""
    original = torch.optim.AdamW
    if getattr(original, "_cpu_patched", False):
        return

    class AdamW(original):  # type: ignore[misc, valid-type]
        _cpu_patched = True

        def __init__(self, params, *args, **kwargs):
            if kwargs.get("fused") is None and kwargs.get("foreach") is None:
                kwargs["fused"] = True
            super().__init__(params, *args, **kwargs)

        def _init_group(self, group, params, *per_param):
            has_complex = super()._init_group(group, params, *per_param)
            local_shards(params, *per_param)
            return has_complex

    torch.optim.AdamW = AdamW  # verl looks it up at build time (``from torch import optim``)


def local_shards(params: list, *per_param: list) -> bool:
    """Replace, in place, every DTensor in ``params`` and in the lists that follow it (grads,
    optimizer states: each either empty or one entry per parameter) by its local shard, when
    each parameter's entries share its device mesh and placements, so that an elementwise
    update of the shards is the update of the DTensors. Returns whether it did; otherwise the
    lists are left as they are."""
    from torch.distributed.tensor import DTensor

    if not any(isinstance(p, DTensor) for p in params):
        return False
    for tensors in (params, *per_param):
        if len(tensors) not in (0, len(params)):
            return False
    for index, param in enumerate(params):
        for tensors in per_param:
            if not tensors:
                continue
            other = tensors[index]
            if isinstance(other, DTensor) != isinstance(param, DTensor):
                if other.dim() == 0 and not isinstance(other, DTensor):  # a step count
                    continue
                return False
            if isinstance(other, DTensor) and (other.device_mesh != param.device_mesh
                                               or other.placements != param.placements):
                return False
    for tensors in (params, *per_param):
        tensors[:] = [t.to_local() if isinstance(t, DTensor) else t for t in tensors]
    return True


def _patch_empty_cache() -> None:
    """verl's ``aggressive_empty_cache`` (called by the FSDP worker as it enters rollout mode,
    every step and every validation) runs ``gc.collect()`` and then empties the device cache.
    On CPU there is no device cache (``torch.cpu.empty_cache`` is this module's no-op), so only
    the full garbage collection remains: about 0.8 s per call in the quick start's worker
    (py-spy). Python's own generational collection still runs."""
    from verl.utils import memory_utils

    original = memory_utils.aggressive_empty_cache
    memory_utils.aggressive_empty_cache = _noop  # modules imported later take the no-op
    _replace_everywhere("verl", "aggressive_empty_cache", original, _noop)  # and those imported before


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


#: Environment variable with the number of threads torch uses in every Ray worker process
#: (default: the CPUs this process may run on). Ray starts its workers with
#: OMP_NUM_THREADS=1, which would leave all but one core idle in every phase of the step.
THREADS_ENV = "CPU_THREADS"


def _set_threads() -> None:
    import os

    raw = os.environ.get(THREADS_ENV) or str(len(os.sched_getaffinity(0)))
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"{THREADS_ENV}={raw!r}; expected an integer >= 1")
    torch.set_num_threads(int(raw))


def _keep_response_logits(module, args, kwargs):
    """Forward pre-hook: pass ``logits_to_keep`` when the actor's forward set one."""
    keep = getattr(module, "_cpu_logits_to_keep", 0)
    if keep and "logits_to_keep" not in kwargs:
        kwargs = {**kwargs, "logits_to_keep": keep}
    return args, kwargs


def shared_prompt_index(input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                        prompt_length: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(one row of each distinct prompt, the distinct prompt each row has), or None when no
    prompt occurs twice.

    A prompt is a row's first ``prompt_length`` columns of ``input_ids``, ``attention_mask``
    and ``position_ids``. Unlike :func:`group_index`, identical prompts are found anywhere in
    the batch: verl's sequence-length balancing may reorder rows between the rollout and the
    actor's micro-batches."""
    batch_size = input_ids.size(0)
    key = torch.cat([t[:, :prompt_length].long() for t in (input_ids, attention_mask, position_ids)], dim=1)
    distinct, inverse = torch.unique(key, dim=0, return_inverse=True)
    if distinct.size(0) == batch_size:
        return None
    # the first row of each prompt represents it (any would do: their prompt columns are equal)
    rows = torch.arange(batch_size, device=input_ids.device)
    firsts = torch.full((distinct.size(0),), batch_size, dtype=torch.long, device=input_ids.device)
    firsts = firsts.scatter_reduce(0, inverse, rows, reduce="amin")
    return firsts, inverse


def _drops_kv_cache(module: torch.nn.Module) -> bool:
    """True when a layer of ``module`` would ignore a KV cache: transformers' gradient
    checkpointing layers set ``past_key_values=None`` while training."""
    return any(getattr(m, "gradient_checkpointing", False) and m.training for m in module.modules())


#: Rows of logits that :class:`_LinearLogProbs` turns into log-probs and entropy at a time: 8
#: rows of SmolLM2's 49,152-entry vocabulary are 1.5 MB in fp32, about what this machine's
#: caches hold, so the several passes over a chunk read it from cache, not memory.
LOGPROB_CHUNK_ROWS = 8
#: Whether :func:`_forward_shared_prompts` computes log-probs and entropy inside the head
#: (:class:`_LinearLogProbs`) for the models of :data:`_PLAIN_HEAD_MODELS`.
FUSED_LOG_PROBS = True


class _LinearLogProbs(torch.autograd.Function):
    """``(log_probs, entropy)`` of ``labels`` under ``hidden @ weight.T / temperature``, as
    verl computes them from the logits (``logits.div_(temperature)``, then
    ``logprobs_from_logits`` and ``entropy_from_logits``), without verl's intermediate
    full-size tensors.

    ``hidden`` is (n, d), ``weight`` (vocab, d), both in the logits' dtype, ``labels`` (n,).
    The logits are computed once in their dtype and divided by the temperature in place in
    that dtype (verl's rounding); the log-softmax, the label's log-prob and the entropy are then
    computed in fp32, :data:`LOGPROB_CHUNK_ROWS` rows at a time, and returned in the logits'
    dtype. The log-probs are therefore verl's up to the order of the sums; the entropy is
    computed in fp32 where verl's bf16 path rounds the softmax and the products to bf16, so
    under bf16 it differs from verl's by a few bf16 roundings. ``entropy`` is None unless
    ``with_entropy``.

    The backward reuses the saved logits' storage for their gradient (so it can run only
    once, as verl's does), ``-p * (g_lp + g_H * (log p + H))`` plus ``g_lp`` at the label, in
    fp32 per chunk, divided by the temperature, and ends with the two matmuls of a linear
    layer's backward.

    What it saves: verl's CPU path (no flash-attention cross-entropy) runs a per-row
    ``log_softmax`` loop whose backward fills and copies full (positions, vocab) tensors, a
    full-size temperature division and softmax for the entropy, plus the join of the two
    calls' logits here. Measured on this recipe's 2-core AMD EPYC (avx512_bf16, 2 threads,
    other jobs on the cores, so only the ratios mean much) for one update micro-batch's
    response logits, 8 x 127 positions, 576 -> 49,152, bf16 autocast, entropy included, the
    weight cast from fp32 in both, best / median of 7 alternating rounds: forward 538 / 553 ms
    against 679 / 777 ms, forward and backward 1.39 / 1.43 s against 2.25 / 2.38 s. In the
    profile of a whole update micro-batch under FSDP2 (8 rows = 2 prompts x 4 responses, 194
    prompt and 128 response columns), the vocabulary-sized work besides the three matmuls
    (about 1 s, in both) went from 0.65 s to 0.36 s. Against the exact (fp64) values both are equally close: log-probs mean error 0.016
    (fused) and 0.018 (verl's), entropy 0.016 and 0.025, gradients 0.26 % relative in both;
    for the whole micro-batch against fp32, log-probs 0.072 in both, entropy 0.048 against
    0.097, gradients 2.5 % in both. Chunks of 4, 8, 16 and 32 rows measured the same."""

    @staticmethod
    def forward(ctx, hidden, weight, labels, temperature: float, with_entropy: bool):
        logits = hidden @ weight.T
        if temperature != 1.0:  # x / 1 is x: skip the pass over the logits
            logits.div_(temperature)
        n, vocab = logits.shape
        lse = torch.empty(n, dtype=torch.float32)
        picked = logits.gather(-1, labels.unsqueeze(-1)).squeeze(-1).float()
        entropy = torch.empty(n, dtype=torch.float32) if with_entropy else None
        # one fp32 buffer each for a chunk's log-probs and exponentials, reused: every op
        # works in place on data the previous op left in cache, and nothing is allocated per chunk
        log_p = torch.empty(LOGPROB_CHUNK_ROWS, vocab, dtype=torch.float32)
        exp = torch.empty_like(log_p)
        for start in range(0, n, LOGPROB_CHUNK_ROWS):
            rows = slice(start, min(start + LOGPROB_CHUNK_ROWS, n))
            size = rows.stop - start
            z, e = log_p[:size], exp[:size]
            z.copy_(logits[rows])
            top = z.amax(dim=-1, keepdim=True)
            z.sub_(top)
            torch.exp(z, out=e)
            total = e.sum(dim=-1, keepdim=True)
            lse[rows] = (top + total.log()).squeeze(-1)
            if with_entropy:  # H = -sum(p * log p), p = e / total, log p = z - log(total)
                z.sub_(total.log())
                entropy[rows] = -e.mul_(z).sum(dim=-1) / total.squeeze(-1)  # e is read no more: product in place
        log_probs = picked - lse
        ctx.temperature = temperature
        ctx.save_for_backward(hidden, weight, labels, logits, lse, entropy)
        out_entropy = None if entropy is None else entropy.to(logits.dtype)
        return log_probs.to(logits.dtype), out_entropy

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_log_probs, grad_entropy):
        hidden, weight, labels, logits, lse, entropy = ctx.saved_tensors
        n, vocab = logits.shape
        # d log p_y / dz = onehot(y) - p and dH / dz = -p * (log p + H), both divided by the
        # temperature: grad = p * (coef_log_p * log p + coef) + onehot(y) * g_lp / T
        g_lp = torch.zeros(n) if grad_log_probs is None else grad_log_probs.float()
        g_h = None if entropy is None or grad_entropy is None else grad_entropy.float()
        scale = 1.0 / ctx.temperature
        coef = -g_lp * scale if g_h is None else -(g_lp + g_h * entropy) * scale
        coef_log_p = None if g_h is None else -g_h * scale
        grad = logits  # overwritten chunk by chunk with the gradient of the loss by the logits
        log_p = torch.empty(LOGPROB_CHUNK_ROWS, vocab, dtype=torch.float32)
        p = torch.empty_like(log_p)
        for start in range(0, n, LOGPROB_CHUNK_ROWS):
            rows = slice(start, min(start + LOGPROB_CHUNK_ROWS, n))
            size = rows.stop - start
            z, e = log_p[:size], p[:size]
            z.copy_(logits[rows])
            z.sub_(lse[rows].unsqueeze(-1))
            torch.exp(z, out=e)
            if coef_log_p is None:
                e.mul_(coef[rows].unsqueeze(-1))
            else:
                e.mul_(z.mul_(coef_log_p[rows].unsqueeze(-1)).add_(coef[rows].unsqueeze(-1)))
            e.scatter_add_(-1, labels[rows].unsqueeze(-1), (g_lp[rows] * scale).unsqueeze(-1))
            grad[rows] = e
        grad_hidden = grad @ weight if ctx.needs_input_grad[0] else None
        grad_weight = grad.T @ hidden if ctx.needs_input_grad[1] else None
        return grad_hidden, grad_weight, None, None, None


def linear_log_probs(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, temperature: float,
                     with_entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:class:`_LinearLogProbs` for ``hidden`` (..., d) and ``labels`` (...): the linear layer
    in autocast's dtype when autocast is on (as ``F.linear`` under autocast), in fp32 per chunk
    after that; returns ``(log_probs, entropy or None)`` of ``labels``' shape."""
    dtype = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else hidden.dtype
    shape = labels.shape
    with torch.autocast("cpu", enabled=False):
        log_probs, entropy = _LinearLogProbs.apply(hidden.reshape(-1, hidden.size(-1)).to(dtype), weight.to(dtype),
                                                   labels.reshape(-1), float(temperature), with_entropy)
    return log_probs.view(shape), None if entropy is None else entropy.view(shape)


#: Model types whose causal-LM forward returns ``lm_head(hidden)`` as the logits unchanged (no
#: soft-capping or scaling after the head), so that the head may return log-probs instead.
_PLAIN_HEAD_MODELS = ("llama", "qwen2", "qwen3", "mistral")


def _scoring_head(module: torch.nn.Module) -> torch.nn.Linear | None:
    """The output projection of ``module`` when :func:`_scoring` may replace it, else None."""
    config = getattr(module, "config", None)
    head = module.get_output_embeddings() if hasattr(module, "get_output_embeddings") else None
    if getattr(config, "model_type", None) not in _PLAIN_HEAD_MODELS or type(head) is not torch.nn.Linear \
            or head.bias is not None:
        return None
    return head


class _scoring:
    """Within the block, ``head`` returns ``(log_prob, entropy)`` of ``labels`` (the last dim
    of its output; entropy only ``with_entropy``) instead of the logits, the rows of its input
    first taken in the order ``rows`` when given. The head runs inside the model's forward, so
    under FSDP2 its weight is the gathered one and the backward reaches the model's output
    (and FSDP's hooks) as the logits' would."""

    def __init__(self, head, labels, rows, temperature, with_entropy):
        self.head, self.labels, self.rows = head, labels, rows
        self.temperature, self.with_entropy = temperature, with_entropy

    def _forward(self, hidden):
        if self.rows is not None:
            hidden = hidden.index_select(0, self.rows)
        log_probs, entropy = linear_log_probs(hidden, self.head.weight, self.labels, self.temperature,
                                              self.with_entropy)
        return log_probs.unsqueeze(-1) if entropy is None else torch.stack([log_probs, entropy], dim=-1)

    def __enter__(self):
        self.head.forward = self._forward

    def __exit__(self, *exc):
        del self.head.forward


def _forward_shared_prompts(actor, batch: dict, prompt_length: int, firsts: torch.Tensor, inverse: torch.Tensor,
                            temperature: float, calculate_entropy: bool):
    """verl's non-remove-padding forward (``_forward_micro_batch``) for a batch in which rows
    share prompts: each distinct prompt is computed once and its keys and values are read by
    every row that has it. Returns ``(entropy or None, log_probs)``, both (bs, responses' width);
    ``prompt_length`` is the batch's prompt columns.

    Two model calls. The first runs the distinct prompts into a DynamicCache and returns the
    last prompt position's logits (they predict response token 0). Every layer's keys and
    values are then expanded to all rows by ``index_select``, which is differentiable (its
    backward sums over the rows), so a loss on the log-probs gives the prompt computation the
    gradient of all its copies, as one forward over every row would. The second call runs every
    row's response tokens but the last (which predicts nothing that is scored) on that cache,
    with the full attention mask and explicit positions. The two logits joined are verl's
    ``logits[:, -response_length - 1:-1]``.

    Under FSDP2 the first call's logits must be part of the loss, not only its cache: FSDP2
    gathers a layer's parameters for the backward when the gradient reaches the layer's output,
    and the last layer's output reaches the loss only through those logits.

    For the model types of :data:`_PLAIN_HEAD_MODELS` (and :data:`FUSED_LOG_PROBS`), the head
    of both calls returns the log-probs and entropy of the scored tokens instead of logits
    (:class:`_scoring`, :class:`_LinearLogProbs`): the prompt call's head takes its hidden
    state once per row (``inverse``) with response token 0 as label, the response call's the
    response tokens 1 on; nothing of vocabulary size is joined, divided or kept but the logits
    the backward needs."""
    from transformers import DynamicCache
    from verl.workers.actor import dp_actor

    input_ids, attention_mask, position_ids = batch["input_ids"], batch["attention_mask"], batch["position_ids"]
    responses = batch["responses"]
    end = prompt_length + responses.size(1) - 1  # columns fed: all but the last response token
    module = actor.actor_module
    head = _scoring_head(module) if FUSED_LOG_PROBS else None
    # dp_actor.torch: verl's autocast, or none where _patch_actor_autocast disabled it (fp32)
    with dp_actor.torch.autocast(device_type=actor.device_name, dtype=torch.bfloat16):
        cache = DynamicCache()
        prompt_call = dict(input_ids=input_ids[firsts, :prompt_length],
                           attention_mask=attention_mask[firsts, :prompt_length],
                           position_ids=position_ids[firsts, :prompt_length], past_key_values=cache, use_cache=True,
                           logits_to_keep=1)
        response_call = None
        if end > prompt_length:  # some response has a second token
            response_call = dict(input_ids=input_ids[:, prompt_length:end], attention_mask=attention_mask[:, :end],
                                 position_ids=position_ids[:, prompt_length:end], past_key_values=cache,
                                 use_cache=True,
                                 cache_position=torch.arange(prompt_length, end, device=input_ids.device))
        if head is not None:  # the head returns (log-prob, entropy) of each position: no logits kept
            with _scoring(head, responses[:, :1], inverse, temperature, calculate_entropy):
                scores = module(**prompt_call).logits  # (bs, 1, 1 or 2)
            if response_call is not None:
                cache.reorder_cache(inverse)
                with _scoring(head, responses[:, 1:], None, temperature, calculate_entropy):
                    scores = torch.cat([scores, module(**response_call).logits], dim=1)
            del cache
            return (scores[..., 1] if calculate_entropy else None), scores[..., 0]
        out = module(**prompt_call)
        logits = out.logits.index_select(0, inverse)  # (bs, 1, vocab)
        if response_call is not None:
            cache.reorder_cache(inverse)  # index_select of every layer's keys and values
            out = module(**response_call)
            logits = torch.cat([logits, out.logits], dim=1)  # (bs, width, vocab)
        # the last call's logits are copied into ``logits`` and the cache is read no more:
        # without gradients, both are freed before the log-softmax below
        del out, cache
        # from here on as verl's branch
        logits.div_(temperature)
        log_probs = dp_actor.logprobs_from_logits(logits, responses)
        entropy = None
        if calculate_entropy:
            if not actor.config.entropy_checkpointing:
                entropy = dp_actor.verl_F.entropy_from_logits(logits)
            else:
                entropy = dp_actor.torch.utils.checkpoint.checkpoint(dp_actor.verl_F.entropy_from_logits, logits)
    return entropy, log_probs


def _patch_actor_padding() -> None:
    """Run the actor's and ref's forward on the micro-batch's real columns only, and compute
    each prompt that several rows share (a GRPO group's) once.

    verl's dataset left-pads every prompt to ``data.max_prompt_length`` and the rollout
    right-pads every response to ``response_length``; without remove-padding (which needs
    flash-attention) each forward pass computes every padding column. Columns that are
    padding in every row of the micro-batch are cut before the forward pass, and the
    response's log-probs / entropy are padded back with zeros (those positions have
    ``response_mask`` 0, so no loss or metric reads them). Positions are passed explicitly,
    so the values computed for the real tokens are unchanged.

    verl repeats every prompt ``rollout.n`` times, so a micro-batch holds each prompt several
    times. When a prompt repeats (:func:`shared_prompt_index`), the distinct prompts are run
    once and their KV cache is shared by the rows (:func:`_forward_shared_prompts`; the old
    log-probs, the ref's and the actor update with its gradients all go through here).
    Otherwise, or with fused kernels, or where gradient checkpointing would drop the cache,
    the model is asked for the logits of the response positions only (transformers'
    ``logits_to_keep``): verl computes the vocabulary projection for every prompt position
    and then slices it away (``logits[:, -response_length - 1:-1]``); with prompts about 3x
    longer than the responses that is most of the LM head's work and memory.

    Measured on a 2-core AMD EPYC (AVX2, fp32, 2 threads,
    ``OMP_WAIT_POLICY=PASSIVE`` as in the workers, a training run sharing the cores), for
    SmolLM2-135M and 8 responses of 64 tokens sharing one 170-token prompt, best / median of 3
    alternating rounds, columns cut and response logits only in both: without gradients
    10.4 / 10.7 s one forward pass, 4.8 / 5.2 s prompt shared; forward and backward 27.9 /
    28.9 s against 12.2 / 12.6 s (1,872 token positions computed against 170 + 8 x 63)."""
    import torch.nn.functional as F
    from verl.workers.actor import dp_actor

    cls = dp_actor.DataParallelPPOActor
    original = cls._forward_micro_batch
    if getattr(original, "_cpu_patched", False):
        return

    def _forward_micro_batch(self, micro_batch, temperature, calculate_entropy=False):
        mask = micro_batch["attention_mask"]
        plain = (not self.use_remove_padding and not getattr(self, "use_ulysses_sp", False)
                 and "multi_modal_inputs" not in micro_batch and micro_batch["position_ids"].dim() == 2)
        columns = mask.bool().any(dim=0).nonzero().squeeze(1) if plain else []
        if len(columns) == 0:
            return original(self, micro_batch, temperature, calculate_entropy)
        response_length = micro_batch["responses"].size(-1)
        prompt_length = mask.size(1) - response_length
        first = min(int(columns[0]), prompt_length - 1)  # the last prompt column predicts response token 0
        kept = max(int(columns[-1]) + 1 - prompt_length, 1)  # response columns kept
        end = prompt_length + kept
        trimmed = dict(micro_batch)
        for key in ("input_ids", "attention_mask", "position_ids"):
            trimmed[key] = micro_batch[key][:, first:end]
        trimmed["responses"] = micro_batch["responses"][:, :kept]
        module = self.actor_module

        shared = None
        if not self.use_fused_kernels and not _drops_kv_cache(module):  # fused kernels return no logits
            shared = shared_prompt_index(trimmed["input_ids"], trimmed["attention_mask"], trimmed["position_ids"],
                                         prompt_length - first)
        if shared is not None:
            entropy, log_probs = _forward_shared_prompts(self, trimmed, prompt_length - first, *shared,
                                                         temperature, calculate_entropy)
        else:  # verl's forward on the kept columns, logits of the response positions only
            if not getattr(module, "_cpu_keep_hook", False):
                module.register_forward_pre_hook(_keep_response_logits, with_kwargs=True)
                module._cpu_keep_hook = True
            module._cpu_logits_to_keep = 0 if self.use_fused_kernels else kept + 1
            try:
                entropy, log_probs = original(self, trimmed, temperature, calculate_entropy)
            finally:
                module._cpu_logits_to_keep = 0
        pad = (0, response_length - kept)
        return (None if entropy is None else F.pad(entropy, pad)), F.pad(log_probs, pad)

    _forward_micro_batch._cpu_patched = True
    _forward_micro_batch.original = original
    cls._forward_micro_batch = _forward_micro_batch


def _patch_actor_autocast() -> None:
    """With ``CPU_DTYPE=fp32``, run the actor's and ref's forward without verl's hard-coded
    bf16 autocast (``dp_actor._forward_micro_batch``); the FSDP2 mixed-precision dtype comes
    from the config (the cpu profile sets it to the same dtype)."""
    import types

    from verl.workers.actor import dp_actor

    if compute_dtype() == torch.bfloat16 or isinstance(dp_actor.torch, types.ModuleType) and \
            getattr(dp_actor.torch, "_cpu_patched", False):
        return

    class _TorchWithoutAutocast(types.ModuleType):
        """``torch`` as dp_actor sees it, except that ``autocast`` is disabled."""

        _cpu_patched = True

        def __getattr__(self, name):
            return getattr(torch, name)

        @staticmethod
        def autocast(device_type, *args, **kwargs):
            return torch.autocast(device_type, enabled=False)

    dp_actor.torch = _TorchWithoutAutocast("torch")


def _patch_debug_metrics() -> None:
    """Add the mean and max absolute log-prob difference between the rollout and the actor
    (``training/rollout_log_prob_absdiff_mean|max``) to verl's rollout-vs-actor metrics,
    which report differences of probabilities only. Where the old log-probs are left to the
    update (:func:`_patch_old_log_probs_in_update`), the trainer's batch holds NaN placeholders
    and the metrics come from the update instead: none are computed from the placeholders."""
    import verl.utils.debug.metrics as metrics

    original = metrics.calculate_debug_metrics
    if getattr(original, "_cpu_patched", False):
        return

    def calculate_debug_metrics(data):
        rollout, actor = data.batch["rollout_log_probs"], data.batch["old_log_probs"]
        if data.meta_info.get(OLD_LOG_PROBS_IN_UPDATE, False):
            return {}
        out = original(data)
        mask = data.batch["response_mask"] if "response_mask" in data.batch.keys() else \
            data.batch["attention_mask"][:, -rollout.size(1):]
        diff = (rollout.float() - actor.float()).abs()[mask.bool()]
        if diff.numel():
            out["training/rollout_log_prob_absdiff_mean"] = diff.mean().item()
            out["training/rollout_log_prob_absdiff_max"] = diff.max().item()
        return out

    calculate_debug_metrics._cpu_patched = True
    metrics.calculate_debug_metrics = calculate_debug_metrics


#: ``meta_info`` key set on the trainer's batch when the old log-probs are left to the update.
OLD_LOG_PROBS_IN_UPDATE = "cpu_old_log_probs_in_update"


def old_log_probs_needed(config) -> str | None:
    """Why verl 0.6.0 needs the separate old log-prob pass for this run's config, or None
    when that pass only feeds metrics.

    verl's ``DataParallelPPOActor.update_policy`` is on-policy when a step's batch is one PPO
    mini-batch updated for one epoch, and then computes the PPO ratio against its own forward
    pass (``old_log_prob = log_prob.detach()``), not against the recomputed ``old_log_probs``.
    These are still read by the trainer for the KL penalty in the reward, rollout importance
    sampling (``algorithm.rollout_is_threshold``), and, with dynamic batch sizes, the update's
    micro-batches are reordered (the metrics gathered in the update would not line up)."""
    actor = config.actor_rollout_ref.actor
    algorithm = config.algorithm
    if actor.ppo_epochs != 1:
        return f"actor.ppo_epochs={actor.ppo_epochs}: the later epochs are off-policy"
    if config.data.train_batch_size > actor.ppo_mini_batch_size:
        return (f"data.train_batch_size={config.data.train_batch_size} > actor.ppo_mini_batch_size="
                f"{actor.ppo_mini_batch_size}: the later mini-batches are off-policy")
    if algorithm.get("use_kl_in_reward", False):
        return "algorithm.use_kl_in_reward reads the old log-probs"
    if algorithm.get("rollout_is_threshold", None) is not None:
        return "algorithm.rollout_is_threshold reads the old log-probs"
    if actor.get("use_dynamic_bsz", False):
        return "actor.use_dynamic_bsz reorders the update's micro-batches"
    return None


def _old_log_probs_placeholder(data, temperature: float):
    """What the trainer receives instead of the old log-prob pass: NaN old log-probs and
    entropy (any use of them would show as NaN) and the flag that leaves both to the update."""
    from verl import DataProto

    nan = torch.full(data.batch["responses"].shape, float("nan"))
    return DataProto.from_dict(tensors={"old_log_probs": nan, "entropys": nan.clone()},
                               meta_info={"temperature": temperature, OLD_LOG_PROBS_IN_UPDATE: True})


def _skip_old_log_prob_pass(trainer) -> None:
    """Give ``trainer`` (a RayPPOTrainer whose workers are built) the placeholder instead of the
    old log-prob pass where :func:`old_log_probs_needed` allows it; say which in the log."""
    reason = old_log_probs_needed(trainer.config)
    if reason is None:
        temperature = trainer.config.actor_rollout_ref.rollout.temperature
        trainer.actor_rollout_wg.compute_log_prob = lambda data: _old_log_probs_placeholder(data, temperature)
        print("cpu patch: on-policy update; the old log-probs' metrics come from the update's forward pass "
              "(no separate old log-prob pass)")
    else:
        print(f"cpu patch: separate old log-prob pass kept ({reason})")


def _patch_old_log_probs_in_update() -> None:
    """Skip verl's separate old log-prob pass where it only feeds metrics
    (:func:`old_log_probs_needed` is None), and take those metrics from the update's forward pass.

    verl 0.6.0's trainer runs ``compute_log_prob`` over the whole batch every step (one no-grad
    forward pass of the actor: 6.5 s of the quick start's 52 s step on a 2-core AMD EPYC with
    avx512_bf16), then the on-policy update ignores its log-probs and computes its own from the
    same weights. The pass is kept for two metrics: ``actor/entropy`` and the rollout-vs-actor
    agreement (``training/rollout_*``, :func:`_patch_debug_metrics`). Here the trainer's
    ``compute_log_prob`` call returns a placeholder (:func:`_old_log_probs_placeholder`) at no
    cost, and the update records each micro-batch's log-probs and entropy (detached; entropy is
    computed for this even where the loss has no entropy term) and reports both metrics, under
    verl's names, from the weights before its optimizer step: the same quantities, from the
    update's micro-batches. The update itself is unchanged: same loss, same gradients.

    Two sides: the trainer process (``RayPPOTrainer.init_workers`` wraps the worker group's
    ``compute_log_prob``) and the actor worker (``DataParallelPPOActor.update_policy`` and an
    outer layer on ``_forward_micro_batch``). The worker refuses a flagged batch whose update is
    not on-policy, so a placeholder can never reach a loss."""
    from verl.trainer.ppo import ray_trainer
    from verl.workers.actor import dp_actor

    trainer = ray_trainer.RayPPOTrainer
    if getattr(trainer.init_workers, "_cpu_patched", False):
        return
    init_workers = trainer.init_workers

    def patched_init_workers(self):
        init_workers(self)
        _skip_old_log_prob_pass(self)

    patched_init_workers._cpu_patched = True
    trainer.init_workers = patched_init_workers

    actor_cls = dp_actor.DataParallelPPOActor
    update_policy = actor_cls.update_policy
    forward = actor_cls._forward_micro_batch

    def patched_forward(self, micro_batch, temperature, calculate_entropy=False):
        outputs = getattr(self, "_cpu_update_outputs", None)
        if outputs is None or not torch.is_grad_enabled():
            return forward(self, micro_batch, temperature, calculate_entropy)
        entropy, log_probs = forward(self, micro_batch, temperature, calculate_entropy=True)
        outputs.append((log_probs.detach(), entropy.detach()))
        return (entropy if calculate_entropy else None), log_probs

    def patched_update_policy(self, data):
        if not data.meta_info.get(OLD_LOG_PROBS_IN_UPDATE, False):
            return update_policy(self, data)
        if self.config.ppo_epochs != 1 or len(data) > self.config.ppo_mini_batch_size or \
                self.config.get("use_dynamic_bsz", False):
            raise RuntimeError("cpu patch: the old log-probs were left to the update, but this update is not "
                               f"on-policy with fixed micro-batches ({len(data)} responses, mini-batch "
                               f"{self.config.ppo_mini_batch_size}, {self.config.ppo_epochs} epochs)")
        keys = [k for k in ("rollout_log_probs", "response_mask", "responses") if k in data.batch.keys()]
        kept = data.select(batch_keys=keys)
        kept.meta_info = {}  # not the flag: these metrics are computed from real log-probs
        self._cpu_update_outputs = []
        try:
            metrics = update_policy(self, data)
            outputs = self._cpu_update_outputs
        finally:
            self._cpu_update_outputs = None
        log_probs = torch.cat([lp for lp, _ in outputs]).cpu()
        entropy = torch.cat([e for _, e in outputs]).cpu()
        mask = kept.batch["response_mask"]
        metrics["actor/entropy"] = [dp_actor.agg_loss(entropy, mask, self.config.loss_agg_mode).item()]
        if "rollout_log_probs" in kept.batch.keys():
            import verl.utils.debug.metrics as debug_metrics

            kept.batch["old_log_probs"] = log_probs
            for name, value in debug_metrics.calculate_debug_metrics(kept).items():
                metrics[name] = [float(value)]
        return metrics

    patched_forward._cpu_patched = True
    patched_update_policy._cpu_patched = True
    actor_cls._forward_micro_batch = patched_forward
    actor_cls.update_policy = patched_update_policy


def enable_sdpa_gqa() -> None:
    """Let transformers' SDPA attention pass grouped KV heads to torch with ``enable_gqa=True``
    on CPU even when an attention mask is given.

    transformers 4.56 (``integrations/sdpa_attention.use_gqa_in_sdpa``) allows GQA only without a
    mask, a limit of CUDA's fused kernels, and otherwise copies every KV head to its query heads
    (``repeat_kv``) in every layer of every forward pass. torch >= 2.5 on CPU takes ``enable_gqa``
    with a mask. Measured on this recipe's 2-core machine for SmolLM2-135M's shapes (9 query
    heads, 3 KV heads, 64 rows, 300 cached positions, one decode step, one layer): 71 ms with the
    copy, 4.6 ms with ``enable_gqa``, identical output; forward plus backward of a masked prefill
    agree within 1.2e-5 (summation order)."""
    from transformers.integrations import sdpa_attention

    original = sdpa_attention.use_gqa_in_sdpa
    if getattr(original, "_cpu_patched", False):
        return

    def use_gqa_in_sdpa(attention_mask, key) -> bool:
        return key.device.type == "cpu" and not isinstance(key, torch.fx.Proxy) or original(attention_mask, key)

    use_gqa_in_sdpa._cpu_patched = True
    sdpa_attention.use_gqa_in_sdpa = use_gqa_in_sdpa


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
    _set_threads()
    _patch_torch_cpu()
    _patch_process_group()
    _patch_verl_device()
    _patch_cpu_offload_policy()
    _patch_profiler()
    _patch_actor_padding()
    _patch_actor_autocast()
    _patch_debug_metrics()
    _patch_old_log_probs_in_update()
    _patch_optimizer()
    _patch_empty_cache()
    enable_sdpa_gqa()
    _register_hf_rollout()
    _APPLIED = True


# --------------------------------------------------------------------------------------
# Rollout for CPU: Hugging Face model, one prefill per GRPO group, sampling loop
# --------------------------------------------------------------------------------------
from verl.workers.rollout.base import BaseRollout  # noqa: E402  (verl is a hard dependency)

#: Environment variable naming a file to which the rollout appends, at every weight sync,
#: one JSON line with a digest of the weights it generates with (tests of the weight sync).
DIGEST_ENV = "CPU_ROLLOUT_DIGEST_FILE"
#: Environment variable with the compute dtype of the rollout, the actor and the ref: ``bf16``
#: or ``fp32`` (verl's names). The cpu profile sets bf16 only where the CPU multiplies bf16
#: natively (AMX or AVX512-BF16); elsewhere bf16 matmuls are emulated and were measured about 8x
#: slower than fp32. Unset: fp32.
DTYPE_ENV = "CPU_DTYPE"
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def compute_dtype() -> torch.dtype:
    import os

    name = os.environ.get(DTYPE_ENV, "fp32")
    if name not in DTYPES:
        raise ValueError(f"{DTYPE_ENV}={name!r}; expected bf16 or fp32")
    return DTYPES[name]


def weights_digest(named_tensors, dtype: torch.dtype) -> str:
    """sha256 over the tensors' names and bytes in ``dtype``, in name order (a parameter
    digest that the rollout and a checkpoint reader compute the same way)."""
    import hashlib

    digest = hashlib.sha256()
    for name, tensor in sorted(named_tensors, key=lambda item: item[0]):
        digest.update(name.encode())
        digest.update(tensor.detach().to("cpu", dtype).contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def group_index(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(first row of each run of identical consecutive rows, the run each row belongs to).

    verl repeats every prompt ``rollout.n`` times, interleaved, before the rollout; a GRPO
    group is such a run, and its prompt needs to be prefilled once."""
    same = (input_ids[1:] == input_ids[:-1]).all(dim=1) & (attention_mask[1:] == attention_mask[:-1]).all(dim=1)
    new_run = torch.cat([torch.ones(1, dtype=torch.bool), ~same])
    firsts = new_run.nonzero().squeeze(1)
    return firsts, torch.cumsum(new_run.long(), dim=0) - 1


def sample_categorical(probs: torch.Tensor, block: int = 256, uniform: torch.Tensor | None = None) -> torch.Tensor:
    """One token per row of ``probs`` (rows sum to 1), by inverse-CDF sampling in two levels:
    pick a block of ``block`` vocabulary entries by its total mass, then the entry within it.
    ``uniform``: the (rows, 1) float64 random numbers in [0, 1) to sample with (default: drawn here).

    Same distribution as ``torch.multinomial(probs, 1)``, which on CPU draws one exponential
    random number per vocabulary entry: measured 88-117 ms per decode step for 64 rows of
    SmolLM2's 49,152-token vocabulary on the recipe's 2-core machine, against 6 ms here (64 random
    numbers and one pass over the probabilities). A zero-probability entry (top-k / top-p
    filtered) is never drawn.

    The block masses are summed in the probabilities' dtype and then widened to float64 (a
    float64 sum first converts all 64 x 49,152 probabilities: measured 5.3 ms against 0.5 ms;
    the fp32 sum of 256 probabilities is exact to about 1e-7 of the block's mass), and the
    probabilities are padded only when ``block`` does not divide the vocabulary (SmolLM2's it does)."""
    rows, vocab = probs.shape
    pad = -vocab % block
    blocks = (torch.nn.functional.pad(probs, (0, pad)) if pad else probs).reshape(rows, -1, block)
    mass = blocks.sum(-1).double()
    cdf = mass.cumsum(-1)
    if uniform is None:
        uniform = torch.rand(rows, 1, dtype=torch.float64)
    u = uniform * cdf[:, -1:]
    chosen = torch.searchsorted(cdf, u, right=True).clamp_(max=mass.size(1) - 1)
    inner = blocks[torch.arange(rows), chosen.squeeze(1)].double().cumsum(-1)
    u = (u - (cdf.gather(1, chosen) - mass.gather(1, chosen))).clamp(min=0)
    u = torch.minimum(u, inner[:, -1:] * (1 - 1e-9))  # rounding must not step past the block's last mass
    return (chosen * block + torch.searchsorted(inner, u, right=True)).squeeze(1)


#: Attention implementation of the rollout's model (:func:`register_rollout_attention`): SDPA for
#: the prefill and any multi-token call, a shared-prompt attention for the decode steps of
#: :func:`sample_responses`.
ROLLOUT_ATTENTION = "cpu_shared_prompt"


class SharedPromptKV:
    """The prompt keys and values of a decode batch, stored once per GRPO group.

    ``keys[layer]`` / ``values[layer]``: (groups, kv heads, prompt columns, head dim), from the
    prefill of the distinct prompts. Row ``b`` of the decode batch belongs to group
    ``groups[b]``; ``groups`` is non-decreasing (a group's rows are consecutive, as
    :func:`group_index` finds them). For the attention the rows are laid out group by group in
    ``slots`` places per group (the largest group's size): ``take`` is the row in each place (a
    smaller group's spare places repeat its last row and are never read back), ``slot`` the
    place of each row."""

    def __init__(self, keys: list, values: list, groups: torch.Tensor):
        if groups.numel() > 1 and bool((groups[1:] < groups[:-1]).any()):
            raise ValueError("the rows of a group must be consecutive")
        self.keys, self.values, self.groups = keys, values, groups
        sizes = torch.bincount(groups, minlength=keys[0].size(0))
        firsts = sizes.cumsum(0) - sizes
        self.slots = int(sizes.max())
        self.slot = groups * self.slots + torch.arange(groups.numel()) - firsts[groups]
        places = torch.arange(self.slots)
        self.take = (firsts[:, None] + torch.minimum(places[None, :], sizes[:, None] - 1).clamp(min=0)).reshape(-1)
        # groups of equal size (verl's rollout.n copies of each prompt): the places are the rows
        self.identity = self.take.numel() == groups.numel()
        self.prompt_length = keys[0].size(2)

    def select(self, rows: torch.Tensor) -> "SharedPromptKV":
        """The same prompts for the decode batch ``rows`` (increasing indices) of this one;
        groups left without a row are dropped."""
        present, groups = torch.unique_consecutive(self.groups[rows], return_inverse=True)
        if len(present) == self.keys[0].size(0):
            return SharedPromptKV(self.keys, self.values, groups)
        return SharedPromptKV([k[present] for k in self.keys], [v[present] for v in self.values], groups)

    def to_places(self, rows: torch.Tensor) -> torch.Tensor:
        """(batch, ...) per row -> (groups * slots, ...) per place."""
        return rows if self.identity else rows[self.take]

    def to_rows(self, places: torch.Tensor) -> torch.Tensor:
        """(groups * slots, ...) per place -> (batch, ...) per row."""
        return places if self.identity else places[self.slot]


def _shared_prompt_decode(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                          bias: torch.Tensor, scaling: float, shared: SharedPromptKV) -> torch.Tensor:
    """Attention of one new token per row over its group's prompt and its own response so far.

    ``key`` / ``value``: (batch, kv heads, response capacity, head dim), the response columns
    (the static cache of the decode); ``bias``: (batch, 1, 1, prompt + filled response columns),
    0 where a row attends and a large negative number elsewhere. Scores of the prompt and of the
    response columns are joined before one softmax, so this is the attention over the row's
    whole sequence (up to fp32 rounding). Returns (batch, 1, heads, head dim).

    Layout: the scores and probabilities are (groups, kv heads, slots, queries per KV head,
    columns), so that a group's query rows against its prompt are one matrix product per KV
    head (``slots * queries`` rows) with no copy; the response columns are per row (one small
    product per row and KV head)."""
    batch, heads, _, head_dim = query.shape
    kv_heads = key.size(1)
    per_kv = heads // kv_heads
    prompt = shared.prompt_length
    filled = bias.size(-1) - prompt
    slots = shared.slots
    prompt_keys, prompt_values = shared.keys[module.layer_idx], shared.values[module.layer_idx]
    groups = prompt_keys.size(0)

    def grouped(per_place: torch.Tensor) -> torch.Tensor:
        """(groups * slots, kv heads, q, x) -> (groups, kv heads, slots, q, x) (a view)"""
        return per_place.view(groups, slots, *per_place.shape[1:]).transpose(1, 2)

    def per_row(by_group: torch.Tensor) -> torch.Tensor:
        """(groups, kv heads, slots, q, x) -> (batch, kv heads, q, x) (a copy)"""
        places = by_group.transpose(1, 2).reshape(groups * slots, kv_heads, by_group.size(3), by_group.size(4))
        return shared.to_rows(places)

    q = (query * scaling).reshape(batch, kv_heads, per_kv, head_dim)
    q_grouped = grouped(shared.to_places(q)).reshape(groups, kv_heads, slots * per_kv, head_dim)
    scores_prompt = torch.matmul(q_grouped, prompt_keys.transpose(-1, -2))  # (groups, kv, slots * per_kv, prompt)
    scores_response = torch.matmul(q, key[:, :, :filled].transpose(-1, -2))  # (batch, kv, per_kv, filled)
    scores = torch.cat([scores_prompt.view(groups, kv_heads, slots, per_kv, prompt),
                        grouped(shared.to_places(scores_response))], dim=-1)
    scores = scores.float() + grouped(shared.to_places(bias))  # bias as (groups, 1, slots, 1, columns)
    probs = torch.softmax(scores, dim=-1).to(value.dtype)
    out_prompt = torch.matmul(probs[..., :prompt].reshape(groups, kv_heads, slots * per_kv, prompt), prompt_values)
    out = torch.matmul(per_row(probs[..., prompt:]), value[:, :, :filled])  # (batch, kv, per_kv, head dim)
    out += per_row(out_prompt.view(groups, kv_heads, slots, per_kv, head_dim))
    return out.reshape(batch, 1, heads, head_dim)


def rollout_attention_forward(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None,
                              shared_prompt: SharedPromptKV | None = None, **kwargs):
    """The rollout model's attention (:data:`ROLLOUT_ATTENTION`): transformers' SDPA attention,
    except for the decode steps of :func:`sample_responses`, which pass ``shared_prompt``.

    Why: torch's fused CPU SDPA kernel (``_scaled_dot_product_flash_attention_for_cpu``) was
    measured at 5.8 ms per layer for one decode step of SmolLM2-135M at batch 64 (about 175 ms of
    a 546 ms step) for about 47 MFLOP: it runs one small matrix product per row and query head
    over the whole static cache (322 columns), ``enable_gqa`` included. The decode attention here
    (:func:`_shared_prompt_decode`) reads each GRPO group's prompt keys and values once for all
    its rows (8 x fewer prompt bytes at 8 responses per prompt) and only the response columns
    filled so far. Measured per layer in a decode step on the AVX2 machine (batch 64, 8
    groups, 194 prompt columns, a training run sharing the cores, best / median of 8 alternating
    rounds): 7.0 / 8.7 ms for SDPA against 3.8 / 4.5 ms with 65 response columns filled and
    4.9 / 6.4 ms with 121, 2 threads (1 thread: 7.4 / 9.0 against 3.7 / 4.4 ms). Plain batched
    matrix products over every row's copy of the cache were no faster than SDPA (7.3 / 7.9 ms
    against 7.9 / 8.6 ms for one layer alone): MKL spends about 5-12 us on each of the 192 small
    products (3 query heads x 64 dims per row and KV head), the response part's cost here."""
    if shared_prompt is None:
        from transformers.integrations import sdpa_attention  # looked up here: enable_sdpa_gqa patches it

        return sdpa_attention.sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                                     scaling=scaling, **kwargs)
    if query.size(2) != 1:
        raise ValueError(f"shared-prompt attention is for one new token per row, got {query.size(2)}")
    scaling = query.size(-1) ** -0.5 if scaling is None else scaling
    return _shared_prompt_decode(module, query, key, value, attention_mask, scaling, shared_prompt), None


def register_rollout_attention() -> None:
    """Register :data:`ROLLOUT_ATTENTION` with transformers (attention and its mask: SDPA's)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    AttentionInterface.register(ROLLOUT_ATTENTION, rollout_attention_forward)
    AttentionMaskInterface.register(ROLLOUT_ATTENTION, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])


class VocabChunkedLinear(torch.nn.Linear):
    """``nn.Linear`` computed as ``weight @ x.T`` over blocks of :attr:`chunk` output features,
    each block's (features x rows) product transposed into its columns of the output.

    For the LM head at decode shapes (64 rows x 576 -> 49,152 vocabulary) MKL's ``x @ weight.T``
    was measured on the AVX2 machine (a training run sharing the cores, best / median of
    5 alternating rounds) at 140 / 149 ms with 1 thread and 175 / 186 ms with 2, against 90 / 103
    and 75 / 86 ms this way (26 against 40-49 GFLOP/s); one ``weight @ x.T`` over the whole
    vocabulary took 113 / 120 ms (the transpose of its 12 MB output is slow), blocks of 512 to
    2,048 features did about as well as 1,024. Same values up to fp32 summation order; the
    parameters are the module's own (tied weights stay tied, ``load_state_dict`` updates them in
    place)."""

    chunk = 1024

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        rows = hidden.reshape(-1, hidden.size(-1))
        out = rows.new_empty(rows.size(0), self.out_features)
        for start in range(0, self.out_features, self.chunk):
            block = self.weight[start:start + self.chunk]
            out[:, start:start + block.size(0)].copy_(torch.mm(block, rows.t()).t())
        if self.bias is not None:
            out += self.bias
        return out.view(*hidden.shape[:-1], self.out_features)


def _weight_major_mlp_forward(self, x: torch.Tensor) -> torch.Tensor:
    """A gated MLP (``down(act(gate(x)) * up(x))``, Llama's and Qwen2's) with every product
    computed as ``weight @ x.T``: the hidden activations stay transposed, (features, rows),
    and only the output is transposed back."""
    rows = x.reshape(-1, x.size(-1)).t()
    hidden = self.act_fn(torch.mm(self.gate_proj.weight, rows)) * torch.mm(self.up_proj.weight, rows)
    return torch.mm(self.down_proj.weight, hidden).t().reshape(x.shape)


_WEIGHT_MAJOR_CLASSES: dict = {}


def _use_weight_major_mlp(mlp: torch.nn.Module) -> bool:
    """Give ``mlp`` (a gated MLP without biases) :func:`_weight_major_mlp_forward` as its forward,
    through a subclass of its own class (isinstance checks and parameters unchanged). Returns
    whether it did.

    Why: at the decode step's 64 rows, MKL splits ``x @ weight.T`` over its 2 threads in a way
    that was measured slower than 1 thread on the AVX2 machine (a training run sharing the
    cores): the 30 MLPs of SmolLM2-135M took 314 / 386 ms (best / median of 10 alternating
    rounds) at 2 threads against 215 / 264 ms as ``weight @ x.T``; equal at 1 thread (245 / 303
    against 249 / 295 ms) and at the prefill's 1,552 rows. Same values (the same dot products)."""
    projections = [getattr(mlp, name, None) for name in ("gate_proj", "up_proj", "down_proj")]
    if not all(isinstance(p, torch.nn.Linear) and p.bias is None for p in projections) or \
            not hasattr(mlp, "act_fn"):
        return False
    cls = type(mlp)
    if cls not in _WEIGHT_MAJOR_CLASSES:
        _WEIGHT_MAJOR_CLASSES[cls] = type(f"WeightMajor{cls.__name__}", (cls,),
                                          {"forward": _weight_major_mlp_forward})
    mlp.__class__ = _WEIGHT_MAJOR_CLASSES[cls]
    return True


def load_rollout_model(path, dtype: torch.dtype, lean: bool = True):
    """The rollout's copy of the policy: ``AutoModelForCausalLM`` in ``dtype`` with the attention
    :data:`ROLLOUT_ATTENTION` and, in fp32, the LM head computed as :class:`VocabChunkedLinear`
    and the MLPs as :func:`_weight_major_mlp_forward`, in eval mode. Its parameters and their
    names are the plain model's (the weight sync loads the actor's state dict into them in place).
    With ``lean`` and a model that :class:`LeanLlamaDecode` supports, ``model.lean_decode`` holds
    the lean decode step that :func:`sample_responses` runs (weights derived from the parameters,
    rebuilt whenever they change: :func:`lean_decode`); otherwise the decode steps run the HF
    forward."""
    from transformers import AutoModelForCausalLM

    register_rollout_attention()
    model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=dtype, attn_implementation=ROLLOUT_ATTENTION)
    if dtype == torch.float32:
        # measured in fp32 only: in bf16 on the AVX2 machine (emulated) the two made a rollout
        # slower (26 against 15 s for 8 rows x 8 tokens), and the CPUs with native bf16 matmuls,
        # where the cpu profile uses bf16, were not measured
        head = model.get_output_embeddings()
        if type(head) is torch.nn.Linear:
            head.__class__ = VocabChunkedLinear  # same module and parameters, another forward
        for layer in getattr(model.base_model, "layers", []):
            _use_weight_major_mlp(layer.mlp)
    model.eval()
    if lean and LeanLlamaDecode.unsupported(model) is None:
        model.lean_decode = LeanLlamaDecode(model)
    return model


def lean_decode(model) -> "LeanLlamaDecode | None":
    """The model's :class:`LeanLlamaDecode` (rebuilt first if its parameters changed since), or
    None: the decode steps then run the HF forward."""
    decode = getattr(model, "lean_decode", None)
    if decode is not None:
        decode.ensure_fresh()
    return decode


def _packed_linear_supported(dtype: torch.dtype) -> bool:
    """Whether this torch has oneDNN's prepacked linear (``mkldnn._reorder_linear_weight`` /
    ``mkldnn._linear_pointwise``, what torch.compile's CPU backend uses for frozen weights) for
    ``dtype``: fp32 wherever oneDNN is built in, bf16 where oneDNN reports bf16 support (AVX512
    and newer; the cpu profile runs bf16 only where the CPU multiplies it natively anyway)."""
    if not (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
            and hasattr(torch.ops.mkldnn, "_linear_pointwise")):
        return False
    return dtype == torch.float32 or dtype == torch.bfloat16 and torch.ops.mkldnn._is_mkldnn_bf16_supported()


class _Linear:
    """``x @ weight.T`` (no bias) with ``weight`` prepacked for oneDNN (``packed``) or as it is."""

    def __init__(self, weight: torch.Tensor, packed: bool, rows_hint: int):
        weight = weight.detach().contiguous()
        self.out_features, self.in_features = weight.shape
        self.packed = packed
        self.weight = torch.ops.mkldnn._reorder_linear_weight(weight, rows_hint) if packed else weight

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed:
            return torch.ops.mkldnn._linear_pointwise(x, self.weight, None, "none", [], "")
        return torch.nn.functional.linear(x, self.weight)


class ResponseKV:
    """The decode's keys and values of the response columns, per layer (batch, kv heads,
    capacity, head dim), as the static cache of the HF decode holds them."""

    def __init__(self, layers: int, batch: int, kv_heads: int, capacity: int, head_dim: int, dtype: torch.dtype):
        shape = (batch, kv_heads, capacity, head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype) for _ in range(layers)]
        self.values = [torch.zeros(shape, dtype=dtype) for _ in range(layers)]

    def reorder_cache(self, rows: torch.Tensor) -> None:
        """Keep the rows ``rows`` (the decode batch drops its stopped rows)."""
        self.keys = [k.index_select(0, rows) for k in self.keys]
        self.values = [v.index_select(0, rows) for v in self.values]


class LeanLlamaDecode:
    """One decode step of a Llama model (one new token per row, the shared-prompt attention
    :func:`_shared_prompt_decode`) as a plain loop over its layers, with weights derived from the
    model's parameters: q/k/v joined into one product, gate/up into one, every product (LM head
    included) on oneDNN-prepacked weights where torch has them (:func:`_packed_linear_supported`).

    Supported (:meth:`unsupported` says why not): ``LlamaForCausalLM`` (SmolLM2's class) without
    attention, MLP or LM-head biases, in fp32 or bf16. Any other model (Qwen2's q/k/v biases,
    Gemma's scaled norms, ...) decodes through its own HF forward, as before.

    The derived weights are copies (about one more copy of the model in memory, the tied LM head
    included): :meth:`refresh` rebuilds them, and :meth:`ensure_fresh` does so whenever any
    parameter of the model changed since (its tensor or its version counter, which
    ``load_state_dict`` and every in-place write bump), so a weight sync cannot leave the decode on
    old weights. The model's own parameters and their names are untouched.

    Same computation as the HF decode step, op for op in the same dtypes (RMSNorm in fp32, the
    model's own rotary module, residual adds in the compute dtype, the LM head's logits in the
    compute dtype), up to the summation order of the joined and prepacked products.

    Why, measured on the recipe's 2-core AMD EPYC (AVX512-BF16, no AMX; another user's job on the
    cores, load average 2.5-4; SmolLM2-135M, MATH prompts of ~170-194 columns, 24 or 16 decode
    steps from a real prefill, best / median of 3 alternating rounds, ms per decode step):

    ===========  ===============  ===============  ===============  ===============
    variant      bf16, 16 rows    bf16, 64 rows    fp32, 16 rows    fp32, 64 rows
    ===========  ===============  ===============  ===============  ===============
    HF forward   113 / 119        255 / 265        157 / 167        360 / 375
    lean, plain  106 / 236        250 / 328        191 / 230        503 / 705
    lean packed  83 / 87          217 / 218        103 / 105        284 / 298
    + 1 thread   72 / 73          152 / 176        93 / 109         207 / 243
    ===========  ===============  ===============  ===============  ===============

    "lean, plain" (timed in a separate set of rounds): the same loop on joined but unpacked
    weights (``F.linear``); "+ 1 thread":
    the attention half of each layer (q/k/v product, rotary, attention, output product) at 1
    thread, the MLP and LM head at the caller's (:attr:`attention_threads`); all 4 products of
    a layer at 1 thread measured no better (71 / 75, 159 / 193, 102 / 105, 255 / 258). Per
    product (bf16, 16 rows, 2 threads, best of 3 rounds, ms): q/k/v 0.354 as 3 ``F.linear``, 0.137
    joined, 0.105 joined and prepacked; gate/up 0.412 / 0.305 / 0.229; LM head (49,152 x 576)
    6.8 as ``F.linear``, 3.5 prepacked (fp32: 21.5 / 7.8; at 64 rows bf16 18.1 / 11.2). The
    output product (576 x 576) took 0.107 at 2 threads and 0.068 at 1, prepacked. Also at 1
    thread the MLP's elementwise work between its products (4 more thread switches per layer):
    no clear gain at 64 rows (151 / 161 against 155 / 168 bf16, 263 / 268 against 263 / 271
    fp32, 4 rounds).

    The whole rollout (``python -m benchmarks.bench_cpu_rollout --dtypes bf16,fp32
    --skip-generate --rounds 3``, 128 new tokens, sampling; prefill included; the same machine,
    shared, load average 3-6), ms per decode step, best / median, against the HF forward's
    decode ("before"): 4 x 4 rows bf16 86 / 96 against 131 / 157, fp32 129 / 143 against
    238 / 271; 8 x 8 rows bf16 206 / 214 against 261 / 263, fp32 313 / 412 against 474 / 666.
    """

    #: threads of the attention half of each layer (None: the caller's)
    attention_threads: int | None = 1

    def __init__(self, model, packed: bool | None = None, rows_hint: int = 16):
        """``packed``: prepack the products' weights (default: where :func:`_packed_linear_supported`);
        ``rows_hint``: the rows oneDNN lays the packed weights out for; any number of rows works.
        Packed for 16 or for 64 rows, the products ran equally fast at 16 and at 64 rows (bf16
        and fp32, q/k/v, gate/up, down and LM head shapes, within 10 %, best of 3 rounds)."""
        self.model = model
        self.packed = _packed_linear_supported(model.dtype) if packed is None else packed
        self.rows_hint = rows_hint
        self.refresh()

    @staticmethod
    def unsupported(model) -> str | None:
        """Why the lean decode cannot run ``model`` (None: it can)."""
        from transformers import LlamaForCausalLM

        if not isinstance(model, LlamaForCausalLM):
            return f"{type(model).__name__} is not a LlamaForCausalLM"
        cfg = model.config
        if getattr(cfg, "attention_bias", False) or getattr(cfg, "mlp_bias", False):
            return "attention or MLP biases"
        if model.get_output_embeddings().bias is not None:
            return "LM head bias"
        if model.dtype not in (torch.float32, torch.bfloat16):
            return f"dtype {model.dtype}"
        return None

    def _sources(self) -> list:
        return list(self.model.parameters())

    def _versions(self) -> list:
        return [(p.data_ptr(), p._version) for p in self._sources()]

    def refresh(self) -> None:
        """Rebuild the derived weights from the model's current parameters (on plain weights if
        oneDNN refuses to prepack them). Measured for SmolLM2-135M on the 2-core machine (shared):
        0.14-0.23 s in bf16, 0.22-0.49 s in fp32, once per weight sync; :meth:`fresh` 1-2 ms."""
        try:
            self._build()
        except RuntimeError:
            if not self.packed:
                raise
            self.packed = False
            self._build()

    def _build(self) -> None:
        import types

        model, hint, packed = self.model, self.rows_hint, self.packed
        cfg = model.config
        decoder = model.model
        with torch.no_grad():
            self.layers = []
            for layer in decoder.layers:
                attn, mlp = layer.self_attn, layer.mlp
                self.layers.append(types.SimpleNamespace(
                    attn=attn,
                    norm1=layer.input_layernorm, norm2=layer.post_attention_layernorm,
                    qkv=_Linear(torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]), packed, hint),
                    o=_Linear(attn.o_proj.weight, packed, hint),
                    gate_up=_Linear(torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]), packed, hint),
                    down=_Linear(mlp.down_proj.weight, packed, hint),
                    act=mlp.act_fn, intermediate=mlp.gate_proj.out_features))
            self.head = _Linear(model.get_output_embeddings().weight, packed, hint)
        self.embed = decoder.embed_tokens
        self.norm = decoder.norm
        self.rotary = decoder.rotary_emb
        self.heads = cfg.num_attention_heads
        self.kv_heads = cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.dtype = model.dtype
        self.built_from = self._versions()

    def fresh(self) -> bool:
        """Whether the derived weights are the model's current parameters."""
        return self._versions() == self.built_from

    def ensure_fresh(self) -> None:
        if not self.fresh():
            self.refresh()

    def new_cache(self, batch: int, capacity: int) -> ResponseKV:
        return ResponseKV(len(self.layers), batch, self.kv_heads, capacity, self.head_dim, self.dtype)

    @staticmethod
    def _rms_norm(norm, x: torch.Tensor) -> torch.Tensor:
        """LlamaRMSNorm's forward, op for op. ``F.rms_norm`` on the fp32 copy gave no clear gain
        in a decode step (ms, best / median of 3, machine shared: 64 / 68 against 64 / 67 at 16
        rows bf16, 157 / 177 against 183 / 190 at 64 rows bf16, 272 / 337 against 260 / 285 at
        64 rows fp32)."""
        dtype = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
        return norm.weight * x.to(dtype)

    def step(self, token: torch.Tensor, position: torch.Tensor, bias: torch.Tensor, cache: ResponseKV, column: int,
             shared: SharedPromptKV) -> torch.Tensor:
        """The logits (batch, vocab) in the compute dtype after feeding ``token`` (batch,) at
        ``position`` (batch, 1); its keys and values go to response column ``column`` of
        ``cache``; ``bias``: the additive mask of :func:`_shared_prompt_decode` up to that column."""
        batch = token.size(0)
        heads, kv_heads, head_dim = self.heads, self.kv_heads, self.head_dim
        x = torch.nn.functional.embedding(token, self.embed.weight)  # (batch, hidden)
        cos, sin = self.rotary(x, position)  # (batch, 1, head dim)
        half = head_dim // 2
        q_end, k_end = heads * head_dim, (heads + kv_heads) * head_dim
        threads = torch.get_num_threads()
        few = self.attention_threads if self.attention_threads and self.attention_threads < threads else None
        try:
            for index, layer in enumerate(self.layers):
                if few:
                    torch.set_num_threads(few)
                qkv = layer.qkv(self._rms_norm(layer.norm1, x))
                qk = qkv[:, :k_end].view(batch, heads + kv_heads, head_dim)
                qk = qk * cos + torch.cat([-qk[..., half:], qk[..., :half]], dim=-1) * sin  # rotary
                query = qk[:, :heads].unsqueeze(2)  # (batch, heads, 1, head dim), as HF's attention gets it
                cache.keys[index][:, :, column] = qk[:, heads:]
                cache.values[index][:, :, column] = qkv[:, k_end:].view(batch, kv_heads, head_dim)
                out = _shared_prompt_decode(layer.attn, query, cache.keys[index], cache.values[index], bias,
                                            layer.attn.scaling, shared)
                x = x + layer.o(out.reshape(batch, q_end))
                if few:
                    torch.set_num_threads(threads)
                gate_up = layer.gate_up(self._rms_norm(layer.norm2, x))
                x = x + layer.down(layer.act(gate_up[:, :layer.intermediate]) * gate_up[:, layer.intermediate:])
        finally:
            torch.set_num_threads(threads)
        return self.head(self._rms_norm(self.norm, x))


def _warpers(do_sample: bool, temperature: float, top_k: int, top_p: float):
    """transformers' logits warpers for the sampling settings, as ``generate`` applies them."""
    from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    warpers = LogitsProcessorList()
    if do_sample:
        if temperature != 1.0:
            warpers.append(TemperatureLogitsWarper(temperature))
        if top_k and top_k > 0:
            warpers.append(TopKLogitsWarper(top_k))
        if top_p < 1.0:
            warpers.append(TopPLogitsWarper(top_p))
    return warpers


#: With the shared-prompt attention, the decode batch drops its stopped rows (their keys and
#: values, mask and positions) once at least this fraction of it has stopped and at least
#: :data:`DROP_MIN_STEPS_LEFT` steps may follow: every later step then computes the live rows
#: only. In the benchmark's batch (64 rows, 128 new tokens) 16 rows stopped early, at steps 7 to
#: 108. A row costs about 1/64 of a decode step (~10 ms on the AVX2 machine, a training run
#: sharing the cores); dropping rows copies the response cache of the live rows once
#: (``reorder_cache``: measured 60-100 ms for 60 rows, 400-450 ms the first time, its fresh pages).
DROP_STOPPED_FRACTION = 1 / 16
DROP_MIN_STEPS_LEFT = 8


@torch.no_grad()
def sample_responses(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, *, max_new_tokens: int,
                     eos_token_ids, pad_token_id: int, do_sample: bool, temperature: float = 1.0,
                     top_p: float = 1.0, top_k: int = 0, return_log_probs: bool = False):
    """Sample up to ``max_new_tokens`` tokens for each left-padded prompt row.

    The semantics are ``model.generate``'s for the same settings (temperature, top-k, top-p
    through transformers' own logits warpers, sampling from the softmax (:func:`sample_categorical`)
    or greedy; a row stops at
    its first EOS and is padded with ``pad_token_id`` after it). What differs is the work:
    identical consecutive prompt rows (one GRPO group) are prefilled once, and only the last
    position's logits are computed in the prefill.

    With the model's attention :data:`ROLLOUT_ATTENTION` (as :func:`load_rollout_model` loads
    it), the group's prompt keys and values stay stored once and every decode step attends to
    them through :func:`rollout_attention_forward`; the static cache holds the response columns
    only, and rows that stopped are dropped from the decode batch (:data:`DROP_STOPPED_FRACTION`;
    every sampling step still draws one random number per row of the batch, so a seed gives the
    same tokens either way, up to fp32 rounding of the logits); a model with a lean decode step
    (:func:`lean_decode`) computes the decode steps with it instead of its HF forward (same
    logits up to the rounding of the products). With any other
    attention implementation the prompt's keys and values are copied to every row of its group
    in one static cache of prompt and response columns, and every row is computed to the end
    (the previous rollout, kept for other models and to measure against).

    Returns ``(responses (bs, n_new) long, log_probs (bs, n_new) float32 or None)``;
    ``n_new <= max_new_tokens`` (every row stopped). ``log_probs`` are the sampled tokens'
    log-probabilities under ``logits / temperature``, the quantity verl's actor computes as
    ``old_log_probs`` (0 after a row's EOS).
    """
    from transformers import DynamicCache, StaticCache

    eos = torch.tensor(eos_token_ids if isinstance(eos_token_ids, (list, tuple)) else [eos_token_ids])
    warpers = _warpers(do_sample, temperature, top_k, top_p)
    batch_size, prompt_length = input_ids.shape
    firsts, groups = group_index(input_ids, attention_mask)
    positions = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    shared = model.config._attn_implementation == ROLLOUT_ATTENTION
    lean = lean_decode(model) if shared else None

    if shared:
        prompt_cache = DynamicCache()
        out = model(input_ids=input_ids[firsts], attention_mask=attention_mask[firsts],
                    position_ids=positions[firsts], past_key_values=prompt_cache, use_cache=True, logits_to_keep=1)
        layers = prompt_cache.layers
        prompt_kv = SharedPromptKV([layer.keys for layer in layers], [layer.values for layer in layers], groups)
        del prompt_cache
        # A static cache of the response columns: a dynamic cache concatenates the whole cache in
        # every layer at every decode step (measured 40 % of a decode step at batch 64).
        cache = lean.new_cache(batch_size, max_new_tokens) if lean is not None else \
            StaticCache(config=model.config, max_cache_len=max_new_tokens)
        # the additive attention mask of the decode steps: prompt columns, then response columns
        # (a response column opens when its token is fed for a row that has not stopped)
        bias = torch.full((batch_size, 1, 1, prompt_length + max_new_tokens), torch.finfo(torch.float32).min)
        bias[:, 0, 0, :prompt_length].masked_fill_(attention_mask.bool(), 0.0)
    else:
        # A static cache holds every position from the start (see above).
        cache = StaticCache(config=model.config, max_cache_len=prompt_length + max_new_tokens)
        mask = attention_mask.new_zeros((batch_size, prompt_length + max_new_tokens))
        mask[:, :prompt_length] = attention_mask
        out = model(input_ids=input_ids[firsts], attention_mask=mask[firsts], position_ids=positions[firsts],
                    past_key_values=cache, use_cache=True, cache_position=torch.arange(prompt_length),
                    logits_to_keep=1)
        if len(firsts) < batch_size:
            cache.reorder_cache(groups)  # every row of a group reads its prompt's prefilled keys and values
    logits = out.logits[:, -1].float()[groups]
    rows = torch.arange(batch_size)  # the rows of the full batch that the decode batch computes
    next_pos = positions[:, -1:] + 1
    finished = torch.zeros(batch_size, dtype=torch.bool)
    tokens, log_probs = [], []
    for step in range(max_new_tokens):
        if do_sample:
            scores = warpers(None, logits)
            # random numbers for the whole batch, so that the rows that left the decode batch do
            # not change what the others sample
            uniform = torch.rand(batch_size, 1, dtype=torch.float64)[rows]
            token = sample_categorical(torch.softmax(scores, dim=-1), uniform=uniform)
        else:
            token = logits.argmax(dim=-1)
        stopped = finished[rows]
        if return_log_probs:
            scaled = logits / temperature if do_sample else logits
            lp = torch.log_softmax(scaled, dim=-1).gather(1, token[:, None]).squeeze(1)
            log_probs.append(torch.zeros(batch_size).index_put_((rows,), lp.masked_fill(stopped, 0.0)))
        token = token.masked_fill(stopped, pad_token_id)
        tokens.append(torch.full((batch_size,), pad_token_id, dtype=token.dtype).index_put_((rows,), token))
        alive = ~stopped  # rows for which this token is real (their EOS included)
        finished[rows] = stopped | torch.isin(token, eos)
        if bool(finished.all()) or step == max_new_tokens - 1:
            break
        column = prompt_length + step
        if shared:
            live = ~finished[rows]
            if live.numel() - int(live.sum()) >= max(1, DROP_STOPPED_FRACTION * live.numel()) and \
                    max_new_tokens - 1 - step >= DROP_MIN_STEPS_LEFT:
                keep = live.nonzero().squeeze(1)
                cache.reorder_cache(keep)
                prompt_kv = prompt_kv.select(keep)
                rows, bias, next_pos, token, alive = rows[keep], bias[keep], next_pos[keep], token[keep], alive[keep]
            bias[:, 0, 0, column].masked_fill_(alive, 0.0)
            if lean is not None:
                logits = lean.step(token, next_pos, bias[..., :column + 1], cache, step, prompt_kv)
            else:
                logits = model(input_ids=token[:, None], attention_mask=bias[..., :column + 1], position_ids=next_pos,
                               past_key_values=cache, use_cache=True, cache_position=torch.tensor([step]),
                               shared_prompt=prompt_kv).logits[:, -1]
        else:
            mask[:, column] = alive.to(mask.dtype)
            logits = model(input_ids=token[:, None], attention_mask=mask, position_ids=next_pos, past_key_values=cache,
                           use_cache=True, cache_position=torch.tensor([column])).logits[:, -1]
        next_pos = next_pos + 1
        logits = logits.float()
    responses = torch.stack(tokens, dim=1)
    return responses, (torch.stack(log_probs, dim=1) if return_log_probs else None)


class CPUHFRollout(BaseRollout):
    """Rollout with a plain Hugging Face copy of the policy, for CPU runs.

    verl 0.6.0's ``HFRollout`` predates the ``BaseRollout`` interface (``resume`` /
    ``release`` / ``update_weights``) and cannot be built by ``_build_rollout``. This class
    keeps its own ``AutoModelForCausalLM`` (:func:`load_rollout_model`: compute dtype
    ``CPU_DTYPE``, the same as the actor's and the ref's forward; SDPA attention for the prefill,
    the shared-prompt attention for the decode steps, run by a lean decode step for Llama
    models (:class:`LeanLlamaDecode`); in fp32 the LM head in vocabulary blocks
    and the MLPs weight-major), receives the actor's full weights before every rollout through
    :meth:`update_weights`, and samples with :func:`sample_responses` (one prefill per GRPO group).

    Speed: verl's dataset left-pads every prompt to ``data.max_prompt_length``; before
    generating, the columns that are padding in every row are cut (and put back in the
    output), so decoding runs on the batch's longest real prompt rather than the maximum.

    With ``rollout.calculate_log_probs=True`` the output also holds ``rollout_log_probs``,
    and verl logs how far they are from the actor's (``training/rollout_probs_diff_*``, plus
    ``training/rollout_log_prob_absdiff_*`` added by :func:`_patch_debug_metrics`).

    Output layout (as verl's vLLM rollout): ``prompts`` (bs, prompt_length), ``responses``
    (bs, response_length) padded with ``pad_token_id``, ``input_ids`` / ``attention_mask`` /
    ``position_ids`` (bs, prompt_length + response_length).
    """

    def __init__(self, config, model_config, device_mesh):
        super().__init__(config=config, model_config=model_config, device_mesh=device_mesh)
        import os

        self.dtype = compute_dtype()
        self.module = load_rollout_model(model_config.local_path, self.dtype)
        self.digest_file = os.environ.get(DIGEST_ENV)
        self._syncs = 0

    async def resume(self, tags: list[str]):
        """Weights and KV cache live in host memory: nothing to resume."""

    async def release(self):
        """Nothing to release on CPU."""

    async def update_weights(self, weights: Generator[tuple[str, torch.Tensor], None, None], **kwargs):
        """Load the actor's full weights (HF names) into the rollout copy."""
        state = {name: tensor.detach().to("cpu", self.dtype) for name, tensor in weights}
        missing, unexpected = self.module.load_state_dict(state, strict=False)
        tied = {"lm_head.weight"} if self.module.config.tie_word_embeddings else set()
        if unexpected or set(missing) - tied:
            raise RuntimeError(f"rollout weight sync: missing {missing[:5]}, unexpected {unexpected[:5]}")
        if getattr(self.module, "lean_decode", None) is not None:
            self.module.lean_decode.refresh()  # its joined, prepacked weights are copies
        self._syncs += 1
        if self.digest_file:
            import json

            named = [(n, p) for n, p in self.module.state_dict().items() if n not in tied]
            line = json.dumps({"sync": self._syncs, "dtype": str(self.dtype).removeprefix("torch."),
                               "digest": weights_digest(named, self.dtype)})
            with open(self.digest_file, "a", encoding="utf-8") as fh:
                fh.write(line + "\n")

    def _sampling(self, meta_info: dict) -> dict:
        cfg = self.config
        greedy = {"do_sample": False}
        if not meta_info.get("do_sample", cfg.do_sample):
            return greedy
        if meta_info.get("validate", False):
            val = cfg.val_kwargs
            if not val.do_sample:
                return greedy
            return {"do_sample": True, "temperature": val.temperature, "top_p": val.top_p, "top_k": max(0, val.top_k)}
        return {
            "do_sample": True,
            "temperature": meta_info.get("temperature", cfg.temperature),
            "top_p": meta_info.get("top_p", cfg.top_p),
            "top_k": max(0, meta_info.get("top_k", cfg.top_k)),
        }

    def generate_sequences(self, prompts):
        from tensordict import TensorDict
        from verl import DataProto
        from verl.utils.torch_functional import get_response_mask

        input_ids = prompts.batch["input_ids"]  # (bs, prompt_length), left-padded
        attention_mask = prompts.batch["attention_mask"]
        position_ids = prompts.batch["position_ids"]
        eos_token_id = prompts.meta_info["eos_token_id"]
        pad_token_id = prompts.meta_info["pad_token_id"]
        response_length = self.config.response_length
        batch_size, _ = input_ids.shape
        want_log_probs = bool(getattr(self.config, "calculate_log_probs", False))

        # cut the left-padding columns shared by every row
        real_columns = attention_mask.bool().any(dim=0).nonzero()
        start = int(real_columns[0]) if len(real_columns) else 0
        responses, log_probs = sample_responses(
            self.module, input_ids[:, start:], attention_mask[:, start:], max_new_tokens=response_length,
            eos_token_ids=eos_token_id, pad_token_id=pad_token_id, return_log_probs=want_log_probs,
            **self._sampling(prompts.meta_info))
        if responses.size(1) < response_length:  # every row stopped early: pad to the fixed length
            fill = responses.new_full((batch_size, response_length - responses.size(1)), pad_token_id)
            responses = torch.cat([responses, fill], dim=1)
            if log_probs is not None:
                log_probs = torch.cat([log_probs, log_probs.new_zeros(fill.shape)], dim=1)

        response_mask = get_response_mask(response_id=responses, eos_token=eos_token_id, dtype=attention_mask.dtype)
        offsets = torch.arange(1, response_length + 1, dtype=position_ids.dtype).unsqueeze(0)
        tensors = {
            "prompts": input_ids,
            "responses": responses,
            "input_ids": torch.cat([input_ids, responses], dim=1),
            "attention_mask": torch.cat([attention_mask, response_mask], dim=1),
            "position_ids": torch.cat([position_ids, position_ids[:, -1:] + offsets], dim=1),
        }
        if log_probs is not None:
            tensors["rollout_log_probs"] = log_probs
        batch = TensorDict(tensors, batch_size=batch_size)
        return DataProto(batch=batch, non_tensor_batch=dict(prompts.non_tensor_batch))
