"""The side-by-side step table of benchmarks/bench_cpu_run.py (--compare, --compare-runs), on synthetic
TensorBoard scalars."""

from __future__ import annotations

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
