"""cpu_support: the SmolLM2 conversion's contract prompt and the CPU rollout adapter."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import REPO

torch = pytest.importorskip("torch")
pytest.importorskip("verl")

from cpu_support import prepare_smollm2  # noqa: E402
from cpu_support import verl_cpu_patch  # noqa: E402
from cpu_support.verl_cpu_patch import CPUHFRollout, group_index, sample_responses, weights_digest  # noqa: E402

SMOLLM_DIR = REPO / "models" / "SmolLM2-135M-Instruct"
STOCK_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
)


def render(template: str, content: str = "Q") -> str:
    import jinja2

    return jinja2.Template(template).render(messages=[{"role": "user", "content": content}])


def test_contract_prompt_renders_with_real_newlines_and_one_backslash():
    rendered = render(prepare_smollm2.with_contract(STOCK_TEMPLATE))
    contract = prepare_smollm2.contract_system_prompt()
    assert contract in rendered
    assert "\n<think>\n" in rendered and "\\boxed{...}" in rendered and "\\\\boxed" not in rendered


def test_unknown_template_is_refused():
    with pytest.raises(ValueError, match="default system prompt not found"):
        prepare_smollm2.with_contract("{{ messages }}")


@pytest.mark.skipif(not (SMOLLM_DIR / "config.json").exists(), reason="run setup.sh --device cpu first")
def test_converted_model_has_the_released_special_tokens():
    gen = json.loads((SMOLLM_DIR / "generation_config.json").read_text())
    assert (gen["bos_token_id"], gen["eos_token_id"], gen["pad_token_id"]) == (1, 2, 2)
    special = json.loads((SMOLLM_DIR / "special_tokens_map.json").read_text())
    assert special["eos_token"] == special["pad_token"] == "<|im_end|>"


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    path = tmp_path_factory.mktemp("tiny_llama")
    LlamaForCausalLM(cfg).save_pretrained(path)
    return path


def make_rollout(model_dir: Path, response_length: int = 6, dtype: str = "fp32", **config) -> CPUHFRollout:
    """The rollout as verl builds it (fp32 here, so greedy output can be compared exactly)."""
    config = SimpleNamespace(**{"response_length": response_length, "do_sample": False, "temperature": 1.0,
                                "top_p": 1.0, "top_k": -1, **config},
                             val_kwargs=SimpleNamespace(do_sample=False, temperature=0, top_p=1.0, top_k=-1))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(verl_cpu_patch.DTYPE_ENV, dtype)
        return CPUHFRollout(config=config, model_config=SimpleNamespace(local_path=str(model_dir)), device_mesh=None)


def left_padded_prompts(pad: int, prompt_length: int = 12):
    """Two prompts (lengths 3 and 5) left-padded to ``prompt_length`` as verl's dataset does."""
    from verl import DataProto

    rows = [[5, 6, 7], [9, 10, 11, 12, 13]]
    ids = torch.full((2, prompt_length), pad, dtype=torch.long)
    mask = torch.zeros((2, prompt_length), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, -len(row):] = torch.tensor(row)
        mask[i, -len(row):] = 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    batch = DataProto.from_dict({"input_ids": ids, "attention_mask": mask, "position_ids": pos})
    batch.meta_info = {"eos_token_id": 3, "pad_token_id": pad}
    return batch


def test_rollout_output_layout(tiny_model_dir):
    rollout = make_rollout(tiny_model_dir)
    prompts = left_padded_prompts(pad=0)
    out = rollout.generate_sequences(prompts)
    b = out.batch
    assert b["prompts"].shape == (2, 12) and b["responses"].shape == (2, 6)
    assert b["input_ids"].shape == b["attention_mask"].shape == b["position_ids"].shape == (2, 18)
    assert torch.equal(b["prompts"], prompts.batch["input_ids"])
    assert torch.equal(b["input_ids"][:, 12:], b["responses"])
    # positions continue from the last prompt position, one per response token
    assert torch.equal(b["position_ids"][:, 12:], prompts.batch["position_ids"][:, -1:] + torch.arange(1, 7))


def test_cutting_shared_left_padding_does_not_change_greedy_responses(tiny_model_dir):
    """The adapter drops padding columns shared by all rows; greedy output must equal HF
    generate on the full verl-padded batch."""
    rollout = make_rollout(tiny_model_dir)
    prompts = left_padded_prompts(pad=0, prompt_length=40)
    out = rollout.generate_sequences(prompts)
    full = rollout.module.generate(input_ids=prompts.batch["input_ids"], attention_mask=prompts.batch["attention_mask"],
                                   max_new_tokens=6, do_sample=False, eos_token_id=3, pad_token_id=0)[:, 40:]
    n = full.shape[1]
    assert torch.equal(out.batch["responses"][:, :n], full)


def test_update_weights_loads_the_actor_weights(tiny_model_dir):
    rollout = make_rollout(tiny_model_dir)
    new = {k: torch.zeros_like(v) for k, v in rollout.module.state_dict().items() if k != "lm_head.weight"}
    asyncio.run(rollout.update_weights(iter(new.items())))
    assert all(float(p.detach().abs().sum()) == 0 for p in rollout.module.parameters())
    with pytest.raises(RuntimeError, match="weight sync"):
        asyncio.run(rollout.update_weights(iter({"not.a.weight": torch.zeros(1)}.items())))


