"""The health figures: a grid of the key curves (``health_grid.png``) and one PNG per curve. Each panel
shades what its rules read as ok / info / warn / alert, lists their verdicts (level, rule, step),
circles every warn and alert on the curve at the step it fired, and says "not measured" where verl
logs 0 for a metric it cannot measure instead of drawing the zeros."""

from __future__ import annotations

import io
import math
import os
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from .read import (MEMORY_TAGS, TAG_CLIPFRAC, TAG_ENTROPY, TAG_GRAD_NORM, TAG_KL_LOSS, TAG_MAX_MEM,
                   TAG_MAX_MEM_RESERVED, TAG_MFU, TAG_PG_LOSS, TAG_PPO_KL, TAG_RESP_CLIP, TAG_RESP_LEN,
                   TAG_ROLLOUT_PEARSON, TAG_SCORE_MEAN, TAG_THROUGHPUT, VAL_MEAN_RE, Run)
from .report import step_range
from .rules import SEVERITY, Context, Finding, Thresholds, all_zero, baseline, entropy_limits, fmt

#: how to read a panel, under every figure
KEY = ("shaded where the rules read a value as ok (green), info (blue), warn (orange) or alert (red); warn and alert "
       "circled where they first fired; \"passed: <rule>\": that check found nothing wrong")
COLORS = {"ok": "tab:green", "info": "tab:blue", "warn": "darkorange", "alert": "red", "early": "dimgray"}
#: words of an "ok" finding whose rule had too few steps to judge: the panel says so instead of "ok"
TOO_EARLY = ("fewer than", "too early", "not judged", "check yet")
INF = math.inf
#: (low, high, level the rules give a value there, widen the y-axis to show the whole band)
Band = Tuple[float, float, str, bool]


def bands(edges: Sequence[float], levels: str, shown: Optional[str] = "ok") -> List[Band]:
    """The bands between consecutive ``edges``, the i-th at the i-th of ``levels``; the ``shown`` ones widen the
    y-axis to show them whole."""
    return [(lo, hi, level, level == shown) for lo, hi, level in zip(edges, edges[1:], levels.split())]


def entropy_bands(th: Thresholds, run: Run) -> List[Band]:
    base = baseline(s, th) if (s := run.get(TAG_ENTROPY)) is not None else None
    if base is None:
        return []
    alert, warn, warn_high = entropy_limits(base, th)
    return bands((-INF, alert, warn, th.entropy_low, th.entropy_high, warn_high, INF), "alert warn info ok info warn")


@dataclass(frozen=True)
class Panel:
    title: str
    tags: Tuple[str, ...]
    ylabel: str
    rules: Tuple[str, ...]
    bands: Sequence[Band] = ()
    #: tags logged as 0 when verl cannot measure them (no accelerator, no peak FLOPS)
    zero_unmeasured: Tuple[str, ...] = ()


