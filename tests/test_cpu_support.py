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
from cpu_support.verl_cpu_patch import (  # noqa: E402
    CPUHFRollout,
    group_index,
    sample_responses,
    shared_prompt_index,
    weights_digest,
)

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


@pytest.mark.parametrize("block", [64, 40])  # 1,000 entries: the last block padded, or no padding
def test_sample_categorical_draws_from_the_distribution_and_never_a_zero_entry(block):
    torch.manual_seed(0)
    probs = torch.softmax(torch.randn(1000), dim=0)
    probs[::7] = 0.0  # filtered entries (top-k / top-p)
    probs /= probs.sum()
    draws = verl_cpu_patch.sample_categorical(probs.expand(200_000, -1).contiguous(), block=block)
    freq = torch.bincount(draws, minlength=1000).double() / draws.numel()
    assert draws.max() < 1000 and freq[::7].sum() == 0
    assert (freq - probs.double()).abs().max() < 1e-3  # about 4 standard errors of the largest entry
    one_hot = torch.zeros(3, 10)
    one_hot[0, 9], one_hot[1, 0], one_hot[2, 5] = 1, 1, 1
    for small in (4, 5):  # 10 entries: padded, or not
        assert verl_cpu_patch.sample_categorical(one_hot, block=small).tolist() == [9, 0, 5]


def rollout_and_plain_models(model_dir: Path, lean: bool = True, dtype=torch.float32):
    """The model as the rollout loads it (``lean``: with its lean decode step, else decoding
    through its HF forward), and the plain SDPA model (the previous rollout's)."""
    from transformers import AutoModelForCausalLM

    rollout = verl_cpu_patch.load_rollout_model(model_dir, dtype, lean=lean)
    assert (getattr(rollout, "lean_decode", None) is not None) == lean
    plain = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=dtype, attn_implementation="sdpa")
    return rollout, plain.eval()


def record_last_logits(model) -> list:
    """The last position's logits of every forward call of model and of every step of its lean
    decode (if it has one), appended."""
    calls = []
    model.register_forward_hook(lambda _m, _a, out: calls.append(out.logits[:, -1].clone()))
    lean = getattr(model, "lean_decode", None)
    if lean is not None:
        step = lean.step
        lean.step = lambda *args: calls.append(step(*args)) or calls[-1].clone()
    return calls


def record_decode_rows(model) -> list:
    """The rows of every forward call of model and of every step of its lean decode, appended."""
    rows = []
    model.register_forward_hook(lambda _m, _a, kwargs, _out: rows.append(kwargs["input_ids"].size(0)),
                                with_kwargs=True)
    lean = getattr(model, "lean_decode", None)
    if lean is not None:
        step = lean.step
        lean.step = lambda token, *args: rows.append(token.size(0)) or step(token, *args)
    return rows


@pytest.mark.parametrize("lean", [True, False])  # the lean decode step, or the HF forward
@pytest.mark.parametrize("rows", [[0, 1, 2, 3, 4, 5], [0, 1, 2, 3, 4]])  # groups of 3 and 3, of 3 and 2
def test_shared_prompt_decode_gives_the_sdpa_logits(tiny_model_dir, monkeypatch, rows, lean):
    """Every decode step's logits with the rollout's model (each group's prompt keys and values
    stored once, the response columns in their own static cache, the decode attention as
    grouped matrix products, LM head in vocabulary blocks, weight-major MLPs) are the plain SDPA
    model's over one static cache of prompt and response columns; SDPA runs in the prefill only."""
    from transformers.integrations import sdpa_attention

    rollout, plain = rollout_and_plain_models(tiny_model_dir, lean=lean)
    ids, mask = grouped_batch(n=3)
    ids, mask = ids[rows], mask[rows]
    sdpa_queries = []
    original = sdpa_attention.sdpa_attention_forward

    def counting(module, query, *args, **kwargs):
        sdpa_queries.append(query.size(2))
        return original(module, query, *args, **kwargs)

    monkeypatch.setattr(sdpa_attention, "sdpa_attention_forward", counting)  # what the rollout's attention calls
    got, want = record_last_logits(rollout), record_last_logits(plain)
    settings = dict(max_new_tokens=6, eos_token_ids=-1, pad_token_id=0, do_sample=False)
    responses, _ = sample_responses(rollout, ids, mask, **settings)
    reference, _ = sample_responses(plain, ids, mask, **settings)
    assert torch.equal(responses, reference)
    assert sdpa_queries == [ids.size(1)] * rollout.config.num_hidden_layers  # the prefill's layers
    assert len(got) == len(want) == 6  # the prefill (one row per prompt) and 5 decode steps
    for step, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape and torch.allclose(g, w, atol=1e-5), step


