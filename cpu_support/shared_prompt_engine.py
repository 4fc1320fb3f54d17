"""verl's FSDP actor/ref engine with each GRPO group's prompt computed once.

A GRPO micro-batch holds several responses to one prompt. verl's engine (``FSDPEngineWithLMHead.forward_step``
in ``verl/workers/engine/fsdp/transformer_impl.py``) runs the model over every prompt + response: each
prompt once per response, with logits at every prompt position, which the loss never reads
(``no_padding_2_padding`` in ``verl/workers/utils/padding.py`` keeps the response's). On the CPU
quick start the prompts are two thirds of the tokens.

``SharedPromptEngine`` computes each distinct prompt of a micro-batch once, keeping its key/value
cache, then that prompt's responses as one batch attending to the cache, with logits at the
response positions only. Gradients flow through the cache into the prompt, so the log-probs, the
loss and the update are verl's up to float rounding (``tests/unit/test_shared_prompt_engine.py``
compares them with the plain forward). The log-probs come back in verl's layout: one value per
token of each sequence, the response's at prompt_len - 1 ... prompt_len + response_len - 2, zeros
at the prompt positions. The platform module registers it for the device ``cpu``; micro-batches it
does not handle (fused kernels, sequence parallelism, multimodal inputs, distillation, Σπ², 3-D
position ids) go to verl's own ``forward_step``, as every one does with ``VERL_CPU_SHARED_PROMPT=0``.
"""

from __future__ import annotations

import os
from contextlib import nullcontext

import torch
from tensordict import TensorDict

from verl.utils import tensordict_utils as tu
from verl.utils.device import get_device_name
from verl.utils.model import extract_multi_modal_inputs
from verl.utils.torch_functional import entropy_from_logits, logprobs_from_logits
from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead
from verl.workers.engine.utils import detach_tree

#: set to 0 to run verl's own forward (for comparisons)
ENABLED_ENV = "VERL_CPU_SHARED_PROMPT"

# non-tensor switches of a micro-batch this forward does not implement
_UNSUPPORTED_FLAGS = ("use_fused_kernels", "calculate_sum_pi_squared", "distillation_use_topk", "distillation_only")


def _enabled() -> bool:
    return os.environ.get(ENABLED_ENV, "1").strip() not in ("0", "false", "False")


class SharedPromptEngine(FSDPEngineWithLMHead):
    """``FSDPEngineWithLMHead`` whose forward computes each distinct prompt once (module docstring)."""

    def can_share(self, micro_batch: TensorDict) -> bool:
        if not _enabled() or getattr(self, "ulysses_sequence_parallel_size", 1) > 1:
            return False
        if any(tu.get_non_tensor_data(data=micro_batch, key=k, default=False) for k in _UNSUPPORTED_FLAGS):
            return False
        if not {"prompts", "responses"} <= set(micro_batch.keys()):
            return False
        if extract_multi_modal_inputs(micro_batch.get("multi_modal_inputs", [])):
            return False
        input_ids, prompts, responses = micro_batch["input_ids"], micro_batch["prompts"], micro_batch["responses"]
        if not (input_ids.is_nested and prompts.is_nested and responses.is_nested):
            return False
        if micro_batch["position_ids"].dim() != 2:  # mrope's (4, bsz, len) layout
            return False
        lengths = prompts.offsets().diff() + responses.offsets().diff()
        return bool(torch.equal(lengths, input_ids.offsets().diff()))

    def forward_step(self, micro_batch: TensorDict, loss_function, forward_only):
        if not self.can_share(micro_batch):
            return super().forward_step(micro_batch, loss_function, forward_only)
        micro_batch = micro_batch.to(get_device_name())
        dtype = getattr(self, "_autocast_dtype", torch.bfloat16)
        autocast = nullcontext() if dtype == torch.float32 else torch.autocast(get_device_name(), dtype=dtype)
        with autocast:
            entropy = tu.get_non_tensor_data(data=micro_batch, key="calculate_entropy", default=False)
            model_output = shared_prompt_outputs(self.module, micro_batch, calculate_entropy=entropy)
            if loss_function is not None:
                loss, metrics = loss_function(
                    model_output=model_output, data=micro_batch, dp_group=self.get_data_parallel_group()
                )
            else:
                loss, metrics = torch.tensor(1.0, device=get_device_name()), {}
        return loss, {"model_output": detach_tree(model_output), "loss": loss.detach().item(), "metrics": metrics}


