"""What the shell steps run (launch_guard, console_summary, check_merged_model; devices.sh and
npu_env.sh are sourced) and two maintenance scripts (sync_readme, write_tokenizer_config); run a
Python one from the repository root as ``python -m tools.<name>``."""
