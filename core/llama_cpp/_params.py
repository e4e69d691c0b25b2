"""The constructor's keywords: validation, legacy names, and the native param structs."""

from __future__ import annotations

import difflib
import os
import warnings
from typing import Any

from llama_cpp_native import ffi, lib

# Keywords of earlier llama-cpp-python versions that real clients still pass
# (LangChain's LlamaCpp among them).  Mapped ones are translated by the
# constructor; the others no longer mean anything and only warn.
LEGACY_IGNORED = {
    "n_parts": "llama.cpp loads split models itself",
    "f16_kv": "the KV cache type is type_k/type_v",
    "lora_base": "llama.cpp applies adapters to the loaded model directly",
    "mul_mat_q": "llama.cpp chooses its kernels",
    "low_vram": "removed from llama.cpp",
    "n_gqa": "read from the model",
    "rms_norm_eps": "read from the model",
    "rope_scaling": "use rope_scaling_type",
    "rpc_servers": "RPC is configured when building llama.cpp (CMAKE_ARGS=-DGGML_RPC=on)",
    "logits_all_in_batch": "use logits_all",
    "tfs_z": "tail-free sampling was removed from llama.cpp",
    "device": "llama.cpp picks its devices (n_gpu_layers, main_gpu, split_mode, tensor_split)",
}
LEGACY_MAPPED = {"use_mmap", "use_mlock", "use_direct_io", "lora_path", "lora_scale", "embedding", "flash_attn"}


