"""The side-by-side step tables of benchmarks/bench_cpu_run.py (--compare, --compare-stacks), on synthetic
TensorBoard scalars and fake launcher runs."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pytest

from benchmarks.bench_cpu_run import side_by_side


def scalars(step_s: dict[int, float], gen_s: dict[int, float]) -> dict[str, dict[int, float]]:
    return {"timing_s/step": step_s, "timing_s/gen": gen_s}


def test_one_global_step_is_compared_and_the_ratio_is_ref_over_new():
    runs = {"ref": [(scalars({1: 300.0}, {1: 60.0}), None, None)],
            "new": [(scalars({1: 100.0, 2: 50.0}, {1: 20.0, 2: 10.0}), None, None)]}
    text = side_by_side(runs, "header", step=1)
    assert "| gen | 60.0 | 20.0 | 3.0x |" in text and "| step | 300.0 | 100.0 | 3.0x |" in text
    assert "wall time" not in text  # unknown for runs that were only read


def test_without_a_step_each_phase_is_the_mean_over_steps_and_runs():
    runs = {"ref": [(scalars({1: 300.0, 2: 100.0}, {1: 60.0}), 900.0, 2**30)],
            "new": [(scalars({1: 100.0, 2: 50.0}, {1: 20.0, 2: 10.0}), 300.0, 2**31)]}
    text = side_by_side(runs, "header")
    assert "| step | 200.0 | 75.0 | 2.7x |" in text and "| gen | 60.0 | 15.0 | 4.0x |" in text
    assert "| wall time, launcher start to exit (s) | 900 | 300 | 3.0x |" in text


# --compare-stacks ---------------------------------------------------------------------------
REFERENCE = {"timing_s/step": {1: 100.0, 2: 60.0}, "timing_s/gen": {1: 40.0, 2: 30.0},
             "timing_s/generate_sequences": {1: 35.0, 2: 25.0}, "timing_s/update_actor": {1: 20.0, 2: 20.0},
             "timing_s/testing": {2: 10.0}, "timing_s/save_checkpoint": {2: 6.0},
             "response_length/mean": {1: 100.0, 2: 90.0}, "critic/score/mean": {1: 0.0, 2: 0.0}}
CURRENT = {"timing_s/step": {1: 50.0, 2: 40.0}, "timing_s/gen": {1: 20.0, 2: 10.0},
           "timing_s/agent_loop/generate_sequences/max": {1: 15.0, 2: 5.0},
           "timing_s/agent_loop/generate_sequences/mean": {1: 9.0, 2: 3.0},
           "timing_s/update_actor": {1: 10.0, 2: 10.0}, "timing_s/update_weights": {1: 2.0, 2: 2.0},
           "timing_s/testing": {2: 8.0}, "timing_s/save_checkpoint": {2: 4.0},
           "response_length/mean": {1: 110.0, 2: 70.0}, "critic/score/mean": {1: 0.125, 2: 0.0}}


def test_the_stack_table_maps_verl_0_6_phases_to_verl_0_9_ones():
    from benchmarks.bench_cpu_run import stack_table

    text = stack_table({"reference": [(REFERENCE, 400.0, 2**33)], "current": [(CURRENT, 200.0, 2**32)]}, "header")
    assert "| phase (s per step) or fact | reference | current | reference / current |" in text
    assert "| gen | 35.0 | 15.0 | 2.3x |" in text
    # the rollout's own generate call: 0.6.0's generate_sequences, 0.9.1's slowest agent-loop call
    assert "| generation alone | 30.0 | 10.0 | 3.0x |" in text
    assert "| update_weights | - | 2.0 | - |" in text  # current only
    # step + testing (+ save_checkpoint on reference, which times it outside step)
    assert "| whole global step (step + the phases timed outside it) | 88.0 | 49.0 | 1.8x |" in text
    assert "| response_length/mean (tokens) | 95.0 | 90.0 | - |" in text
    assert "| critic/score/mean | 0.000 | 0.062 | - |" in text
    assert "| wall time, launcher start to exit (s) | 400 | 200 | 2.0x |" in text
    assert "reference: gen 35.0 s (40 % of the whole global step); current: gen 15.0 s (31 %" in text
    assert "update_weights" in text.split("\n")[-1]  # the notes name the phase without counterpart


def write_events(folder, scalars):
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(folder))
    for tag, values in scalars.items():
        for step, value in values.items():
            writer.add_scalar(tag, value, step)
    writer.close()


def test_compare_stacks_runs_each_stack_in_turns_with_the_same_settings(monkeypatch, tmp_path, capsys):
    pytest.importorskip("tensorboard")
    from benchmarks import bench_cpu_run

    calls = []

    def fake_launcher(output_dir, extra, repo, env_extra=None):
        calls.append((env_extra["STACK"], output_dir.parent, extra))
        write_events(output_dir / "tensorboard", REFERENCE if env_extra["STACK"] == "reference" else CURRENT)
        return (3 if env_extra["STACK"] == "current" else 0), 100.0, 2**30

    monkeypatch.setattr(bench_cpu_run, "run_launcher", fake_launcher)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the runs' output folders
    monkeypatch.setattr(bench_cpu_run, "stack_versions", lambda python: f"verl of {python.parent.parent.name}")
    monkeypatch.setattr(bench_cpu_run, "stack_python", lambda stack: Path(sys.executable))
    monkeypatch.setattr(bench_cpu_run, "stack_settings", lambda: "rollout.name hf / vllm")
    monkeypatch.setenv("TOTAL_STEPS", "2")
    out = tmp_path / "stacks.md"
    rc = bench_cpu_run.main(["--compare-stacks", "--rounds", "2", "--markdown", str(out), "trainer.x=1"])
    assert rc == 3  # a launcher's failure is the exit status; the table is written anyway
    assert [c[0] for c in calls] == ["reference", "current", "reference", "current"]
    assert len({c[1] for c in calls}) == 1 and all(c[2] == ["trainer.x=1"] for c in calls)
    text = out.read_text()
    assert "TOTAL_STEPS=2" in text and "overrides trainer.x=1" in text
    assert "set apart (reference / current): rollout.name hf / vllm;" in text
    assert "| generation alone | 30.0 | 10.0 | 3.0x |" in text
    assert text in capsys.readouterr().out


def test_compare_stacks_without_a_stacks_venv_exits_2(monkeypatch, tmp_path, capsys):
    from benchmarks import bench_cpu_run

    monkeypatch.setattr(bench_cpu_run, "stack_python", lambda stack: tmp_path / stack / "bin" / "python")
    monkeypatch.setattr(bench_cpu_run, "run_launcher", lambda *a, **k: pytest.fail("must not run"))
    assert bench_cpu_run.main(["--compare-stacks"]) == 2
    assert "reference/bin/python: missing; expected the reference stack's venv" in capsys.readouterr().err


def test_each_stacks_venv_is_the_one_its_stack_file_names():
    from script_utils import REPO, stack_python

    assert stack_python("reference") == REPO / ".venv-reference/bin/python"
    assert stack_python("current") == REPO / ".venv-current/bin/python"


def test_the_header_names_what_the_stack_files_set_apart():
    from benchmarks.bench_cpu_run import stack_settings

    assert "rollout.name hf / vllm" in stack_settings()
