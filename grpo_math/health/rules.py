"""The health rules: every threshold (``Thresholds``), what the log says of the run's configuration
(``Context``) and one ``check_*`` per rule, registered in ``RULES`` with its metric, its thresholds in
words and its sources once for ``--list-rules`` and docs/health_rules.md."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from .read import (DEFAULT_VAL_TAG, HYDRA_CONFIG, MEMORY_TAGS, ROLLOUT_TAGS, TAG_ABORTED, TAG_ADV_MAX, TAG_ADV_MIN,
                   TAG_CLIPFRAC, TAG_CPU_MEM, TAG_ENTROPY, TAG_GRAD_NORM, TAG_KL_COEF, TAG_KL_LOSS, TAG_LR,
                   TAG_MAX_MEM, TAG_MAX_MEM_RESERVED, TAG_MFU, TAG_PG_LOSS, TAG_PPO_KL, TAG_RESP_CLIP, TAG_RESP_LEN,
                   TAG_RESP_MIN, TAG_ROLLOUT_PEARSON, TAG_ROLLOUT_PROBS_DIFF, TAG_SCORE_MAX, TAG_SCORE_MEAN,
                   TAG_SCORE_MIN, TAG_THROUGHPUT, VAL_MEAN_RE, Run, RunConfig, Series, experiment_name, run_stack)

LEVELS = ("skipped", "ok", "info", "warn", "alert")
SEVERITY = {name: i for i, name in enumerate(LEVELS)}

SRC_GUIDE = "reference recipe metric guide"
SRC_DP_ACTOR = "verl 0.6.0 verl/workers/actor/dp_actor.py"
SRC_TRAINER = "verl 0.6.0 verl/trainer/ppo/ray_trainer.py"
SRC_METRIC_UTILS = "verl 0.6.0 verl/trainer/ppo/metric_utils.py"
SRC_FSDP_WORKERS = "verl 0.6.0 verl/workers/fsdp_workers.py"
SRC_GRPO = "GRPO, Shao et al. 2024 (DeepSeekMath, arXiv:2402.03300)"
SRC_DAPO = "DAPO, Yu et al. 2025 (arXiv:2503.14476)"


@dataclass(frozen=True)
class Thresholds:
    """Every number the rules use (override with --set NAME=VALUE); units in the comments."""

    # actor/entropy, nats/token. Guide: >= 2.0 exploring, < 0.5 confident, towards 0 collapse.
    entropy_high: float = 2.0
    entropy_low: float = 0.5
    entropy_collapse_abs: float = 0.01  # below: (near) deterministic, collapse
    entropy_collapse_frac: float = 0.2  # < entropy_low and < this x initial: collapse
    entropy_drop_warn_frac: float = 0.5  # < entropy_low and < this x initial: warn
    entropy_rise_warn_factor: float = 2.0  # >= entropy_high and >= this x initial: warn
    baseline_steps: int = 3  # steps whose median is a metric's initial value
    # actor/kl_loss, nats/token (low_var_kl); heuristics for kl_loss_coef ~ 1e-3.
    kl_loss_warn: float = 0.1
    kl_loss_alert: float = 1.0
    kl_loss_low: float = 1e-5  # still at or below after kl_low_min_steps: the policy is not moving
    kl_low_min_steps: int = 10
    # actor/pg_clipfrac, fraction of tokens. Guide: 10-25 % healthy, > 30 % violent, < 5 % too low.
    clipfrac_healthy_low: float = 0.10
    clipfrac_healthy_high: float = 0.25
    clipfrac_violent: float = 0.30
    clipfrac_too_low: float = 0.05
    clipfrac_band_min_lr: float = 1e-5  # the guide's low band applies only at actor lr >= this
    clipfrac_low_persist: int = 3
    # actor/grad_norm, pre-clip L2 norm. Guide: steady around 0.1-1.0; verl clips at 1.0.
    grad_norm_band_low: float = 0.1
    grad_norm_band_high: float = 1.0
    grad_high_persist: int = 3
    grad_spike_factor: float = 5.0  # a step above this x the trailing median is a spike ...
    grad_spike_window: int = 10
    grad_spike_min_history: int = 3
    grad_spike_min_value: float = 0.1  # ... when it is at least this large
    # response_length/mean, tokens, against its trailing median; clip_ratio: share cut at max length.
    resp_rise_factor: float = 1.5
    resp_fall_factor: float = 0.5
    resp_window: int = 5
    resp_min_history: int = 3
    resp_clip_ratio_warn: float = 0.2
    resp_clip_persist: int = 3
    # validation vs training reward (guide: same magnitude), reward units.
    val_train_ratio_max: float = 3.0  # larger/smaller of |val| and |train| above this: not the same
    val_train_min_abs: float = 0.05  # both below: too small to compare
    val_drop: float = 0.03  # below the best validation by this: regression
    train_rise: float = 0.03  # training score up by this meanwhile: reward up, validation down
    train_window: int = 5  # training steps averaged at a validation point
    # GRPO learning signal (critic/advantages/*, rollout dumps).
    zero_adv_eps: float = 1e-8
    no_signal_alert_steps: int = 3
    zero_var_group_frac_warn: float = 0.75  # share of groups whose responses all scored the same
    # Rollout vs actor on the rollout's tokens, alert:
    rollout_pearson_min: float = 0.8  # Pearson of the token probabilities below this
    rollout_ppo_kl_max: float = 0.05  # or, without the old-log-prob pass, the update's actor/ppo_kl above this
    # The first validation after step 0: below this x the step-0 value and this much lower: warn.
    val_first_drop_frac: float = 0.5
    val_first_drop_abs: float = 0.05
    zero_reward_steps: int = 3  # critic/score/mean exactly 0 at each of the first this many steps
    # response_length/mean falling steadily over windows of the last W, 2W, 4W ... logged steps:
    resp_decline_window: int = 10  # W
    resp_decline_tau: float = -0.6  # Kendall's tau <= this
    resp_decline_frac: float = 0.15  # a Theil-Sen fall >= this share of its start
    resp_decline_step_share: float = 0.5  # no step carrying more than this share of the fall
    # perf/throughput, tokens/s per device: a step below this x its trailing median.
    perf_drop_factor: float = 0.5
    perf_window: int = 5
    perf_min_history: int = 2
    # Memory (MEMORY_TAGS): after the warm-up steps, this many steps rising with Kendall's tau >=
    # this, a Theil-Sen growth of this many GB and this share of its start.
    mem_warmup_steps: int = 2
    mem_min_steps: int = 8
    mem_growth_tau: float = 0.6
    mem_growth_gb: float = 1.0
    mem_growth_frac: float = 0.1


DEFAULT_THRESHOLDS = Thresholds()


def override_thresholds(base: Thresholds, assignments: Sequence[str]) -> Thresholds:
    """``base`` with ``NAME=VALUE`` assignments applied; ValueError: unknown name, no ``=``, not an int/float."""
    types = {f.name: int if f.type in (int, "int") else float for f in dataclasses.fields(Thresholds)}
    changes = {}
    for item in assignments:
        name, eq, raw = item.partition("=")
        name = name.strip().lower()
        if not eq:
            raise ValueError(f"--set {item!r}: expected NAME=VALUE")
        if name not in types:
            raise ValueError(f"--set {item!r}: unknown threshold {name!r} (see --list-rules)")
        try:
            changes[name] = types[name](raw)
        except ValueError:
            raise ValueError(f"--set {item!r}: expected a {types[name].__name__} value") from None
    return dataclasses.replace(base, **changes)


# ---- Context: the run's configuration, from its log, its config files and the command line ----
@dataclass
class Context:
    updates_per_step: Optional[int] = None
    updates_note: str = "unknown"
    lr: Optional[float] = None
    lr_note: str = "unknown"
    kl_coef: Optional[float] = None
    kl_coef_note: str = "unknown"
    loss_scale: float = 1.0
    val_tag: Optional[str] = None
    val_reward_tag: Optional[str] = None
    rollout_groups: Optional[Dict[int, Tuple[int, int, int]]] = None
    clipfrac_band_applies: bool = True
    clipfrac_note: str = ""
    config: Optional[RunConfig] = None
    experiment: str = ""
    experiment_note: str = ""
    #: verl's version of the stack that made the run ("verl 0.6.0", ...), or None
    stack: Optional[str] = None
    stack_note: str = "unknown"
    #: a CPU run: perf/max_memory_allocated_gb 0 at every step (no accelerator memory used)
    on_cpu: bool = False


def _last_finite(s: Optional[Series]) -> Optional[float]:
    v = s.values[s.finite] if s is not None else np.array([])
    return float(v[-1]) if v.size else None


def all_zero(s: Optional[Series]) -> Optional[bool]:
    """Whether every finite value of ``s`` is 0 (None: no finite value)."""
    return None if s is None or not s.finite.any() else bool(np.all(s.values[s.finite] == 0))


def pick_val_tags(tags: Iterable[str], requested: Optional[str] = None) -> Tuple[Optional[str], Optional[str]]:
    """(core validation tag, the reward tag comparable with critic/score/mean). Core: ``requested``,
    else DEFAULT_VAL_TAG, else the first ``val-core/<src>/<var>/mean@<n>`` (``acc`` first, largest
    ``n``). Reward: ``val-(core|aux)/<same src>/reward/mean@<n>`` (largest ``n``), else the core tag."""
    parsed = {t: m for t in sorted(tags) if (m := VAL_MEAN_RE.match(t))}
    if requested:
        core = requested if requested in tags else None
    elif DEFAULT_VAL_TAG in tags:
        core = DEFAULT_VAL_TAG
    else:
        cands = sorted((t for t, m in parsed.items() if m["sec"] == "core"),
                       key=lambda t: (parsed[t]["var"] != "acc", -int(parsed[t]["n"]), t))
        core = cands[0] if cands else None
    m = VAL_MEAN_RE.match(core or "")
    rewards = sorted((t for t, mm in parsed.items() if m and mm["src"] == m["src"] and mm["var"] == "reward"),
                     key=lambda t: (-int(parsed[t]["n"]), parsed[t]["sec"] != "core"))
    return core, (rewards[0] if rewards else core)


def build_context(run: Run, th: Thresholds, *, updates_per_step: Optional[int] = None, lr: Optional[float] = None,
                  kl_coef: Optional[float] = None, loss_scale: float = 1.0, val_tag: Optional[str] = None,
                  rollout_groups: Optional[Dict[int, Tuple[int, int, int]]] = None,
                  config: Optional[RunConfig] = None) -> Context:
    """The run's configuration from its log, command-line values winning, then the run's Hydra config.
    Without either, one update per step is read from actor/pg_clipfrac and actor/ppo_kl exactly 0 at
    every step: verl's on_policy branch (dp_actor.py: one PPO mini-batch, ppo_epochs 1) uses the current
    log-probs as the old ones."""
    ctx = Context(loss_scale=loss_scale, rollout_groups=rollout_groups, config=config)
    ctx.experiment, ctx.experiment_note = experiment_name(run, config)
    ctx.stack, ctx.stack_note = run_stack(run, config)
    ctx.on_cpu = (config is not None and config.device == "cpu") or all_zero(run.get(TAG_MAX_MEM)) is True
    zc, zk = all_zero(run.get(TAG_CLIPFRAC)), all_zero(run.get(TAG_PPO_KL))
    if updates_per_step is not None:
        ctx.updates_per_step, ctx.updates_note = updates_per_step, "--updates-per-step"
    elif config is not None and config.updates_per_step is not None:
        ctx.updates_per_step = config.updates_per_step
        ctx.updates_note = f"ppo_epochs x train_batch_size / ppo_mini_batch_size in {config.path}"
    elif zc is False or zk is False:
        ctx.updates_note = "more than 1 (actor/pg_clipfrac or actor/ppo_kl non-zero: the ratio moved off 1)"
    elif zc:
        ctx.updates_per_step = 1
        ctx.updates_note = ("detected: actor/pg_clipfrac and actor/ppo_kl exactly 0 at every step (verl on-policy "
                            "branch, dp_actor.py)" if zk else
                            "probably (actor/pg_clipfrac exactly 0 at every step, actor/ppo_kl not logged)")
    for name, given, tag, flag in (("lr", lr, TAG_LR, "--lr"), ("kl_coef", kl_coef, TAG_KL_COEF, "--kl-coef")):
        value = given if given is not None else _last_finite(run.get(tag))
        note = flag if given is not None else tag if value is not None else f"unknown ({tag} not logged)"
        setattr(ctx, name, value)
        setattr(ctx, f"{name}_note", note)
    ctx.val_tag, ctx.val_reward_tag = pick_val_tags(run.scalars, val_tag)
    reasons = []
    if ctx.updates_per_step == 1:
        reasons.append("one policy update per step (on-policy: the PPO ratio is 1, so the clip "
                       "fraction is 0 by construction)")
    if ctx.lr is not None and ctx.lr < th.clipfrac_band_min_lr:
        reasons.append(f"actor lr {ctx.lr:g} < {th.clipfrac_band_min_lr:g}: public verl GRPO runs at lr "
                       "1e-6..2e-6 log pg_clipfrac of 0.03-0.13 %, far below the guide's 10-25 % band, "
                       "which comes from classic PPO learning rates")
    ctx.clipfrac_band_applies = not reasons
    ctx.clipfrac_note = "; ".join(reasons) or ("the guide's 10-25 % clip-fraction band is applied (lr unknown or "
                                               f">= {th.clipfrac_band_min_lr:g} and more than one update per step)")
    return ctx


# ---- The rules: each check returns (level, step or None, value or None, message[, tag it concerns]) ----
CheckResult = tuple


@dataclass
class Finding:
    """The outcome of one rule on one run."""

    rule: str
    tag: str
    level: str
    step: Optional[int]
    value: Optional[float]
    message: str
    source: str = ""


@dataclass(frozen=True)
class Rule:
    """A named rule: ``check`` runs when every tag in ``needs`` (and one of ``needs_any``) has data."""

    id: str
    tag: str
    needs: Tuple[str, ...]
    describe: Callable[[Thresholds], str]
    source: str
    check: Callable[[Run, Thresholds, Context], CheckResult]
    needs_val: bool = False
    needs_rollouts: bool = False
    needs_any: Tuple[str, ...] = ()


#: every rule, in the order of its report line: each ``@rule`` below adds one
RULES: List[Rule] = []


def rule(id: str, tag: str, needs: Tuple[str, ...], describe: Callable[[Thresholds], str], source: str, **kw):
    """Declares the decorated check a rule: its metric, its thresholds in words, its sources."""
    def add(check: Callable[[Run, Thresholds, Context], CheckResult]):
        RULES.append(Rule(id, tag, needs, describe, source, check, **kw))
        return check
    return add


def fmt(x: Optional[float]) -> str:
    if x is None:
        return "-"
    if not math.isfinite(x) or x == 0:
        return "0" if x == 0 else str(x)
    return f"{x:.3g}" if abs(x) >= 1e4 or abs(x) < 1e-3 else f"{x:.4g}"


def baseline(s: Series, th: Thresholds) -> Optional[float]:
    v = s.values[s.finite][: max(1, th.baseline_steps)]
    return float(np.median(v)) if v.size else None


def _first(mask: np.ndarray) -> Optional[int]:
    idx = np.flatnonzero(mask)
    return int(idx[0]) if idx.size else None


def _first_persistent(mask: np.ndarray, k: int) -> Optional[int]:
    """Index where the first run of ``k`` consecutive True values starts."""
    k = max(1, k)
    return _first(np.lib.stride_tricks.sliding_window_view(mask, k).all(axis=1)) if len(mask) >= k else None


def _trailing_medians(values: np.ndarray, window: int, min_history: int) -> np.ndarray:
    """Median of the finite values in the ``window`` points before each (NaN with fewer than ``min_history``)."""
    out = np.full(values.shape, np.nan)
    for i in range(values.size):
        prev = values[max(0, i - window): i]
        prev = prev[np.isfinite(prev)]
        if prev.size >= max(1, min_history):
            out[i] = float(np.median(prev))
    return out


def _at(s: Series, i: Optional[int]) -> Tuple[Optional[int], Optional[float]]:
    return (None, None) if i is None else (int(s.steps[i]), float(s.values[i]))


def _median(s: Series) -> Optional[float]:
    return float(np.median(s.values[s.finite])) if s.finite.any() else None


def entropy_limits(base: float, th: Thresholds) -> Tuple[float, float, float]:
    """(alert below, warn below, warn from) for a run whose initial entropy is ``base``."""
    return (max(th.entropy_collapse_abs, min(th.entropy_low, th.entropy_collapse_frac * base)),
            min(th.entropy_low, th.entropy_drop_warn_frac * base),
            max(th.entropy_high, th.entropy_rise_warn_factor * base))


@rule("entropy_collapse", TAG_ENTROPY, (TAG_ENTROPY,), lambda t:
      f"alert < {t.entropy_collapse_abs:g} or (< {t.entropy_low:g} and < {t.entropy_collapse_frac:g}x initial); "
      f"warn < {t.entropy_low:g} and < {t.entropy_drop_warn_frac:g}x initial; info < {t.entropy_low:g} "
      f"(confident); initial = median of the first {t.baseline_steps} steps", f"{SRC_GUIDE}; {SRC_TRAINER}")
def check_entropy_collapse(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    s = run.get(TAG_ENTROPY)
    v, fin, base = s.values, s.finite, baseline(s, th)
    if base is None:
        return "ok", None, None, "no finite entropy values"
    alert, warn, _ = entropy_limits(base, th)
    step, val = _at(s, _first(fin & (v < alert)))
    if step is not None:
        return ("alert", step, val, f"entropy collapse: {fmt(val)} nats/token (initial {fmt(base)}); "
                f"below {th.entropy_collapse_abs:g} or below {th.entropy_collapse_frac:g}x the initial value "
                "- the policy is becoming deterministic and stops exploring")
    step, val = _at(s, _first(fin & (v < warn)))
    if step is not None:
        return ("warn", step, val, f"entropy falling: {fmt(val)} < {th.entropy_low:g} and under "
                f"{th.entropy_drop_warn_frac:g}x the initial {fmt(base)} - watch for collapse")
    last = float(v[fin][-1])
    if last < th.entropy_low:
        return ("info", int(s.steps[fin][-1]), last, f"confident (< {th.entropy_low:g}) and stable relative to "
                f"the initial {fmt(base)}; usual for an instruct model")
    return "ok", None, last, f"latest {fmt(last)} (initial {fmt(base)})"


@rule("entropy_high", TAG_ENTROPY, (TAG_ENTROPY,), lambda t:
      f"info >= {t.entropy_high:g} (exploring); warn >= {t.entropy_high:g} and >= "
      f"{t.entropy_rise_warn_factor:g}x initial", SRC_GUIDE)
def check_entropy_high(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    s = run.get(TAG_ENTROPY)
    v, fin, base = s.values, s.finite, baseline(s, th)
    if base is None:
        return "ok", None, None, "no finite entropy values"
    step, val = _at(s, _first(fin & (v >= entropy_limits(base, th)[2])))
    if step is not None:
        return ("warn", step, val, f"entropy rose to {fmt(val)} (>= {th.entropy_high:g}, >= "
                f"{th.entropy_rise_warn_factor:g}x the initial {fmt(base)}): exploring heavily or degenerating "
                "into random text - read some responses")
    step, val = _at(s, _first(fin & (v >= th.entropy_high)))
    if step is not None:
        return "info", step, val, f"exploring (>= {th.entropy_high:g}) since the start"
    return "ok", None, _last_finite(s), f"below {th.entropy_high:g} throughout"


def _kl_penalty_note(ctx: Context, kl: Optional[float]) -> str:
    if ctx.kl_coef is None:
        return "kl_loss_coef unknown"
    pen = "" if kl is None or not math.isfinite(kl) else f", penalty coef*KL = {fmt(ctx.kl_coef * kl)}"
    return f"kl_loss_coef {ctx.kl_coef:g} ({ctx.kl_coef_note}){pen}"


@rule("kl_high", TAG_KL_LOSS, (TAG_KL_LOSS,), lambda t:
      f"warn > {t.kl_loss_warn:g}, alert > {t.kl_loss_alert:g} nats/token (logged value x --loss-scale); "
      "reported with kl_loss_coef", f"{SRC_GUIDE}; {SRC_DP_ACTOR}; {SRC_GRPO}; thresholds heuristic")
def check_kl_high(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    s = run.get(TAG_KL_LOSS)
    v = s.values * ctx.loss_scale
    fin = np.isfinite(v)
    for level, limit in (("alert", th.kl_loss_alert), ("warn", th.kl_loss_warn)):
        if (i := _first(fin & (v > limit))) is not None:
            return (level, int(s.steps[i]), float(v[i]), f"KL to the reference {fmt(v[i])} > {limit:g}: the "
                    f"policy is drifting from the reference model ({_kl_penalty_note(ctx, float(v[i]))}); "
                    "raise kl_loss_coef or lower the lr")
    last, mx = (float(v[fin][-1]), float(np.max(v[fin]))) if fin.any() else (None, None)
    return "ok", None, last, f"max {fmt(mx)} <= {th.kl_loss_warn:g} ({_kl_penalty_note(ctx, last)})"


@rule("kl_low", TAG_KL_LOSS, (TAG_KL_LOSS,), lambda t:
      f"warn if still <= {t.kl_loss_low:g} at the latest step >= {t.kl_low_min_steps}",
      f"{SRC_GUIDE}; thresholds heuristic")
def check_kl_low(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    s = run.get(TAG_KL_LOSS)
    v = s.values * ctx.loss_scale
    judged = np.isfinite(v) & (s.steps >= th.kl_low_min_steps)
    if not judged.any():
        return ("ok", None, _last_finite(s), f"fewer than {th.kl_low_min_steps} steps: too early to judge "
                "whether the policy moves off the reference")
    start = last = int(np.flatnonzero(judged)[-1])
    if v[last] > th.kl_loss_low:
        return "ok", None, float(v[last]), f"latest {fmt(float(v[last]))} > {th.kl_loss_low:g}: the policy is moving"
    while start - 1 >= 0 and judged[start - 1] and v[start - 1] <= th.kl_loss_low:
        start -= 1
    return ("warn", int(s.steps[start]), float(v[last]), f"KL still <= {th.kl_loss_low:g} after "
            f"{th.kl_low_min_steps}+ steps: the policy barely moves off the reference - not learning? "
            f"(check lr and rewards; {_kl_penalty_note(ctx, float(v[last]))}; logged values are scaled "
            f"by --loss-scale {ctx.loss_scale:g})")


@rule("pg_loss_nan", TAG_PG_LOSS, (TAG_PG_LOSS,), lambda t: "alert at the first non-finite value",
      f"{SRC_GUIDE}; {SRC_DP_ACTOR}")
def check_pg_loss_nan(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    s = run.get(TAG_PG_LOSS)
    if (i := _first(~s.finite)) is not None:
        return ("alert", *_at(s, i), "policy-gradient loss is not finite: numerical instability (check lr, bf16 "
                "overflow, reward NaNs)")
    return "ok", None, float(s.values[-1]), "finite at every step"


NONFINITE_TAGS = (TAG_ENTROPY, TAG_KL_LOSS, TAG_GRAD_NORM, TAG_CLIPFRAC, TAG_SCORE_MEAN, TAG_RESP_LEN)


@rule("nonfinite_metrics", "actor/*, critic/score/mean, response_length/mean", (), lambda t:
      "alert at the first non-finite entropy, kl_loss, grad_norm, pg_clipfrac, score or length",
      f"{SRC_DP_ACTOR} (_optimizer_step skips non-finite grad norms)", needs_any=NONFINITE_TAGS)
def check_nonfinite(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    firsts = [(int(s.steps[i]), tag, float(s.values[i])) for tag in NONFINITE_TAGS
              if (s := run.get(tag)) is not None and (i := _first(~s.finite)) is not None]
    if not firsts:
        return "ok", None, None, "all finite"
    step, tag, val = min(firsts, key=lambda f: f[0])  # the earliest step; at a tie, the first tag
    extra = (" (verl skips the optimizer step when the grad norm is not finite, dp_actor.py)"
             if tag == TAG_GRAD_NORM else "")
    return "alert", step, val, f"{tag} is not finite{extra}", tag


@rule("clipfrac_high", TAG_CLIPFRAC, (TAG_CLIPFRAC,), lambda t:
      f"warn > {t.clipfrac_healthy_high:g}, alert > {t.clipfrac_violent:g}", f"{SRC_GUIDE}; {SRC_DP_ACTOR}")
def check_clipfrac_high(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    s = run.get(TAG_CLIPFRAC)
    v, fin = s.values, s.finite
    if (i := _first(fin & (v > th.clipfrac_violent))) is not None:
        return ("alert", int(s.steps[i]), float(v[i]), f"clip fraction {fmt(v[i])} > {th.clipfrac_violent:g}: "
                "updates too violent - lower the lr or use more, smaller mini-batches")
    if (i := _first(fin & (v > th.clipfrac_healthy_high))) is not None:
        return ("warn", int(s.steps[i]), float(v[i]), f"clip fraction {fmt(v[i])} above the healthy "
                f"{th.clipfrac_healthy_low:g}-{th.clipfrac_healthy_high:g} band")
    mx = float(np.max(v[fin])) if fin.any() else None
    return "ok", None, mx, f"max {fmt(mx)} <= {th.clipfrac_healthy_high:g}"


@rule("clipfrac_low", TAG_CLIPFRAC, (TAG_CLIPFRAC,), lambda t:
      f"< {t.clipfrac_too_low:g} for {t.clipfrac_low_persist}+ steps: warn, or info when on-policy "
      f"(1 update/step) or actor lr < {t.clipfrac_band_min_lr:g}", f"{SRC_GUIDE}; {SRC_DP_ACTOR} (on_policy); "
      "public verl GRPO step logs at actor/lr 1e-6..2e-6: pg_clipfrac 0.0003-0.0013")
def check_clipfrac_low(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    s = run.get(TAG_CLIPFRAC)
    v, fin, med = s.values, s.finite, _median(s)
    i = _first_persistent(fin & (v < th.clipfrac_too_low), th.clipfrac_low_persist)
    if i is None:
        if fin.sum() < th.clipfrac_low_persist and fin.any() and np.all(v[fin] < th.clipfrac_too_low):
            return ("ok", None, med, f"below {th.clipfrac_too_low:g} but fewer than {th.clipfrac_low_persist} "
                    "steps to judge")
        return "ok", None, med, f"median {fmt(med)}"
    step, val = _at(s, i)
    if not ctx.clipfrac_band_applies:
        return ("info", step, val, f"clip fraction {fmt(val)} < {th.clipfrac_too_low:g} for "
                f"{th.clipfrac_low_persist}+ steps, expected here: {ctx.clipfrac_note}")
    return ("warn", step, val, f"clip fraction {fmt(val)} < {th.clipfrac_too_low:g} for {th.clipfrac_low_persist}+ "
            "steps: the trust-region constraint is barely active - lr too low or clip_ratio too wide")


def jump_rule(id: str, tag: str, up: bool, names: str, said: str, calm: Callable[[Series, Thresholds], tuple],
              source: str, early: str = "", also: str = "") -> None:
    """A rule warning at the first step above (``up``) or below factor x the median of the window steps
    before it (min_history of them at least): ``names`` the thresholds factor, window, min_history[, floor
    on the value]. ``said`` formats the warning ({v}, {ratio}, {med}); ``calm``: (value, message) when none
    fires; ``early`` names the check before any step has its history; ``also`` ends the words of ``describe``."""
    def describe(t: Thresholds) -> str:
        factor, window, history = (getattr(t, n) for n in names.split()[:3])
        sign = ">" if up else "<"
        return f"warn {sign} {factor:g}x trailing median ({window} steps, >= {history} history)" + also.format(t=t)

    def check_jump(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
        factor, window, history, *floor = (getattr(th, n) for n in names.split())
        s = run.get(tag)
        v, med = s.values, _trailing_medians(s.values, window, history)
        with np.errstate(invalid="ignore"):
            hit = np.isfinite(v) & np.isfinite(med) & (med > 0) & (v > factor * med if up else v < factor * med)
            i = _first(hit & (v >= floor[0]) if floor else hit)
        if i is not None:
            return "warn", int(s.steps[i]), float(v[i]), said.format(v=fmt(v[i]), ratio=v[i] / med[i], med=fmt(med[i]))
        if early and not np.isfinite(med).any():
            return "ok", None, _last_finite(s), f"fewer than {history + 1} steps: no {early} check yet"
        return ("ok", None, *calm(s, th))

    rule(id, tag, (tag,), describe, source)(check_jump)


jump_rule("grad_norm_spike", TAG_GRAD_NORM, True,
          "grad_spike_factor grad_spike_window grad_spike_min_history grad_spike_min_value",
          "grad-norm jump to {v} = {ratio:.1f}x the trailing median {med}: warning sign of explosion",
          lambda s, th: (_last_finite(s), f"no step above {th.grad_spike_factor:g}x its trailing median"),
          SRC_GUIDE, early="spike", also=" and >= {t.grad_spike_min_value:g}")


@rule("grad_norm_band", TAG_GRAD_NORM, (TAG_GRAD_NORM,), lambda t:
      f"warn > {t.grad_norm_band_high:g} for {t.grad_high_persist}+ steps; info if median < "
      f"{t.grad_norm_band_low:g}", f"{SRC_GUIDE}; verl actor grad_clip 1.0 (dp_actor.yaml)")
def check_grad_high(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    s = run.get(TAG_GRAD_NORM)
    i = _first_persistent(s.finite & (s.values > th.grad_norm_band_high), th.grad_high_persist)
    med = _median(s)
    if i is not None:
        return ("warn", *_at(s, i), f"grad norm > {th.grad_norm_band_high:g} for {th.grad_high_persist}+ steps "
                "(verl clips at actor.grad_clip=1.0, so every update is being clipped)")
    if med is not None and med < th.grad_norm_band_low:
        below = f"median {fmt(med)} below the guide's {th.grad_norm_band_low:g}-{th.grad_norm_band_high:g}"
        if cause := _zero_advantage_cause(run, th, s):
            return "info", None, med, f"{below}: {cause}"
        if ctx.lr is not None and ctx.lr < th.clipfrac_band_min_lr:
            return ("info", None, med, f"{below} with non-zero advantages: small updates, usual at actor lr "
                    f"{ctx.lr:g} (public verl GRPO runs at lr 1e-6: 0.04-0.2)")
        return "info", None, med, f"{below} with non-zero advantages: small updates (check lr and rewards)"
    return "ok", None, med, f"median {fmt(med)}"


def _zero_advantages(run: Run, th: Thresholds) -> Tuple[np.ndarray, np.ndarray]:
    """(steps logging both advantage extremes, mask of those where max = min = 0)."""
    mx, mn = run.get(TAG_ADV_MAX), run.get(TAG_ADV_MIN)
    common, imx, imn = np.intersect1d(mx.steps, mn.steps, return_indices=True)
    return common, (np.abs(mx.values[imx]) <= th.zero_adv_eps) & (np.abs(mn.values[imn]) <= th.zero_adv_eps)


def _zero_advantage_cause(run: Run, th: Thresholds, grad: Series) -> str:
    """Why the gradient is (near) 0 when GRPO's advantages were 0 (each group's rewards equal), else ""."""
    if run.get(TAG_ADV_MAX) is None or run.get(TAG_ADV_MIN) is None:
        return ""
    common, zero = _zero_advantages(run, th)
    if not zero.any():
        return ""
    steps = common[zero]
    smax, smin = run.get(TAG_SCORE_MAX), run.get(TAG_SCORE_MIN)
    same = ""
    if smax is not None and smin is not None:
        pairs = [(smax.values[smax.steps == st], smin.values[smin.steps == st]) for st in steps]
        scores = [float(a[0]) if a.size and b.size and a[0] == b[0] else None for a, b in pairs]
        if None not in scores and len(set(scores)) == 1:
            same = f" (every response of the step scored {fmt(scores[0])})"
    gsteps = np.intersect1d(steps, grad.steps)
    exact = gsteps.size and np.all(np.abs(grad.values[np.isin(grad.steps, gsteps)]) <= th.zero_adv_eps)
    return (f"at {len(steps)} of {len(common)} steps every GRPO advantage was 0: all rewards in each prompt group "
            f"were equal{same}, so the policy gradient is {'exactly ' if exact else ''}0 there - a missing reward "
            "signal, not a small learning rate")


RESP_JUMP = "mean response length {v} tokens = {ratio:.2f}x the trailing median {med}: "
jump_rule("response_length_rise", TAG_RESP_LEN, True, "resp_rise_factor resp_window resp_min_history",
          RESP_JUMP + "sudden rise: rambling or repetition - read some responses",
          lambda s, th: (_last_finite(s), "no sudden change"), f"{SRC_GUIDE}; {SRC_METRIC_UTILS}", early="jump")
jump_rule("response_length_fall", TAG_RESP_LEN, False, "resp_fall_factor resp_window resp_min_history",
          RESP_JUMP + "sudden fall: lazy / truncated answers or a reward shortcut - read some responses",
          lambda s, th: (_last_finite(s), "no sudden change"), f"{SRC_GUIDE}; {SRC_METRIC_UTILS}", early="jump")


@rule("response_truncation", TAG_RESP_CLIP, (TAG_RESP_CLIP,), lambda t:
      f"warn > {t.resp_clip_ratio_warn:g} for {t.resp_clip_persist}+ steps in a row, or at every step of a "
      "shorter run", f"{SRC_METRIC_UTILS}; {SRC_DAPO} (overlong responses); threshold heuristic")
def check_resp_truncation(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    s = run.get(TAG_RESP_CLIP)
    v, fin = s.values, s.finite
    over, n = fin & (v > th.resp_clip_ratio_warn), int(fin.sum())
    short = 0 < n < th.resp_clip_persist and bool(over[fin].all())  # a run shorter than the persistence
    i = _first(over) if short else _first_persistent(over, th.resp_clip_persist)
    if i is not None:
        step, val = _at(s, i)
        span = f"at each of the {n} logged steps" if short else f"for {th.resp_clip_persist}+ steps"
        return ("warn", step, val, f"{fmt(100 * val)} % of responses hit max_response_length at step {step}, over "
                f"{th.resp_clip_ratio_warn:g} {span}: truncated "
                "answers score 0 (no boxed answer); raise data.max_response_length or check for repetition")
    if not over.any():
        mx = float(np.max(v[fin])) if fin.any() else None
        return "ok", None, _last_finite(s), f"max {fmt(mx)} <= {th.resp_clip_ratio_warn:g}"
    return "ok", None, _last_finite(s), (f"max {fmt(float(np.max(v[over])))} > {th.resp_clip_ratio_warn:g} at "
                                         f"{int(over.sum())} step(s), fewer than {th.resp_clip_persist} in a row: "
                                         "not persistent")


def _train_level(score: Series, step: int, th: Thresholds) -> Optional[float]:
    steps, vals = score.steps[score.finite], score.values[score.finite]
    sel = vals[(steps <= step) & (steps > step - th.train_window)]
    sel = sel if sel.size else vals[: th.train_window]  # e.g. validation before training (step 0)
    return float(np.mean(sel)) if sel.size else None


@rule("val_train_gap", "<val reward tag>", (TAG_SCORE_MEAN,), lambda t:
      f"warn if the larger of abs(val), abs(train) is > {t.val_train_ratio_max:g}x the smaller or the signs "
      f"differ (both < {t.val_train_min_abs:g}: not judged); train = nearest step",
      f"{SRC_GUIDE}; {SRC_TRAINER} (_validate tag names)", needs_val=True)
def check_val_train_gap(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    val, score = run.get(ctx.val_reward_tag), run.get(TAG_SCORE_MEAN)
    if not score.finite.any():
        return "ok", None, None, "no finite training score"
    ts, tv = score.steps[score.finite], score.values[score.finite]
    for step, v in zip(val.steps, val.values):
        t = float(tv[int(np.argmin(np.abs(ts - step)))])
        a, b = abs(v), abs(t)
        if not math.isfinite(v) or max(a, b) < th.val_train_min_abs:
            continue
        if v * t < 0 or min(a, b) == 0 or max(a, b) / min(a, b) > th.val_train_ratio_max:
            return ("warn", int(step), float(v), f"validation reward {fmt(v)} vs training score {fmt(t)} "
                    f"near step {int(step)}: not the same magnitude (ratio > {th.val_train_ratio_max:g}) - "
                    "check that validation uses the same reward function, prompt format and data")
    return "ok", None, _last_finite(val), f"same magnitude as {TAG_SCORE_MEAN} at every validation"


def _val_drops(run: Run, th: Thresholds, ctx: Context):
    val, score = run.get(ctx.val_reward_tag), run.get(TAG_SCORE_MEAN)
    steps, vals = val.steps[val.finite], val.values[val.finite]
    for j in range(1, vals.size):
        b = int(np.argmax(vals[:j]))
        drop = float(vals[b] - vals[j])
        if drop >= th.val_drop:
            now, then = ((_train_level(score, int(steps[k]), th) for k in (j, b)) if score is not None
                         else (None, None))
            rise = now - then if now is not None and then is not None else None
            yield int(steps[j]), float(vals[j]), int(steps[b]), float(vals[b]), drop, rise


@rule("reward_up_val_down", "<val reward tag>", (TAG_SCORE_MEAN,), lambda t:
      f"warn if val falls >= {t.val_drop:g} below its best while the mean train score ({t.train_window} steps) "
      f"rose >= {t.train_rise:g}", "reward-hacking sign; thresholds heuristic (MATH test, 5000 problems: val "
      "noise ~0.007)", needs_val=True)
def check_reward_up_val_down(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    for step, v, bstep, bv, drop, rise in _val_drops(run, th, ctx):
        if rise is not None and rise >= th.train_rise:
            return ("warn", step, v, f"training score rose by {fmt(rise)} while validation fell by {fmt(drop)} "
                    f"(from {fmt(bv)} at step {bstep}): the policy may be exploiting the reward (hacking) "
                    "or overfitting - read some high-reward responses")
    return "ok", None, _last_finite(run.get(ctx.val_reward_tag)), "no validation drop while training reward rose"


@rule("val_regression", "<val reward tag>", (), lambda t: f"warn if val falls >= {t.val_drop:g} below its best",
      "thresholds heuristic", needs_val=True)
def check_val_regression(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    for step, v, bstep, bv, drop, _ in _val_drops(run, th, ctx):
        return ("warn", step, v, f"validation fell by {fmt(drop)} from its best {fmt(bv)} at step {bstep}",
                ctx.val_reward_tag)
    return ("ok", None, _last_finite(run.get(ctx.val_reward_tag)), "no drop below the best validation value",
            ctx.val_reward_tag)


def _persistent_else_once(steps: np.ndarray, mask: np.ndarray, values: np.ndarray, th: Thresholds, alert: str,
                          warn: str, ok: CheckResult) -> CheckResult:
    """Alert where ``mask`` first holds no_signal_alert_steps steps in a row, else warn where it first holds."""
    for level, i, message in (("alert", _first_persistent(mask, th.no_signal_alert_steps), alert),
                              ("warn", _first(mask), warn)):
        if i is not None:
            return level, int(steps[i]), float(values[i]), message
    return ok


@rule("no_learning_signal", TAG_ADV_MAX, (TAG_ADV_MAX, TAG_ADV_MIN), lambda t:
      f"advantages max = min = 0: warn at a step, alert for {t.no_signal_alert_steps}+ consecutive steps",
      f"{SRC_GRPO} (group-normalised advantage); {SRC_METRIC_UTILS}")
def check_no_signal(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    common, zero = _zero_advantages(run, th)
    msg = "all GRPO advantages are 0: every prompt group's responses scored the same, so the policy gradient is zero"
    return _persistent_else_once(common, zero, np.zeros(zero.shape), th,
                                 f"{msg} for {th.no_signal_alert_steps}+ consecutive steps - no learning signal",
                                 f"{msg} at {int(zero.sum())} step(s)",
                                 ("ok", None, None, "some groups have reward variance at every step"))


@rule("no_positive_reward", TAG_SCORE_MAX, (TAG_SCORE_MEAN, TAG_SCORE_MAX), lambda t:
      f"score max <= 0 and mean <= 0: warn at a step, alert for {t.no_signal_alert_steps}+ consecutive steps",
      f"{SRC_METRIC_UTILS}; {SRC_GRPO}")
def check_no_reward(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    mean, mx = run.get(TAG_SCORE_MEAN), run.get(TAG_SCORE_MAX)
    common, ime, imx = np.intersect1d(mean.steps, mx.steps, return_indices=True)
    none = (mx.values[imx] <= 0) & (mean.values[ime] <= 0)
    return _persistent_else_once(common, none, mean.values[ime], th, "no response earned a positive score for "
                                 f"{th.no_signal_alert_steps}+ steps (critic/score/max <= 0): check the reward "
                                 "function and the answer format", "no response earned a positive score at "
                                 f"{int(none.sum())} step(s) (critic/score/max <= 0)",
                                 ("ok", None, _last_finite(mean), "positive scores at every step"))


@rule("zero_variance_groups", "rollout dumps (--rollout-dir)", (), lambda t:
      f"share of groups with zero score variance: warn >= {t.zero_var_group_frac_warn:g}, alert = 1",
      f"{SRC_GRPO}; {SRC_DAPO} (dynamic sampling); {SRC_TRAINER} (_dump_generations)", needs_rollouts=True)
def check_zero_var_groups(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    groups = {step: g[:2] for step, g in (ctx.rollout_groups or {}).items() if g[0]}
    fired = [("alert" if z == n else "warn", step, z / n, n, z) for step, (n, z) in sorted(groups.items())
             if z == n or z / n >= th.zero_var_group_frac_warn]
    if fired:  # the first step at the worst level
        level, step, frac, n, z = max(fired, key=lambda f: SEVERITY[f[0]])
        return (level, step, frac, f"{z}/{n} prompt groups had zero reward variance (all responses scored "
                "the same): they give no GRPO gradient - harder/easier data or more samples per prompt")
    if not groups:
        return "ok", None, None, "no prompt group of 2+ responses in the rollout dumps"
    mean = float(np.mean([z / n for n, z in groups.values()]))
    return "ok", None, mean, f"mean share of zero-variance groups {fmt(mean)}"


jump_rule("throughput_drop", TAG_THROUGHPUT, False, "perf_drop_factor perf_window perf_min_history",
          "throughput fell to {v} tokens/s per device, {ratio:.2f}x the trailing median {med} (contention, swapping, "
          "longer responses?)",
          lambda s, th: (_median(s), f"median {fmt(_median(s))} tokens/s per device (higher is better)"),
          f"{SRC_GUIDE}; {SRC_METRIC_UTILS}", also="; else report the median (higher is better)")


@rule("mfu", TAG_MFU, (TAG_MFU,), lambda t: "informational: median (higher is better); info when 0 (not "
      f"measured) or on a CPU run (trainer.device cpu, or {TAG_MAX_MEM} 0 at every step: not meaningful)",
      f"{SRC_GUIDE}; {SRC_FSDP_WORKERS}")
def check_mfu(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    m = _median(run.get(TAG_MFU))
    if m == 0:
        return ("info", None, 0.0, "MFU 0: verl's flops counter has no peak-FLOPS entry for this device "
                "(get_device_flops returns inf, e.g. CPU) - not measured")
    if m is not None and ctx.on_cpu:
        return ("info", None, m, f"median actor MFU {fmt(100 * m)} % is not meaningful on a CPU run: verl divides "
                "by an accelerator's peak FLOPS")
    return "ok", None, m, f"median actor MFU {fmt(None if m is None else 100 * m)} % (higher is better)"


MISMATCH = "the rollout is not generating with the actor's weights"


@rule("rollout_actor_mismatch", TAG_ROLLOUT_PEARSON, (), lambda t:
      f"alert \"{MISMATCH}\" at the first step with {TAG_ROLLOUT_PEARSON} < {t.rollout_pearson_min:g}, or, in a "
      f"run without the old-log-prob pass, {TAG_PPO_KL} > {t.rollout_ppo_kl_max:g}; {TAG_ROLLOUT_PROBS_DIFF} is "
      "quoted (logged with rollout.calculate_log_probs=True)", "verl 0.6.0 / 0.9.1 verl/utils/debug/metrics.py; "
      "the recorded CPU runs in tests/data/health_*", needs_any=(TAG_ROLLOUT_PEARSON, TAG_PPO_KL))
def check_rollout_mismatch(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    pearson = run.get(TAG_ROLLOUT_PEARSON)
    tag, below, limit = (TAG_ROLLOUT_PEARSON, True, th.rollout_pearson_min) if pearson is not None else \
        (TAG_PPO_KL, False, th.rollout_ppo_kl_max)
    s = run.get(tag)
    with np.errstate(invalid="ignore"):
        i = None if s is None else _first(s.finite & (s.values < limit if below else s.values > limit))
    if i is not None:
        step, val = _at(s, i)
        others = "; ".join(f"{t} {fmt(float(x.values[x.steps == step][0]))}" for t in ROLLOUT_TAGS
                           if t != tag and (x := run.get(t)) is not None and np.any(x.steps == step))
        return ("alert", step, val, f"{MISMATCH}: {tag} {fmt(val)} {'<' if below else '>'} {limit:g} at step {step}"
                f"{' (' + others + ')' if others else ''} - the weight sync from the actor to the rollout "
                "failed or skipped weights (e.g. a tied lm_head, vllm-ascend's NZ layout: VLLM_ASCEND_ENABLE_NZ=0)",
                tag)
    ranges = [(t, x.values[x.finite]) for t in ROLLOUT_TAGS + ((TAG_PPO_KL,) if pearson is None else ())
              if (x := run.get(t)) is not None and x.finite.any()]
    return ("ok", None, _last_finite(pearson), "rollout and actor agree: " + "; ".join(
        f"{t} {fmt(float(v.min()))}..{fmt(float(v.max()))}" for t, v in ranges))


@rule("val_drop_after_first_update", "<val tag>", (), lambda t:
      f"warn if the first validation after step 0 is below {t.val_first_drop_frac:g}x the step-0 validation "
      f"and at least {t.val_first_drop_abs:g} lower", "thresholds heuristic, see below", needs_val=True)
def check_val_drop_first_update(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    val = run.get(ctx.val_tag)
    steps, vals = val.steps[val.finite], val.values[val.finite]
    after = np.flatnonzero(steps > 0)
    if not np.any(steps == 0) or not after.size:
        why = "no validation at step 0 (trainer.val_before_train=False): nothing to compare" \
            if not np.any(steps == 0) else "no validation after step 0 yet"
        return "ok", None, None, why, ctx.val_tag
    v0, v1, s1 = float(vals[steps == 0][0]), float(vals[after[0]]), int(steps[after[0]])
    if v1 < th.val_first_drop_frac * v0 and v0 - v1 >= th.val_first_drop_abs:
        return ("warn", s1, v1, f"validation fell from {fmt(v0)} at step 0 to {fmt(v1)} at step {s1}, the first "
                f"validation after an update (below {th.val_first_drop_frac:g}x and {fmt(v0 - v1)} lower): the first "
                "updates cannot move the policy that far at the recipe's lr - check that the rollout generates with "
                "the actor's weights (rollout_actor_mismatch) and that the checkpoint and chat template are the "
                "model's", ctx.val_tag)
    return ("ok", None, v1, f"{fmt(v0)} at step 0 -> {fmt(v1)} at step {s1}, the first validation after an update",
            ctx.val_tag)


@rule("zero_reward_from_start", TAG_SCORE_MEAN, (TAG_SCORE_MEAN,), lambda t:
      f"alert if exactly 0 at each of the first {t.zero_reward_steps} steps; names the reward file and function "
      f"from the run's Hydra config ({HYDRA_CONFIG} beside the log folder, or --config)",
      f"{SRC_METRIC_UTILS}; verl 0.6.0 / 0.9.1 reward loading (custom_reward_function, "
      "reward.custom_reward_function)")
def check_zero_reward_from_start(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    s = run.get(TAG_SCORE_MEAN)
    n = max(1, th.zero_reward_steps)
    reward = ctx.config.reward if ctx.config is not None else \
        "the configured reward (no Hydra config found beside the log)"
    if len(s) < n:
        return "ok", None, _last_finite(s), f"fewer than {n} steps logged: not judged yet"
    if np.all(s.values[:n] == 0):
        return ("alert", int(s.steps[n - 1]), 0.0, f"{TAG_SCORE_MEAN} exactly 0 at each of the first {n} steps "
                f"({', '.join(str(int(x)) for x in s.steps[:n])}): no response was paid by {reward}. Either the "
                "reward is silently broken (a timeout raising off the main thread, a reward key this verl ignores, "
                "a wrong function name) or the model never answers correctly (as SmolLM2-135M on the cpu "
                "profile): score a known-correct response with that function")
    return ("ok", None, _last_finite(s), f"non-zero training reward within the first {n} steps "
            f"({reward if ctx.config is not None else 'reward function unknown'})")


def kendall_tau(y: np.ndarray) -> float:
    """Kendall's tau-a of (position, y): +1 rising in every pair, -1 falling in every pair."""
    return float(np.triu(np.sign(y[None, :] - y[:, None]), 1).sum() / (y.size * (y.size - 1) / 2))


