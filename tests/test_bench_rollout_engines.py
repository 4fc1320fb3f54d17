"""benchmarks/bench_rollout_engines.py without running an engine: its arithmetic, its table, and
the worker protocol on fake workers (a script that prints what a worker prints)."""

from __future__ import annotations

import json
import sys
import tempfile

import pytest

from benchmarks import bench_rollout_engines as bench


def run(engine: str, wall: float, tokens: int, greedy=None, load: float = 5.0) -> dict:
    return {"engine": engine, "label": f"{engine} engine", "versions": "v", "load_s": load, "wall_s": wall,
            "tokens": tokens, "greedy": greedy or [[1, 2]]}


def test_the_dtype_follows_the_cpu_profiles_rule(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("model name\t: AMD EPYC\nflags\t\t: fpu avx2 avx512f avx512_bf16\n")
    assert bench.default_dtype(cpuinfo) == "bf16"
    cpuinfo.write_text("model name\t: AMD EPYC\nflags\t\t: fpu avx2 avx512f\n")
    assert bench.default_dtype(cpuinfo) == "fp32"
    assert bench.default_dtype(tmp_path / "absent") == "fp32"


def test_vllm_threads_are_bound_to_the_first_allowed_cpus():
    assert bench.thread_binding(2, {5, 3, 9}) == "3,5"
    with pytest.raises(ValueError, match="--threads 4"):
        bench.thread_binding(4, {0, 1})


def test_greedy_agreement_counts_identical_rows_and_the_common_prefix():
    eos = 2
    a = bench.through_eos([[5, 6, 7, 8], [5, 2, 9, 9], [4, 4, 4, 4]], eos)
    assert a == [[5, 6, 7, 8], [5, 2], [4, 4, 4, 4]]
    b = [[5, 6, 7, 3], [5, 2], [1, 4, 4, 4]]
    same, prefix = bench.greedy_agreement(a, b, k=4)
    assert same == 1 and prefix == pytest.approx((3 + 2 + 0) / 3)
    # within the first k=3 tokens the first row agrees too
    assert bench.greedy_agreement(a, b, k=3)[0] == 2
    with pytest.raises(ValueError):
        bench.greedy_agreement(a, b[:2], k=3)


def test_the_limit_is_the_slower_of_reading_memory_and_the_matmuls():
    common = dict(params=10**8, layers=30, kv_heads=3, head_dim=64, bytes_per_value=2, prompts=8, n=8,
                  real_prompt=100.0, new_tokens=100, prefill_gflops=100.0)
    # compute bound: 2 * 1e8 * 64 FLOPs at 100 GFLOP/s = 0.128 s a step; memory is 10x faster
    rate, step_s, prefill_s = bench.estimated_limit(decode_gflops=100.0, copy_gbps=1000.0, **common)
    assert step_s == pytest.approx(0.128)
    assert prefill_s == pytest.approx(2 * 1e8 * 100 * 8 / 100e9)
    assert rate == pytest.approx(64 * 100 / (prefill_s + 100 * 0.128))
    # memory bound: the weights (2e8 bytes) and the KV cache read at 1 GB/s
    kv = 2 * 30 * 3 * 64 * 2 * (8 * 100 + 64 * 100 / 2)
    assert bench.estimated_limit(decode_gflops=1e6, copy_gbps=1.0, **common)[1] == pytest.approx((2e8 + kv) / 1e9)


def test_the_table_gives_best_and_median_over_rounds():
    results = {"vllm": [run("vllm", 10.0, 5000), run("vllm", 20.0, 5000)],
               "project": [run("project", 25.0, 6000), run("project", 30.0, 6000)]}
    text = bench.table(results, "header")
    assert "| vllm engine | 2 | 10.0 / 15.0 | 5000 | 500.0 / 375.0 | 5.0 / 5.0 |" in text
    assert "| project engine | 2 | 25.0 / 27.5 | 6000 | 240.0 / 220.0 |" in text


def test_the_greedy_line_reports_agreement_and_round_to_round_stability():
    results = {"vllm": [run("vllm", 1, 1, [[1, 2], [3, 3]]), run("vllm", 1, 1, [[1, 2], [3, 4]])],
               "project": [run("project", 1, 1, [[1, 2], [3, 5]])] * 2}
    line = bench.greedy_line(results, k=2, dtype="bf16")
    assert "in bf16" in line and "1 of 2 rows identical" in line and "mean common prefix 1.5" in line
    assert "no (vllm)" in line
    single = bench.greedy_line({e: runs[:1] for e, runs in results.items()}, k=2, dtype="fp32")
    assert "in fp32" in single and "every round" not in single


def test_a_result_is_the_last_json_line_with_an_engine_and_log_noise_is_skipped():
    out = 'INFO loading\n{"not": "a result"}\n{broken\n' + json.dumps(run("vllm", 1.0, 3)) + "\n"
    assert bench.parse_result(out, "log")["wall_s"] == 1.0
    with pytest.raises(bench.WorkerError, match="log: no JSON result"):
        bench.parse_result("INFO only\n", "log")


FAKE_WORKER = """
import json, os, sys
args = sys.argv[1:]
engine = args[args.index("--worker") + 1]
print("library noise on stdout")
if os.environ.get("FAIL_ENGINE") == engine:
    sys.exit(3)
greedy = [[7, 8, 2]] * 4 if engine == "vllm" or "--greedy-only" in args else [[7, 9, 2]] * 4
print(json.dumps({"engine": engine, "label": engine, "versions": "fake", "load_s": 1.0, "wall_s": 2.0,
                  "tokens": 100 if engine == "vllm" else 50, "greedy": greedy,
                  **({"limit": {"params": 1000, "layers": 2, "kv_heads": 1, "head_dim": 4, "decode_gflops": 1.0,
                                "prefill_gflops": 1.0, "prefill_rows": 8, "copy_gbps": 1.0}}
                     if "--measure-limit" in args else {})}))
dtype = args[args.index("--dtype") + 1]
with open(os.environ["FAKE_CALLS"], "a") as calls:
    calls.write(" ".join([engine, dtype] + [a[2:] for a in args if a in ("--measure-limit", "--greedy-only")]) + "\\n")
"""


@pytest.fixture
def fake_engines(tmp_path, monkeypatch):
    """Both venv Pythons replaced by a fake worker; the batch built from a two-row parquet."""
    pytest.importorskip("transformers")
    script = tmp_path / "fake_worker.py"
    script.write_text(FAKE_WORKER)
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nexec {sys.executable} {script} \"$@\"\n")
    python.chmod(0o755)
    calls = tmp_path / "calls"
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the workers' logs
    monkeypatch.setenv("FAKE_CALLS", str(calls))
    monkeypatch.setattr("benchmarks.bench_cpu_rollout.build_batch", lambda tok, data, prompts, n: fake_batch(n))

    class Tok:
        eos_token_id = 2
        pad_token_id = 2

    monkeypatch.setattr("transformers.AutoTokenizer.from_pretrained", lambda *a, **k: Tok())
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    data = tmp_path / "train.parquet"
    data.write_text("")
    return ["--model", str(model), "--data", str(data), "--vllm-python", str(python), "--project-python",
            str(python), "--prompts", "2", "--n", "2", "--threads", "1", "--dtype", "fp32"], calls


