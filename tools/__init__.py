"""What the shell steps run: console_summary and check_merged_model; devices.sh and
npu_env.sh are sourced. Run a Python one from the repository root as ``python -m tools.<name>``. The
maintenance scripts a launch never runs (sync_readme, reward_policy, write_tokenizer_config) are in
maintenance/."""