def panels(run: Run, th: Thresholds, ctx: Context) -> List[Panel]:
    """The key curves, in reading order, with the tags of each that this run logged; a panel whose
    tags are all absent is left out."""
    val = tuple(t for t in dict.fromkeys([ctx.val_reward_tag, ctx.val_tag]) if t)
    kl_warn, kl_alert = th.kl_loss_warn / ctx.loss_scale, th.kl_loss_alert / ctx.loss_scale  # on the logged scale
    every = [
        Panel("actor/entropy", (TAG_ENTROPY,), "nats/token", ("entropy_collapse", "entropy_high"),
              entropy_bands(th, run)),
        Panel("actor/kl_loss", (TAG_KL_LOSS,), "nats/token (logged)", ("kl_high", "kl_low"),
              bands((-INF, kl_warn, kl_alert, INF), "ok warn alert", None)),
        Panel("actor/pg_loss", (TAG_PG_LOSS,), "loss", ("pg_loss_nan",)),
        Panel("actor/pg_clipfrac", (TAG_CLIPFRAC,), "fraction", ("clipfrac_high", "clipfrac_low"),
              bands((-INF, th.clipfrac_too_low, th.clipfrac_healthy_high, th.clipfrac_violent, INF),
                    f"{'warn' if ctx.clipfrac_band_applies else 'info'} ok warn alert")),
        Panel("actor/grad_norm", (TAG_GRAD_NORM,), "L2 norm", ("grad_norm_spike", "grad_norm_band"),
              bands((-INF, th.grad_norm_band_low, th.grad_norm_band_high, INF), "info ok warn")),
        Panel("response_length/mean", (TAG_RESP_LEN,), "tokens",
              ("response_length_rise", "response_length_fall", "response_length_decline", "empty_responses")),
        Panel("response_length/clip_ratio", (TAG_RESP_CLIP,), "fraction", ("response_truncation",),
              bands((0.0, th.resp_clip_ratio_warn, INF), "ok warn")),
        Panel("reward: train vs validation", (TAG_SCORE_MEAN, *val), "score",
              ("zero_reward_from_start", "no_positive_reward", "no_learning_signal", "zero_variance_groups",
               "val_train_gap", "reward_up_val_down", "val_regression", "val_drop_after_first_update")),
        Panel("rollout vs actor: Pearson of token probabilities", (TAG_ROLLOUT_PEARSON,), "correlation",
              ("rollout_actor_mismatch",), bands((-INF, th.rollout_pearson_min, 1.0), "alert ok"))
        if run.get(TAG_ROLLOUT_PEARSON) is not None else
        Panel("rollout vs actor: actor/ppo_kl (no old-log-prob pass)", (TAG_PPO_KL,), "nats/token",
              ("rollout_actor_mismatch",), bands((-INF, th.rollout_ppo_kl_max, INF), "ok alert")),
        Panel("perf/throughput", (TAG_THROUGHPUT,), "tokens/s per device", ("throughput_drop",)),
        Panel("perf/mfu/actor", (TAG_MFU,), "fraction of peak", ("mfu",), zero_unmeasured=(TAG_MFU,)),
        Panel("memory: device peak, host used", MEMORY_TAGS,
              "GB (device: the actor worker's RSS)" if ctx.on_cpu else "GB", ("memory_growth",),
              zero_unmeasured=(TAG_MAX_MEM, TAG_MAX_MEM_RESERVED)),
    ]
    return [p for p in every if any(run.get(t) is not None for t in p.tags)]


def unmeasured(run: Run, ctx: Context, panel: Panel) -> Dict[str, str]:
    """{tag: why it was not measured} for the panel's logged tags that carry no measurement."""
    out = {}
    for tag in (t for t in panel.zero_unmeasured if run.get(t) is not None):
        if tag == TAG_MFU and ctx.on_cpu:
            out[tag] = "a CPU run: verl divides by an accelerator's peak FLOPS"
        elif all_zero(run.get(tag)) is not False:
            out[tag] = "verl logs 0 at every step: " + ("no peak FLOPS known for this device" if tag == TAG_MFU
                                                        else "no accelerator memory")
    return out


def legend_name(run: Run, tag: str) -> str:
    m = VAL_MEAN_RE.match(tag)
    return f"val-{m['sec']} {m['var']}/mean@{m['n']}" if m else run.logged(tag)


#: (marker, line style, marker size, hollow) per series: series drawn on top of each other stay
#: visible, each later one a larger hollow marker around the earlier.
SERIES_STYLES = (("o", "-", 3.5, False), ("s", "--", 6.5, True), ("^", ":", 9.0, True), ("D", "-.", 11.0, True))


def verdict_lines(panel: Panel, findings: Sequence[Finding], why: bool = True) -> List[Tuple[str, str]]:
    """(text, level) per line: each rule that fired or informs, worst first (an info one with its reason, when
    ``why``: a warn or alert is circled on the curve), then the ok ones, then those that had too few steps to judge."""
    mine = [f for f in findings if f.rule in panel.rules or (f.rule == "nonfinite_metrics" and f.tag in panel.tags)]
    lines = [(f"{f.level.upper()} {f.rule}" + (f" at step {f.step}" if f.step is not None else "")
              + (": " + textwrap.shorten(f.message, 110, placeholder=" ...") if why and f.level == "info" else ""),
              f.level) for f in sorted(mine, key=lambda f: -SEVERITY[f.level]) if f.level in ("info", "warn", "alert")]
    early = [f.rule for f in mine if f.level == "ok" and any(w in f.message for w in TOO_EARLY)]
    ok = [f.rule for f in mine if f.level == "ok" and f.rule not in early]
    return (lines + ([("passed: " + ", ".join(ok), "ok")] if ok else [])
            + ([("too few steps to judge: " + ", ".join(early), "early")] if early else []))


