"""The CPU patch's on-policy shortcut: the old log-prob pass is skipped where verl's update
ignores it, and the update reports its metrics (cpu_support.verl_cpu_patch)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("verl")

from cpu_support import verl_cpu_patch  # noqa: E402
from test_launcher_config import compose, launcher_overrides  # noqa: E402


@pytest.fixture
def patched_actor(monkeypatch):
    """verl's DataParallelPPOActor with the fp32 forward patches, the debug metrics and the
    on-policy patch, undone after the test."""
    import verl.utils.debug.metrics as debug_metrics
    from verl.trainer.ppo import ray_trainer
    from verl.workers.actor import dp_actor

    monkeypatch.setattr(debug_metrics, "calculate_debug_metrics", debug_metrics.calculate_debug_metrics)
    monkeypatch.setenv(verl_cpu_patch.DTYPE_ENV, "fp32")
    monkeypatch.setattr(dp_actor, "torch", dp_actor.torch)
    cls = dp_actor.DataParallelPPOActor
    for name in ("_forward_micro_batch", "update_policy"):
        monkeypatch.setattr(cls, name, getattr(cls, name))
    monkeypatch.setattr(ray_trainer.RayPPOTrainer, "init_workers", ray_trainer.RayPPOTrainer.init_workers)
    verl_cpu_patch._patch_actor_autocast()
    verl_cpu_patch._patch_actor_padding()
    verl_cpu_patch._patch_debug_metrics()
    verl_cpu_patch._patch_old_log_probs_in_update()
    return cls


def make_actor(cls, model_dir, mini_batch: int = 8):
    from transformers import AutoModelForCausalLM
    from verl.workers.config.actor import FSDPActorConfig

    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    config = FSDPActorConfig(strategy="fsdp", ppo_mini_batch_size=mini_batch, ppo_micro_batch_size_per_gpu=4,
                             use_kl_loss=True, kl_loss_type="low_var_kl", ppo_epochs=1, rollout_n=1)
    return cls(config, model, torch.optim.AdamW(model.parameters(), lr=1e-2))


def grpo_batch(rows: int = 8, prompt_length: int = 6, response_length: int = 5):
    """Two GRPO groups of ``rows // 2`` responses, laid out as verl's trainer hands them to the
    actor (left-padded prompts, right-padded responses), with advantages, ref and rollout
    log-probs."""
    from verl import DataProto

    gen = torch.Generator().manual_seed(1)
    prompts = [[5, 6, 7], [9, 10, 11, 12, 13]]
    ids = torch.zeros((rows, prompt_length + response_length), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row in range(rows):
        prompt = prompts[row * 2 // rows]
        length = 2 + row % (response_length - 1)
        ids[row, prompt_length - len(prompt):prompt_length] = torch.tensor(prompt)
        ids[row, prompt_length:prompt_length + length] = torch.randint(14, 64, (length,), generator=gen)
        mask[row, prompt_length - len(prompt):prompt_length + length] = 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    pos[:, prompt_length:] = pos[:, prompt_length - 1:prompt_length] + torch.arange(1, response_length + 1)
    response_mask = mask[:, prompt_length:].float()
    tensors = {
        "input_ids": ids, "attention_mask": mask, "position_ids": pos, "responses": ids[:, prompt_length:],
        "response_mask": response_mask,
        "advantages": torch.randn(rows, 1, generator=gen).expand(rows, response_length).clone() * response_mask,
        "ref_log_prob": -4.0 + 0.1 * torch.randn(rows, response_length, generator=gen),
        "rollout_log_probs": -4.0 + 0.1 * torch.randn(rows, response_length, generator=gen),
    }
    return DataProto.from_dict(tensors=tensors, meta_info={"temperature": 0.7, "micro_batch_size": 4,
                                                           "use_dynamic_bsz": False})


def test_on_policy_update_without_the_old_log_prob_pass_is_verls_update(tiny_model_dir, single_process_group,
                                                                        patched_actor):
    """The update given the placeholder instead of the old log-prob pass changes the weights
    exactly as verl's update after that pass, and reports the pass's entropy and the rollout
    agreement computed from the pass's log-probs."""
    import verl.utils.debug.metrics as debug_metrics
    from verl.trainer.ppo.core_algos import agg_loss

    # verl's way: the separate pass, then the update
    actor = make_actor(patched_actor, tiny_model_dir)
    data = grpo_batch()
    old_log_probs, entropy = actor.compute_log_prob(data, calculate_entropy=True)
    data.batch["old_log_probs"] = old_log_probs
    want_metrics = actor.update_policy(data)
    want_entropy = agg_loss(entropy, data.batch["response_mask"], "token-mean").item()
    want_debug = debug_metrics.calculate_debug_metrics(data)
    want_weights = {n: p.detach().clone() for n, p in actor.actor_module.named_parameters()}

    # the placeholder, as the patched trainer hands it over
    actor = make_actor(patched_actor, tiny_model_dir)
    data = grpo_batch()
    data = data.union(verl_cpu_patch._old_log_probs_placeholder(data, temperature=0.7))
    assert torch.isnan(data.batch["old_log_probs"]).all()
    assert debug_metrics.calculate_debug_metrics(data) == {}  # none from the placeholders
    got_metrics = actor.update_policy(data)

    for name, weight in actor.actor_module.named_parameters():
        assert torch.equal(weight.detach(), want_weights[name]), name
    for name in ("actor/pg_loss", "actor/kl_loss", "actor/grad_norm"):
        assert got_metrics[name] == pytest.approx(want_metrics[name], rel=1e-6), name
    assert got_metrics["actor/entropy"] == [pytest.approx(want_entropy, rel=1e-5)]
    assert want_debug["training/rollout_log_prob_absdiff_mean"] > 0
    for name, value in want_debug.items():
        assert got_metrics[name] == [pytest.approx(float(value), rel=1e-5, abs=1e-7)], name
    assert actor._cpu_update_outputs is None  # nothing kept between updates