def grouped_batch(pad: int = 0, n: int = 3):
    """Two prompts of different lengths, each repeated n times in a row (verl's interleaved
    repeat for a GRPO group of n), left-padded to a common length."""
    rows = [[5, 6, 7], [9, 10, 11, 12, 13]]
    width = 8
    ids = torch.full((2 * n, width), pad, dtype=torch.long)
    mask = torch.zeros((2 * n, width), dtype=torch.long)
    for g, row in enumerate(rows):
        for j in range(n):
            ids[g * n + j, -len(row):] = torch.tensor(row)
            mask[g * n + j, -len(row):] = 1
    return ids, mask


def test_group_index_finds_runs_of_identical_prompts():
    ids, mask = grouped_batch(n=3)
    firsts, groups = group_index(ids, mask)
    assert firsts.tolist() == [0, 3] and groups.tolist() == [0, 0, 0, 1, 1, 1]
    firsts, groups = group_index(ids[[0, 3, 1]], mask[[0, 3, 1]])  # not consecutive: no sharing
    assert firsts.tolist() == [0, 1, 2]


def test_shared_prefill_greedy_equals_generate(tiny_model_dir):
    rollout = make_rollout(tiny_model_dir)
    ids, mask = grouped_batch(n=3)
    out, _ = sample_responses(rollout.module, ids, mask, max_new_tokens=6, eos_token_ids=3, pad_token_id=0,
                              do_sample=False)
    ref = rollout.module.generate(input_ids=ids, attention_mask=mask, max_new_tokens=6, do_sample=False,
                                  eos_token_id=3, pad_token_id=0)[:, ids.size(1):]
    assert torch.equal(out[:, :ref.size(1)], ref)