def draw(ax, run: Run, panel: Panel, findings: Sequence[Finding], th: Thresholds, ctx: Context,
         steps: Tuple[float, float]) -> None:
    """One panel, its x-axis over ``steps`` (first, last), the same for every panel of the run."""
    from matplotlib.ticker import MaxNLocator

    missing = unmeasured(run, ctx, panel)
    tags = [t for t in panel.tags if run.get(t) is not None and t not in missing]
    for k, tag in enumerate(tags):
        s = run.get(tag)
        marker, style, size, hollow = SERIES_STYLES[k % len(SERIES_STYLES)]
        label = legend_name(run, tag)
        same = next((d for d in tags[:k] if np.array_equal(run.get(d).steps, s.steps)
                     and np.array_equal(run.get(d).values, s.values, equal_nan=True)), None)
        if same is not None:
            label += f" (identical to {legend_name(run, same)})"
        elif len(s) > 1 and s.finite.all() and np.all(s.values == s.values[0]):
            label += f" ({fmt(float(s.values[0]))} at every step)"
        ax.plot(s.steps, s.values, linestyle=style, linewidth=1.3, label=label if len(panel.tags) > 1 else None,
                marker=marker if len(s) <= 40 or k else None, markersize=size,
                markerfacecolor="none" if hollow else None, markeredgewidth=1.2 if hollow else None)
    bands = panel.bands if tags else []
    ax.relim()
    ax.autoscale_view()
    ylo, yhi = ax.get_ylim() if tags else (0.0, 1.0)
    for lo, hi, _, include in bands:
        if include:
            lo, hi = (lo if math.isfinite(lo) else min(ylo, hi)), (hi if math.isfinite(hi) else max(yhi, lo))
            pad = 0.05 * (max(yhi, hi) - min(ylo, lo))
            ylo, yhi = min(ylo, lo - pad), max(yhi, hi + pad)
    if ylo == yhi:
        ylo, yhi = ylo - 1, yhi + 1
    unmeasured_by_why = {why: [legend_name(run, t) for t in missing if missing[t] == why] for why in missing.values()}
    notes = [(line, level) for text, level in verdict_lines(panel, findings, why=bool(tags)) + [
        (f"not measured: {', '.join(names)}, {why}", "info") for why, names in unmeasured_by_why.items()]
        for line in textwrap.wrap(text, 72, subsequent_indent="  ")]
    bad = {tag: ~run.get(tag).finite for tag in tags}
    entries = (len(tags) if len(panel.tags) > 1 else 0) + any(m.any() for m in bad.values())
    # the notes above the data and the legend below it: fractions of the axes' height
    above, below = 0.09 * len(notes) + 0.03, (0.07 * entries + 0.04 if entries else 0.0)
    span = (yhi - ylo) / max(0.25, 1 - above - below)
    for tag, m in bad.items():
        if m.any():
            ax.plot(run.get(tag).steps[m], np.full(int(m.sum()), ylo), "x", color="red", markersize=8,
                    label="non-finite")
    bottom, top = ylo - below * span, yhi + above * span
    for lo, hi, level, _ in bands:
        if hi > bottom and lo < top:
            ax.axhspan(max(lo, bottom), min(hi, top), color=COLORS[level], alpha=0.12)
    ax.set_ylim(bottom, top)
    for f in (f for f in findings if f.level in ("warn", "alert") and f.step is not None):
        target = f.tag if f.tag in tags else (tags[0] if tags and f.rule != "nonfinite_metrics" else None)
        if target is not None and f.rule in (*panel.rules, "nonfinite_metrics"):
            at = run.get(target).values[run.get(target).steps == f.step]
            ax.axvline(f.step, color=COLORS[f.level], linestyle="--", linewidth=1, alpha=0.7)
            ax.plot([f.step], [float(at[0]) if at.size and math.isfinite(at[0]) else ylo], marker="o", markersize=13,
                    markerfacecolor="none", markeredgecolor=COLORS[f.level], markeredgewidth=2, linestyle="none")
    for k, (text, level) in enumerate(notes):
        ax.text(0.015, 0.975 - 0.09 * k, text, transform=ax.transAxes, fontsize=6.5, va="top", color=COLORS[level],
                fontweight="bold" if level in ("warn", "alert") else "normal",
                bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1})
    ax.set_xlim(steps[0] - 0.25, steps[1] + 0.25)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(panel.title, fontsize=9)
    ax.set_xlabel("step", fontsize=8)
    ax.set_ylabel(panel.ylabel, fontsize=8)
    ax.tick_params(labelsize=7)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=6, loc="lower right")
    if not tags:  # nothing measured: no axes to read
        ax.set(xticks=[], yticks=[])


