"""The report of one run: markdown (header, a line per rule, notes) and its JSON entries."""

from __future__ import annotations

import math
from typing import Sequence

from .read import Run
from .rules import LEVELS, Context, Finding, fmt


def step_range(run: Run) -> str:
    steps = run.train_steps
    return f"{steps[0]}-{steps[-1]} ({len(steps)} logged)" if steps else "none"


def render_markdown(run: Run, findings: Sequence[Finding], ctx: Context) -> str:
    counts = {lvl: sum(f.level == lvl for f in findings) for lvl in LEVELS}
    reward = ctx.config.reward if ctx.config is not None else "unknown (no Hydra config beside the log; --config)"
    compared = f" (compared with training via `{ctx.val_reward_tag}`)" if ctx.val_reward_tag != ctx.val_tag else ""
    lines = [
        f"# GRPO health report: {run.name if run.name != '.' else ctx.experiment}", "",
        f"- log: `{run.path}`{'; ' + run.about if run.about else ''}; training steps {step_range(run)}; "
        f"{len(run.scalars)} scalar tags",
        f"- experiment: `{ctx.experiment}` ({ctx.experiment_note}); reward: {reward}",
        f"- stack: {ctx.stack or 'unknown'} ({ctx.stack_note})",
        f"- validation tag: `{ctx.val_tag or 'none'}`{compared if ctx.val_reward_tag else ''}",
        f"- policy updates per step: {ctx.updates_per_step if ctx.updates_per_step is not None else '?'} "
        f"({ctx.updates_note}); actor lr: {fmt(ctx.lr)} ({ctx.lr_note}); kl_loss_coef: {fmt(ctx.kl_coef)} "
        f"({ctx.kl_coef_note}); loss scale: {ctx.loss_scale:g}",
        f"- summary: {counts['alert']} alert, {counts['warn']} warn, {counts['info']} info, {counts['ok']} ok, "
        f"{counts['skipped']} skipped", "", "## Rules", "",
        *(f"- **{f.level.upper()}** `{f.rule}` (`{f.tag}`) {f'step {f.step}' if f.step is not None else '-'}, "
          f"value {fmt(f.value)}: {f.message}" for f in findings),
        "", "## Notes", "", f"- Clip fraction: {ctx.clipfrac_note}.",
    ]
    if ctx.stack == "verl 0.6.0":
        lines.append("- verl 0.6.0 logs `actor/pg_loss` and `actor/kl_loss` divided by the number of micro-batches "
                     "per mini-batch (dp_actor.py `update_policy`, `loss_scale_factor`); pass `--loss-scale "
                     "<micro-batches>` to read the KL rules on the true per-token scale.")
    lines += ["- `critic/advantages/max` = `min` = 0 only shows the case where *every* group had zero reward "
              "variance; verl logs no per-group share. Pass `--rollout-dir` (trainer.rollout_data_dir) to count them.",
              ""]
    return "\n".join(lines)


def finding_json(run: Run, f: Finding) -> dict:
    """One JSON entry (value null when not finite; value_text keeps it)."""
    finite = f.value is not None and math.isfinite(f.value)
    return {"run": run.name, "id": f.rule, "tag": f.tag, "level": f.level, "step": f.step,
            "value": f.value if finite else None, "value_text": fmt(f.value) if f.value is not None else None,
            "message": f.message, "source": f.source}