def _temperatures(micro_batch: TensorDict, size: int) -> torch.Tensor:
    temperature = micro_batch["temperature"]
    if not isinstance(temperature, torch.Tensor):
        return torch.full((size,), float(temperature))
    return temperature.reshape(-1).to(torch.float32).expand(size) if temperature.numel() == 1 else temperature.float()


def shared_prompt_outputs(module: torch.nn.Module, micro_batch: TensorDict, calculate_entropy: bool = False) -> dict:
    """verl's ``model_output`` (``log_probs``, and ``entropy`` if asked) for a micro-batch of
    prompt + response sequences, in two calls of ``module``: the distinct prompts, right-padded
    into one batch, keeping their key/value cache; then every response, right-padded, each
    attending to its prompt's row of the cache."""
    prompts = list(micro_batch["prompts"].unbind())
    responses = list(micro_batch["responses"].unbind())
    device = prompts[0].device
    keys = [tuple(p.tolist()) for p in prompts]
    rows = {key: row for row, key in enumerate(dict.fromkeys(keys))}  # each distinct prompt's row in the batch
    distinct = [prompts[keys.index(key)] for key in rows]
    row_of = torch.tensor([rows[key] for key in keys], device=device)

    prompt_ids, prompt_mask = _right_padded(distinct)
    prompt_lens = prompt_mask.sum(1)
    last = torch.unique(prompt_lens - 1)  # only a prompt's last position predicts a response token
    prefix = module(
        input_ids=prompt_ids,
        attention_mask=prompt_mask,
        position_ids=torch.arange(prompt_ids.shape[1], device=device).expand_as(prompt_ids),
        use_cache=True,
        logits_to_keep=last,
    )
    first = prefix.logits[torch.arange(len(distinct), device=device), torch.searchsorted(last, prompt_lens - 1)]
    cache = prefix.past_key_values
    cache.batch_select_indices(row_of)

    response_ids, response_mask = _right_padded(responses)
    width = response_ids.shape[1]
    suffix = module(
        input_ids=response_ids,
        attention_mask=torch.cat([prompt_mask[row_of], response_mask], dim=1),
        position_ids=prompt_lens[row_of].unsqueeze(1) + torch.arange(width, device=device),
        past_key_values=cache,
        use_cache=True,
    )
    # the logits that predict response token k: the prompt's last position for k = 0, else the
    # response's position k - 1 (the response's last position predicts nothing the loss reads);
    # the two parts are scored apart, so that no copy of the response logits is made
    temperature = _temperatures(micro_batch, len(prompts)).to(device)
    parts = [(first[row_of].unsqueeze(1), response_ids[:, :1]), (suffix.logits[:, : width - 1], response_ids[:, 1:])]
    log_probs, entropy = [], []
    for logits, labels in parts[: 2 if width > 1 else 1]:
        if not torch.all(temperature == 1):
            logits = logits / temperature.clamp(min=1e-8).view(-1, 1, 1).to(logits.dtype)
        log_probs.append(logprobs_from_logits(logits, labels, inplace_backward=not calculate_entropy))
        if calculate_entropy:
            entropy.append(entropy_from_logits(logits))

    outputs = {"log_probs": log_probs, "entropy": entropy} if calculate_entropy else {"log_probs": log_probs}
    offsets = micro_batch["input_ids"].offsets()
    lengths = [(len(p), len(r)) for p, r in zip(prompts, responses)]
    return {name: _nested(torch.cat(values, dim=1), lengths, offsets) for name, values in outputs.items()}


def _right_padded(sequences: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(batch, longest) token ids padded with 0 on the right, and the mask of real tokens."""
    lengths = torch.tensor([len(s) for s in sequences], device=sequences[0].device)
    ids = torch.nn.utils.rnn.pad_sequence(sequences, batch_first=True, padding_value=0)
    mask = (torch.arange(ids.shape[1], device=ids.device) < lengths.unsqueeze(1)).long()
    return ids, mask


def _nested(batch: torch.Tensor, lengths: list[tuple[int, int]], offsets: torch.Tensor) -> torch.Tensor:
    """Per-response values (batch, longest response) placed where verl's engine puts them in the
    whole sequence (position t holds the prediction of token t + 1), as one nested tensor."""
    parts = []
    for values, (prompt_len, response_len) in zip(batch, lengths):
        zeros = values.new_zeros
        parts.append(torch.cat([zeros(prompt_len - 1), values[:response_len], zeros(1)]))
    return torch.nested.nested_tensor_from_jagged(torch.cat(parts), offsets)
