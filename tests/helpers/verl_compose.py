"""Compose main_ppo's overrides with the installed verl's own Hydra config; print what verl reads.

Run with a stack's interpreter (``.venv-reference/bin/python`` for reference, ``.venv-current/bin/python``
for current; conftest.verl_reads does), with a JSON list of launches on stdin, each a list of
overrides (what ``DRY_RUN=1 bash run_qwen2_5_1_5b.sh`` prints after ``-m verl.trainer.main_ppo``):
verl is imported once for all of them. Prints a JSON list, one object a launch: verl's version,
the reward function verl's own loader returns (its file and name, or null when verl would fall
back to its default scorer), a few composed values by name, the whole composed ``config``
(resolved) and ``invalid``, what verl's validation raised (null when it passed); or
``{"error": ...}`` for a launch verl cannot compose. No Ray, no device.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path


def compose(overrides: list[str]):
    import verl
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    config_dir = str(Path(verl.__file__).parent / "trainer" / "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return hydra_compose(config_name="ppo_trainer", overrides=overrides)


def loaded_reward(cfg) -> dict | None:
    """The reward function main_ppo would call, as verl's own loader finds it, and the keyword arguments verl
    passes it (custom_reward_function.reward_kwargs)."""
    import functools

    from verl.trainer.ppo.reward import get_custom_reward_fn

    with contextlib.redirect_stdout(sys.stderr):  # verl prints the function it loads
        fn = get_custom_reward_fn(cfg)
    if fn is None:
        return None
    kwargs = {}
    # verl wraps the function: partial(_call_with_kwargs, raw_fn, reward_kwargs)
    while isinstance(fn, functools.partial):
        if len(fn.args) > 1 and isinstance(fn.args[1], dict):
            kwargs.update(fn.args[1])
        fn = fn.args[0] if fn.args and callable(fn.args[0]) else fn.func
    return {"file": fn.__code__.co_filename, "name": fn.__name__, "kwargs": kwargs}


def validate(cfg) -> None:
    from verl.trainer.ppo.utils import need_critic
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    validate_config(config=cfg, use_reference_policy=cfg.actor_rollout_ref.actor.use_kl_loss, use_critic=need_critic(cfg))
    omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)


def what_verl_reads(overrides: list[str]) -> dict:
    import verl
    from omegaconf import OmegaConf

    cfg = compose([o for o in overrides if not o.startswith("hydra.")])
    try:
        with contextlib.redirect_stdout(sys.stderr):  # verl prints its verdict
            validate(cfg)
        invalid = None
    except (AssertionError, ValueError) as exc:
        invalid = f"{type(exc).__name__}: {exc}"
    r = cfg.actor_rollout_ref.rollout
    return {
        "verl": verl.__version__,
        "invalid": invalid,
        "config": OmegaConf.to_container(cfg, resolve=True),
        "reward": loaded_reward(cfg),
        "rollout": r.name,
        "rollout_n": r.n,
        "tp": r.tensor_model_parallel_size,
        "device": cfg.trainer.device,
        "n_gpus_per_node": cfg.trainer.n_gpus_per_node,
        "nnodes": cfg.trainer.nnodes,
        "train_batch_size": cfg.data.train_batch_size,
        "ppo_mini_batch_size": cfg.actor_rollout_ref.actor.ppo_mini_batch_size,
        "ppo_micro_batch_size_per_gpu": cfg.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu,
    }


def main() -> int:
    results = []
    for overrides in json.loads(sys.stdin.read()):
        try:
            results.append(what_verl_reads(overrides))
        except Exception as exc:  # one refused launch fails its own test, not the others'
            results.append({"error": f"{type(exc).__name__}: {exc}"})
    print(json.dumps(results, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
