"""Maintenance scripts a launch never runs: sync_readme (regenerates the generated blocks of README.md,
docs/*.md and docker/README.md), reward_policy (the written reward policy's table and examples, read by
sync_readme and the tests), write_tokenizer_config (writes the shipped tokenizer_config.json); run one
from the repository root as ``python -m maintenance.<name>``."""
