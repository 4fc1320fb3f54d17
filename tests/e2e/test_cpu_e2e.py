"""End to end on CPU: the README's quick start (``cpu_run``: the launcher's cpu profile on the
default stack, current) runs real verl GRPO steps through verl's vLLM rollout (slow; CI runs it).

What must hold: exit 0; >= 2 GRPO steps; the last step's checkpoint exists and is tracked
(tests/e2e/test_merge_real_checkpoint.py merges it, loads it and generates); TensorBoard events hold the
key metrics for every step; the recipe's reward function (new_math_reward.compute_score) is
the one verl called.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, rollout_rows

STEPS = 2  # profiles/cpu.sh TOTAL_STEPS
RESPONSES_PER_STEP = 4 * 4  # profiles/cpu.sh TRAIN_BATCH_SIZE x N_SAMPLES
#: the cpu profile skips the old-log-prob pass, and with it verl's actor/entropy; actor/ppo_kl is
#: then the rollout/actor agreement
TRAIN_TAGS = ("actor/pg_loss", "actor/kl_loss", "actor/ppo_kl", "critic/score/mean", "response_length/mean")
VAL_PREFIX = "val-core/DigitalLearningGmbH/MATH-lighteval"

pytestmark = pytest.mark.slow


def scalars(logdir: Path) -> dict[str, dict[int, float]]:
    """{tag: {global step: value}} of the run's TensorBoard events."""
    from health_report import scalars_by_step

    return scalars_by_step(logdir)


def test_run_exits_zero(cpu_run):
    assert cpu_run.returncode == 0, cpu_run.log[-4000:]


def test_metrics_logged_for_every_step(cpu_run):
    tags = scalars(cpu_run.tensorboard_dir)
    for tag in TRAIN_TAGS:
        assert sorted(tags.get(tag, {})) == list(range(1, STEPS + 1)), f"{tag}: {tags.get(tag)}"
    # validation ran (before training and at the last step) and was scored by the recipe's reward
    assert STEPS in tags[f"{VAL_PREFIX}/acc/mean@1"]


def test_recipe_reward_was_called(cpu_run):
    """verl 0.9.1 loads the reward in its reward-loop workers without a log line: the evidence is
    the format / cot credits only new_math_reward returns, in the validation metrics, and the
    score verl gave every training response, which is what compute_score gives it."""
    from new_math_reward import compute_score
    from prepare_math import HUB_ID  # the rows' data_source

    tags = scalars(cpu_run.tensorboard_dir)
    assert any(t.endswith("/format/mean@1") for t in tags) and any(t.endswith("/cot/mean@1") for t in tags)
    rows = rollout_rows(cpu_run.output_dir)
    assert len(rows) == STEPS * RESPONSES_PER_STEP
    for row in rows:
        assert row["score"] == pytest.approx(compute_score(HUB_ID, row["output"], row["gts"])["score"]), row


def test_last_step_checkpoint_is_tracked(cpu_run):
    """verl saved the last global step's actor and named it in its tracker; merging it, loading
    the result and generating is tests/e2e/test_merge_real_checkpoint.py."""
    ckpt = cpu_run.ckpt_dir
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == str(STEPS)
    assert (ckpt / f"global_step_{STEPS}" / "actor" / "model_world_size_1_rank_0.pt").is_file()


def test_health_report_on_the_real_run(cpu_run, tmp_path):
    """health_report.py, in the run's own environment as the README has it, reads the CPU run's
    real logs: report, JSON and figures are produced, and the run's known pathology (no learning
    signal from a 135M model) is named."""
    from grpo_math.stacks import stack_python

    out = tmp_path / "health"
    proc = subprocess.run(
        [str(stack_python(cpu_run.stack)), str(REPO / "health_report.py"), str(cpu_run.tensorboard_dir),
         "--output-dir", str(out), "--json", str(tmp_path / "health.json")],
        capture_output=True, text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert (out / "health_grid.png").stat().st_size > 10_000
    assert (out / "actor_kl_loss.png").is_file() and (out / "health_report.md").is_file()
    rules = {r["id"]: r for r in json.loads((tmp_path / "health.json").read_text())["rules"]}
    assert rules["pg_loss_nan"]["level"] == "ok" and rules["rollout_actor_mismatch"]["level"] == "ok"
    # every response of the 135M model scores 0: GRPO has no signal, and the report says so
    if max(scalars(cpu_run.tensorboard_dir)["critic/score/max"].values()) == 0:
        assert rules["no_learning_signal"]["level"] in ("warn", "alert")


def test_terminal_shows_a_line_per_global_step(cpu_run):
    """The launcher's terminal output is a summary (CONSOLE=summary): its own lines, preflight's,
    and one line per global step with the phase times and the reward; main_ppo's whole console is
    in train.log."""
    if not cpu_run.terminal:
        pytest.skip("a reused run (RECIPE_CPU_RUN_DIR) has no terminal output")
    lines = cpu_run.terminal.splitlines()
    steps = [line for line in lines if line.startswith("global step ")]
    assert [line.split(":")[0] for line in steps] == [f"global step {s}/{STEPS}" for s in range(1, STEPS + 1)], lines
    assert all("update_actor" in line and "reward" in line for line in steps), steps
    assert len(lines) <= 12 + STEPS, "\n".join(lines)
    assert "Training Progress" in (cpu_run.output_dir / "train.log").read_text()
