"""Where the CPU run's actor/ref worker spends its time, phase by phase, from py-spy's samples.

Usage::

    python -m benchmarks.bench_cpu_run --compare REF --profile   # samples both runs' workers, prints these tables
    python -m benchmarks.profile_cpu_step RAW                     # the table of one saved py-spy raw file

:func:`attach_pyspy` waits for a launch's actor/ref worker (the Ray actor ``WorkerDict``) and
samples it at 20 Hz until it exits. :func:`read_raw` sorts every sample twice: by the worker
method it falls in (the phase: ``update_actor``, ``compute_ref_log_prob`` = ref,
``compute_log_prob`` = old_log_prob, ``update_weights``, ``save_checkpoint``) and by what the
innermost recognised frame is doing (the category: the decoder's matmuls, attention, the LM head,
log-softmax, entropy, autograd's backward, the optimizer, FSDP's casts and gathers, padding and
packing, TransferQueue I/O). :func:`markdown` gives seconds (samples / rate) per phase and
category, and each category's share of the phase.
"""

from __future__ import annotations

import argparse
import collections
import shutil
import subprocess
import sys
import time
from pathlib import Path

RATE = 20  # py-spy samples per second

#: the worker methods that name a phase (verl 0.9.1 ``workers/engine_workers.py``)
PHASES = (
    ("update_actor", "update_actor"),
    ("compute_ref_log_prob", "ref"),
    ("compute_log_prob", "old_log_prob"),
    ("update_weights", "update_weights"),
    ("save_checkpoint", "save_checkpoint"),
)

#: (category, test on one frame "function (file:line)"); the innermost frame that passes a test
#: names the sample's category, so the more specific tests come first
CATEGORIES = (
    ("optimizer step", lambda f: "optim/" in f or "clip_grad" in f or "_foreach" in f),
    ("FSDP casts, gathers, reduce", lambda f: "distributed/fsdp" in f or "distributed/_composable" in f
     or "distributed/tensor" in f or "c10d" in f),
    ("entropy", lambda f: "entropy" in f.split(" (")[0]),
    ("log-softmax / log-probs", lambda f: f.startswith(("logprobs_from_logits", "log_softmax",
                                                         "logprobs_from_logits_v2", "_scale_logits"))),
    ("attention (sdpa, masks)", lambda f: "sdpa" in f or "scaled_dot_product" in f or "masking_utils" in f
     or f.startswith(("eager_attention", "_preprocess_mask"))),
    ("LM head", lambda f: f.startswith("lm_head ")),
    ("autograd backward", lambda f: "autograd" in f and "backward" in f or f.startswith("_engine_run_backward")),
    ("decoder matmuls (Linear)", lambda f: f.startswith("Linear.forward (")),
    ("padding, packing, nested tensors", lambda f: "pad" in f.split(" (")[0] or "nested" in f
     or "attention_utils" in f),
    ("TransferQueue / data movement", lambda f: "transfer_queue" in f or "tensordict" in f),
    ("model forward, other", lambda f: "transformers/models" in f or "nn/modules" in f),
)


def categorise(frames: list[str]) -> str:
    """The category of one sample's stack (root first): its innermost recognised frame's."""
    for frame in reversed(frames):
        for name, test in CATEGORIES:
            if test(frame):
                # the LM head is a Linear whose caller names it
                return name
    return "other"


def lm_head_aware(frames: list[str]) -> list[str]:
    """Mark the LM head: transformers calls ``self.lm_head(...)`` from the causal LM's forward,
    the outermost ``modeling_*`` frame, so a Linear frame right under that one is the head."""
    out = list(frames)
    outer = next((j for j, f in enumerate(out) if "/modeling_" in f), None)
    if outer is not None:
        for i in range(outer + 1, len(out)):
            if "nn/modules/linear.py" in out[i] and all("/modeling_" not in f for f in out[outer + 1:i]):
                out[i] = "lm_head " + out[i]
    return out


def read_raw(path: Path) -> dict[str, collections.Counter]:
    """{phase: Counter(category -> samples)} from py-spy's raw (collapsed-stack) output."""
    table: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        phase = next((label for method, label in PHASES
                      if any(f.split(" (")[0].rpartition(".")[2] == method for f in frames)), None)
        if phase is None:
            continue
        table[phase][categorise(lm_head_aware(frames))] += int(count)
    return table


def markdown(table: dict[str, collections.Counter], title: str) -> str:
    phases = [label for _, label in PHASES if table.get(label)]
    cats = [name for name, _ in CATEGORIES] + ["other"]
    lines = [title, "", "| category | " + " | ".join(f"{p} s (%)" for p in phases) + " |",
             "|---" * (len(phases) + 1) + "|"]
    totals = {p: sum(table[p].values()) for p in phases}
    for cat in cats:
        if not any(table[p][cat] for p in phases):
            continue
        cells = [f"{table[p][cat] / RATE:.1f} ({100 * table[p][cat] / totals[p]:.0f} %)" for p in phases]
        lines.append(f"| {cat} | " + " | ".join(cells) + " |")
    lines.append("| **whole phase** | " + " | ".join(f"**{totals[p] / RATE:.1f}**" for p in phases) + " |")
    return "\n".join(lines)


def attach_pyspy(launcher: subprocess.Popen, raw: Path) -> None:
    """Wait for the launch's actor/ref worker (the Ray actor ``WorkerDict``), then sample it with
    py-spy into ``raw`` until it exits."""
    if shutil.which("py-spy") is None:
        sys.exit("profile_cpu_step: py-spy not found on PATH; expected it installed (pip install py-spy)")
    while launcher.poll() is None:
        pid = subprocess.run(["pgrep", "-f", "^ray::WorkerDict"], capture_output=True, text=True).stdout.split()
        if pid:
            subprocess.run(["py-spy", "record", "-p", pid[0], "-r", str(RATE), "-f", "raw", "-o", str(raw),
                            "--nonblocking"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            return
        time.sleep(1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("raw", type=Path, help="py-spy's raw output for an actor/ref worker")
    args = parser.parse_args(argv)
    if not args.raw.is_file():
        print(f"profile_cpu_step: {args.raw}: not found; expected py-spy's raw output (record -f raw)", file=sys.stderr)
        return 2
    print(markdown(read_raw(args.raw), f"Actor/ref worker time by phase and category ({args.raw}, py-spy at {RATE} Hz)."))
    return 0


if __name__ == "__main__":
    sys.exit(main())