def fake_batch(n):
    import torch

    ids = torch.tensor([[0, 5, 6], [7, 8, 9]]).repeat_interleave(n, 0)
    return ids, (ids != 0).long()


def test_rounds_alternate_the_engines_and_the_last_project_run_measures_the_limit(fake_engines, tmp_path, capsys):
    argv, calls = fake_engines
    out = tmp_path / "results" / "engines.md"
    assert bench.main([*argv, "--rounds", "3", "--markdown", str(out)]) == 0
    assert calls.read_text().split("\n")[:-1] == ["vllm fp32", "project fp32", "project fp32", "vllm fp32",
                                                  "vllm fp32", "project fp32 measure-limit"]
    text = out.read_text()
    assert "| vllm | 3 | 2.0 / 2.0 | 100 | 50.0 / 50.0 |" in text and "| project | 3 |" in text
    assert "Greedy check in fp32" in text and "0 of 4 rows identical" in text and "common prefix 1.0" in text
    assert "Estimated limit in fp32" in text
    assert "mean real prompt 2 tokens (padded to 3)" in text
    assert text in capsys.readouterr().out


def test_a_failing_worker_exits_1_naming_its_log_and_writes_nothing(fake_engines, tmp_path, monkeypatch, capsys):
    argv, _ = fake_engines
    monkeypatch.setenv("FAIL_ENGINE", "project")
    out = tmp_path / "engines.md"
    assert bench.main([*argv, "--markdown", str(out)]) == 1
    err = capsys.readouterr().err
    assert "project_1.log: worker '--worker project' exited 3" in err
    assert not out.exists()


def test_a_missing_venv_exits_2_naming_it(fake_engines, tmp_path, capsys):
    argv, _ = fake_engines
    missing = tmp_path / "nowhere" / "python"
    assert bench.main([*argv, "--vllm-python", str(missing)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"bench_rollout_engines: {missing}: missing (run 'bash setup.sh --device cpu --stack current' first)"


def test_a_bf16_benchmark_adds_an_untimed_greedy_check_in_fp32(fake_engines, tmp_path, capsys):
    argv, calls = fake_engines
    argv = [a if a != "fp32" else "bf16" for a in argv]
    assert bench.main([*argv, "--rounds", "1"]) == 0
    assert calls.read_text().split("\n")[:-1] == ["vllm bf16", "project bf16 measure-limit",
                                                  "vllm fp32 greedy-only", "project fp32 greedy-only"]
    out = capsys.readouterr().out
    assert "Greedy check in bf16 (temperature 0, first 32 tokens of each of the 4 rows): 0 of 4" in out
    assert "Greedy check in fp32 (temperature 0, first 32 tokens of each of the 4 rows): 4 of 4" in out
    calls.write_text("")
    assert bench.main([*argv, "--rounds", "1", "--no-fp32-check"]) == 0
    assert "greedy-only" not in calls.read_text()