@pytest.mark.parametrize("lean", [True, False])
def test_stopped_rows_leave_the_decode_batch_and_greedy_still_equals_generate(tiny_model_dir, monkeypatch, lean):
    monkeypatch.setattr(verl_cpu_patch, "DROP_MIN_STEPS_LEFT", 0)
    rollout, plain = rollout_and_plain_models(tiny_model_dir, lean=lean)
    ids, mask = grouped_batch(n=3)
    free, _ = sample_responses(plain, ids, mask, max_new_tokens=8, eos_token_ids=-1, pad_token_id=0, do_sample=False)
    eos = int(free[0, 0])  # group 0 (rows 0-2) stops at its first token, group 1 (rows 3-5) goes on
    assert eos not in free[3].tolist()
    rows = record_decode_rows(rollout)
    got, _ = sample_responses(rollout, ids, mask, max_new_tokens=8, eos_token_ids=eos, pad_token_id=0,
                              do_sample=False)
    want = plain.generate(input_ids=ids, attention_mask=mask, max_new_tokens=8, do_sample=False, eos_token_id=eos,
                          pad_token_id=0)[:, ids.size(1):]
    assert torch.equal(got, want)
    assert rows == [2] + [3] * 7  # prefill of the 2 prompts, then group 1's rows only


def test_sampled_log_probs_with_rows_stopping_are_the_full_forward_log_probs(tiny_model_dir, monkeypatch):
    """Rows that stop leave the decode batch; the rows that go on keep the log-probabilities of
    one forward pass over prompt and response, and a seed samples what the previous rollout
    (plain SDPA model, every row to the end) samples."""
    monkeypatch.setattr(verl_cpu_patch, "DROP_MIN_STEPS_LEFT", 0)
    rollout = make_rollout(tiny_model_dir)
    _, plain = rollout_and_plain_models(tiny_model_dir)
    ids, mask = grouped_batch(n=3)
    eos = list(range(44, 64))
    settings = dict(max_new_tokens=8, eos_token_ids=eos, pad_token_id=0, do_sample=True, temperature=0.7,
                    return_log_probs=True)
    torch.manual_seed(0)
    out, lp = sample_responses(rollout.module, ids, mask, **settings)
    torch.manual_seed(0)
    before, before_lp = sample_responses(plain, ids, mask, **settings)
    assert torch.equal(out, before) and torch.allclose(lp, before_lp, atol=1e-5)
    is_eos = torch.isin(out, torch.tensor(eos))
    real = (is_eos.long().cumsum(1) - is_eos.long()) == 0  # up to and including the first EOS
    lengths = real.sum(1).tolist()
    assert len(set(lengths)) > 1 and max(lengths) > 2  # rows stopped at different steps, some went on
    full_mask = torch.cat([mask, real.long()], dim=1)
    pos = (full_mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        logits = rollout.module(input_ids=torch.cat([ids, out], dim=1), attention_mask=full_mask,
                                position_ids=pos).logits
    ref = torch.log_softmax(logits[:, ids.size(1) - 1:-1].float() / 0.7, dim=-1).gather(2, out[..., None]).squeeze(-1)
    assert torch.allclose(lp[real], ref[real], atol=1e-4) and (lp[~real] == 0).all()
    assert (out[~real] == 0).all()


def test_rollout_model_keeps_the_plain_parameters_through_a_weight_sync(tiny_model_dir):
    """The rollout's model (LM head in vocabulary blocks, weight-major MLPs) has the plain
    model's parameters, tied embedding included: after a weight sync its logits are those of a
    plain model loaded with the same weights."""
    rollout = make_rollout(tiny_model_dir)
    model = rollout.module
    head = model.get_output_embeddings()
    assert isinstance(head, verl_cpu_patch.VocabChunkedLinear)
    assert head.weight is model.get_input_embeddings().weight
    assert all(type(layer.mlp).__name__ == "WeightMajorLlamaMLP" for layer in model.model.layers)
    head.chunk = 24  # blocks that do not divide the 64-token vocabulary
    _, plain = rollout_and_plain_models(tiny_model_dir)
    assert list(model.state_dict()) == list(plain.state_dict())
    torch.manual_seed(1)
    new = {k: v + 0.05 * torch.randn_like(v) for k, v in plain.state_dict().items() if k != "lm_head.weight"}
    asyncio.run(rollout.update_weights(iter(new.items())))
    plain.load_state_dict(new, strict=False)
    ids, mask = grouped_batch(n=2)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        got = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits
        want = plain(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    assert torch.allclose(got, want, atol=1e-5)


def test_shared_prompt_kv_lays_out_groups_of_any_size():
    keys = [torch.arange(3.0)[:, None, None, None].expand(3, 1, 2, 1).contiguous()]  # group g's keys are g
    kv = verl_cpu_patch.SharedPromptKV(keys, keys, torch.tensor([0, 0, 0, 1, 2, 2]))
    rows = torch.arange(6.0)
    assert kv.slots == 3 and not kv.identity
    assert kv.to_places(rows).tolist() == [0, 1, 2, 3, 3, 3, 4, 5, 5]  # spare places repeat a group's last row
    assert torch.equal(kv.to_rows(kv.to_places(rows)), rows)
    kept = kv.select(torch.tensor([0, 1, 4, 5]))  # group 1 has no row left
    assert kept.groups.tolist() == [0, 0, 1, 1] and kept.identity and kept.slots == 2
    assert kept.keys[0][:, 0, 0, 0].tolist() == [0.0, 2.0]
    with pytest.raises(ValueError, match="consecutive"):
        verl_cpu_patch.SharedPromptKV(keys, keys, torch.tensor([0, 1, 0]))


def test_actor_forward_on_real_columns_and_response_logits_equals_verls(tiny_model_dir, monkeypatch):
    """The patched actor/ref forward (padding columns cut, logits of response positions only)
    gives verl's own log-probs and entropy for every real response token. No prompt repeats
    here, so it is one forward pass, as verl's."""
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


def test_shared_prompt_index_finds_repeated_prompts_anywhere():
    ids, mask = grouped_batch(n=3)
    order = torch.tensor([0, 3, 1, 4, 5, 2])  # the groups' rows interleaved, as after verl's balancing
    ids, mask = ids[order], mask[order]
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    firsts, prompts = shared_prompt_index(ids, mask, pos, ids.size(1))
    assert sorted(firsts.tolist()) == [0, 1]  # the first row of each prompt
    assert torch.equal(ids[firsts][prompts], ids)  # every row is its prompt's representative
    assert shared_prompt_index(ids[:2], mask[:2], pos[:2], ids.size(1)) is None  # no prompt twice
    shifted = pos.clone()
    shifted[2] += 1  # same tokens, other positions: another prompt
    _, prompts = shared_prompt_index(ids, mask, shifted, ids.size(1))
    assert len(set(prompts.tolist())) == 3


@pytest.fixture
def fp32_actor_forward(monkeypatch):
    """verl's DataParallelPPOActor._forward_micro_batch, patched, with fp32 (no autocast)."""
    from verl.workers.actor import dp_actor

    monkeypatch.setenv(verl_cpu_patch.DTYPE_ENV, "fp32")
    monkeypatch.setattr(dp_actor, "torch", dp_actor.torch)  # the autocast patch is undone after the test
    verl_cpu_patch._patch_actor_autocast()
    verl_cpu_patch._patch_actor_padding()
    return dp_actor.DataParallelPPOActor._forward_micro_batch


def stub_actor(module, entropy_checkpointing: bool = False) -> SimpleNamespace:
    """The DataParallelPPOActor attributes that _forward_micro_batch reads (no remove-padding)."""
    return SimpleNamespace(use_remove_padding=False, use_ulysses_sp=False, use_fused_kernels=False,
                           actor_module=module, device_name="cpu", compute_entropy_from_logits=None,
                           config=SimpleNamespace(entropy_checkpointing=entropy_checkpointing))


def two_group_micro_batch(prompt_length: int = 10, response_length: int = 7) -> dict:
    """Two GRPO groups (prompts of 4 and 6 tokens, 3 and 4 responses), rows interleaved, laid
    out as verl's: prompts left-padded, responses right-padded (the longest uses 6 of 7
    columns), positions continuing after the prompt."""
    prompts = [[5, 6, 7, 8], [9, 10, 11, 12, 13, 14]]
    rows = [(0, 6), (1, 3), (0, 5), (1, 2), (0, 1), (1, 6), (1, 4)]  # (prompt, response length)
    ids = torch.zeros((len(rows), prompt_length + response_length), dtype=torch.long)  # pad token 0
    mask = torch.zeros_like(ids)
    gen = torch.Generator().manual_seed(0)
    for row, (prompt, length) in enumerate(rows):
        ids[row, prompt_length - len(prompts[prompt]):prompt_length] = torch.tensor(prompts[prompt])
        ids[row, prompt_length:prompt_length + length] = torch.randint(4, 64, (length,), generator=gen)
        mask[row, prompt_length - len(prompts[prompt]):prompt_length + length] = 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    pos[:, prompt_length:] = pos[:, prompt_length - 1:prompt_length] + torch.arange(1, response_length + 1)
    return {"input_ids": ids, "attention_mask": mask, "position_ids": pos, "responses": ids[:, prompt_length:]}


def log_probs_and_grads(forward, actor, batch, temperature: float = 0.7):
    """(entropy, log-probs, parameter gradients) of forward, the gradients of a loss on the
    real response tokens' log-probs and entropy (DTensor gradients gathered)."""
    module = actor.actor_module
    module.zero_grad(set_to_none=True)
    entropy, log_probs = forward(actor, batch, temperature, calculate_entropy=True)
    real = batch["attention_mask"][:, -batch["responses"].size(1):].bool()
    (-(log_probs * real).sum() - 0.1 * (entropy * real).sum()).backward()
    grads = {name: (p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad).clone()
             for name, p in module.named_parameters()}
    return entropy.detach(), log_probs.detach(), grads


def record_forward_calls(model) -> list:
    """(rows, input columns, logits columns) of every forward call of model, appended."""
    calls = []
    model.register_forward_hook(
        lambda _m, _a, kwargs, out: calls.append((*kwargs["input_ids"].shape, out.logits.size(1))), with_kwargs=True)
    return calls


def assert_same_on_real_tokens(got, want, batch, atol=1e-5):
    real = batch["attention_mask"][:, -batch["responses"].size(1):].bool()
    assert got.shape == want.shape and torch.allclose(got[real], want[real], atol=atol)


def count_fused_head_calls(monkeypatch, fused: bool) -> list:
    """Sets whether the head computes the log-probs (FUSED_LOG_PROBS); the calls of
    linear_log_probs are appended to the returned list."""
    monkeypatch.setattr(verl_cpu_patch, "FUSED_LOG_PROBS", fused)
    calls, original = [], verl_cpu_patch.linear_log_probs
    monkeypatch.setattr(verl_cpu_patch, "linear_log_probs", lambda *args: calls.append(args) or original(*args))
    return calls


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("entropy_checkpointing", [False, True])
def test_actor_forward_computes_a_shared_prompt_once_and_equals_verls(tiny_model_dir, fp32_actor_forward,
                                                                        entropy_checkpointing, fused, monkeypatch):
    """Rows that share a prompt (anywhere in the micro-batch) get it computed once: log-probs,
    entropy and the gradients of a loss on them are verl's, with the log-probs computed in the
    head (fused) or from the logits."""
    from transformers import AutoModelForCausalLM

    fused_calls = count_fused_head_calls(monkeypatch, fused)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, torch_dtype=torch.float32)
    actor = stub_actor(model, entropy_checkpointing)
    batch = two_group_micro_batch()
    calls = record_forward_calls(model)
    want_entropy, want, want_grads = log_probs_and_grads(fp32_actor_forward.original, actor, batch)
    got_entropy, got, got_grads = log_probs_and_grads(fp32_actor_forward, actor, batch)
    # verl: 7 rows x 17 columns; patched: the 2 prompts (6 columns in use, last position's logits),
    # then the 7 rows' response tokens but the last (6 response columns in use)
    assert calls == [(7, 17, 17), (2, 6, 1), (7, 5, 5)]
    assert_same_on_real_tokens(got, want, batch)
    assert_same_on_real_tokens(got_entropy, want_entropy, batch)
    assert got[:, 6:].abs().sum() == 0  # the unused response column is padded back
    assert "forward" not in vars(model.lm_head)  # the head is the model's own again
    assert len(fused_calls) == (2 if fused else 0)  # the prompt call's head and the responses'
    for name, grad in want_grads.items():
        assert torch.allclose(got_grads[name], grad, atol=1e-5), name
    with torch.no_grad():  # the log-prob / ref path
        _, no_grad = fp32_actor_forward(actor, batch, 0.7, calculate_entropy=False)
        assert_same_on_real_tokens(no_grad, want, batch)
        # no padding left after the cut (transformers may then drop the mask): still verl's
        unpadded = {key: value[[5, 5]] for key, value in batch.items()}
        _, want = fp32_actor_forward.original(actor, unpadded, 0.7)
        before = len(calls)
        _, got = fp32_actor_forward(actor, unpadded, 0.7)
        assert calls[before:] == [(1, 6, 1), (2, 5, 5)]
        assert_same_on_real_tokens(got, want, unpadded)
        # one response token in every row: the prompt call alone
        one_token = {key: value[[4, 4]] for key, value in batch.items()}
        _, want = fp32_actor_forward.original(actor, one_token, 0.7)
        before = len(calls)
        _, got = fp32_actor_forward(actor, one_token, 0.7)
        assert calls[before:] == [(1, 4, 1)]
        assert_same_on_real_tokens(got, want, one_token)


def test_actor_forward_with_gradient_checkpointing_does_not_share_prompts(tiny_model_dir, fp32_actor_forward):
    """transformers' checkpointed layers drop a KV cache while training: one forward pass then."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, torch_dtype=torch.float32)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    actor = stub_actor(model)
    batch = two_group_micro_batch()
    calls = record_forward_calls(model)
    want_entropy, want, want_grads = log_probs_and_grads(fp32_actor_forward.original, actor, batch)
    got_entropy, got, got_grads = log_probs_and_grads(fp32_actor_forward, actor, batch)
    assert calls == [(7, 17, 17), (7, 12, 7)]  # columns cut, response logits only, no sharing
    assert_same_on_real_tokens(got, want, batch)
    for name, grad in want_grads.items():
        assert torch.allclose(got_grads[name], grad, atol=1e-5), name


@pytest.mark.parametrize("fused", [True, False])
def test_actor_forward_sharing_prompts_under_fsdp2_equals_verls(tiny_model_dir, fp32_actor_forward,
                                                                single_process_group, fused, monkeypatch):
    """With the model wrapped as verl wraps it (FSDP2 fully_shard of every decoder layer and of
    the root, parameters freed after each forward), the two forward calls before one backward
    give verl's log-probs and gradients; so does the ref's no-grad forward with CPU offload."""
    fused_calls = count_fused_head_calls(monkeypatch, fused)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy
    from transformers import AutoModelForCausalLM
    from verl.utils.fsdp_utils import apply_fsdp2

    batch = two_group_micro_batch()
    plain = stub_actor(AutoModelForCausalLM.from_pretrained(tiny_model_dir, torch_dtype=torch.float32))
    want_entropy, want, want_grads = log_probs_and_grads(fp32_actor_forward.original, plain, batch)
    mesh = init_device_mesh("cpu", (1,))
    mixed = MixedPrecisionPolicy(param_dtype=torch.float32, reduce_dtype=torch.float32, cast_forward_inputs=True)
    for offload in (None, CPUOffloadPolicy(pin_memory=False)):  # actor, ref
        model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, torch_dtype=torch.float32)
        apply_fsdp2(model, {"mesh": mesh, "mp_policy": mixed, "offload_policy": offload,
                            "reshard_after_forward": True}, {})
        actor = stub_actor(model)
        calls = record_forward_calls(model)
        if offload is None:
            got_entropy, got, got_grads = log_probs_and_grads(fp32_actor_forward, actor, batch)
            assert_same_on_real_tokens(got_entropy, want_entropy, batch)
            for name, grad in want_grads.items():
                assert torch.allclose(got_grads[name], grad, atol=1e-5), name
        else:
            with torch.no_grad():
                _, got = fp32_actor_forward(actor, batch, 0.7, calculate_entropy=False)
        assert calls == [(2, 6, 1), (7, 5, 5)]
        assert_same_on_real_tokens(got, want, batch)
    assert len(fused_calls) == (4 if fused else 0)


def test_actor_adamw_is_fused_unless_an_implementation_is_named(monkeypatch):
    monkeypatch.setattr(torch.optim, "AdamW", torch.optim.AdamW)  # restored after the test
    original = torch.optim.AdamW
    verl_cpu_patch._patch_optimizer()
    verl_cpu_patch._patch_optimizer()  # idempotent: one subclass, not a chain
    assert torch.optim.AdamW.__bases__ == (original,)

    def trained(optimizer_cls, lr=1e-2, **kwargs):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
        # verl's call: lr, betas and weight decay, no implementation named
        optimizer = optimizer_cls(model.parameters(), lr=lr, betas=(0.9, 0.999), weight_decay=1e-2, **kwargs)
        x = torch.randn(8, 16)
        for _ in range(3):
            model(x).pow(2).mean().backward()
            optimizer.step()
            optimizer.zero_grad()
        return optimizer, torch.cat([p.detach().flatten() for p in model.parameters()])

    fused, fused_weights = trained(torch.optim.AdamW)
    assert fused.param_groups[0]["fused"] is True
    plain, plain_weights = trained(original)
    assert not plain.param_groups[0]["fused"]
    assert torch.allclose(fused_weights, plain_weights, atol=1e-6)
    assert not torch.allclose(plain_weights, trained(original, lr=0.0)[1])  # the steps moved the weights
    foreach, _ = trained(torch.optim.AdamW, foreach=True)
    assert foreach.param_groups[0]["foreach"] is True and not foreach.param_groups[0]["fused"]


def test_actor_adamw_steps_fsdp2_shards_locally_as_torch_steps_the_dtensors(tiny_model_dir, single_process_group,
                                                                            monkeypatch):
    """On FSDP2's DTensor parameters the patched step hands the fused kernel local shards, and
    the weights and optimizer states after 3 steps are bit-identical to torch's DTensor path."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy
    from torch.distributed.tensor import DTensor
    from transformers import AutoModelForCausalLM
    from verl.utils.fsdp_utils import apply_fsdp2

    monkeypatch.setattr(torch.optim, "AdamW", torch.optim.AdamW)  # restored after the test
    original = torch.optim.AdamW
    verl_cpu_patch._patch_optimizer()
    mesh = init_device_mesh("cpu", (1,))
    kernel_args = []
    fused_adamw = torch._fused_adamw_

    def recording_kernel(params, *args, **kwargs):
        kernel_args.append([type(p) for p in params])
        return fused_adamw(params, *args, **kwargs)

    monkeypatch.setattr(torch, "_fused_adamw_", recording_kernel)

    def trained(optimizer_cls):
        model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, torch_dtype=torch.float32)
        apply_fsdp2(model, {"mesh": mesh, "mp_policy": MixedPrecisionPolicy(param_dtype=torch.float32),
                            "offload_policy": None, "reshard_after_forward": True}, {})
        optimizer = optimizer_cls(model.parameters(), lr=1e-2, betas=(0.9, 0.999), weight_decay=1e-2, fused=True)
        ids = torch.arange(12).reshape(2, 6) % 64
        for _ in range(3):
            model(input_ids=ids).logits.float().pow(2).mean().backward()
            optimizer.step()
            optimizer.zero_grad()
        params = [p for p in model.parameters()]
        assert all(isinstance(p, DTensor) for p in params)
        states = [optimizer.state[p][key] for p in params for key in ("exp_avg", "exp_avg_sq")]
        assert all(isinstance(t, DTensor) for t in states)  # the states stay the DTensors verl checkpoints
        return [t.full_tensor() for t in params + states]

    want = trained(original)
    assert kernel_args and all(kind is DTensor for kinds in kernel_args for kind in kinds)
    kernel_args.clear()
    got = trained(torch.optim.AdamW)
    assert kernel_args and all(kind is torch.Tensor for kinds in kernel_args for kind in kinds)
    assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))
    assert not torch.equal(want[0], AutoModelForCausalLM.from_pretrained(tiny_model_dir).model.embed_tokens.weight)


