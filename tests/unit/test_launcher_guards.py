"""The launcher refuses a user's mistakes before anything starts (grpo_math/launch_guard.py).

- typos: an environment variable that is not a knob but is close to one stops the launcher and
  setup.sh with one line; ordinary environment variables (this machine's, a CI runner's, the
  names the installed stack reads) never do.
- relaunch (preflight.py --launch, in the launcher's PYTHON): a launch into an OUTPUT_DIR whose checkpoints
  were trained with other settings is refused naming the knobs; a finished run is reported complete and not
  trained; an earlier train.log is kept; RESUME_MODE=disable moves the earlier run aside.
- checkpoints: a tracked checkpoint that verl would load although it is partial (or would skip,
  training from scratch) is refused, naming the last complete one.

The launcher runs here for real up to main_ppo: its PYTHON is a script that runs preflight.py with this
interpreter and records main_ppo's arguments instead of running it: no Ray, no training. The kill during a
real save is tests/e2e/test_resume.py's.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, running_stack
from grpo_math import launch_guard
from grpo_math.launch_guard import (Checkpoints, Refused, checkpoint_problem, differences, edit_distance, knob_files,
                                knob_names, next_log_name, planned_steps, repo_knobs, resume_step, start, typos)

LAUNCHER = REPO / "run_qwen2_5_1_5b.sh"
LAUNCHER_KNOBS = knob_names(knob_files("run_qwen2_5_1_5b.sh"))
KNOWN = repo_knobs()


def flagged(names) -> list[tuple[str, str]]:
    return typos(names, LAUNCHER_KNOBS, KNOWN)


# ------------------------------------------------------------------------------------------
# typos
# ------------------------------------------------------------------------------------------
def test_edit_distance_counts_each_edit_once():
    assert edit_distance("TRAIN_BATH_SIZE", "TRAIN_BATCH_SIZE", 2) == 1  # deletion
    assert edit_distance("TRIAN_BATCH_SIZE", "TRAIN_BATCH_SIZE", 2) == 1  # two neighbours swapped
    assert edit_distance("ACTOR_LT", "ACTOR_LR", 1) == 1  # substitution
    assert edit_distance("MAX_RESPONS_LENGHT", "MAX_RESPONSE_LENGTH", 2) == 2  # deletion + swap
    assert edit_distance("DEVICE", "DEVICE", 1) == 0
    assert edit_distance("PATH", "TRAIN_BATCH_SIZE", 2) == 3  # capped at limit + 1
    assert edit_distance("CA", "ABC", 3) == 3  # optimal string alignment: a swapped pair is not edited again


def test_edit_distance_cap_matches_the_full_table():
    """The early exit and the cap agree with the textbook table (Wagner-Fischer plus swaps)."""
    import random

    def full(a: str, b: str) -> int:
        d = [[i + j if i * j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
        for i in range(1, len(a) + 1):
            for j in range(1, len(b) + 1):
                d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
                if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                    d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
        return d[-1][-1]

    rng = random.Random(0)
    for _ in range(3000):
        a = "".join(rng.choice("AB_C") for _ in range(rng.randint(0, 9)))
        b = "".join(rng.choice("AB_C") for _ in range(rng.randint(0, 9)))
        limit = rng.randint(0, 4)
        assert edit_distance(a, b, limit) == min(full(a, b), limit + 1), (a, b, limit)


@pytest.mark.parametrize("name,knob", [
    ("TRAIN_BATH_SIZE", "TRAIN_BATCH_SIZE"), ("TRIAN_BATCH_SIZE", "TRAIN_BATCH_SIZE"), ("ACTOR_LRR", "ACTOR_LR"),
    ("DEVICES", "DEVICE"), ("device", "DEVICE"), ("Total_Steps", "TOTAL_STEPS"), ("N_SAMPLE", "N_SAMPLES"),
    ("MAX_RESPONS_LENGHT", "MAX_RESPONSE_LENGTH"), ("ASCEND_RT_VISIBLE_DEVICE", "ASCEND_RT_VISIBLE_DEVICES"),
    ("CPU_DTYPES", "CPU_DTYPE"),  # a profile's knob
    ("KL_LOSS_COEFF", "KL_LOSS_COEF"), ("RESUME_MOD", "RESUME_MODE"),
])
def test_close_to_a_knob_is_a_typo(name, knob):
    assert flagged([name]) == [(name, knob)]


@pytest.mark.parametrize("name", [
    "TRAIN_BATCH_SIZE", "CPU_THREADS", "HCCL_EXEC_TIMEOUT",  # knobs of the launcher and its profiles
    "VENV_DIR", "STEP", "FORCE", "LIMIT",  # knobs of setup.sh, merge_checkpoint.sh, evaluate_opencompass.sh
    "NNODES", "SWANLAB_LOGDIR",  # other programs' names, listed in launch_guard.NOT_TYPOS
    "ACTOR_LRXY",  # two edits from an 8-character knob
    "TRAIN_BATCH_SIZ_XY",  # three edits from a long knob
    "_", "1X", "A-B",  # not a knob's shape
])
def test_not_a_typo(name):
    assert flagged([name]) == []


def test_two_edits_only_for_long_knobs():
    assert len("TRAIN_BATCH_SIZE") >= launch_guard.LONG_NAME and flagged(["TRAN_BATH_SIZE"]) == [
        ("TRAN_BATH_SIZE", "TRAIN_BATCH_SIZE")]
    assert len("SAVE_FREQ") < launch_guard.LONG_NAME and flagged(["SAV_FREK"]) == []


def test_knobs_come_from_the_docs_parser(monkeypatch):
    """One parser of NAME=${NAME:-default} lines: the one that writes docs/knobs.md."""
    import grpo_math.knobs

    table = (REPO / "docs" / "knobs.md").read_text()
    for name in knob_names([LAUNCHER, REPO / "profiles" / "cpu.sh"]):
        assert f"| `{name}` |" in table, name
    assert {"TRAIN_BATCH_SIZE", "CPU_DTYPE", "HCCL_CONNECT_TIMEOUT", "N_NODES"} <= set(LAUNCHER_KNOBS)
    monkeypatch.setattr(grpo_math.knobs, "read_knobs", lambda path: [("ONLY_KNOB", "1", "")])
    assert knob_names(knob_files("run_qwen2_5_1_5b.sh")) == ["ONLY_KNOB"]


def test_the_guard_imports_no_maintenance_script():
    """What runs on every launch loads neither the documentation generator nor anything outside
    the standard library and grpo_math (the system's python3 runs it before any environment)."""
    code = ("import runpy, sys\nsys.argv = ['launch_guard', 'typos', 'setup.sh']\n"
            "try:\n    runpy.run_module('grpo_math.launch_guard', run_name='__main__', alter_sys=True)\n"
            "except SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.startswith(('tools', 'grpo_math', 'maintenance'))))")
    proc = subprocess.run([sys.executable, "-S", "-c", code], cwd=REPO, capture_output=True, text=True,
                          env={"PATH": os.environ["PATH"]})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[-2] == "['grpo_math', 'grpo_math.io', 'grpo_math.knobs']"


def test_not_compared_and_not_typos_name_real_knobs():
    """A renamed knob must not leave a stale exemption behind."""
    assert set(launch_guard.NOT_COMPARED) <= set(LAUNCHER_KNOBS)
    assert not set(launch_guard.NOT_TYPOS) & KNOWN


#: Ordinary environment variables: shells and desktops, Python tooling, CI runners (GitHub Actions,
#: GitLab, Jenkins, Buildkite, CircleCI, Travis), containers, Slurm and MPI, torch.distributed,
#: CUDA and NCCL, Ascend CANN and HCCL, Ray, vLLM, Hugging Face, OpenMP and BLAS, trackers, verl.
ORDINARY = """
PATH HOME USER LOGNAME SHELL PWD OLDPWD SHLVL HOSTNAME HOSTTYPE OSTYPE MACHTYPE LANG LANGUAGE LC_ALL LC_CTYPE
LC_MESSAGES TERM TERM_PROGRAM COLORTERM TZ TMPDIR TEMP TMP EDITOR VISUAL PAGER MAIL DISPLAY XAUTHORITY XDG_RUNTIME_DIR
XDG_CONFIG_HOME XDG_CACHE_HOME XDG_DATA_HOME XDG_SESSION_ID XDG_SESSION_TYPE DBUS_SESSION_BUS_ADDRESS SSH_AUTH_SOCK
SSH_CLIENT SSH_CONNECTION SSH_TTY SUDO_USER SUDO_UID SUDO_GID SUDO_COMMAND LS_COLORS LESSOPEN LESSCLOSE HISTFILE
HISTSIZE HISTCONTROL PS1 PS2 PROMPT_COMMAND COLUMNS LINES MANPATH INFOPATH LD_LIBRARY_PATH LD_PRELOAD LIBRARY_PATH
CPATH PKG_CONFIG_PATH CC CXX CFLAGS CXXFLAGS LDFLAGS MAKEFLAGS http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY
NO_PROXY ALL_PROXY SSL_CERT_FILE SSL_CERT_DIR REQUESTS_CA_BUNDLE CURL_CA_BUNDLE DEBIAN_FRONTEND container
JOURNAL_STREAM INVOCATION_ID SYSTEMD_EXEC_PID
PYTHONPATH PYTHONHOME PYTHONUNBUFFERED PYTHONDONTWRITEBYTECODE PYTHONHASHSEED PYTHONWARNINGS PYTHONIOENCODING
PYTHONFAULTHANDLER PYTHONBREAKPOINT PYTHONSTARTUP PYTHONNOUSERSITE PYTHONUTF8 VIRTUAL_ENV VIRTUAL_ENV_PROMPT
CONDA_PREFIX CONDA_DEFAULT_ENV CONDA_EXE CONDA_PYTHON_EXE CONDA_SHLVL CONDA_PROMPT_MODIFIER PYENV_ROOT PYENV_VERSION
PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_FIND_LINKS PIP_NO_CACHE_DIR PIP_CACHE_DIR PIP_DISABLE_PIP_VERSION_CHECK
PIP_DEFAULT_TIMEOUT PIP_TRUSTED_HOST PIP_CONSTRAINT UV_CACHE_DIR UV_INDEX_URL UV_PYTHON POETRY_HOME PYTEST_ADDOPTS
PYTEST_CURRENT_TEST PYTEST_XDIST_WORKER COVERAGE_PROCESS_START MPLBACKEND MPLCONFIGDIR
CI CONTINUOUS_INTEGRATION GITHUB_ACTION GITHUB_ACTION_PATH GITHUB_ACTION_REPOSITORY GITHUB_ACTIONS GITHUB_ACTOR
GITHUB_ACTOR_ID GITHUB_API_URL GITHUB_BASE_REF GITHUB_ENV GITHUB_EVENT_NAME GITHUB_EVENT_PATH GITHUB_GRAPHQL_URL
GITHUB_HEAD_REF GITHUB_JOB GITHUB_OUTPUT GITHUB_PATH GITHUB_REF GITHUB_REF_NAME GITHUB_REF_PROTECTED GITHUB_REF_TYPE
GITHUB_REPOSITORY GITHUB_REPOSITORY_ID GITHUB_REPOSITORY_OWNER GITHUB_REPOSITORY_OWNER_ID GITHUB_RETENTION_DAYS
GITHUB_RUN_ATTEMPT GITHUB_RUN_ID GITHUB_RUN_NUMBER GITHUB_SERVER_URL GITHUB_SHA GITHUB_STATE GITHUB_STEP_SUMMARY
GITHUB_TRIGGERING_ACTOR GITHUB_WORKFLOW GITHUB_WORKFLOW_REF GITHUB_WORKFLOW_SHA GITHUB_WORKSPACE RUNNER_ARCH
RUNNER_DEBUG RUNNER_ENVIRONMENT RUNNER_NAME RUNNER_OS RUNNER_TEMP RUNNER_TOOL_CACHE RUNNER_TRACKING_ID
RUNNER_WORKSPACE ACTIONS_RUNNER_DEBUG ACTIONS_STEP_DEBUG ACTIONS_CACHE_URL ACTIONS_RUNTIME_URL ACTIONS_RUNTIME_TOKEN
ACTIONS_ID_TOKEN_REQUEST_URL ACTIONS_ID_TOKEN_REQUEST_TOKEN ImageOS ImageVersion AGENT_TOOLSDIRECTORY CONDA
JAVA_HOME JAVA_HOME_17_X64 ANDROID_HOME ANDROID_SDK_ROOT ANDROID_NDK_HOME CHROMEWEBDRIVER GECKOWEBDRIVER
EDGEWEBDRIVER SELENIUM_JAR_PATH DOTNET_ROOT DOTNET_NOLOGO DOTNET_SKIP_FIRST_TIME_EXPERIENCE
POWERSHELL_DISTRIBUTION_CHANNEL PIPX_HOME PIPX_BIN_DIR BOOTSTRAP_HASKELL_NONINTERACTIVE GHCUP_INSTALL_BASE_PREFIX
VCPKG_INSTALLATION_ROOT ANT_HOME GRADLE_HOME NVM_DIR SWIFT_PATH HOMEBREW_NO_AUTO_UPDATE ACCEPT_EULA
AZURE_EXTENSION_DIR DEPLOYMENT_BASEPATH XDG_CONFIG_HOME LEIN_HOME LEIN_JAR
GITLAB_CI CI_SERVER CI_JOB_ID CI_JOB_NAME CI_JOB_STAGE CI_JOB_TOKEN CI_COMMIT_SHA CI_COMMIT_REF_NAME
CI_COMMIT_BRANCH CI_PIPELINE_ID CI_PIPELINE_SOURCE CI_PROJECT_DIR CI_PROJECT_NAME CI_PROJECT_PATH CI_RUNNER_ID
CI_REGISTRY CI_REGISTRY_IMAGE CI_DEFAULT_BRANCH CI_NODE_INDEX CI_NODE_TOTAL CI_BUILDS_DIR CI_CONCURRENT_ID
BUILD_NUMBER BUILD_ID BUILD_URL BUILD_TAG JOB_NAME JOB_URL JENKINS_URL JENKINS_HOME WORKSPACE NODE_NAME NODE_LABELS
EXECUTOR_NUMBER GIT_COMMIT GIT_BRANCH GIT_URL BUILDKITE BUILDKITE_BUILD_ID BUILDKITE_BRANCH BUILDKITE_COMMIT
CIRCLECI CIRCLE_BRANCH CIRCLE_SHA1 CIRCLE_NODE_INDEX CIRCLE_NODE_TOTAL TRAVIS TRAVIS_BRANCH TRAVIS_COMMIT
KUBERNETES_SERVICE_HOST KUBERNETES_SERVICE_PORT KUBERNETES_PORT POD_NAME POD_NAMESPACE NODE_IP DOCKER_HOST
NVIDIA_VISIBLE_DEVICES NVIDIA_DRIVER_CAPABILITIES NVIDIA_REQUIRE_CUDA NV_CUDA_LIB_VERSION CUDA_VERSION NCCL_VERSION
SLURM_JOB_ID SLURM_JOB_NAME SLURM_JOB_NODELIST SLURM_NNODES SLURM_NTASKS SLURM_NTASKS_PER_NODE SLURM_PROCID
SLURM_LOCALID SLURM_NODEID SLURM_CPUS_PER_TASK SLURM_GPUS_ON_NODE SLURM_SUBMIT_DIR SLURM_ARRAY_TASK_ID
OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE OMPI_COMM_WORLD_LOCAL_RANK PMI_RANK PMI_SIZE PMIX_RANK
MASTER_ADDR MASTER_PORT WORLD_SIZE RANK LOCAL_RANK LOCAL_WORLD_SIZE NODE_RANK GROUP_RANK ROLE_RANK NNODES
NPROC_PER_NODE TORCHELASTIC_RUN_ID TORCH_NCCL_ASYNC_ERROR_HANDLING TORCH_DISTRIBUTED_DEBUG TORCH_CPP_LOG_LEVEL
TORCH_SHOW_CPP_STACKTRACES TORCH_HOME TORCH_CUDA_ARCH_LIST TORCH_COMPILE_DEBUG TORCHINDUCTOR_CACHE_DIR
TORCH_EXTENSIONS_DIR PYTORCH_CUDA_ALLOC_CONF PYTORCH_NPU_ALLOC_CONF CUBLAS_WORKSPACE_CONFIG
CUDA_VISIBLE_DEVICES CUDA_HOME CUDA_PATH CUDA_DEVICE_ORDER CUDA_LAUNCH_BLOCKING CUDA_DEVICE_MAX_CONNECTIONS
CUDA_MODULE_LOADING NCCL_DEBUG NCCL_DEBUG_SUBSYS NCCL_SOCKET_IFNAME NCCL_IB_DISABLE NCCL_P2P_DISABLE NCCL_SHM_DISABLE
NCCL_TIMEOUT NCCL_ASYNC_ERROR_HANDLING NCCL_BLOCKING_WAIT NCCL_CUMEM_ENABLE NCCL_NVLS_ENABLE NCCL_IB_HCA
NCCL_NET_GDR_LEVEL NVIDIA_TF32_OVERRIDE
ASCEND_RT_VISIBLE_DEVICES ASCEND_VISIBLE_DEVICES ASCEND_TOOLKIT_HOME ASCEND_HOME_PATH ASCEND_AICPU_PATH
ASCEND_OPP_PATH ASCEND_GLOBAL_LOG_LEVEL ASCEND_SLOG_PRINT_TO_STDOUT ASCEND_GLOBAL_EVENT_ENABLE ASCEND_LAUNCH_BLOCKING
ASCEND_PROCESS_LOG_PATH ASCEND_CACHE_PATH ASCEND_WORK_PATH ASCEND_CUSTOM_OPP_PATH ASCEND_DOCKER_RUNTIME ATB_HOME_PATH
ATB_SPEED_HOME_PATH ATB_OPERATION_EXECUTE_ASYNC ATB_LAYER_INTERNAL_TENSOR_REUSE TOOLCHAIN_HOME TASK_QUEUE_ENABLE
CPU_AFFINITY_CONF INF_NAN_MODE_ENABLE COMBINED_ENABLE MULTI_STREAM_MEMORY_REUSE ACLNN_CACHE_LIMIT
HCCL_CONNECT_TIMEOUT HCCL_EXEC_TIMEOUT HCCL_IF_IP HCCL_IF_BASE_PORT HCCL_SOCKET_IFNAME HCCL_SOCKET_FAMILY
HCCL_BUFFSIZE HCCL_INTRA_ROCE_ENABLE HCCL_INTRA_PCIE_ENABLE HCCL_WHITELIST_DISABLE HCCL_WHITELIST_FILE HCCL_RDMA_TC
HCCL_RDMA_SL HCCL_RDMA_TIMEOUT HCCL_RDMA_RETRY_CNT HCCL_OP_EXPANSION_MODE HCCL_DETERMINISTIC HCCL_ALGO
HCCL_ENTRY_LOG_ENABLE HCCL_HOST_SOCKET_PORT_RANGE HCCL_NPU_SOCKET_PORT_RANGE HCCL_OP_BASE_FFTS_MODE_ENABLE
HCCL_ASYNC_ERROR_HANDLING HCCL_EVENT_TIMEOUT LCCL_DETERMINISTIC
RAY_ADDRESS RAY_DEDUP_LOGS RAY_DEBUG RAY_BACKEND_LOG_LEVEL RAY_LOG_TO_STDERR RAY_TMPDIR RAY_memory_monitor_refresh_ms
RAY_memory_usage_threshold RAY_USAGE_STATS_ENABLED RAY_DISABLE_DOCKER_CPU_WARNING RAY_record_ref_creation_sites
RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES RAY_DEBUG_POST_MORTEM
RAY_DASHBOARD_PORT RAY_NAMESPACE RAY_JOB_ID RAY_RUNTIME_ENV_HOOK RAY_OBJECT_STORE_ALLOW_SLOW_STORAGE
VLLM_HOST_IP VLLM_PORT VLLM_USE_V1 VLLM_ATTENTION_BACKEND VLLM_WORKER_MULTIPROC_METHOD VLLM_LOGGING_LEVEL
VLLM_CPU_KVCACHE_SPACE VLLM_CPU_OMP_THREADS_BIND VLLM_USE_MODELSCOPE VLLM_ENABLE_V1_MULTIPROCESSING
VLLM_ALLOW_LONG_MAX_MODEL_LEN VLLM_CACHE_ROOT VLLM_CONFIG_ROOT VLLM_TARGET_DEVICE VLLM_ASCEND_ENABLE_TOPK_OPTIMIZE
VLLM_LOGGING_CONFIG_PATH VLLM_NO_USAGE_STATS VLLM_DO_NOT_TRACK VLLM_RPC_TIMEOUT VLLM_ENGINE_ITERATION_TIMEOUT_S
VLLM_USE_RAY_SPMD_WORKER VLLM_USE_RAY_COMPILED_DAG VLLM_TORCH_PROFILER_DIR VLLM_SLEEP_WHEN_IDLE
HF_HOME HF_ENDPOINT HF_TOKEN HF_HUB_OFFLINE HF_DATASETS_OFFLINE HF_HUB_CACHE HF_DATASETS_CACHE HF_HUB_ENABLE_HF_TRANSFER
HF_HUB_DISABLE_TELEMETRY HF_HUB_DISABLE_PROGRESS_BARS HF_HUB_ETAG_TIMEOUT HF_HUB_DOWNLOAD_TIMEOUT
HF_XET_HIGH_PERFORMANCE HUGGINGFACE_HUB_CACHE HUGGING_FACE_HUB_TOKEN TRANSFORMERS_CACHE TRANSFORMERS_OFFLINE
TRANSFORMERS_VERBOSITY TOKENIZERS_PARALLELISM HF_ALLOW_CODE_EVAL
OMP_NUM_THREADS OMP_WAIT_POLICY OMP_PROC_BIND OMP_PLACES OMP_DYNAMIC OMP_SCHEDULE OMP_STACKSIZE OMP_DISPLAY_ENV
MKL_NUM_THREADS MKL_THREADING_LAYER MKL_SERVICE_FORCE_INTEL KMP_AFFINITY KMP_BLOCKTIME KMP_DUPLICATE_LIB_OK
KMP_SETTINGS KMP_INIT_AT_FORK OPENBLAS_NUM_THREADS NUMEXPR_NUM_THREADS NUMEXPR_MAX_THREADS VECLIB_MAXIMUM_THREADS
GOMP_SPINCOUNT DNNL_VERBOSE ONEDNN_VERBOSE ONEDNN_MAX_CPU_ISA MALLOC_ARENA_MAX JEMALLOC_CONF
WANDB_API_KEY WANDB_PROJECT WANDB_ENTITY WANDB_MODE WANDB_DIR WANDB_RUN_ID WANDB_NAME WANDB_SILENT WANDB_DISABLED
SWANLAB_API_KEY SWANLAB_MODE SWANLAB_LOG_DIR SWANLAB_LOGDIR SWANLAB_PROJ_NAME SWANLAB_WORKSPACE SWANLAB_EXP_NAME
SWANLAB_WEB_HOST SWANLAB_API_HOST SWANLAB_SAVE_DIR MLFLOW_TRACKING_URI TENSORBOARD_DIR COMET_API_KEY
NEPTUNE_API_TOKEN VERL_LOGGING_LEVEL VERL_PPO_LOGGING_LEVEL VERL_USE_EXTERNAL_MODULES VERL_PLATFORM HYDRA_FULL_ERROR
TF_CPP_MIN_LOG_LEVEL TF_ENABLE_ONEDNN_OPTS JAX_PLATFORMS XLA_FLAGS NUMBA_CACHE_DIR TRITON_CACHE_DIR TRITON_HOME
GRPC_VERBOSITY AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_DEFAULT_REGION AWS_REGION AWS_PROFILE AWS_CA_BUNDLE
GOOGLE_APPLICATION_CREDENTIALS OPENAI_API_KEY OPENAI_BASE_URL GIT_SSL_CAINFO GIT_AUTHOR_NAME GIT_AUTHOR_EMAIL
GIT_COMMITTER_NAME GIT_COMMITTER_EMAIL GIT_DIR GIT_WORK_TREE GIT_TERMINAL_PROMPT GIT_ASKPASS GNUPGHOME GPG_TTY
NODE_EXTRA_CA_CERTS NODE_OPTIONS NODE_ENV RUST_BACKTRACE RUST_LOG CARGO_HOME RUSTUP_HOME GOPATH GOROOT GOPROXY
JAVA_OPTS MAVEN_OPTS RECIPE_CPU_RUN_DIR RECIPE_SWANLAB_RUN_DIR CPU_ROLLOUT_DIGEST_FILE RECIPE_DIR
ATB_STREAM_SYNC_EVERY_RUNNER_ENABLE ATB_STREAM_SYNC_EVERY_KERNEL_ENABLE ATB_STREAM_SYNC_EVERY_OPERATION_ENABLE
ATB_OPSRUNNER_SETUP_CACHE_ENABLE ATB_OPSRUNNER_KERNEL_CACHE_TYPE ATB_OPSRUNNER_KERNEL_CACHE_LOCAL_COUNT
ATB_WORKSPACE_MEM_ALLOC_GLOBAL ATB_DEVICE_TILING_BUFFER_BLOCK_NUM ATB_SHARE_MEMORY_NAME_SUFFIX
ATB_LAUNCH_KERNEL_WITH_TILING ATB_MATMUL_SHUFFLE_K_ENABLE ATB_RUNNER_POOL_SIZE ASDOPS_HOME_PATH ASDOPS_LOG_LEVEL
ASDOPS_LOG_TO_STDOUT ASDOPS_LOG_TO_FILE ASDOPS_LOG_PATH LCCL_PARALLEL
""".split()

ENV_READ = re.compile(r"""(?:environ(?:\.get)?|getenv)\s*[(\[]\s*["']([A-Za-z_][A-Za-z0-9_]*)["']""")


def names_read_by(package: str) -> set[str]:
    """Environment variable names an installed package reads (os.environ[...] / .get / getenv)."""
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        return set()
    found = set()
    for path in Path(spec.origin).parent.rglob("*.py"):
        text = path.read_text(errors="replace")
        if "environ" in text or "getenv" in text:
            found.update(ENV_READ.findall(text))
    return found


def test_no_false_alarm_on_ordinary_environment_variables():
    assert flagged(ORDINARY) == []
    assert flagged(os.environ) == []  # this machine's, and the CI runner's when CI runs it


def test_no_false_alarm_on_names_the_stack_reads():
    """Every environment variable name read by the run's packages (verl, Ray, transformers, the
    hub, torch, SwanLab, TensorBoard, vLLM where installed): ~900 names on the reference stack."""
    names = set().union(*(names_read_by(p) for p in
                          ("verl", "ray", "transformers", "huggingface_hub", "torch", "swanlab", "tensorboard", "vllm")))
    assert len(names) > 300
    assert flagged(names) == []


def launcher_env(**env: str) -> dict[str, str]:
    """This process's environment without any knob a developer may have exported, plus ``env``."""
    base = {k: v for k, v in os.environ.items() if k not in KNOWN}
    return {**base, **env}


def test_launcher_refuses_a_typo_before_anything_starts(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run(["bash", str(LAUNCHER)], capture_output=True, text=True, timeout=60,
                          env=launcher_env(TRAIN_BATH_SIZE="4", DEVICE="cpu", DRY_RUN="1", OUTPUT_DIR=str(out)))
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "run_qwen2_5_1_5b.sh: TRAIN_BATH_SIZE is not a knob; did you mean TRAIN_BATCH_SIZE? "
        "(if it is meant for another program, unset it for this command)"]
    assert proc.stdout == "" and not out.exists()  # not even the dry run's command


@pytest.mark.parametrize(("args", "env", "message"), [
    (["trainer.total_epochs=1", "--preflight-only"], {},
     "run_qwen2_5_1_5b.sh: --preflight-only after another argument; expected it first (the rest are Hydra overrides)"),
    ([], {"PROFILE": "cpu_lern"},
     "run_qwen2_5_1_5b.sh: PROFILE=cpu_lern has no profiles/cpu_lern.sh; expected auto or one of: cpu cpu_learn "
     "cuda_1 cuda_2x8 cuda_4 cuda_8 npu_1 npu_2x8 npu_4 npu_8"),
    (["--preflight_only"], {},
     "run_qwen2_5_1_5b.sh: unknown option --preflight_only; expected --help or --preflight-only first, then Hydra "
     "overrides (key=value)"),
], ids=["flag-after-override", "profile-typo", "unknown-option"])
def test_launcher_refuses_a_misplaced_flag_and_an_unknown_profile(tmp_path, args, env, message):
    out = tmp_path / "out"
    proc = subprocess.run(["bash", str(LAUNCHER), *args], capture_output=True, text=True, timeout=60,
                          env=launcher_env(DEVICE="cpu", DRY_RUN="1", OUTPUT_DIR=str(out), **env))
    assert (proc.returncode, proc.stderr.splitlines()) == (2, [message])
    assert proc.stdout == "" and not out.exists()


def test_setup_refuses_a_typo_of_its_own_knob(tmp_path):
    venv = tmp_path / "venv"
    proc = subprocess.run(["bash", str(REPO / "setup.sh"), "--skip-model", "--skip-data"], capture_output=True,
                          text=True, timeout=60, env=launcher_env(VENV_DIR=str(venv), DATA_DIRR="x"))
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "setup.sh: DATA_DIRR is not a knob; did you mean DATA_DIR? (if it is meant for another program, unset it "
        "for this command)"]
    assert not venv.exists() and "device=" not in proc.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["--device", "npu", "--stack", "both"],
     "setup.sh: --stack both needs a venv per stack (cpu, cuda); in an NPU container set up its own stack"),
    (["--device", "cpu", "--stack", "newest"], "setup.sh: --stack newest; expected reference, current or both"),
])
def test_setup_refuses_a_stack_it_cannot_install_in_one_line(tmp_path, args, message):
    venv = tmp_path / "venv"
    proc = subprocess.run(["bash", str(REPO / "setup.sh"), *args], capture_output=True, text=True, timeout=60,
                          env=launcher_env(VENV_DIR=str(venv)))
    assert (proc.returncode, proc.stderr.splitlines()) == (2, [message])
    assert not venv.exists()


