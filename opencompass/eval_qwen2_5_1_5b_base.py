"""OpenCompass model config: the base model, Qwen2.5-1.5B-Instruct, before GRPO training.

Use it with ``python run.py --models eval_qwen2_5_1_5b_base --datasets math_gen_a58d9d`` after
copying this file into the OpenCompass checkout's ``configs/models/`` (see opencompass/README.md).

Path: ``BASE_MODEL_PATH``, default ``$RECIPE_DIR/models/Qwen2.5-1.5B-Instruct`` (setup.sh puts
the model there with the recipe's tokenizer_config.json, so the recipe's system prompt is in
force, as for the trained model; point BASE_MODEL_PATH at an untouched download to measure the
stock chat template instead). Fields as in eval_qwen2_5_1_5b_grpo.py.
"""

import os

from opencompass.models import HuggingFacewithChatTemplate

RECIPE_DIR = os.environ.get('RECIPE_DIR', os.getcwd())
BASE_MODEL_PATH = os.environ.get('BASE_MODEL_PATH', os.path.join(RECIPE_DIR, 'models', 'Qwen2.5-1.5B-Instruct'))

models = [
    dict(
        type=HuggingFacewithChatTemplate,
        abbr='qwen2.5-1.5b-instruct-recipe-prompt-hf',
        path=BASE_MODEL_PATH,
        max_out_len=1024,
        batch_size=32,
        run_cfg=dict(num_gpus=1),
    )
]