def test_local_shards_leaves_mismatched_placements_to_the_dtensor_path(single_process_group):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (1,))
    param = distribute_tensor(torch.ones(4, 2), mesh, [Shard(0)])
    same, other = distribute_tensor(torch.ones(4, 2), mesh, [Shard(0)]), distribute_tensor(torch.ones(4, 2), mesh,
                                                                                          [Replicate()])
    params, grads, steps = [param], [other], [torch.tensor(1.0)]
    assert not verl_cpu_patch.local_shards(params, grads, steps)
    assert params[0] is param and grads[0] is other  # left as they were
    params, grads, empty = [param], [same], []
    assert verl_cpu_patch.local_shards(params, grads, steps, empty)
    assert type(params[0]) is torch.Tensor and params[0].data_ptr() == param.to_local().data_ptr()
    assert not verl_cpu_patch.local_shards([torch.ones(2)], [torch.ones(2)])  # plain tensors: nothing to do


def test_entering_rollout_mode_skips_the_full_garbage_collection(monkeypatch):
    import gc

    from verl.workers import fsdp_workers

    import sys

    for module in [m for name, m in sys.modules.items() if name.startswith("verl") and m is not None]:
        if hasattr(module, "aggressive_empty_cache"):  # restored after the test
            monkeypatch.setattr(module, "aggressive_empty_cache", module.aggressive_empty_cache)
    for name, fn in verl_cpu_patch._TORCH_CPU_ATTRS.items():  # what verl calls through get_torch_device()
        monkeypatch.setattr(torch.cpu, name, getattr(torch.cpu, name, fn), raising=False)
    collections = []
    monkeypatch.setattr(gc, "collect", lambda *a: collections.append(a) or 0)
    fsdp_workers.aggressive_empty_cache(force_sync=True)
    assert collections, "verl's aggressive_empty_cache no longer collects garbage: revisit the patch"
    collections.clear()
    verl_cpu_patch._patch_empty_cache()
    fsdp_workers.aggressive_empty_cache(force_sync=True)
    assert collections == []


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("with_entropy", [True, False])
def test_linear_log_probs_equal_verls_from_the_logits(temperature, with_entropy, monkeypatch):
    """The head's fused log-probs, entropy and their gradients (by the hidden states and the
    weight) are verl's from the full logits in fp32; chunks of rows not dividing the rows."""
    from verl.utils import torch_functional as verl_F

    monkeypatch.setattr(verl_cpu_patch, "LOGPROB_CHUNK_ROWS", 3)
    gen = torch.Generator().manual_seed(0)
    hidden0 = torch.randn(2, 5, 16, generator=gen)
    weight0 = torch.randn(50, 16, generator=gen)
    labels = torch.randint(0, 50, (2, 5), generator=gen)
    signs = torch.randn(2, 5, generator=gen)

    def run(fused):
        hidden, weight = hidden0.clone().requires_grad_(), weight0.clone().requires_grad_()
        if fused:
            log_probs, entropy = verl_cpu_patch.linear_log_probs(hidden, weight, labels, temperature, with_entropy)
        else:
            logits = hidden @ weight.T
            logits.div_(temperature)
            log_probs = verl_F.logprobs_from_logits(logits, labels)
            entropy = verl_F.entropy_from_logits(logits) if with_entropy else None
        loss = (log_probs * signs).sum() + (0.3 * (entropy * signs.flip(0)).sum() if with_entropy else 0)
        loss.backward()
        return log_probs.detach(), entropy, hidden.grad, weight.grad

    got, want = run(True), run(False)
    assert got[0].dtype == torch.float32 and torch.allclose(got[0], want[0], atol=1e-5)
    assert got[1] is None if not with_entropy else torch.allclose(got[1], want[1].detach(), atol=1e-5)
    assert torch.allclose(got[2], want[2], atol=1e-5) and torch.allclose(got[3], want[3], atol=1e-5)
    with torch.no_grad():
        log_probs, _ = verl_cpu_patch.linear_log_probs(hidden0, weight0, labels, temperature, with_entropy)
    assert torch.allclose(log_probs, want[0], atol=1e-5)


