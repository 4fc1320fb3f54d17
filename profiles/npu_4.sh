# shellcheck shell=bash
# Profile npu_4: the reference run. 4 Atlas A2 NPUs, 1 node, vLLM(-Ascend) rollout with
# tensor parallel 2. The launcher's defaults ARE this profile, so nothing is overridden here.