def test_a_flagged_batch_that_is_not_on_policy_is_refused(tiny_model_dir, single_process_group, patched_actor):
    """Two mini-batches per step: the second is off-policy and needs the real old log-probs."""
    actor = make_actor(patched_actor, tiny_model_dir, mini_batch=4)
    data = grpo_batch()
    data = data.union(verl_cpu_patch._old_log_probs_placeholder(data, temperature=0.7))
    before = {n: p.detach().clone() for n, p in actor.actor_module.named_parameters()}
    with pytest.raises(RuntimeError, match="not on-policy"):
        actor.update_policy(data)
    assert all(torch.equal(p, before[n]) for n, p in actor.actor_module.named_parameters())


def test_an_unflagged_batch_takes_verls_update(tiny_model_dir, single_process_group, patched_actor):
    """Without the flag (the pass was kept) the update is verl's own and adds no metric."""
    actor = make_actor(patched_actor, tiny_model_dir, mini_batch=4)
    data = grpo_batch()
    data.batch["old_log_probs"], _ = actor.compute_log_prob(data, calculate_entropy=True)
    metrics = actor.update_policy(data)
    assert "actor/entropy" not in metrics and len(metrics["actor/grad_norm"]) == 2


def test_the_trainer_hands_the_placeholder_only_where_the_pass_is_not_needed():
    """After init_workers the patched trainer replaces the worker group's compute_log_prob for
    on-policy configs only (the launcher's CPU profiles are), and says why it kept the pass
    otherwise."""
    from verl import DataProto

    def init(cfg):
        trainer = SimpleNamespace(config=cfg, actor_rollout_wg=SimpleNamespace(compute_log_prob="the worker's"))
        verl_cpu_patch._skip_old_log_prob_pass(trainer)
        return trainer.actor_rollout_wg.compute_log_prob

    for profile in ("cpu", "cpu_learn"):
        cfg = compose(launcher_overrides("cpu", PROFILE=profile))
        assert verl_cpu_patch.old_log_probs_needed(cfg) is None, profile
        placeholder = init(cfg)(DataProto.from_dict(tensors={"responses": torch.ones(3, 4, dtype=torch.long)}))
        assert placeholder.meta_info[verl_cpu_patch.OLD_LOG_PROBS_IN_UPDATE] is True
        assert placeholder.batch["old_log_probs"].shape == (3, 4)
        assert torch.isnan(placeholder.batch["old_log_probs"]).all()
        assert torch.isnan(placeholder.batch["entropys"]).all()

    reasons = {
        "actor_rollout_ref.actor.ppo_epochs=2": "ppo_epochs=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2": "later mini-batches",
        "algorithm.use_kl_in_reward=True": "use_kl_in_reward",
        "algorithm.rollout_is_threshold=2.0": "rollout_is_threshold",
        "actor_rollout_ref.actor.use_dynamic_bsz=True": "use_dynamic_bsz",
    }
    for override, reason in reasons.items():
        cfg = compose(launcher_overrides("cpu", override))
        assert reason in verl_cpu_patch.old_log_probs_needed(cfg), override
        assert init(cfg) == "the worker's", override