def step_span(run: Run, shown: Sequence[Panel]) -> Tuple[float, float]:
    """The first and last step any shown panel logged (validation may start at step 0)."""
    logged = [s.steps for p in shown for t in p.tags if (s := run.get(t)) is not None and len(s)]
    return (float(min(s[0] for s in logged)), float(max(s[-1] for s in logged))) if logged else (0.0, 1.0)


def pyplot():
    """matplotlib's pyplot drawing off-screen (Agg)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def health_grid(run: Run, findings: Sequence[Finding], th: Thresholds, ctx: Context):
    """The grid of key curves as a matplotlib Figure titled with the experiment's name (None when no
    curve has data)."""
    shown = panels(run, th, ctx)
    if not shown:
        return None
    ncols, nrows = 3, (len(shown) + 2) // 3
    height = 3.4 * nrows + 0.7  # fixed margins in inches (tight_layout costs a second draw)
    fig, axes = pyplot().subplots(nrows, ncols, figsize=(5 * ncols, height), squeeze=False)
    span = step_span(run, shown)
    for ax, panel in zip(axes.flat, shown):
        draw(ax, run, panel, findings, th, ctx, span)
    for ax in list(axes.flat)[len(shown):]:
        ax.set_visible(False)
    counts = {lvl: sum(f.level == lvl for f in findings) for lvl in ("alert", "warn", "info")}
    fig.suptitle(f"GRPO health: {ctx.experiment}", fontsize=12, fontweight="bold")
    log = os.path.relpath(run.path) if Path(os.path.abspath(run.path)).is_relative_to(Path.cwd()) else run.path
    fig.text(0.5, 1 - 0.45 / height, f"log {log}; training steps {step_range(run)}; {counts['alert']} alert, "
             f"{counts['warn']} warn, {counts['info']} info\neach panel lists its rules' verdicts; {KEY}",
             ha="center", va="top", fontsize=8, color="dimgray")
    fig.subplots_adjust(left=0.06, right=0.98, bottom=0.5 / height, top=1 - 1.2 / height, wspace=0.25, hspace=0.5)
    return fig


def render_figures(run: Run, findings: Sequence[Finding], th: Thresholds, ctx: Context) -> Dict[str, bytes]:
    """PNG bytes: ``health_grid.png`` and one ``<title>.png`` per panel."""
    plt = pyplot()

    def png(fig) -> bytes:
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100)
        plt.close(fig)
        return buf.getvalue()

    fig = health_grid(run, findings, th, ctx)
    if fig is None:
        return {}
    out = {"health_grid.png": png(fig)}
    shown = panels(run, th, ctx)
    span = step_span(run, shown)
    for panel in shown:
        fig, ax = plt.subplots(figsize=(6, 4.1))
        fig.subplots_adjust(left=0.14, right=0.97, bottom=0.2, top=0.92)
        fig.text(0.5, 0.01, "\n".join(textwrap.wrap(f"{ctx.experiment}: {KEY}", 110)), ha="center", va="bottom",
                 fontsize=6.5, color="dimgray")
        draw(ax, run, panel, findings, th, ctx, span)
        out[re.sub(r"[^A-Za-z0-9._-]+", "_", panel.title).strip("_") + ".png"] = png(fig)
    return out
