"""OpenCompass model config: Qwen2.5-1.5B-Instruct after the recipe's GRPO training on MATH.

Use it with ``python run.py --models eval_qwen2_5_1_5b_grpo --datasets math_gen_a58d9d`` after
copying this file into the OpenCompass checkout's ``configs/models/`` (see opencompass/README.md).

Path: the merged Hugging Face folder that merge_checkpoint.sh writes,
``<repo>/outputs/<experiment>/checkpoints/global_step_<N>/actor/huggingface``. Set
``GRPO_MODEL_PATH`` to it, or ``RECIPE_DIR`` to the repository root to get the reference run's
step 280 (the reference: MATH 43.48 for the base model -> 55.06 after 280 GRPO steps).
OpenCompass evaluates the config in its own working directory (mmengine copies it to a
temporary file first), so the default cannot be taken relative to this file.

Fields (OpenCompass ``HuggingFacewithChatTemplate``): ``path`` (model and tokenizer folder; the
tokenizer's chat template, hence the recipe's system prompt, is applied to every prompt),
``max_out_len`` (generated tokens per answer, the recipe's response length 1024),
``batch_size`` (prompts per generate call), ``run_cfg.num_gpus`` (devices per task).
"""

import os

from opencompass.models import HuggingFacewithChatTemplate

RECIPE_DIR = os.environ.get('RECIPE_DIR', os.getcwd())
GRPO_MODEL_PATH = os.environ.get(
    'GRPO_MODEL_PATH',
    os.path.join(RECIPE_DIR, 'outputs', 'qwen2_5_1_5b_math', 'checkpoints', 'global_step_280', 'actor',
                 'huggingface'))

models = [
    dict(
        type=HuggingFacewithChatTemplate,
        abbr='qwen2.5-1.5b-instruct-grpo-math-hf',
        path=GRPO_MODEL_PATH,
        max_out_len=1024,
        batch_size=32,
        run_cfg=dict(num_gpus=1),
    )
]