def test_sampled_log_probs_are_the_full_forward_log_probs(tiny_model_dir):
    """rollout_log_probs must be what the actor computes: log softmax(logits / T) of the
    sampled token, from one forward pass over prompt + response."""
    rollout = make_rollout(tiny_model_dir)
    ids, mask = grouped_batch(n=2)
    torch.manual_seed(0)
    out, lp = sample_responses(rollout.module, ids, mask, max_new_tokens=5, eos_token_ids=-1, pad_token_id=0,
                               do_sample=True, temperature=0.7, return_log_probs=True)
    full = torch.cat([ids, out], dim=1)
    full_mask = torch.cat([mask, torch.ones_like(out)], dim=1)
    pos = (full_mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        logits = rollout.module(input_ids=full, attention_mask=full_mask, position_ids=pos).logits
    logits = logits[:, ids.size(1) - 1:-1].float() / 0.7
    ref = torch.log_softmax(logits, dim=-1).gather(2, out[..., None]).squeeze(-1)
    assert torch.allclose(lp, ref, atol=1e-4)
    assert len({tuple(r) for r in out.tolist()}) > 1  # rows of one group sample independently


def test_rows_stop_at_eos_and_are_padded_after_it(tiny_model_dir):
    rollout = make_rollout(tiny_model_dir)
    ids, mask = grouped_batch(n=2)
    torch.manual_seed(1)
    eos = list(range(20, 64))  # most of the vocabulary ends a row: rows stop early, at different steps
    out, lp = sample_responses(rollout.module, ids, mask, max_new_tokens=8, eos_token_ids=eos, pad_token_id=0,
                               do_sample=True, return_log_probs=True)
    for row, row_lp in zip(out.tolist(), lp.tolist()):
        stop = next((i for i, t in enumerate(row) if t in eos), len(row) - 1)
        assert all(t == 0 for t in row[stop + 1:]) and all(v == 0.0 for v in row_lp[stop + 1:])


def test_rollout_returns_rollout_log_probs_when_asked(tiny_model_dir):
    rollout = make_rollout(tiny_model_dir, calculate_log_probs=True)
    out = rollout.generate_sequences(left_padded_prompts(pad=0))
    assert out.batch["rollout_log_probs"].shape == out.batch["responses"].shape


def test_weight_sync_digest_is_logged_and_matches_the_weights(tiny_model_dir, tmp_path, monkeypatch):
    log = tmp_path / "digests.jsonl"
    monkeypatch.setenv(verl_cpu_patch.DIGEST_ENV, str(log))
    rollout = make_rollout(tiny_model_dir)
    new = {k: torch.full_like(v, 0.5) for k, v in rollout.module.state_dict().items() if k != "lm_head.weight"}
    asyncio.run(rollout.update_weights(iter(new.items())))
    entry = json.loads(log.read_text())
    assert entry["sync"] == 1 and entry["digest"] == weights_digest(new.items(), torch.float32)
    assert entry["digest"] != weights_digest({k: v * 0 for k, v in new.items()}.items(), torch.float32)


def test_rollout_dtype_comes_from_cpu_dtype_and_bad_values_are_refused(tiny_model_dir, monkeypatch):
    cfg = SimpleNamespace(response_length=4, do_sample=False)
    build = lambda: CPUHFRollout(config=cfg, model_config=SimpleNamespace(local_path=str(tiny_model_dir)),  # noqa: E731
                                 device_mesh=None)
    monkeypatch.delenv(verl_cpu_patch.DTYPE_ENV, raising=False)
    assert next(build().module.parameters()).dtype == torch.float32  # unset: exact fp32
    monkeypatch.setenv(verl_cpu_patch.DTYPE_ENV, "bf16")
    assert next(build().module.parameters()).dtype == torch.bfloat16
    monkeypatch.setenv(verl_cpu_patch.DTYPE_ENV, "fp8")
    with pytest.raises(ValueError, match="CPU_DTYPE"):
        build()


def test_sdpa_gqa_skips_the_kv_copy_and_keeps_the_logits(tiny_model_dir, monkeypatch):
    """With a padding mask, transformers copies the KV heads (``repeat_kv``) unless told that
    torch's SDPA takes ``enable_gqa``; the logits must not change when it is."""
    from transformers.integrations import sdpa_attention

    rollout = make_rollout(tiny_model_dir)
    ids, mask = grouped_batch(n=2)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    monkeypatch.setattr(sdpa_attention, "use_gqa_in_sdpa", sdpa_attention.use_gqa_in_sdpa)  # undone after
    with torch.no_grad():
        copied = rollout.module(input_ids=ids, attention_mask=mask, position_ids=pos).logits
        verl_cpu_patch.enable_sdpa_gqa()

        def no_copy(*_args):
            raise AssertionError("repeat_kv called")

        monkeypatch.setattr(sdpa_attention, "repeat_kv", no_copy)
        grouped = rollout.module(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    assert torch.allclose(copied, grouped, atol=1e-5)


def test_sample_categorical_draws_from_the_distribution_and_never_a_zero_entry():
    torch.manual_seed(0)
    probs = torch.softmax(torch.randn(1000), dim=0)
    probs[::7] = 0.0  # filtered entries (top-k / top-p)
    probs /= probs.sum()
    draws = verl_cpu_patch.sample_categorical(probs.expand(200_000, -1).contiguous(), block=64)
    freq = torch.bincount(draws, minlength=1000).double() / draws.numel()
    assert draws.max() < 1000 and freq[::7].sum() == 0
    assert (freq - probs.double()).abs().max() < 1e-3  # about 4 standard errors of the largest entry
    one_hot = torch.zeros(3, 10)
    one_hot[0, 9], one_hot[1, 0], one_hot[2, 5] = 1, 1, 1
    assert verl_cpu_patch.sample_categorical(one_hot, block=4).tolist() == [9, 0, 5]


def test_actor_forward_on_real_columns_and_response_logits_equals_verls(tiny_model_dir, monkeypatch):
    """The patched actor/ref forward (padding columns cut, logits of response positions only)
    gives verl's own log-probs and entropy for every real response token."""
    from transformers import AutoModelForCausalLM
    from verl.workers.actor import dp_actor

    monkeypatch.setenv(verl_cpu_patch.DTYPE_ENV, "fp32")
    monkeypatch.setattr(dp_actor, "torch", dp_actor.torch)  # the autocast patch is undone after the test
    verl_cpu_patch._patch_actor_autocast()
    verl_cpu_patch._patch_actor_padding()
    patched = dp_actor.DataParallelPPOActor._forward_micro_batch
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, torch_dtype=torch.float32).eval()
    logit_lengths = []
    model.register_forward_hook(lambda _m, _a, out: logit_lengths.append(out.logits.size(1)))
    actor = SimpleNamespace(use_remove_padding=False, use_ulysses_sp=False, use_fused_kernels=False,
                            actor_module=model, device_name="cpu", compute_entropy_from_logits=None,
                            config=SimpleNamespace(entropy_checkpointing=False))
    prompt_length, response_length = 10, 6
    ids = torch.randint(4, 64, (3, prompt_length + response_length))
    mask = torch.zeros_like(ids)
    for row, (start, stop) in enumerate([(6, 13), (4, 12), (7, 11)]):  # left- and right-padding everywhere
        mask[row, start:stop] = 1
    batch = {"input_ids": ids, "attention_mask": mask, "position_ids": (mask.cumsum(-1) - 1).clamp(min=0),
             "responses": ids[:, prompt_length:]}
    with torch.no_grad():
        want_entropy, want = patched.original(actor, batch, 1.0, calculate_entropy=True)
        got_entropy, got = patched(actor, batch, 1.0, calculate_entropy=True)
    real = mask[:, prompt_length:].bool()
    assert got.shape == want.shape and torch.allclose(got[real], want[real], atol=1e-5)
    assert torch.allclose(got_entropy[real], want_entropy[real], atol=1e-5)
    assert logit_lengths == [16, 4]  # verl's: every column; patched: the 3 response columns in use + 1
    assert model._cpu_logits_to_keep == 0  # reset after the forward
