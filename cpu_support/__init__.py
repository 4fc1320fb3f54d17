"""CPU-only support for the recipe: verl's CPU platform (verl_cpu_platform) and the SmolLM2 model (prepare_smollm2)."""