def test_linear_log_probs_under_bf16_autocast_are_verls_within_bf16():
    """Under bf16 autocast the logits are rounded to bf16 as verl's are, and the log-probs
    and entropy come back in bf16; they agree with verl's bf16 path within its rounding."""
    from verl.utils import torch_functional as verl_F

    gen = torch.Generator().manual_seed(1)
    hidden = torch.randn(3, 7, 32, generator=gen)
    weight = torch.randn(300, 32, generator=gen) * 0.2
    labels = torch.randint(0, 300, (3, 7), generator=gen)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        log_probs, entropy = verl_cpu_patch.linear_log_probs(hidden, weight, labels, 0.7, True)
        logits = torch.nn.functional.linear(hidden, weight)
        logits.div_(0.7)
        want = verl_F.logprobs_from_logits(logits, labels)
        want_entropy = verl_F.entropy_from_logits(logits)
    assert log_probs.dtype == entropy.dtype == want.dtype == torch.bfloat16
    assert torch.allclose(log_probs.float(), want.float(), rtol=2e-2, atol=2e-2)
    assert torch.allclose(entropy.float(), want_entropy.float(), rtol=2e-2, atol=2e-2)


def test_scoring_head_only_for_models_whose_logits_are_the_heads_output(tiny_model_dir):
    """Only a bias-free linear head of a model type without logit soft-capping or scaling is
    replaced; other models keep verl's logits path."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, torch_dtype=torch.float32)
    assert verl_cpu_patch._scoring_head(model) is model.lm_head
    model.config.model_type = "gemma2"
    assert verl_cpu_patch._scoring_head(model) is None


def decode_logits_and_full_forward(model, ids, mask, new_tokens: int = 6):
    """(the logits of every decode step of a greedy rollout, the full forward's logits at the same
    positions over prompt + the generated tokens), both (rows, steps, vocab) in fp32."""
    steps = record_last_logits(model)
    responses, _ = sample_responses(model, ids, mask, max_new_tokens=new_tokens, eos_token_ids=-1, pad_token_id=0,
                                    do_sample=False)
    decoded = torch.stack([s.float() for s in steps[1:]], dim=1)  # steps[0]: the prefill's
    full_mask = torch.cat([mask, torch.ones_like(responses)], dim=1)
    pos = (full_mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        full = model(input_ids=torch.cat([ids, responses], dim=1), attention_mask=full_mask, position_ids=pos).logits
    return decoded, full[:, ids.size(1):-1].float()


@pytest.mark.parametrize("dtype, atol", [(torch.float32, 1e-5), (torch.bfloat16, 1e-2)])
def test_lean_decode_logits_are_the_full_forward_logits(tiny_model_dir, dtype, atol):
    """The lean decode step's logits equal HF's full forward over the same tokens: fp32 up to
    summation order, bf16 up to a few bf16 roundings (logits of magnitude up to about 0.6 here,
    where bf16's step is 2**-8; measured 2e-3 off, as the HF decode)."""
    rollout, _ = rollout_and_plain_models(tiny_model_dir, dtype=dtype)
    ids, mask = grouped_batch(n=3)
    decoded, full = decode_logits_and_full_forward(rollout, ids, mask)
    assert decoded.shape == full.shape == (6, 5, 64)
    assert (decoded - full).abs().max() <= atol
    # the HF decode of the same model (its previous path) is no closer in bf16
    hf, _ = rollout_and_plain_models(tiny_model_dir, lean=False, dtype=dtype)
    hf_decoded, hf_full = decode_logits_and_full_forward(hf, ids, mask)
    assert (hf_decoded - hf_full).abs().max() <= atol


def test_lean_decode_greedy_equals_generate_in_bf16(tiny_model_dir):
    rollout, plain = rollout_and_plain_models(tiny_model_dir, dtype=torch.bfloat16)
    ids, mask = grouped_batch(n=3)
    got, _ = sample_responses(rollout, ids, mask, max_new_tokens=6, eos_token_ids=3, pad_token_id=0, do_sample=False)
    want = plain.generate(input_ids=ids, attention_mask=mask, max_new_tokens=6, do_sample=False, eos_token_id=3,
                          pad_token_id=0)[:, ids.size(1):]
    assert torch.equal(got[:, :want.size(1)], want)


def test_weight_sync_changes_what_the_lean_decode_computes(tiny_model_dir):
    """The lean decode's joined, prepacked weights are copies: after a weight sync the decode
    steps compute with the new weights (a plain model loaded with them gives the same logits),
    not the old ones."""
    rollout = make_rollout(tiny_model_dir)
    model = rollout.module
    lean = model.lean_decode
    assert lean is not None and lean.fresh()
    ids, mask = grouped_batch(n=2)
    before, _ = decode_logits_and_full_forward(model, ids, mask)
    _, plain = rollout_and_plain_models(tiny_model_dir)
    torch.manual_seed(2)
    new = {k: v + 0.1 * torch.randn_like(v) for k, v in plain.state_dict().items() if k != "lm_head.weight"}
    asyncio.run(rollout.update_weights(iter(new.items())))
    assert model.lean_decode is lean and lean.fresh()
    plain.load_state_dict(new, strict=False)
    after, _ = decode_logits_and_full_forward(model, ids, mask)
    _, want = decode_logits_and_full_forward(plain, ids, mask)  # plain's full forward over the same tokens
    assert torch.allclose(after, want, atol=1e-5)
    assert (after - before).abs().max() > 1e-2


def test_lean_decode_rebuilds_its_weights_when_a_parameter_changes_in_place(tiny_model_dir):
    """A parameter written in place without a weight sync (its version counter moves) still
    reaches the decode: the derived weights are rebuilt before the next rollout."""
    rollout, _ = rollout_and_plain_models(tiny_model_dir)
    ids, mask = grouped_batch(n=2)
    before, _ = decode_logits_and_full_forward(rollout, ids, mask)
    with torch.no_grad():
        rollout.model.layers[1].mlp.down_proj.weight.mul_(3.0)
        rollout.get_output_embeddings().weight.add_(0.05)  # tied: the embedding too
    assert not rollout.lean_decode.fresh()
    after, full = decode_logits_and_full_forward(rollout, ids, mask)
    assert rollout.lean_decode.fresh()
    assert torch.allclose(after, full, atol=1e-5) and (after - before).abs().max() > 1e-2


def test_models_the_lean_decode_does_not_support_decode_through_their_hf_forward(tmp_path):
    """A Llama with attention biases has no lean decode; its rollout still equals generate."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, attention_bias=True)
    LlamaForCausalLM(cfg).save_pretrained(tmp_path)
    model = verl_cpu_patch.load_rollout_model(tmp_path, torch.float32)
    assert verl_cpu_patch.LeanLlamaDecode.unsupported(model) == "attention or MLP biases"
    assert getattr(model, "lean_decode", None) is None and verl_cpu_patch.lean_decode(model) is None
    ids, mask = grouped_batch(n=3)
    got, _ = sample_responses(model, ids, mask, max_new_tokens=6, eos_token_ids=3, pad_token_id=0, do_sample=False)
    want = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=6, do_sample=False, eos_token_id=3,
                          pad_token_id=0)[:, ids.size(1):]
    assert torch.equal(got[:, :want.size(1)], want)


def test_lean_decode_on_plain_weights_gives_the_prepacked_logits(tiny_model_dir):
    """Where oneDNN cannot prepack, the lean decode runs ``F.linear`` on the joined weights: the
    same logits."""
    rollout, _ = rollout_and_plain_models(tiny_model_dir)
    ids, mask = grouped_batch(n=3)
    packed, full = decode_logits_and_full_forward(rollout, ids, mask)
    rollout.lean_decode = verl_cpu_patch.LeanLlamaDecode(rollout, packed=False)
    plain, _ = decode_logits_and_full_forward(rollout, ids, mask)
    assert torch.allclose(packed, plain, atol=1e-5) and torch.allclose(plain, full, atol=1e-5)