def test_launcher_help_says_who_checks_hydra_overrides():
    text = subprocess.run(["bash", str(LAUNCHER), "--help"], capture_output=True, text=True, timeout=30,
                          env=launcher_env(TRAIN_BATH_SIZE="4")).stdout  # --help works even with a typo
    assert "Hydra overrides for main_ppo,\n  checked by verl itself" in text
    assert "TRAIN_BATH_SIZE" in text and "launch_settings.json" in text and "train.N.log" in text


# ------------------------------------------------------------------------------------------
# checkpoints
# ------------------------------------------------------------------------------------------
def fake_checkpoint(ckpt_dir: Path, step: int, world_size: int = 1, track: bool = True) -> Path:
    """The files verl 0.6.0's _save_checkpoint writes for ``step`` (contents are placeholders:
    the guard reads names, sizes and fsdp_config.json only)."""
    actor = ckpt_dir / f"global_step_{step}" / "actor"
    (actor / "huggingface").mkdir(parents=True)
    for kind in ("model", "optim", "extra_state"):
        for rank in range(world_size):
            (actor / f"{kind}_world_size_{world_size}_rank_{rank}.pt").write_bytes(b"x")
    (actor / "huggingface" / "config.json").write_text("{}")
    (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": world_size}))
    (actor.parent / "data.pt").write_bytes(b"x")
    if track:
        (ckpt_dir / "latest_checkpointed_iteration.txt").write_text(str(step))
    return actor.parent


@pytest.mark.parametrize("damage,problem", [
    (lambda d: (d / "data.pt").unlink(), "no data.pt"),
    (lambda d: (d / "actor" / "optim_world_size_2_rank_1.pt").write_bytes(b""), "optim_world_size_2_rank_1.pt missing or empty"),
    (lambda d: (d / "actor" / "extra_state_world_size_2_rank_0.pt").unlink(), "extra_state_world_size_2_rank_0.pt"),
    (lambda d: (d / "actor" / "fsdp_config.json").unlink(), "fsdp_config.json"),
    (lambda d: (d / "actor" / "huggingface" / "config.json").unlink(), "huggingface/config.json"),
    (lambda d: __import__("shutil").rmtree(d / "actor"), "fsdp_config.json"),  # max_actor_ckpt_to_keep's deletion
])
def test_partial_checkpoint_is_named(tmp_path, damage, problem):
    step_dir = fake_checkpoint(tmp_path, 4, world_size=2)
    assert checkpoint_problem(step_dir) is None
    damage(step_dir)
    assert problem in checkpoint_problem(step_dir)


def test_tracked_partial_checkpoint_is_refused_naming_the_last_complete(tmp_path):
    fake_checkpoint(tmp_path, 2)
    partial = fake_checkpoint(tmp_path, 4)
    (partial / "data.pt").unlink()
    with pytest.raises(Refused, match=r"names global_step_4, a partial checkpoint \(no data.pt.*verl would load; "
                                      r"resume from the last complete one with RESUME_MODE=resume_path "
                                      rf"trainer.resume_from_path={tmp_path}/global_step_2, or start over"):
        resume_step(Checkpoints.read(tmp_path))


@pytest.mark.parametrize("tracker,message", [("", "is empty"), ("4\x00", "holds '4\\x00'"), (None, "no latest_checkpointed")])
def test_broken_or_missing_tracker_is_refused(tmp_path, tracker, message):
    fake_checkpoint(tmp_path, 2, track=False)
    if tracker is not None:
        (tmp_path / "latest_checkpointed_iteration.txt").write_text(tracker)
    with pytest.raises(Refused, match=re.escape(message)):
        resume_step(Checkpoints.read(tmp_path))


def test_tracker_naming_a_missing_folder_is_refused(tmp_path):
    fake_checkpoint(tmp_path, 2)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("6")
    with pytest.raises(Refused, match="global_step_6, which does not exist: verl would train from scratch"):
        resume_step(Checkpoints.read(tmp_path))


def test_newer_partial_folder_beside_a_complete_tracked_one_resumes_from_the_tracked(tmp_path):
    fake_checkpoint(tmp_path, 2)
    partial = fake_checkpoint(tmp_path, 3, track=False)
    (partial / "data.pt").unlink()
    assert resume_step(Checkpoints.read(tmp_path)) == 2


def test_nothing_to_resume(tmp_path):
    assert resume_step(Checkpoints.read(tmp_path / "missing")) is None
    partial = fake_checkpoint(tmp_path, 1, track=False)  # killed during the first save
    (partial / "data.pt").unlink()
    assert resume_step(Checkpoints.read(tmp_path)) is None


# ------------------------------------------------------------------------------------------
# settings, length, logs
# ------------------------------------------------------------------------------------------
def test_differences_ignore_length_logging_and_speed():
    old = {"knobs": {"TRAIN_BATCH_SIZE": "4", "TOTAL_STEPS": "2", "LOGGER": "tensorboard", "CPU_THREADS": "2",
                     "ACTOR_LR": "1e-6", "CPU_DTYPE": "bf16"},
           "hydra_overrides": ["trainer.rollout_data_dir=/a", "actor_rollout_ref.actor.clip_ratio=0.2"]}
    new = {"knobs": {"TRAIN_BATCH_SIZE": "4", "TOTAL_STEPS": "9", "LOGGER": "console", "CPU_THREADS": "8",
                     "ACTOR_LR": "1e-5"},
           "hydra_overrides": ["trainer.rollout_data_dir=/b", "+actor_rollout_ref.actor.clip_ratio=0.3",
                               "trainer.total_epochs=3"]}
    assert differences(old, new) == ["ACTOR_LR 1e-6 -> 1e-5", "CPU_DTYPE bf16 -> (unset)",
                                     "actor_rollout_ref.actor.clip_ratio 0.2 -> 0.3"]
    assert differences(old, old) == []


def test_planned_steps():
    never = lambda settings: pytest.fail("counted prompts although TOTAL_STEPS is set")  # noqa: E731
    assert planned_steps({"TOTAL_STEPS": "3"}, {}, never) == 3
    assert planned_steps({"TOTAL_STEPS": "3"}, {"trainer.total_training_steps": "5"}, never) == 5
    knobs = {"TOTAL_STEPS": "null", "TOTAL_EPOCHS": "2", "TRAIN_BATCH_SIZE": "4"}
    assert planned_steps(knobs, {}, lambda s: 10) == 4  # drop_last: 10 // 4 = 2 batches x 2 epochs
    assert planned_steps(knobs, {"trainer.total_epochs": "1"}, lambda s: 10) == 2


def test_kept_prompts_is_verls_filtered_dataset_length(tmp_path):
    """kept_prompts() counts what verl's RLHFDataset keeps with filter_overlong_prompts."""
    model = REPO / "models" / "SmolLM2-135M-Instruct"
    train = REPO / "data" / "verl" / "math_level1" / "train.parquet"
    if not (model / "config.json").is_file() or not train.is_file():
        pytest.skip("needs bash setup.sh --device cpu (model and Level-1 data)")
    from omegaconf import OmegaConf
    from verl.utils.dataset.rl_dataset import RLHFDataset

    import preflight

    max_len = 160  # below the cpu profile's 320, so that some prompts are dropped
    tok = preflight.load_tokenizer(model)
    kept = preflight.kept_prompts(tok, train, max_len)
    cfg = OmegaConf.create({"max_prompt_length": max_len, "filter_overlong_prompts": True, "prompt_key": "prompt",
                            "cache_dir": str(tmp_path), "filter_overlong_prompts_workers": 1})
    dataset = RLHFDataset(data_files=str(train), tokenizer=tok, config=cfg)
    import pyarrow.parquet as pq

    assert 0 < kept == len(dataset) < pq.read_metadata(train).num_rows


def test_next_log_name(tmp_path):
    log = tmp_path / "train.log"
    assert next_log_name(log) == tmp_path / "train.1.log"
    (tmp_path / "train.1.log").touch()
    (tmp_path / "train.7.log").touch()
    (tmp_path / "train.x.log").touch()
    assert next_log_name(log) == tmp_path / "train.8.log"
    assert next_log_name(tmp_path / "console.txt") == tmp_path / "console.1.txt"


def test_start_with_null_total_steps_counts_prompts(tmp_path):
    ckpt = tmp_path / "checkpoints"
    fake_checkpoint(ckpt, 6)
    knobs = {"CKPT_DIR": str(ckpt), "RESUME_MODE": "auto", "TOTAL_STEPS": "null", "TOTAL_EPOCHS": "3",
             "TRAIN_BATCH_SIZE": "4", "OUTPUT_DIR": str(tmp_path)}
    lines = []
    assert start(knobs, [], lines.append, count_kept=lambda s: 9) == launch_guard.EXIT_COMPLETE
    assert lines[-1] == f"run_qwen2_5_1_5b.sh: {tmp_path} is complete at global step 6 (planned: 6); raise TOTAL_EPOCHS to continue"
    assert start({**knobs, "TOTAL_EPOCHS": "4"}, [], lines.append, count_kept=lambda s: 9) == 0


# ------------------------------------------------------------------------------------------
# the launcher, up to main_ppo (a recording PYTHON)
# ------------------------------------------------------------------------------------------
class Launcher:
    """run_qwen2_5_1_5b.sh on the cpu profile in ``tmp_path/out``; its PYTHON runs preflight.py (the relaunch
    guard) for real and records main_ppo's arguments, so each launch runs every guard and trains nothing."""

    def __init__(self, tmp_path: Path):
        self.out = tmp_path / "out"
        self.ckpt = self.out / "checkpoints"
        self.calls = tmp_path / "calls.txt"
        self.python = tmp_path / "python"
        self.python.write_text(f"#!/usr/bin/env bash\nif [[ $1 != -m ]]; then exec {sys.executable} \"$@\"; fi\n"
                               f"printf '%s\\n' \"$*\" >> {self.calls}\necho 'main_ppo ran'\n")
        self.python.chmod(0o755)

    def __call__(self, *args: str, **env: str) -> subprocess.CompletedProcess:
        if self.calls.exists():
            self.calls.unlink()
        run_env = launcher_env(DEVICE="cpu", OUTPUT_DIR=str(self.out), PYTHON=str(self.python), PREFLIGHT="0", **env)
        return subprocess.run(["bash", str(LAUNCHER), *args], env=run_env, capture_output=True, text=True, timeout=120)

    def trained(self) -> bool:
        return self.calls.exists() and self.calls.read_text().startswith("-m verl.trainer.main_ppo ")

    def settings(self) -> dict:
        return json.loads((self.ckpt / "launch_settings.json").read_text())


def test_first_launch_writes_its_settings_beside_the_checkpoints(tmp_path):
    launch = Launcher(tmp_path)
    proc = launch()
    assert proc.returncode == 0 and launch.trained(), proc.stderr
    saved = launch.settings()
    assert saved["knobs"]["TRAIN_BATCH_SIZE"] == "4" and saved["knobs"]["PROFILE"] == "cpu"
    assert saved["knobs"]["CKPT_DIR"] == str(launch.ckpt) and saved["hydra_overrides"] == []
    assert (launch.out / "train.log").read_text() == "main_ppo ran\n"


def test_relaunch_with_other_knobs_is_refused(tmp_path):
    launch = Launcher(tmp_path)
    assert launch().returncode == 0
    fake_checkpoint(launch.ckpt, 2)
    before = (launch.ckpt / "launch_settings.json").read_text()
    proc = launch("actor_rollout_ref.actor.clip_ratio=0.3", TRAIN_BATCH_SIZE="8", TOTAL_STEPS="4", LOGGER="console")
    assert proc.returncode == 2 and not launch.trained()
    assert proc.stderr.splitlines() == [
        f"run_qwen2_5_1_5b.sh: {launch.ckpt}/launch_settings.json: this launch changes what the run in {launch.ckpt} "
        "trained (TRAIN_BATCH_SIZE 4 -> 8; actor_rollout_ref.actor.clip_ratio (not given) -> 0.3): use a new "
        "OUTPUT_DIR, or RESUME_MODE=disable to start over (the earlier run is moved aside)"]
    assert (launch.ckpt / "launch_settings.json").read_text() == before
    assert not (launch.out / "train.1.log").exists()


def test_relaunch_extending_the_run_resumes_and_keeps_the_earlier_log(tmp_path):
    launch = Launcher(tmp_path)
    assert launch().returncode == 0
    fake_checkpoint(launch.ckpt, 2)
    proc = launch(f"trainer.rollout_data_dir={tmp_path / 'rollouts'}", TOTAL_STEPS="4", SAVE_FREQ="1",
                  VAL_BEFORE_TRAIN="False", LOGGER="console", CPU_THREADS="1")
    assert proc.returncode == 0 and launch.trained(), proc.stderr
    assert "the earlier train.log kept as train.1.log" in proc.stderr
    assert (launch.out / "train.1.log").read_text() == "main_ppo ran\n"
    assert launch.settings()["knobs"]["TOTAL_STEPS"] == "4"
    assert launch().returncode == 0 and not launch.trained()  # the profile's TOTAL_STEPS=2: complete
    assert not (launch.out / "train.2.log").exists()


def test_finished_run_is_reported_complete_and_not_trained(tmp_path):
    launch = Launcher(tmp_path)
    assert launch().returncode == 0
    fake_checkpoint(launch.ckpt, 2)  # the cpu profile's TOTAL_STEPS=2
    proc = launch()
    assert proc.returncode == 0 and not launch.trained()
    assert proc.stderr.splitlines() == [
        f"run_qwen2_5_1_5b.sh: {launch.out} is complete at global step 2 (planned: 2); raise TOTAL_STEPS to continue"]
    assert not (launch.out / "train.1.log").exists()
    assert launch(TOTAL_STEPS="3").returncode == 0 and launch.trained()


def test_resume_mode_disable_moves_the_earlier_run_aside(tmp_path):
    launch = Launcher(tmp_path)
    assert launch().returncode == 0
    fake_checkpoint(launch.ckpt, 2)
    (launch.out / "tensorboard").mkdir()
    (launch.out / "tensorboard" / "events.out.tfevents.1").write_bytes(b"x")
    proc = launch(RESUME_MODE="disable", TRAIN_BATCH_SIZE="8")
    assert proc.returncode == 0 and launch.trained(), proc.stderr
    assert "trainer.resume_mode=disable" in launch.calls.read_text()
    moved = re.search(r"RESUME_MODE=disable: the earlier run's files moved aside: (\S+) -> (checkpoints\.\d{8}T\d{6}Z), "
                      r"(\S+) -> (tensorboard\.\d{8}T\d{6}Z)$", proc.stderr.splitlines()[0])
    assert moved, proc.stderr
    aside = launch.out / moved.group(2)
    assert checkpoint_problem(aside / "global_step_2") is None
    assert json.loads((aside / "launch_settings.json").read_text())["knobs"]["TRAIN_BATCH_SIZE"] == "4"
    assert (launch.out / moved.group(4) / "events.out.tfevents.1").is_file()
    assert sorted(p.name for p in launch.ckpt.iterdir()) == ["launch_settings.json"]
    assert launch.settings()["knobs"]["TRAIN_BATCH_SIZE"] == "8"


def test_partial_tracked_checkpoint_stops_the_launcher(tmp_path):
    launch = Launcher(tmp_path)
    assert launch().returncode == 0
    fake_checkpoint(launch.ckpt, 1)
    partial = fake_checkpoint(launch.ckpt, 2)
    __import__("shutil").rmtree(partial / "actor")
    proc = launch(TOTAL_STEPS="3")
    assert proc.returncode == 2 and not launch.trained()
    assert len(proc.stderr.splitlines()) == 1 and "a partial checkpoint (no readable actor/fsdp_config.json)" in proc.stderr


def test_dry_run_and_preflight_only_leave_the_folder_alone(tmp_path):
    launch = Launcher(tmp_path)
    assert launch(DRY_RUN="1").returncode == 0 and not launch.out.exists()


def test_unwritable_checkpoint_folder_is_one_line(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    ckpt = tmp_path / "file" / "checkpoints"
    knobs = {"CKPT_DIR": str(ckpt), "RESUME_MODE": "disable", "LOG_FILE": str(tmp_path / "train.log")}
    code = launch_guard.run_start(knobs, [], count_kept=lambda s: pytest.fail("counted prompts"))
    err = capsys.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1
    assert err.startswith(f"run_qwen2_5_1_5b.sh: {ckpt}: Not a directory; expected a writable CKPT_DIR")


def test_typos_of_an_unknown_script_is_a_usage_error(capsys):
    assert launch_guard.main(["typos", "no_such.sh"]) == 2
    assert "no_such.sh: no such script" in capsys.readouterr().err


def test_the_guard_counts_with_the_tokenizer_the_checks_loaded(tmp_path, monkeypatch, capsys):
    """preflight.py --launch runs the relaunch guard in preflight's interpreter: TOTAL_STEPS=null's prompts are
    counted with the tokenizer the checks loaded (one load in all); with --skip-checks (PREFLIGHT=0) the guard
    loads it itself; a count it cannot make is one line naming TOTAL_STEPS."""
    model = REPO / "models" / "SmolLM2-135M-Instruct"
    train = REPO / "data" / "verl" / "math_level1" / "train.parquet"
    if not (model / "config.json").is_file() or not train.is_file():
        pytest.skip("needs bash setup.sh --device cpu (model and Level-1 data)")
    import grpo_math.model_checks
    import preflight

    loads = []
    real = grpo_math.model_checks.load_tokenizer
    for module in (preflight, grpo_math.model_checks):
        monkeypatch.setattr(module, "load_tokenizer", lambda path: loads.append(Path(path)) or real(path))
    ckpt = tmp_path / "checkpoints"
    fake_checkpoint(ckpt, 2)
    knobs = [f"CKPT_DIR={ckpt}", "RESUME_MODE=auto", "TOTAL_STEPS=null", "TOTAL_EPOCHS=1", "TRAIN_BATCH_SIZE=4",
             f"OUTPUT_DIR={tmp_path}"]

    def argv(train_file: Path = train) -> list[str]:
        return ["--device", "cpu", "--stack", running_stack(), "--profile", "cpu", "--model-path", str(model),
                "--train-file", str(train_file), "--val-file", str(train), "--max-prompt-length", "320",
                "--train-batch-size", "4", "--ppo-mini-batch-size", "4", "--micro-batch", "4", "--n-samples", "4",
                "--n-devices", "1", "--ckpt-dir", str(ckpt), "--no-reward-check"]

    planned = preflight.kept_prompts(real(model), train, 320) // 4
    assert planned > 2
    assert preflight.main([*argv(), "--launch", *knobs]) == 0, capsys.readouterr().err
    assert loads == [model] and capsys.readouterr().err.splitlines()[-1] == (
        f"run_qwen2_5_1_5b.sh: {ckpt} has no launch_settings.json: this launch's settings cannot be compared with "
        "the earlier run's")
    loads.clear()
    fake_checkpoint(ckpt, planned)
    assert preflight.main([*argv(), "--skip-checks", "--launch", *knobs]) == launch_guard.EXIT_COMPLETE
    assert loads == [model] and capsys.readouterr().err.splitlines() == [
        f"run_qwen2_5_1_5b.sh: {tmp_path} is complete at global step {planned} (planned: {planned}); raise "
        "TOTAL_EPOCHS to continue"]
    assert preflight.main([*argv(tmp_path / "none.parquet"), "--skip-checks", "--launch", *knobs]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(
        "run_qwen2_5_1_5b.sh: TOTAL_STEPS=null: cannot count the training prompts to tell whether the run is "
        "complete (FileNotFoundError: ") and err[0].endswith("); set TOTAL_STEPS"), err
