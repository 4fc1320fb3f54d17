"""The learning loop on CPU: a short run of the cpu_learn profile must change the policy in
the direction of the reward (slow; CI runs it).

A run that goes through the launcher and verl's main_ppo would still finish and log numbers
if the loop were broken: an advantage that is always 0 or has the wrong sign, an optimizer
that never steps, a rollout that never receives the actor's new weights, or a reward that is
not wired in. Each of those fails one assertion here:

- the rollout's weights are digested at every sync (``CPU_ROLLOUT_DIGEST_FILE``); the digest
  at step k must equal the actor checkpoint of step k-1 (the initial model for step 1);
- GRPO advantages and the gradient norm are non-zero at every step, the KL loss is above 0
  after the first update, and the final weights differ from the initial ones;
- the rewarded behaviour (the answer contract's format, compute_format_score) is more
  frequent in the last steps than in the first. verl seeds the data order and the rollout's
  sampler, so the run is the same every time on the same machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import REPO

STEPS = 6
#: the cpu_learn profile, shortened for CI: no validation, a checkpoint at the last two steps
#: (the weight-sync check reads step STEPS-1's), model weights only
SETTINGS = {
    "PROFILE": "cpu_learn", "TOTAL_STEPS": str(STEPS), "VAL_BEFORE_TRAIN": "False", "TEST_FREQ": "-1",
    "SAVE_FREQ": str(STEPS - 1), "RESUME_MODE": "disable",
}
OVERRIDES = ("actor_rollout_ref.actor.checkpoint.save_contents=[model]",)

pytestmark = pytest.mark.slow


@dataclass
class LearnRun:
    returncode: int
    output_dir: Path
    log: str
    wall_s: float

    @property
    def scalars(self) -> dict[str, dict[int, float]]:
        from health_report import scalars_by_step

        return scalars_by_step(self.output_dir / "tensorboard")

    @property
    def digests(self) -> list[dict]:
        return [json.loads(line) for line in (self.output_dir / "digests.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def learn_run(tmp_path_factory) -> LearnRun:
    for needed in ("models/SmolLM2-135M-Instruct/config.json", "data/verl/math_level1/train.parquet"):
        if not (REPO / needed).exists():
            pytest.fail(f"{needed} missing: run 'bash setup.sh --device cpu' first")
    out = tmp_path_factory.mktemp("cpu_learn")
    env = {**os.environ, **SETTINGS, "DEVICE": "cpu", "OUTPUT_DIR": str(out),
           "CPU_ROLLOUT_DIGEST_FILE": str(out / "digests.jsonl")}
    start = time.monotonic()
    proc = subprocess.run(["bash", str(REPO / "run_qwen2_5_1_5b.sh"), *OVERRIDES], env=env, cwd=out,
                          capture_output=True, text=True, timeout=1200)
    return LearnRun(proc.returncode, out, proc.stdout + proc.stderr, time.monotonic() - start)


def checkpoint_digest(actor_dir: Path, dtype) -> str:
    """Digest of an FSDP actor checkpoint's weights, computed as the rollout computes its own."""
    import torch
    from torch.distributed.tensor import DTensor

    from cpu_support.verl_cpu_patch import weights_digest

    state = torch.load(actor_dir / "model_world_size_1_rank_0.pt", map_location="cpu", weights_only=False)
    named = [(k, v.to_local() if isinstance(v, DTensor) else v) for k, v in state.items() if k != "lm_head.weight"]
    return weights_digest(named, dtype)


def model_digest(model_dir: Path, dtype) -> str:
    import torch
    from transformers import AutoModelForCausalLM

    from cpu_support.verl_cpu_patch import weights_digest

    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    return weights_digest([(k, v) for k, v in model.state_dict().items() if k != "lm_head.weight"], dtype)


def test_run_exits_zero_and_used_the_format_reward(learn_run):
    assert learn_run.returncode == 0, learn_run.log[-4000:]
    assert "using customized reward function 'compute_format_score'" in learn_run.log


def test_rollout_generates_with_the_previous_steps_actor_weights(learn_run):
    import torch

    digests = learn_run.digests
    assert [d["sync"] for d in digests] == list(range(1, STEPS + 1))  # one sync per step, no validation
    dtype = getattr(torch, digests[0]["dtype"])
    ckpt = learn_run.output_dir / "checkpoints"
    assert digests[0]["digest"] == model_digest(REPO / "models/SmolLM2-135M-Instruct", dtype)
    # checkpoints exist for steps STEPS-1 and STEPS: step STEPS generated with the weights of step STEPS-1
    assert digests[STEPS - 1]["digest"] == checkpoint_digest(ckpt / f"global_step_{STEPS - 1}/actor", dtype)
    assert len({d["digest"] for d in digests}) == STEPS  # the weights changed at every step


def test_final_weights_differ_from_the_initial_ones(learn_run):
    import torch

    final = checkpoint_digest(learn_run.output_dir / f"checkpoints/global_step_{STEPS}/actor", torch.float32)
    assert final != model_digest(REPO / "models/SmolLM2-135M-Instruct", torch.float32)


def test_every_step_has_a_learning_signal(learn_run):
    s = learn_run.scalars
    for step in range(1, STEPS + 1):
        adv = max(abs(s["critic/advantages/max"][step]), abs(s["critic/advantages/min"][step]))
        assert adv > 0, f"step {step}: all GRPO advantages are 0"
        assert s["actor/grad_norm"][step] > 0, f"step {step}: gradient norm 0"
    for step in range(2, STEPS + 1):  # the actor has moved away from the ref after step 1's first update
        assert s["actor/kl_loss"][step] > 0, f"step {step}: KL loss 0"


def test_rollout_and_actor_agree_on_log_probs(learn_run):
    """A rollout with stale or wrong weights would disagree with the actor's recomputation."""
    diffs = learn_run.scalars["training/rollout_log_prob_absdiff_mean"]
    assert sorted(diffs) == list(range(1, STEPS + 1))
    assert max(diffs.values()) < 0.1, diffs


def test_the_rewarded_behaviour_becomes_more_frequent(learn_run):
    score = learn_run.scalars["critic/score/mean"]
    first = sum(score[s] for s in (1, 2, 3)) / 3
    last = sum(score[s] for s in (STEPS - 2, STEPS - 1, STEPS)) / 3
    assert last > first + 0.05, score
