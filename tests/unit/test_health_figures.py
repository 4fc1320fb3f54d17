"""health_report.py's pictures say what its text says: the experiment's name in the grid's title,
every panel listing its rules' verdicts, each warn/alert circled on the curve it concerns at the
step it fired, shading that agrees with the rules, "not measured" instead of zeros verl logs for
what it cannot measure, series drawn over each other told apart, and the zero-gradient
explanation naming its real cause."""

from __future__ import annotations

import pytest

from grpo_math.health import figures, read, rules
from grpo_math.health.report import render_markdown
from conftest import REPO
from test_health_report import _both, _set, report, write_run

pytest.importorskip("matplotlib")


def grid(logdir, *, config=None):
    """(figure, findings, context) of the one run under ``logdir``, as main() builds them."""
    run = read.discover_runs(logdir)[0]
    path = config or read.find_run_config(run)
    ctx = rules.build_context(run, rules.DEFAULT_THRESHOLDS, config=read.read_run_config(path) if path else None)
    findings = rules.evaluate(run, rules.DEFAULT_THRESHOLDS, ctx)
    return figures.health_grid(run, findings, rules.DEFAULT_THRESHOLDS, ctx), findings, ctx


def panels(fig):
    return {ax.get_title(): ax for ax in fig.axes if ax.get_visible()}


def labels(ax):
    """The panel's notes, a wrapped note (continued on indented lines) joined into one."""
    out = []
    for text in (t.get_text() for t in ax.texts):
        if text.startswith(" ") and out:
            out[-1] += " " + text.strip()
        else:
            out.append(text.strip())
    return out


def test_title_names_the_experiment_not_the_log_folder(tmp_path):
    out = tmp_path / "outputs" / "smollm2_135m_math_cpu"
    write_run(out / "tensorboard", steps=3)
    fig, _, ctx = grid(out / "tensorboard")
    assert fig._suptitle.get_text() == "GRPO health: smollm2_135m_math_cpu"
    assert ctx.experiment_note == "the folder holding tensorboard/"
    (out / "hydra" / ".hydra").mkdir(parents=True)
    (out / "hydra" / ".hydra" / "config.yaml").write_text("trainer:\n  experiment_name: my_experiment\n")
    fig, _, ctx = grid(out / "tensorboard")
    assert fig._suptitle.get_text() == "GRPO health: my_experiment"
    assert ctx.experiment_note.startswith("trainer.experiment_name in ")
    md = render_markdown(read.discover_runs(out / "tensorboard")[0], [], ctx)
    assert md.startswith("# GRPO health report: my_experiment\n")
    # verl's own layout, tensorboard_log/<project>/<experiment>
    write_run(tmp_path / "tensorboard_log" / "proj" / "exp7", steps=3)
    fig, _, _ = grid(tmp_path / "tensorboard_log" / "proj" / "exp7")
    assert fig._suptitle.get_text() == "GRPO health: exp7"


def circles(ax):
    return [ln.get_data() for ln in ax.lines if ln.get_marker() == "o" and ln.get_markersize() == 13]


def test_each_panel_lists_its_verdicts_and_circles_warn_and_alert(tmp_path):
    zero_adv = _both(_set("critic/advantages/max", 0.0, 5, 7), _set("critic/advantages/min", 0.0, 5, 7))
    write_run(tmp_path / "run", override=_both(_set("actor/grad_norm", 5.0, 12, 12), zero_adv))
    fig, findings, _ = grid(tmp_path / "run")
    fired = {f.rule: f for f in findings if f.level in ("warn", "alert")}
    assert set(fired) == {"grad_norm_spike", "no_learning_signal"}
    p = panels(fig)
    assert labels(p["actor/grad_norm"]) == ["WARN grad_norm_spike at step 12", "passed: grad_norm_band"]
    # the advantages have no curve: their verdict is on the reward panel, circled at its step
    assert labels(p["reward: train vs validation"])[0] == "ALERT no_learning_signal at step 5"
    info, passed = labels(p["actor/pg_clipfrac"])  # an info verdict says why
    assert info.startswith("INFO clipfrac_low at step 1: clip fraction 0 < 0.05") and passed == "passed: clipfrac_high"
    for title, step, value in (("actor/grad_norm", 12, 5.0), ("reward: train vs validation", 5, None)):
        [(x, y)] = circles(p[title])
        assert list(x) == [step] and (value is None or list(y) == [value])
    for title, ax in p.items():
        assert labels(ax), f"{title}: no verdict"
        if title not in ("actor/grad_norm", "reward: train vs validation"):
            assert not circles(ax) and not any(x.startswith(("WARN", "ALERT")) for x in labels(ax)), title


def shading(ax):
    """{level: [(low, high)]} of the panel's shaded bands."""
    out = {}
    for patch in ax.patches:  # axhspan: a Rectangle (matplotlib >= 3.9) or a Polygon
        ys = [patch.get_y(), patch.get_y() + patch.get_height()] if hasattr(patch, "get_height") else \
            [y for _, y in patch.get_xy()]
        level = next(lvl for lvl, c in figures.COLORS.items() if patch.get_facecolor()[:3] == to_rgb(c))
        out.setdefault(level, []).append((min(ys), max(ys)))
    return out


def to_rgb(color):
    from matplotlib.colors import to_rgb as rgb

    return rgb(color)


