"""benchmarks/bench_cpu_run.py's tables and benchmarks/hardware_limit.py's arithmetic, on synthetic
runs (the benchmark itself trains; these check what it prints)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.bench_cpu_run import WHOLE, Run, phase_mean, side_by_side


def run(step_s: dict[int, float], gen_s: dict[int, float], testing: dict[int, float] | None = None,
        wall: float = 300.0) -> Run:
    scalars = {"timing_s/step": step_s, "timing_s/gen": gen_s, "actor/ppo_kl": {1: 1e-3, 2: -2e-3}}
    if testing:
        scalars["timing_s/testing"] = testing
    return Run(0, Path("."), scalars, wall, 3 * 2**30, [], 9)


def test_the_whole_global_step_adds_testing_which_verl_times_after_the_step():
    assert phase_mean(run({1: 50.0, 2: 60.0}, {1: 10.0}, testing={2: 10.0}), WHOLE) == 60.0


def test_side_by_side_gives_each_phase_the_mean_over_steps_and_rounds_and_the_ratio():
    ref = [run({1: 300.0, 2: 100.0}, {1: 60.0}, wall=900.0)]
    new = [run({1: 100.0, 2: 50.0}, {1: 20.0, 2: 10.0}), run({1: 100.0, 2: 50.0}, {1: 20.0, 2: 10.0})]
    text = side_by_side({"ref": ref, "new": new})
    assert "| gen | 60.0 | 15.0 | 4.00x |" in text
    assert f"| **{WHOLE}** | 200.0 | 75.0 | 2.67x |" in text
    assert "| wall time, launcher start to exit (s) | 900 | 300; 300 |" in text
    assert "| peak memory: the machine's used memory over the run (GiB) | 3.0 | 3.0; 3.0 |" in text
    assert "| actor/ppo_kl (rollout vs actor, on-policy) per step | 1.0e-03, -2.0e-03 |" in text
    assert "| lines printed to the terminal | 9 | 9; 9 |" in text


def test_the_hardware_limit_of_a_step_is_its_flops_and_bytes_at_the_measured_rates():
    torch = pytest.importorskip("torch")
    from benchmarks import hardware_limit as hl

    machine = hl.Machine(flops=1e11, bandwidth=1e9, dtype=torch.bfloat16, threads=2)
    model = hl.Model(params=10**8, layers=10, hidden=500, bytes_per_param=2)
    m = {"global_seqlen/mean": 1000.0, "prompt_length/mean": 150.0, "response_length/mean": 100.0,
         "response_length/max": 128.0}
    limits = hl.step_limits(machine, model, m, prompts=4, responses=16, val_prompts=8, val_response_max=None,
                            saved=True)
    # each prompt once (4 x 150 tokens attending to 75 on average), every response once
    # (16 x 100 tokens attending to the prompt and half the response, 200)
    tokens = 4 * 150 + 16 * 100
    fwd = tokens * 2e8 + 4 * 10 * 500 * (4 * 150 * 75 + 16 * 100 * 200)
    assert limits["ref"][0] == pytest.approx(fwd / 1e11)
    assert limits["update_actor"][0] == pytest.approx(3 * fwd / 1e11)
    assert limits["old_log_prob"][0] == 0.0 and "testing" not in limits
    # decode: each of 128 steps reads 2e8 bytes of weights (0.2 s), longer than computing 16 tokens (0.03 s)
    prefill = 4 * 150 * (2e8 + 4 * 10 * 500 * 75) / 1e11
    assert limits["gen"][0] == pytest.approx(prefill + 128 * 0.2)
    assert limits["save_checkpoint"][0] == pytest.approx(12e8 / 1e9)


def test_the_algos_comparison_reads_reward_reach_length_and_dropped_groups():
    from benchmarks.bench_cpu_algos import DROPPED, SCORE, summary, table

    scalars = {SCORE: dict(enumerate([0.0, 0.1, 0.2, 0.25, 0.35, 0.5], start=1)),
               "response_length/mean": {1: 40.0, 2: 60.0}, DROPPED: {1: 2.0, 4: 1.0}}
    got = summary(scalars)
    assert got["first3"] == pytest.approx(0.1) and got["last3"] == pytest.approx(1.1 / 3)
    assert (got["reach"], got["length"], got["dropped"], got["steps"]) == (5, 50.0, 3, 6)
    text = table({"dapo": got, "grpo": {**got, "reach": None}}, "header")
    assert "| dapo | 0.100 | 0.367 | 5 | 50.0 | 3 | 6 |" in text and "| grpo | 0.100 | 0.367 | not reached | 50.0 | - |" in text
    with pytest.raises(ValueError, match="expected at least 6"):
        summary({SCORE: {1: 0.0}})