def theil_sen(x: np.ndarray, y: np.ndarray) -> Tuple[float, float]:
    """(slope, intercept) of the Theil-Sen line: the median pairwise slope, robust to outliers."""
    i, j = np.triu_indices(x.size, 1)
    slope = float(np.median((y[j] - y[i]) / (x[j] - x[i])))
    return slope, float(np.median(y - slope * x))


@rule("response_length_decline", TAG_RESP_LEN, (TAG_RESP_LEN,), lambda t:
      f"warn when, over the last {t.resp_decline_window}, {2 * t.resp_decline_window}, "
      f"{4 * t.resp_decline_window} ... logged steps (a window of k steps tried every k/{t.resp_decline_window} "
      f"steps), Kendall's tau <= {t.resp_decline_tau:g}, the Theil-Sen line falls >= {t.resp_decline_frac:g} of "
      f"its start and no single step's fall exceeds {t.resp_decline_step_share:g} of that",
      "hkust-nlp/simpleRL-reason issues #65 (Qwen2.5-1.5B on MATH: response_length/mean fell) and #90 (it fell "
      f"from over-long, cut-off step-0 responses); {SRC_METRIC_UTILS}")
def check_resp_decline(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    s = run.get(TAG_RESP_LEN)
    x, y = s.steps[s.finite].astype(np.float64), s.values[s.finite]
    w = max(3, th.resp_decline_window)
    if y.size < w:
        return "ok", None, _last_finite(s), f"fewer than {w} steps: no trend check yet"
    for end in range(w, y.size + 1):
        for size in (w << k for k in range((end // w).bit_length())):  # W, 2W, 4W ... <= end
            if (end - w) % (size // w) == 0 and (tau := kendall_tau(y[end - size:end])) <= th.resp_decline_tau:
                xs, ys = x[end - size:end], y[end - size:end]  # a window of k steps tried every k/W steps
                slope, icpt = theil_sen(xs, ys)
                start, stop = slope * xs[0] + icpt, slope * xs[-1] + icpt
                fall = start - stop
                if start > 0 and fall >= th.resp_decline_frac * start and \
                        float(np.max(-np.diff(ys), initial=0.0)) <= th.resp_decline_step_share * fall:
                    return ("warn", int(xs[-1]), float(ys[-1]), f"mean response length fell steadily over steps "
                            f"{int(xs[0])}-{int(xs[-1])}: {fmt(start)} -> {fmt(stop)} tokens on the Theil-Sen line "
                            f"(-{100 * fall / start:.0f} %), Kendall's tau {tau:.2f}. Known on Qwen2.5-1.5B with MATH: "
                            "read some responses - cut-off step-0 responses (missing stop tokens, "
                            "response_length/clip_ratio), a length bias of the loss aggregation, or a reward that "
                            "pays short answers")
    return "ok", None, _last_finite(s), f"no steady fall over {w}+ steps"


@rule("memory_growth", TAG_MAX_MEM_RESERVED, (), lambda t:
      f"warn when, after the first {t.mem_warmup_steps} logged steps, {t.mem_min_steps}+ steps of "
      f"{', '.join(MEMORY_TAGS)} (verl 0.9.1: actor/perf/*) rise with Kendall's tau >= {t.mem_growth_tau:g} "
      f"and their Theil-Sen line grows >= {t.mem_growth_gb:g} GB and >= {t.mem_growth_frac:g} of its start",
      f"{SRC_FSDP_WORKERS}; verl 0.9.1 verl/workers/engine_workers.py; vllm-project/vllm-ascend#9563",
      needs_any=MEMORY_TAGS)
def check_memory_growth(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    """Of the memory tags that grew steadily, the one that grew most relative to its start."""
    fits = {}
    for tag in MEMORY_TAGS:
        if (s := run.get(tag)) is None:
            continue
        x, y = s.steps[s.finite][th.mem_warmup_steps:].astype(np.float64), s.values[s.finite][th.mem_warmup_steps:]
        if y.size >= max(3, th.mem_min_steps):
            slope, icpt = theil_sen(x, y)
            fits[tag] = (kendall_tau(y), slope * x[0] + icpt, slope * (x[-1] - x[0]), int(x[0]), int(x[-1]))
    if not fits:
        return ("ok", None, None, f"fewer than {th.mem_min_steps} steps after the first {th.mem_warmup_steps}: "
                "no trend check yet")
    grown = {t: f for t, f in fits.items() if f[0] >= th.mem_growth_tau and f[2] >= th.mem_growth_gb
             and f[2] >= th.mem_growth_frac * f[1]}
    if not grown:
        return "ok", None, None, "no steady growth: " + "; ".join(
            f"{run.logged(t)} {f[2]:+.2f} GB over steps {f[3]}-{f[4]} (tau {f[0]:.2f})" for t, f in fits.items())
    tag, (tau, start, growth, first, last) = max(grown.items(), key=lambda tf: tf[1][2] / max(tf[1][1], 1e-9))
    return ("warn", last, _last_finite(run.get(tag)), f"{'host' if tag == TAG_CPU_MEM else 'device'} memory grew "
            f"steadily over steps {first}-{last}: {fmt(start)} -> {fmt(start + growth)} GB on the Theil-Sen line "
            f"({growth / (last - first):+.2f} GB per step), Kendall's tau {tau:.2f}. Likely memory not fully freed "
            "between steps, e.g. by the rollout's sleep/wake-up (vllm-ascend#9563 on NPU); it ends in out-of-memory "
            "hours in: save checkpoints often (trainer.save_freq) and relaunch, which resumes with fresh processes; "
            "try a newer vllm-ascend / vLLM, or a lower rollout gpu_memory_utilization to last longer",
            run.logged(tag))


@rule("empty_responses", TAG_RESP_MIN, (TAG_RESP_MIN,), lambda t: f"warn when {TAG_RESP_MIN} is 0 at any step; "
      f"quotes {TAG_ABORTED} (verl 0.9.1) and the rollout dumps' empty outputs (--rollout-dir)",
      f"{SRC_METRIC_UTILS}; verl-project/verl#6310")
def check_empty_responses(run: Run, th: Thresholds, ctx: Context) -> CheckResult:
    s = run.get(TAG_RESP_MIN)
    steps = s.steps[s.values == 0]
    if not steps.size:
        return "ok", None, _last_finite(s), "no empty response: every step's shortest has a token or more"
    share = run.get(TAG_ABORTED)
    share = share.values[share.steps == steps[0]] if share is not None else np.array([])
    dumped = sum(g[2] for step, g in (ctx.rollout_groups or {}).items() if step in steps)
    return ("warn", int(steps[0]), 0.0, f"{len(steps)} step(s) had an empty response ({TAG_RESP_MIN} 0"
            f"{f'; {fmt(100 * float(share[0]))} % of step {steps[0]} ({TAG_ABORTED})' if share.size else ''}"
            f"{f'; {dumped} empty outputs in the rollout dumps' if dumped else ''}): verl places a response's "
            "reward at its last token, index -1 for an empty one, i.e. the last padding token, and GRPO sums "
            "token rewards without the response mask, so it leaks into its group's advantages (verl#6310; "
            "reward_manager/naive.py and core_algos.py of 0.6.0 and 0.9.1). Read those responses "
            "(trainer.rollout_data_dir) and make sure none comes back without a token: an aborted or failed "
            "generation")


def evaluate(run: Run, th: Thresholds, ctx: Context, rules: Sequence[Rule] = RULES) -> List[Finding]:
    """Every rule on ``run``; a rule whose metrics are absent is ``skipped``."""
    out = []
    for r in rules:
        tag = (ctx.val_reward_tag or ctx.val_tag or "val-core/<data_source>/reward/mean@1") if r.needs_val else r.tag
        missing = [t for t in r.needs if run.get(t) is None]
        if r.needs_val and run.get(ctx.val_reward_tag) is None:
            missing.append("val-core/*/mean@*")
        if r.needs_rollouts and not ctx.rollout_groups:
            missing.append("--rollout-dir dumps")
        if r.needs_any and not any(run.get(t) is not None for t in r.needs_any):
            missing.append("actor/* metrics" if r.needs_any is NONFINITE_TAGS else " or ".join(r.needs_any))
        if missing:
            out.append(Finding(r.id, tag, "skipped", None, None, f"skipped (no data: {', '.join(missing)})",
                               r.source))
            continue
        level, step, value, message, *more = r.check(run, th, ctx)
        out.append(Finding(r.id, more[0] if more and more[0] else tag, level, step, value, message, r.source))
    return out


def rules_markdown() -> str:
    """The rules and thresholds as markdown (``--list-rules``; maintenance/sync_readme.py copies it into
    docs/health_rules.md), with the defaults of DEFAULT_THRESHOLDS."""
    th = DEFAULT_THRESHOLDS
    return "\n".join(["| id | metric | fires when (defaults) | source |", "|---|---|---|---|",
                      *(f"| `{r.id}` | `{r.tag}` | {r.describe(th)} | {r.source} |" for r in RULES), "",
                      "Thresholds, fields of `Thresholds` (override with `--set NAME=VALUE`): " + ", ".join(
                          f"`{f.name}` {getattr(th, f.name)!r}" for f in dataclasses.fields(Thresholds)) + "."])