def test_recorded_cpu_run_shading_agrees_with_the_rules():
    """The quick start on the current stack: 87.5 % of responses cut at max length (warned), entropy
    above 2 (info: exploring), gradient 0 (info: no advantage), MFU 0 (not measured)."""
    fig, findings, ctx = grid(REPO / "tests" / "data" / "health_cpu_current" / "tensorboard")
    p = panels(fig)
    # one x-axis for every panel: validation starts at step 0, the training metrics at 1
    assert {ax.get_xlim() for ax in p.values()} == {(-0.25, 2.25)}
    assert labels(p["response_length/clip_ratio"]) == ["WARN response_truncation at step 1"]
    assert shading(p["response_length/clip_ratio"])["warn"][0][0] == pytest.approx(0.2)
    assert labels(p["actor/entropy"])[0] == "INFO entropy_high at step 1: exploring (>= 2) since the start"
    assert any(lo == pytest.approx(2.0) for lo, _ in shading(p["actor/entropy"])["info"])
    assert labels(p["actor/grad_norm"])[0].startswith(  # grad_norm 0, and why
        "INFO grad_norm_band: median 0 below the guide's 0.1-1: at 2 of 2 steps every GRPO advantage was 0")
    assert shading(p["actor/grad_norm"])["info"][0][1] == pytest.approx(0.1)
    assert labels(p["perf/mfu/actor"])[-1].startswith("not measured: perf/mfu/actor, a CPU run")
    assert not p["perf/mfu/actor"].lines
    assert ctx.stack == "verl 0.9.x"


def test_mfu_not_measured_on_cpu(tmp_path):
    write_run(tmp_path / "cpu", steps=3, override=_set("perf/max_memory_allocated_gb", 0.0, 1))
    write_run(tmp_path / "gpu", steps=3, override=_set("perf/max_memory_allocated_gb", 30.0, 1))
    cpu = panels(grid(tmp_path / "cpu")[0])["perf/mfu/actor"]
    assert not cpu.lines and labels(cpu)[-1].startswith("not measured: perf/mfu/actor, a CPU run")
    memory = panels(grid(tmp_path / "cpu")[0])["memory: device peak, host used"]
    assert any(x.startswith("not measured: perf/max_memory_allocated_gb") for x in labels(memory))
    gpu = panels(grid(tmp_path / "gpu")[0])["perf/mfu/actor"]
    assert len(gpu.lines) == 1 and not any(x.startswith("not measured") for x in labels(gpu))


def test_identical_series_are_told_apart(tmp_path):
    """The CPU quick start: training score and both validation tags 0 throughout."""
    zero = _both(_set("critic/score/mean", 0.0, 1), _set("critic/score/max", 0.0, 1))
    w = write_run(tmp_path / "run", steps=2, override=zero, val=None, close=False)
    acc = "val-core/DigitalLearningGmbH/MATH-lighteval/acc/mean@1"
    aux = "val-aux/DigitalLearningGmbH/MATH-lighteval/reward/mean@1"
    for tag in (acc, aux):
        for step in (0, 2):
            w.add_scalar(tag, 0.0, step)
    w.close()
    fig, _, ctx = grid(tmp_path / "run")
    assert ctx.val_tag == acc and ctx.val_reward_tag == aux
    ax = panels(fig)["reward: train vs validation"]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["critic/score/mean (0 at every step)", "val-aux reward/mean@1 (0 at every step)",
                      "val-core acc/mean@1 (identical to val-aux reward/mean@1)"]
    styles = [(ln.get_marker(), ln.get_linestyle(), ln.get_markersize()) for ln in ax.lines[:3]]
    assert len(set(styles)) == 3  # each its own marker, line style and size


def test_zero_gradient_explained_by_equal_rewards(tmp_path):
    zero = _both(_set("critic/score/mean", 0.0, 1), _set("critic/score/max", 0.0, 1),
                 _set("critic/score/min", 0.0, 1), _set("critic/advantages/max", 0.0, 1),
                 _set("critic/advantages/min", 0.0, 1), _set("actor/grad_norm", 0.0, 1))
    write_run(tmp_path / "run", steps=2, override=zero, val=lambda s: 0.0)
    _, entries = report(tmp_path / "run")
    msg = entries["grad_norm_band"]["message"]
    assert entries["grad_norm_band"]["level"] == "info"
    assert "at 2 of 2 steps every GRPO advantage was 0" in msg and "every response of the step scored 0" in msg
    assert "exactly 0" in msg and "lr 1e-6" not in msg and "usual" not in msg
    # small but non-zero gradients with a reward signal: the learning rate is the explanation
    write_run(tmp_path / "small", override=_set("actor/grad_norm", 0.05, 1))
    _, entries = report(tmp_path / "small")
    assert "with non-zero advantages" in entries["grad_norm_band"]["message"]
    assert "usual at actor lr 1e-06" in entries["grad_norm_band"]["message"]


def test_rollout_mismatch_marked_on_the_agreement_curve(tmp_path):
    def broken_sync(s, m):
        m[read.TAG_ROLLOUT_PEARSON] = 0.9995 if s < 14 else -0.03
    write_run(tmp_path / "run", override=broken_sync)
    fig, _, _ = grid(tmp_path / "run")
    assert labels(panels(fig)["rollout vs actor: Pearson of token probabilities"]) == \
        ["ALERT rollout_actor_mismatch at step 14"]
