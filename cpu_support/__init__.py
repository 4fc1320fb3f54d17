"""CPU-only support for the recipe: verl patches (verl_cpu_patch) and the SmolLM2 model (prepare_smollm2)."""
