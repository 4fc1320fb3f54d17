"""OpenCompass config: MATH (``math_gen_a58d9d``) on one model, as the reference recipe reports it.

``evaluate_opencompass.sh`` sets every value through the environment (its defaults are the
reference's): OC_MODEL_PATH (the model folder; its chat template, with the recipe's system prompt,
is applied to every prompt), OC_MATH_JSON (absolute path of parquet2json.py's math.json, which
OpenCompass's get_data_path takes as is), OC_ABBR (the model's name in the outputs), OC_BACKEND
(hf: HuggingFacewithChatTemplate, vllm: VLLMwithChatTemplate), OC_MAX_OUT_LEN (tokens per answer),
OC_BATCH_SIZE, OC_NUM_GPUS (devices per task, 0 on CPU; vLLM's tensor-parallel size), OC_LIMIT
(empty: every problem, N: the first N). OpenCompass's dataset config (4-shot prompt, MATHDataset,
MATHVerifyEvaluator) is imported unchanged but for ``path`` and ``test_range``.
"""

from os import environ as _env
from os.path import basename as _basename, dirname as _dirname

from mmengine.config import read_base

with read_base():
    from opencompass.configs.datasets.math.math_gen_a58d9d import math_datasets

from opencompass.models import HuggingFacewithChatTemplate, VLLMwithChatTemplate

_math_json = _env['OC_MATH_JSON']
_num_gpus = int(_env['OC_NUM_GPUS'])

datasets = []
for _d in math_datasets:
    _reader = dict(_d['reader_cfg'])
    if _env.get('OC_LIMIT', ''):
        _reader['test_range'] = f"[0:{int(_env['OC_LIMIT'])}]"
    datasets.append(dict(_d, path=_dirname(_math_json), file_name=_basename(_math_json),
                         reader_cfg=_reader))

if _env['OC_BACKEND'] == 'vllm':
    _model = dict(type=VLLMwithChatTemplate,
                  model_kwargs=dict(tensor_parallel_size=max(_num_gpus, 1)))
else:
    _model = dict(type=HuggingFacewithChatTemplate)
models = [dict(_model, abbr=_env['OC_ABBR'], path=_env['OC_MODEL_PATH'], max_out_len=int(_env['OC_MAX_OUT_LEN']),
               batch_size=int(_env['OC_BATCH_SIZE']), run_cfg=dict(num_gpus=_num_gpus))]
