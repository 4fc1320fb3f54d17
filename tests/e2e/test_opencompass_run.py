"""A real OpenCompass run (evaluate_opencompass.sh, SmolLM2-135M on CPU; slow, CI runs it): its
summary, the 4-shot prompts it sent and the references it read from parquet2json.py's math.json,
then benchmarks/bench_eval_agreement.py --predictions on it, which reads OpenCompass's own
per-problem verdicts beside the recipe's judges (fast tests: tests/unit/test_bench_eval_agreement.py).

The test needs .venv-opencompass (bash setup.sh --with-opencompass): it skips without it,
except under CI (CI=true), where a missing environment is a failure.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import bench_eval_agreement as bench
from conftest import REPO
from parquet2json import reference_answer

OC_VENV = REPO / ".venv-opencompass"
SMOLLM2 = REPO / "models" / "SmolLM2-135M-Instruct"
MATH_JSON = REPO / "data" / "opencompass" / "math.json"


def _need_opencompass():
    if not (OC_VENV / "bin" / "opencompass").exists():
        message = f"{OC_VENV} absent: run 'bash setup.sh --device cpu --with-opencompass'"
        if os.environ.get("CI"):
            pytest.fail(message + " (CI installs it)")
        pytest.skip(message)
    if not (SMOLLM2 / "config.json").exists():
        pytest.fail(f"{SMOLLM2} missing: run 'bash setup.sh --device cpu' first")


N_PROBLEMS = 4
MAX_OUT_LEN = 48


@pytest.mark.slow
def test_real_opencompass_run_and_the_judges_agreement(tmp_path):
    _need_opencompass()
    env = {**os.environ, "LIMIT": str(N_PROBLEMS), "MAX_OUT_LEN": str(MAX_OUT_LEN), "CPU_THREADS": "1",
           "DEVICE": "cpu", "WORK_DIR": str(tmp_path / "oc")}
    proc = subprocess.run(["bash", str(REPO / "evaluate_opencompass.sh"), str(SMOLLM2)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    closing = proc.stdout.strip().splitlines()[-1]
    assert closing.startswith("evaluate_opencompass.sh: MATH accuracy ") and "math_gen_a58d9d" in closing
    out_dir = Path(closing.rsplit(" -> ", 1)[1])
    assert "| math | a58d9d | accuracy | gen |" in proc.stdout  # OpenCompass's own table, printed

    # the summary exists and parses
    (summary_csv,) = sorted((out_dir / "summary").glob("summary_*.csv"))
    rows = list(csv.DictReader(summary_csv.open()))
    math_row = next(r for r in rows if r["dataset"] == "math")
    accuracy = float(math_row["SmolLM2-135M-Instruct"])
    assert 0.0 <= accuracy <= 100.0 and math_row["version"] == "a58d9d"

    # OpenCompass sent the 4-shot prompt (8 example turns, then the problem) on the problems of
    # parquet2json.py's math.json, and read the reference parquet2json.py's note assumes
    pred_file = out_dir / "predictions" / "SmolLM2-135M-Instruct" / "math.json"
    preds = json.loads(pred_file.read_text())
    assert len(preds) == N_PROBLEMS
    source = list(json.loads(MATH_JSON.read_text(encoding="utf-8")).values())[:N_PROBLEMS]
    for i, row in enumerate(source):
        sent = preds[str(i)]["origin_prompt"]
        assert [turn["role"] for turn in sent] == ["HUMAN", "BOT"] * 4 + ["HUMAN"], f"problem {i}"
        assert f"Problem:\n{row['problem']}\nSolution:" in sent[-1]["prompt"], f"problem {i}"
        assert preds[str(i)]["gold"] == reference_answer(row["solution"])

    # bench_eval_agreement --predictions reads OpenCompass's own verdicts beside the recipe's judges
    table = tmp_path / "eval_agreement.md"
    rejudged = subprocess.run([sys.executable, "-m", "benchmarks.bench_eval_agreement", "--predictions", str(out_dir),
                               "--markdown", str(table)], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert rejudged.returncode == 0, rejudged.stderr[-2000:]
    items, found = bench.real_items(out_dir)
    assert found == str(pred_file) and len(items) == N_PROBLEMS
    assert [it["OpenCompass"] for it in items] == [bool(d["correct"]) for d in bench.opencompass_verdicts(pred_file)]
    assert 100.0 * sum(it["OpenCompass"] for it in items) / N_PROBLEMS == pytest.approx(accuracy, abs=0.01)
    assert [it["prediction"] for it in items] == [preds[str(i)]["prediction"] for i in range(N_PROBLEMS)]
    bench.judge_all(items)
    text = table.read_text()
    assert f"({N_PROBLEMS} predictions)" in text
    assert f"| OpenCompass `MATHVerifyEvaluator` | {sum(it['OpenCompass'] for it in items)} | - | - |" in text
    for judge in bench.JUDGES:
        same = sum(it[judge] == it["OpenCompass"] for it in items)
        assert (f"| {judge} | {sum(it[judge] for it in items)} | {same / N_PROBLEMS:.1%} ({same}/{N_PROBLEMS}) | "
                f"{N_PROBLEMS - same} |") in text, judge