def reject_unknown(kwargs: dict[str, Any], known: list[str]) -> None:
    """TypeError for a keyword no version ever had, suggesting the closest parameter."""
    for name in kwargs:
        if name in LEGACY_IGNORED or name in LEGACY_MAPPED:
            continue
        close = difflib.get_close_matches(name, known + sorted(LEGACY_MAPPED), n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise TypeError(f"Llama() got an unexpected keyword argument {name!r}{hint}")


def warn_ignored(kwargs: dict[str, Any]) -> None:
    for name, value in kwargs.items():
        if name in LEGACY_IGNORED and value is not None:  # passing None is not using it
            warnings.warn(
                f"Llama({name}=...) is ignored: {LEGACY_IGNORED[name]}", DeprecationWarning, stacklevel=4
            )


def legacy_load_mode(use_mmap: bool | None, use_mlock: bool | None, use_direct_io: bool | None) -> int | None:
    """Translate use_mmap/use_mlock/use_direct_io into a llama_load_mode (None: none given)."""
    if use_mmap is None and use_mlock is None and use_direct_io is None:
        return None
    warnings.warn(
        "use_mmap/use_mlock/use_direct_io are deprecated: pass load_mode=llama_load_mode.LLAMA_LOAD_MODE_*",
        DeprecationWarning,
        stacklevel=4,
    )
    if use_direct_io:
        return lib.LLAMA_LOAD_MODE_DIRECT_IO
    mmap = True if use_mmap is None else bool(use_mmap)
    if use_mlock:
        return lib.LLAMA_LOAD_MODE_MMAP_MLOCK if mmap else lib.LLAMA_LOAD_MODE_MLOCK
    return lib.LLAMA_LOAD_MODE_MMAP if mmap else lib.LLAMA_LOAD_MODE_NONE


def legacy_flash_attn(flash_attn: Any, flash_attn_type: int | None) -> int | None:
    """``flash_attn`` (a bool: llama-cpp-python's keyword before ``flash_attn_type``) as a flash_attn_type;
    ``flash_attn_type`` as given when it is not used.  Both given and disagreeing is a ValueError."""
    if flash_attn is None:
        return flash_attn_type
    if not isinstance(flash_attn, bool):
        raise ValueError(f"flash_attn must be True or False, got {flash_attn!r}")
    mapped = lib.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attn else lib.LLAMA_FLASH_ATTN_TYPE_DISABLED
    if flash_attn_type is not None and flash_attn_type not in (lib.LLAMA_FLASH_ATTN_TYPE_AUTO, mapped):
        raise ValueError(f"flash_attn={flash_attn} and flash_attn_type={flash_attn_type} disagree; pass one of them")
    warnings.warn("flash_attn is deprecated: pass flash_attn_type=LLAMA_FLASH_ATTN_TYPE_ENABLED (or _DISABLED, "
                  "_AUTO)", DeprecationWarning, stacklevel=4)
    return mapped


def enum_value(name: str, value: Any, default: int, lo: int, hi: int) -> int:
    """An enum parameter the seed types Optional: None is ``default``, else an integer in ``lo..hi``."""
    return default if value is None else int(check_int(name, value, lo, hi))


def check_int(name: str, value: Any, lo: int | None = None, hi: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        allowed = f">= {lo}" if hi is None else f"in {lo}..{hi}"
        raise ValueError(f"{name} must be {allowed}, got {value}")
    return value


def check_float(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise ValueError(f"{name} must be a number, got {value!r}")
    return float(value)


def gpu_layers(value: Any) -> int:
    """``"auto"`` -> -1 (llama.cpp decides), ``"all"`` -> -2, or a layer count."""
    if isinstance(value, str):
        key = value.strip().lower()
        if key == "auto":
            return -1
        if key == "all":
            return -2
        try:
            return int(key)
        except ValueError:
            raise ValueError(f"n_gpu_layers must be 'auto', 'all' or an integer, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"n_gpu_layers must be 'auto', 'all' or an integer, got {type(value).__name__}")
    return value


def overlap_decode(value: Any, *, n_gpu_layers: int, recurrent: bool) -> bool:
    """Whether the engine starts each next decode before a tick's tokens are handed out (``overlap_decode``;
    docs/engine.md).  ``None`` chooses: on when layers are offloaded to a GPU, whose ``llama_decode`` returns
    once the graph is queued (on the CPU it computes the graph before returning, so starting it earlier only
    delays the tokens).  A recurrent memory cannot drop the token decoded for a reader that stopped."""
    if value is None:
        return n_gpu_layers != 0 and not recurrent and bool(lib.llama_supports_gpu_offload())
    if not isinstance(value, bool):
        raise TypeError(f"overlap_decode must be True, False or None (chosen by the offload), got {value!r}")
    if value and recurrent:
        raise ValueError("overlap_decode=True needs a memory that can drop its last token, and this model's "
                         "recurrent state cannot; pass False or None")
    return value


def default_threads() -> tuple[int, int]:
    """(generation, batch) thread counts: half the cores for generation, all for batches."""
    cpus = os.cpu_count() or 1
    return max(1, cpus // 2), cpus


class KvOverrides:
    """Native ``llama_model_kv_override`` array kept alive as long as the model params use it."""

    def __init__(self, overrides: dict[str, Any]) -> None:
        self.array = ffi.new("struct llama_model_kv_override[]", len(overrides) + 1)
        for i, (key, value) in enumerate(overrides.items()):
            raw = key.encode("utf-8")
            if len(raw) >= 128:
                raise ValueError(f"kv_overrides key {key!r} is longer than 127 bytes")
            item = self.array[i]
            item.key = raw
            if isinstance(value, bool):
                item.tag = lib.LLAMA_KV_OVERRIDE_TYPE_BOOL
                item.val_bool = value
            elif isinstance(value, int):
                item.tag = lib.LLAMA_KV_OVERRIDE_TYPE_INT
                item.val_i64 = value
            elif isinstance(value, float):
                item.tag = lib.LLAMA_KV_OVERRIDE_TYPE_FLOAT
                item.val_f64 = value
            elif isinstance(value, str):
                data = value.encode("utf-8")
                if len(data) >= 128:
                    raise ValueError(f"kv_overrides[{key!r}] is longer than 127 bytes")
                item.tag = lib.LLAMA_KV_OVERRIDE_TYPE_STR
                item.val_str = data
            else:
                raise ValueError(f"kv_overrides[{key!r}] must be bool, int, float or str, got {type(value).__name__}")
        self.array[len(overrides)].key = b""


class BufferOverrides:
    """Native ``llama_model_tensor_buft_override`` array (patterns kept alive with it)."""

    def __init__(self, patterns: list[str], buft: Any) -> None:
        self._patterns = [ffi.new("char[]", p.encode()) for p in patterns]
        self.array = ffi.new("struct llama_model_tensor_buft_override[]", len(patterns) + 1)
        for i, pattern in enumerate(self._patterns):
            self.array[i].pattern = pattern
            self.array[i].buft = buft
        self.array[len(patterns)].pattern = ffi.NULL


_MOE_TENSORS = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"


def moe_cpu_overrides(cpu_moe: bool, n_cpu_moe: int) -> BufferOverrides | None:
    """Keep the MoE expert tensors of all layers (cpu_moe) or of the first n_cpu_moe layers on the CPU."""
    n_cpu_moe = check_int("n_cpu_moe", n_cpu_moe, 0)
    if cpu_moe:
        patterns = [_MOE_TENSORS]
    elif n_cpu_moe:
        patterns = [rf"blk\.{i}{_MOE_TENSORS}" for i in range(n_cpu_moe)]
    else:
        return None
    return BufferOverrides(patterns, lib.ggml_backend_cpu_buffer_type())
