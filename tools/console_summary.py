"""The launcher's terminal view of main_ppo (CONSOLE=summary): one line per global step.

It prints a start line, the validation score before training, and for each global step the wall seconds,
their phases, the reward, the response length and the rollout/actor agreement (the weight-sync check), read
from verl's console logger (``step:N - name:value ...``, verl/utils/tracking.py) and the total from the
``Training Progress`` bar; a Hydra override main_ppo refused, in one line. Standard library only: it runs in
whatever interpreter the launcher has.
"""

from __future__ import annotations

import argparse
import re
import sys

STEP_LINE = re.compile(r"\bstep:(\d+) - (.*)$")
METRIC = re.compile(r"([\w/@.\-]+):(?:np\.float\d*\()?(-?[\d.]+(?:e[-+]?\d+)?|nan|inf)\)?")
TOTAL = re.compile(r"Training Progress:.*?\| *\d+/(\d+)")
#: Hydra refusing an override before main_ppo starts (hydra/_internal/config_loader_impl.py), and omegaconf's reason
HYDRA_REFUSED = re.compile(r"ConfigCompositionException: (Could not override '[^']+'\.|.*)$")
HYDRA_REASON = re.compile(r"^omegaconf\.errors\.\w+: (.*)$")
#: exit status when the summary has stated main_ppo's failure in one line (the launcher then shows no log tail)
STATED = 3
#: the phases of verl 0.9.1's ``fit`` shown for a step, in their order (``timing_s/<name>``)
PHASES = ("gen", "old_log_prob", "ref", "update_actor", "update_weights", "save_checkpoint", "testing")
#: the rollout/actor agreement: verl's decoupled mode logs the Pearson correlation of the two
#: probabilities, its bypass mode the actor's KL to the rollout (``actor/ppo_kl``) at the update
AGREEMENT = (("training/rollout_actor_probs_pearson_corr", "rollout/actor prob corr {:.4f}"),
             ("actor/ppo_kl", "actor/rollout KL {:.1e}"))


def metrics(text: str) -> dict[str, float]:
    return {name: float(value) for name, value in METRIC.findall(text)}


def step_line(step: int, total: int | None, m: dict[str, float]) -> str:
    """One global step's summary, from its console metrics."""
    acc = next((v for k, v in m.items() if k.startswith("val-core/") and "/acc/" in k), None)
    if "timing_s/step" not in m:  # step 0: the validation before training
        return f"validation before training: acc {acc:.3f}" if acc is not None else f"step {step}"
    phases = ", ".join(f"{p} {m[f'timing_s/{p}']:.1f}" for p in PHASES if m.get(f"timing_s/{p}", 0) >= 0.05)
    parts = [f"global step {step}/{total or '?'}: {m['timing_s/step'] + m.get('timing_s/testing', 0):.1f} s ({phases})"]
    if "critic/score/mean" in m:
        parts.append(f"reward {m['critic/score/mean']:.3f}")
    if "response_length/mean" in m:
        parts.append(f"response {m['response_length/mean']:.0f} tokens")
    parts += [fmt.format(m[key]) for key, fmt in AGREEMENT if key in m][:1]
    if acc is not None:
        parts.append(f"validation acc {acc:.3f}")
    return "; ".join(parts)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, usage="main_ppo ... | %(prog)s LOG_FILE",
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log_file", help="where the launcher writes main_ppo's whole console (named in the first line)")
    log = parser.parse_args(argv[1:]).log_file
    print(f"main_ppo: starting Ray, the actor/ref worker and the rollout; its whole console goes to {log}",
          flush=True)
    total, reason, refused = None, None, None
    for line in sys.stdin:
        if total is None and (found := TOTAL.search(line)):
            total = int(found.group(1))
        if found := STEP_LINE.search(line):
            print(step_line(int(found.group(1)), total, metrics(found.group(2))), flush=True)
        elif found := HYDRA_REASON.match(line.strip()):
            reason = found.group(1)
        elif found := HYDRA_REFUSED.search(line.strip()):
            refused = found.group(1)
    if refused is None:
        return 0
    print(f"main_ppo: Hydra refused an override: {refused.rstrip('.')}{f' ({reason})' if reason else ''}; expected a "
          "key of verl's config, spelled as there (a new key takes a leading +)", file=sys.stderr)
    return STATED


if __name__ == "__main__":
    sys.exit(main(sys.argv))
