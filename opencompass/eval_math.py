"""OpenCompass config: MATH (``math_gen_a58d9d``) on one model, as the reference recipe reports it.

Driven by ``evaluate_opencompass.sh`` through environment variables; that script holds every
default (the reference values among them), so this file holds none of its own:

``OC_MODEL_PATH``   model folder (a base model or a merged checkpoint); its tokenizer's chat
                    template is applied to every prompt, so the recipe's system prompt from its
                    ``tokenizer_config.json`` is in force.
``OC_MATH_JSON``    absolute path of ``parquet2json.py``'s ``math.json``; OpenCompass's
                    ``get_data_path`` uses an absolute path as is (no hub, no data cache).
``OC_ABBR``         the model's name in OpenCompass's outputs (``predictions/<abbr>/math.json``).
``OC_BACKEND``      ``hf`` (``HuggingFacewithChatTemplate``) or ``vllm`` (``VLLMwithChatTemplate``).
``OC_MAX_OUT_LEN``  generated tokens per answer.
``OC_BATCH_SIZE``   prompts per generate call.
``OC_NUM_GPUS``     devices per task (0 on CPU); with vLLM also its tensor-parallel size.
``OC_LIMIT``        empty: every problem; N: the first N (``reader_cfg['test_range']``).

The dataset config is OpenCompass's own, imported unchanged except for ``path`` and
``test_range``: the 4-shot prompt, ``MATHDataset`` and ``MATHVerifyEvaluator`` stay as shipped.
"""

from os import environ as _env
from os.path import basename as _basename, dirname as _dirname

from mmengine.config import read_base

with read_base():
    from opencompass.configs.datasets.math.math_gen_a58d9d import math_datasets

from opencompass.models import HuggingFacewithChatTemplate, VLLMwithChatTemplate

_math_json = _env['OC_MATH_JSON']
_limit = _env.get('OC_LIMIT', '')
_max_out_len = int(_env['OC_MAX_OUT_LEN'])
_batch_size = int(_env['OC_BATCH_SIZE'])
_num_gpus = int(_env['OC_NUM_GPUS'])

datasets = []
for _d in math_datasets:
    _reader = dict(_d['reader_cfg'])
    if _limit:
        _reader['test_range'] = f'[0:{int(_limit)}]'
    datasets.append(dict(_d, path=_dirname(_math_json), file_name=_basename(_math_json),
                         reader_cfg=_reader))

if _env['OC_BACKEND'] == 'vllm':
    _model = dict(type=VLLMwithChatTemplate,
                  model_kwargs=dict(tensor_parallel_size=max(_num_gpus, 1)))
else:
    _model = dict(type=HuggingFacewithChatTemplate)
models = [dict(_model, abbr=_env['OC_ABBR'], path=_env['OC_MODEL_PATH'], max_out_len=_max_out_len,
               batch_size=_batch_size, run_cfg=dict(num_gpus=_num_gpus))]
