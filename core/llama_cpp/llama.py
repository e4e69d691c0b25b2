"""The ``Llama`` class: a facade over the model, context and sampler handles."""

from __future__ import annotations

import operator
import threading
import warnings
from pathlib import Path
from typing import Any, Callable, Generator, Sequence

import attrs
import numpy as np
from llama_cpp_native import ffi, lib

from . import _compose, _hub, _logger
from . import _params as P
from ._adapters import NO_ADAPTERS, AdapterKey, Adapters
from ._chat import ChatAPI
from ._completion import CompletionAPI
from .plugins import get_host
from ._handles import Batch, Closing, NativeHandle, load_model, new_context
from .sampling import LLAMA_DEFAULT_SEED, ChainContext, SamplerChain, SamplingParams, effective_logit_bias

_GGUF_MAGIC = b"GGUF"


@attrs.frozen
class LlamaState:
    """What ``Llama.save_state`` returns: the tokens and llama.cpp's serialized context state."""

    input_ids: np.ndarray
    n_tokens: int
    llama_state: bytes
    llama_state_size: int
    seed: int
    scores: np.ndarray | None = None  # kept for the seed's field list; logits are part of llama_state
    adapters: AdapterKey = NO_ADAPTERS  # the LoRA adapters / control vector the cached tokens were evaluated with


class LlamaTokenizer:
    """Tokenizes with a Llama's vocabulary (llama-cpp-python's ``LlamaTokenizer``)."""

    def __init__(self, llama: "Llama") -> None:
        self._model = llama

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> list[int]:
        # special=False like Llama.tokenize: user text that spells a special token stays text
        return self._model.tokenize(text, add_bos=add_bos, special=special)

    def detokenize(self, tokens: Sequence[int], prev_tokens: Sequence[int] | None = None,
                   special: bool = False) -> bytes:
        return self._model.detokenize(tokens, prev_tokens=prev_tokens, special=special)

    def encode(self, text: str, add_bos: bool = True, special: bool = False) -> list[int]:
        return self.tokenize(text.encode("utf-8", errors="ignore"), add_bos=add_bos, special=special)

    def decode(self, tokens: Sequence[int]) -> str:
        return self.detokenize(tokens).decode("utf-8", errors="ignore")

    @classmethod
    def from_ggml_file(cls, path: str) -> "LlamaTokenizer":
        return cls(Llama(model_path=path, vocab_only=True, verbose=False))


class GenerationAborted(Exception):
    """Raised inside the generation loop when ``abort()`` interrupted a decode."""


class _TokenArray:
    """The tokens so far as a growing numpy array, so hooks get them without an O(n) copy per token."""

    __slots__ = ("buf", "n")

    def __init__(self, tokens: Sequence[int]) -> None:
        self.buf = np.empty(max(64, 2 * len(tokens)), dtype=np.intc)
        self.buf[: len(tokens)] = tokens
        self.n = len(tokens)

    def append(self, token: int) -> None:
        if self.n == len(self.buf):
            self.buf = np.concatenate([self.buf, np.empty_like(self.buf)])
        self.buf[self.n] = token
        self.n += 1

    def pop(self) -> None:
        self.n -= 1

    def view(self) -> np.ndarray:
        return self.buf[: self.n]


def _check_model_file(path: Path) -> None:
    """Errors a user can act on before llama.cpp sees the file (which only returns NULL)."""
    if not path.exists():
        raise FileNotFoundError(f"model file not found: {str(path)!r}")
    if not path.is_file():
        raise ValueError(f"model path is not a file: {str(path)!r}")
    with open(path, "rb") as fh:
        head = fh.read(4)
    if head != _GGUF_MAGIC:
        raise ValueError(f"{str(path)!r} is not a GGUF file (it starts with {head!r}, a GGUF file with b'GGUF')")


class Llama(ChatAPI, CompletionAPI, Closing):
    """A llama.cpp model and context, with llama-cpp-python's high-level API.

    ``close()`` (or leaving a ``with`` block) frees everything the instance
    created; any call afterwards raises ``RuntimeError``.
    """

    def __init__(
        self,
        model_path: str | Path,
        mmproj_path: str | None = None,
        *,
        # model parameters
        n_gpu_layers: int | str = "auto",
        split_mode: int = lib.LLAMA_SPLIT_MODE_LAYER,
        main_gpu: int = 0,
        tensor_split: Sequence[float] | None = None,
        load_mode: int | None = None,
        lazy_mode: int | None = None,
        kv_overrides: dict[str, bool | int | float | str] | None = None,
        vocab_only: bool = False,
        check_tensors: bool = False,
        use_extra_bufts: bool = True,
        no_host: bool = False,
        no_alloc: bool = False,
        load_mtp: bool = False,
        cpu_moe: bool = False,
        n_cpu_moe: int = 0,
        numa: bool | int = False,
        # context parameters
        seed: int = LLAMA_DEFAULT_SEED,
        n_ctx: int = 512,
        n_keep: int = 256,
        n_batch: int = 2048,
        n_ubatch: int = 512,
        n_seq_max: int = 1,
        n_rs_seq: int = 0,
        n_outputs_max: int = 0,
        n_outputs_max_per_seq: int = 1,
        ctx_type: int = lib.LLAMA_CONTEXT_TYPE_DEFAULT,
        n_threads: int | None = None,
        n_threads_batch: int | None = None,
        rope_scaling_type: int = lib.LLAMA_ROPE_SCALING_TYPE_UNSPECIFIED,
        pooling_type: int = lib.LLAMA_POOLING_TYPE_UNSPECIFIED,
        attention_type: int = lib.LLAMA_ATTENTION_TYPE_UNSPECIFIED,
        flash_attn_type: int = lib.LLAMA_FLASH_ATTN_TYPE_AUTO,
        rope_freq_base: float = 0.0,
        rope_freq_scale: float = 0.0,
        yarn_ext_factor: float = -1.0,
        yarn_attn_factor: float = 1.0,
        yarn_beta_fast: float = 32.0,
        yarn_beta_slow: float = 1.0,
        yarn_orig_ctx: int = 0,
        logits_all: bool = False,
        embeddings: bool = False,
        offload_kqv: bool = True,
        op_offload: bool | None = None,
        swa_full: bool | None = None,
        kv_unified: bool | None = None,
        type_k: int | None = None,
        type_v: int | None = None,
        no_perf: bool = False,
        last_n_tokens_size: int = 64,
        ctx_checkpoints: int = 16,
        checkpoint_interval: int = 4096,
        checkpoint_on_device: bool = False,
        tokenizer: Any = None,
        # capabilities: objects, or dicts that name a plugin (see llama_cpp._compose)
        chat_format: str | None = None,
        chat_handler: Any = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        cache: Any = None,
        speculative: Any = None,
        draft_model: Any = None,
        spm_infill: bool = False,
        verbose: bool = True,
        verbosity: int | str | None = None,
        log_filters: Sequence[str] | None = None,
        log_filters_case_sensitive: bool = True,
        **legacy: Any,
    ) -> None:
        if mmproj_path is not None:
            raise ValueError("mmproj_path: multimodal models need a multimodal handler, and none is available in "
                             "this version of llama_cpp")
        self._closed = True  # until fully constructed, close() has nothing to free
        self._model: NativeHandle | None = None
        self._ctx: NativeHandle | None = None
        self._adapters: Adapters | None = None
        known = [n for n in Llama.__init__.__code__.co_varnames[1:Llama.__init__.__code__.co_argcount
                                                               + Llama.__init__.__code__.co_kwonlyargcount]]
        P.reject_unknown(legacy, known)
        # every argument, for pickling (a pickled Llama loads the model again on the other side)
        frame_args = locals()
        self._init_args = {name: frame_args[name] for name in known if name not in ("model_path",)}
        self._init_args.update(legacy)
        P.warn_ignored(legacy)
        if "embedding" in legacy:
            embeddings = bool(legacy["embedding"]) or embeddings
        mapped_load = P.legacy_load_mode(legacy.get("use_mmap"), legacy.get("use_mlock"), legacy.get("use_direct_io"))
        if load_mode is None:
            load_mode = mapped_load if mapped_load is not None else lib.LLAMA_LOAD_MODE_AUTO

        # process-global, as llama.cpp's log callback is: verbose=False silences all but errors
        if verbosity is not None or not verbose or log_filters is not None:
            _logger.configure_logging(verbosity=verbosity, verbose=None if verbose else False,
                                      log_filters=log_filters, log_filters_case_sensitive=log_filters_case_sensitive)
        path = Path(model_path)
        _check_model_file(path)
        self.model_path = str(path)
        self.verbose = verbose

        # model params
        mparams = lib.llama_model_default_params()
        mparams.n_gpu_layers = P.gpu_layers(n_gpu_layers)
        mparams.split_mode = P.check_int("split_mode", int(split_mode), 0, 3)
        mparams.main_gpu = P.check_int("main_gpu", main_gpu, 0)
        mparams.load_mode = P.check_int("load_mode", int(load_mode), -1, 4)
        if lazy_mode is not None:
            mparams.lazy_mode = P.check_int("lazy_mode", int(lazy_mode), 0, 2)
        self._tensor_split = None
        if tensor_split is not None:
            max_devices = lib.llama_max_devices()
            if len(tensor_split) > max_devices:
                raise ValueError(f"tensor_split has {len(tensor_split)} entries, at most {max_devices} are allowed")
            self._tensor_split = ffi.new("float[]", [float(x) for x in tensor_split] + [0.0] * (max_devices - len(tensor_split)))
            mparams.tensor_split = self._tensor_split
        self._kv_overrides = None
        if kv_overrides:
            self._kv_overrides = P.KvOverrides(kv_overrides)
            mparams.kv_overrides = self._kv_overrides.array
        mparams.vocab_only = bool(vocab_only)
        mparams.check_tensors = bool(check_tensors)
        mparams.use_extra_bufts = bool(use_extra_bufts)
        mparams.no_host = bool(no_host)
        mparams.no_alloc = bool(no_alloc)
        mparams.load_mtp = bool(load_mtp)
        self._buft_overrides = P.moe_cpu_overrides(cpu_moe, n_cpu_moe)
        if self._buft_overrides is not None:
            mparams.tensor_buft_overrides = self._buft_overrides.array

        # context params
        P.check_int("n_ctx", n_ctx, 0)
        P.check_int("n_batch", n_batch, 1)
        P.check_int("n_ubatch", n_ubatch, 1)
        P.check_int("n_seq_max", n_seq_max, 1, 256)
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise ValueError(f"seed must be an integer, got {seed!r}")
        gen_threads, batch_threads = P.default_threads()
        n_threads = gen_threads if n_threads is None or n_threads == -1 else P.check_int("n_threads", n_threads, 1)
        n_threads_batch = (batch_threads if n_threads_batch is None or n_threads_batch == -1
                           else P.check_int("n_threads_batch", n_threads_batch, 1))
        self._seed = LLAMA_DEFAULT_SEED if seed < 0 else seed & 0xFFFFFFFF  # negative: random
        self.n_keep = P.check_int("n_keep", n_keep, 0)
        self.last_n_tokens_size = P.check_int("last_n_tokens_size", last_n_tokens_size, 0)
        self.logits_all = bool(logits_all)
        self.spm_infill = spm_infill
        self.chat_format = chat_format
        self.chat_handler = chat_handler
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        if speculative is not None or draft_model is not None:
            raise ValueError("speculative decoding (speculative=, draft_model=) is not available in this version "
                             "of llama_cpp: no speculative engine is supported yet")
        self.cache = _compose.resolve("cache", cache)

        cparams = lib.llama_context_default_params()
        cparams.n_ctx = n_ctx
        cparams.n_batch = n_batch if n_ctx == 0 else min(n_ctx, n_batch)
        cparams.n_ubatch = min(cparams.n_batch, n_ubatch)
        cparams.n_seq_max = n_seq_max
        cparams.n_rs_seq = P.check_int("n_rs_seq", n_rs_seq, 0)
        cparams.n_outputs_max = P.check_int("n_outputs_max", n_outputs_max, 0)
        cparams.n_outputs_max_per_seq = P.check_int("n_outputs_max_per_seq", n_outputs_max_per_seq, 0)
        cparams.ctx_type = P.check_int("ctx_type", int(ctx_type), 0, 1)
        cparams.n_threads = n_threads
        cparams.n_threads_batch = n_threads_batch
        cparams.rope_scaling_type = int(rope_scaling_type)
        cparams.pooling_type = int(pooling_type)
        cparams.attention_type = int(attention_type)
        cparams.flash_attn_type = P.check_int("flash_attn_type", int(flash_attn_type), -1, 1)
        cparams.rope_freq_base = P.check_float("rope_freq_base", rope_freq_base)
        cparams.rope_freq_scale = P.check_float("rope_freq_scale", rope_freq_scale)
        cparams.yarn_ext_factor = P.check_float("yarn_ext_factor", yarn_ext_factor)
        cparams.yarn_attn_factor = P.check_float("yarn_attn_factor", yarn_attn_factor)
        cparams.yarn_beta_fast = P.check_float("yarn_beta_fast", yarn_beta_fast)
        cparams.yarn_beta_slow = P.check_float("yarn_beta_slow", yarn_beta_slow)
        cparams.yarn_orig_ctx = P.check_int("yarn_orig_ctx", yarn_orig_ctx, 0)
        cparams.embeddings = bool(embeddings)
        cparams.offload_kqv = bool(offload_kqv)
        cparams.no_perf = bool(no_perf)
        for name, value in (("op_offload", op_offload), ("swa_full", swa_full), ("kv_unified", kv_unified)):
            if value is not None:
                setattr(cparams, name, bool(value))
        if type_k is not None:
            cparams.type_k = int(type_k)
        if type_v is not None:
            cparams.type_v = int(type_v)
        if numa:
            lib.llama_numa_init(lib.GGML_NUMA_STRATEGY_DISTRIBUTE if numa is True else int(numa))

        self._model = load_model(path, mparams)
        self._vocab = lib.llama_model_get_vocab(self._model.ptr)
        self._n_vocab = lib.llama_vocab_n_tokens(self._vocab)
        self.context_params = cparams
        self.model_params = mparams
        if not vocab_only:
            self._ctx = new_context(self._model, cparams)
        self._closed = False
        self._tokens: list[int] = []  # the ledger: tokens whose state is in the KV cache
        self._adapters = Adapters(self._model, lib.llama_model_n_embd(self._model.ptr),
                                  lib.llama_model_n_layer(self._model.ptr))
        self._kv_adapters: AdapterKey | None = NO_ADAPTERS  # what the ledger was evaluated with (None: a mix)
        self._batch_handle: Batch | None = None
        self._scores = (np.zeros((lib.llama_n_ctx(self._ctx.ptr), self._n_vocab), dtype=np.float32)
                        if self.logits_all and self._ctx is not None else None)
        self._lock = threading.Lock()
        self._abort = threading.Event()
        abort_flag = self._abort.is_set
        self._abort_cb = ffi.callback("ggml_abort_callback", lambda _data: abort_flag())
        self._eog: list[int] | None = None
        self._piece_buf = ffi.new("char[]", 256)
        self._tok_buf = ffi.new("llama_token[]", 1)
        self.metadata = self._read_metadata()
        self.tokenizer_ = tokenizer
        self.ctx_checkpoints = P.check_int("ctx_checkpoints", ctx_checkpoints, 0)
        self.checkpoint_interval = P.check_int("checkpoint_interval", checkpoint_interval, 1)
        self.checkpoint_on_device = bool(checkpoint_on_device)
        model_ptr = self._model.ptr
        self.is_hybrid = bool(lib.llama_model_is_recurrent(model_ptr) or lib.llama_model_is_hybrid(model_ptr))
        if self.is_hybrid and self.ctx_checkpoints and verbose:
            warnings.warn("recurrent/hybrid model: this version of llama_cpp keeps no state checkpoints "
                          "(ctx_checkpoints), so a prompt that differs from the evaluated one is evaluated again "
                          "from the start", RuntimeWarning, stacklevel=2)
        if self.chat_format is None:  # a plugin for this model family may claim its format
            self.chat_format = get_host().hook().llama_cpp_chat_format_from_metadata(metadata=dict(self.metadata))
        if legacy.get("lora_path"):
            # the constructor's adapter is the default of every request that names none
            lora_path = str(legacy["lora_path"])
            self._adapters.load(lora_path, lora_path)
            self._adapters.default = ((lora_path, float(legacy.get("lora_scale", 1.0))),)
            if self._ctx is not None:
                self._kv_adapters = self._use_adapters(None, None)

    def __getstate__(self) -> dict[str, Any]:
        """The constructor's arguments and the loaded LoRA adapters: unpickling loads them again.

        The KV cache is not carried.
        """
        if self._closed:
            raise RuntimeError("a closed Llama cannot be pickled")
        default = {name for name, _scale in self._adapters.default}
        loras = [(name, path) for name, path in self._adapters.paths().items() if name not in default]
        return {"model_path": self.model_path, **self._init_args, "__loras__": loras}

    def __setstate__(self, state: dict[str, Any]) -> None:
        state = dict(state)
        loras = state.pop("__loras__", [])
        self.__init__(state.pop("model_path"), **state)  # type: ignore[misc]
        for name, path in loras:
            self.load_lora(name, path)

    from_pretrained = classmethod(_hub.from_pretrained)
    from_config = classmethod(_compose.from_config)

    def set_cache(self, cache: Any) -> None:
        """Attach a prompt cache (an object, or a dict naming a cache strategy plugin); None detaches."""
        self.cache = _compose.resolve("cache", cache)

    # -- lifecycle ----------------------------------------------------------
    def close(self) -> None:
        """Free the context, the adapters and the model (idempotent)."""
        self._closed = True
        for handle in [getattr(self, "_batch_handle", None), self._ctx]:
            if handle is not None:
                handle.close()
        if self._adapters is not None:  # after the context that used them, before their model
            self._adapters.close()
        if self._model is not None:
            self._model.close()

    def _live_ctx(self) -> Any:
        if self._closed:
            raise RuntimeError("this Llama instance is closed")
        if self._ctx is None:
            raise RuntimeError("this Llama instance was loaded with vocab_only=True and has no context")
        return self._ctx.ptr

    def _live_model(self) -> Any:
        if self._closed:
            raise RuntimeError("this Llama instance is closed")
        return self._model.ptr  # type: ignore[union-attr]

    # -- LoRA adapters and control vectors ------------------------------------
    def load_lora(self, name: str, path: str | Path) -> None:
        """Load a LoRA adapter under ``name``; requests apply it with ``active_loras=[{"name": name}]``.

        Loading the same file under the same name again does nothing; another
        file under a loaded name is a ValueError (``unload_lora`` it first).
        """
        self._live_model()
        self._adapters.load(name, str(path))  # type: ignore[union-attr]

    def unload_lora(self, name: str) -> None:
        """Free the adapter loaded as ``name`` (taking it off the context first); unknown names are ignored."""
        self._live_model()
        self._adapters.unload(name, self._ctx.ptr if self._ctx is not None else None)  # type: ignore[union-attr]

    def unload_all_loras(self) -> None:
        """Free every loaded adapter, including the constructor's ``lora_path``."""
        self._live_model()
        self._adapters.unload_all(self._ctx.ptr if self._ctx is not None else None)  # type: ignore[union-attr]

    def list_loras(self) -> list[str]:
        """Names of the loaded adapters (the constructor's ``lora_path`` is named by its path)."""
        return self._adapters.names() if self._adapters is not None else []

    def _use_adapters(self, active_loras: Sequence[dict[str, Any]] | None,
                      control_vector: dict[str, Any] | None) -> AdapterKey:
        """Set the requested adapters on the context (None: the constructor's ``lora_path``, no vector)."""
        adapters = self._adapters
        return adapters.apply(self._live_ctx(), adapters.select(active_loras),  # type: ignore[union-attr]
                              adapters.control_vector(control_vector))  # type: ignore[union-attr]

    # -- model information --------------------------------------------------
    def _read_metadata(self) -> dict[str, str]:
        """GGUF metadata as strings (untrusted: undecodable bytes are replaced)."""
        model = self._live_model()
        out: dict[str, str] = {}
        buf_size = 1024
        buf = ffi.new("char[]", buf_size)
        for i in range(lib.llama_model_meta_count(model)):
            n = lib.llama_model_meta_key_by_index(model, i, buf, buf_size)
            if n < 0:
                continue
            key = ffi.string(buf, min(n, buf_size - 1)).decode("utf-8", "replace")
            n = lib.llama_model_meta_val_str_by_index(model, i, buf, buf_size)
            if n >= buf_size:
                big = ffi.new("char[]", n + 1)
                lib.llama_model_meta_val_str_by_index(model, i, big, n + 1)
                value = ffi.string(big, n)
            else:
                value = ffi.string(buf, max(n, 0))
            out[key] = value.decode("utf-8", "replace")
        return out

    def n_ctx(self) -> int:
        return lib.llama_n_ctx(self._live_ctx())

    def n_ctx_train(self) -> int:
        return lib.llama_model_n_ctx_train(self._live_model())

    def n_embd(self) -> int:
        return lib.llama_model_n_embd(self._live_model())

    def n_layer(self) -> int:
        return lib.llama_model_n_layer(self._live_model())

    def n_head(self) -> int:
        return lib.llama_model_n_head(self._live_model())

    def n_vocab(self) -> int:
        self._live_model()
        return self._n_vocab

    def n_params(self) -> int:
        return lib.llama_model_n_params(self._live_model())

    def token_bos(self) -> int:
        self._live_model()
        return lib.llama_vocab_bos(self._vocab)

    def token_eos(self) -> int:
        self._live_model()
        return lib.llama_vocab_eos(self._vocab)

    def token_eot(self) -> int:
        self._live_model()
        return lib.llama_vocab_eot(self._vocab)

    def token_sep(self) -> int:
        self._live_model()
        return lib.llama_vocab_sep(self._vocab)

    def token_nl(self) -> int:
        self._live_model()
        return lib.llama_vocab_nl(self._vocab)

    def token_pad(self) -> int:
        self._live_model()
        return lib.llama_vocab_pad(self._vocab)

    def n_head_kv(self) -> int:
        return lib.llama_model_n_head_kv(self._live_model())

    def n_embd_inp(self) -> int:
        return lib.llama_model_n_embd_inp(self._live_model())

    def n_embd_out(self) -> int:
        return lib.llama_model_n_embd_out(self._live_model())

    def n_layer_nextn(self) -> int:
        return lib.llama_model_n_layer_nextn(self._live_model())

    def n_swa(self) -> int:
        return lib.llama_model_n_swa(self._live_model())

    def token_mask(self) -> int:
        self._live_model()
        return lib.llama_vocab_mask(self._vocab)

    def pooling_type(self) -> int:
        return int(lib.llama_pooling_type(self._live_ctx()))

    @property
    def model(self) -> Any:
        """The raw ``llama_model *`` (for the low-level API)."""
        return self._live_model()

    @property
    def ctx(self) -> Any:
        """The raw ``llama_context *`` (for the low-level API)."""
        return self._live_ctx()

    @property
    def eval_tokens(self) -> list[int]:
        """The tokens whose state is in the KV cache (a copy)."""
        return list(self._tokens)

    @property
    def loaded_lora_count(self) -> int:
        return len(self.list_loras())

    def tokenizer(self) -> "LlamaTokenizer":
        """A tokenizer object over this model (llama-cpp-python's ``LlamaTokenizer``)."""
        return LlamaTokenizer(self)

    @staticmethod
    def logits_to_logprobs(logits: Any, axis: int = -1) -> np.ndarray:
        """log softmax, computed stably in float32."""
        values = np.asarray(logits, dtype=np.float32)
        peak = values.max(axis=axis, keepdims=True)
        shifted = values - peak
        return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))

    @staticmethod
    def longest_token_prefix(a: Sequence[int], b: Sequence[int], verbose: bool = False) -> int:
        """Length of the common prefix of two token sequences."""
        n = 0
        for x, y in zip(a, b):
            if x != y:
                break
            n += 1
        return n

    def _eog_tokens(self) -> list[int]:
        if self._eog is None:
            vocab = self._vocab
            self._eog = [t for t in range(self._n_vocab) if lib.llama_vocab_is_eog(vocab, t)]
        return self._eog

    @property
    def n_tokens(self) -> int:
        return len(self._tokens)

    @property
    def input_ids(self) -> np.ndarray:
        return np.asarray(self._tokens, dtype=np.intc)

    # -- tokens ---------------------------------------------------------------
    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> list[int]:
        """Token ids of ``text`` (bytes, as in llama-cpp-python)."""
        if isinstance(text, str):
            raise TypeError("tokenize() takes bytes; encode the text first (text.encode('utf-8'))")
        self._live_model()
        if self.tokenizer_ is not None:
            return list(self.tokenizer_.tokenize(text, add_bos=add_bos, special=special))
        capacity = len(text) + 2
        buf = ffi.new("llama_token[]", capacity)
        n = lib.llama_tokenize(self._vocab, text, len(text), buf, capacity, add_bos, special)
        if n < 0:
            capacity = -n
            buf = ffi.new("llama_token[]", capacity)
            n = lib.llama_tokenize(self._vocab, text, len(text), buf, capacity, add_bos, special)
            if n < 0:
                raise RuntimeError(f"tokenization failed for {len(text)} bytes")
        return list(buf[0:n])

    def _piece(self, token: int, special: bool = False) -> bytes:
        n = lib.llama_token_to_piece(self._vocab, token, self._piece_buf, 256, 0, special)
        if n < 0:
            big = ffi.new("char[]", -n)
            n = lib.llama_token_to_piece(self._vocab, token, big, -n, 0, special)
            return ffi.buffer(big, n)[:]
        return ffi.buffer(self._piece_buf, n)[:]

    def detokenize(self, tokens: Sequence[int], prev_tokens: Sequence[int] | None = None,
                   special: bool = False) -> bytes:
        """The bytes of ``tokens``; with ``prev_tokens``, as they continue that text."""
        self._live_model()
        if self.tokenizer_ is not None:
            return bytes(self.tokenizer_.detokenize(list(tokens), prev_tokens=prev_tokens, special=special))
        return b"".join(self._piece(t, special) for t in self._token_list(tokens))

    # -- evaluation -----------------------------------------------------------
    def reset(self) -> None:
        """Forget the evaluated tokens and clear the KV cache."""
        ctx = self._live_ctx()
        lib.llama_memory_clear(lib.llama_get_memory(ctx), True)
        self._tokens = []
        self._kv_adapters = self._adapters.applied  # type: ignore[union-attr]

    def set_seed(self, seed: int) -> None:
        self._seed = LLAMA_DEFAULT_SEED if seed < 0 else seed & 0xFFFFFFFF

    # -- state ------------------------------------------------------------------
    def save_state(self) -> "LlamaState":
        """A snapshot of the context (KV cache, RNG) and the evaluated tokens."""
        ctx = self._live_ctx()
        size = lib.llama_state_get_size(ctx)
        buf = ffi.new("uint8_t[]", size)
        written = lib.llama_state_get_data(ctx, buf, size)
        return LlamaState(input_ids=np.asarray(self._tokens, dtype=np.intc), n_tokens=len(self._tokens),
                          llama_state=ffi.buffer(buf, written)[:], llama_state_size=written, seed=self._seed,
                          adapters=self._kv_adapters)

    def load_state(self, state: "LlamaState") -> None:
        """Restore a snapshot taken by ``save_state`` on a context of the same model and size."""
        ctx = self._live_ctx()
        data = state.llama_state
        if len(data) != state.llama_state_size:
            raise ValueError(f"corrupt LlamaState: {len(data)} bytes of state, header says {state.llama_state_size}")
        read = lib.llama_state_set_data(ctx, data, len(data))
        if read != len(data):
            raise RuntimeError(f"llama.cpp did not accept the saved state ({read} of {len(data)} bytes read); "
                               "was it saved from another model or context size?")
        self._tokens = [int(t) for t in state.input_ids[: state.n_tokens]]
        self._seed = state.seed
        self._kv_adapters = state.adapters

    # logging (process-global, see llama_cpp._logger)
    def set_verbosity(self, verbosity: int | str | bool) -> int:
        level = _logger.set_verbosity(verbosity)
        self.verbose = level >= 3
        return level

    def get_verbosity(self) -> int:
        return _logger.get_verbosity()

    def set_log_filters(self, filters: Sequence[str], *, case_sensitive: bool = True) -> None:
        _logger.set_log_filters(filters, case_sensitive=case_sensitive)

    def add_log_filters(self, filters: Sequence[str]) -> None:
        _logger.add_log_filters(filters)

    def get_log_filters(self) -> list[str]:
        return _logger.get_log_filters()

    def clear_log_filters(self) -> None:
        _logger.clear_log_filters()

    def reset_log_filters(self) -> None:
        _logger.reset_log_filters()

    def abort(self) -> None:
        """Stop a running generation from another thread (finish_reason "abort")."""
        self._abort.set()

    def _decode(self, tokens: Sequence[int], keep_scores: bool = True) -> None:
        """Decode in n_batch chunks; a long prefill can be interrupted by ``abort()``.

        With ``logits_all`` every token's logits are requested and kept in
        ``scores`` (the caller asked for that history); otherwise only the last
        token's logits are computed.
        """
        ctx = self._live_ctx()
        n_batch = self.context_params.n_batch
        interruptible = len(tokens) > 32  # the callback runs per graph node: too costly per token
        if interruptible:
            lib.llama_set_abort_callback(ctx, self._abort_cb, ffi.NULL)
        try:
            for start in range(0, len(tokens), n_batch):
                chunk = tokens[start:start + n_batch]
                if self._scores is not None:
                    batch = self._batch()
                    batch.set_tokens(chunk, len(self._tokens), logits_last=True, logits_all=True)
                    rc = lib.llama_decode(ctx, batch.batch)
                else:
                    arr = ffi.new("llama_token[]", chunk)
                    rc = lib.llama_decode(ctx, lib.llama_batch_get_one(arr, len(chunk)))
                if rc == 2:  # aborted: drop whatever part of the chunk reached the cache
                    lib.llama_memory_seq_rm(lib.llama_get_memory(ctx), 0, len(self._tokens), -1)
                    raise GenerationAborted()
                if rc != 0:
                    raise RuntimeError(f"llama_decode failed ({rc}) on a batch of {len(chunk)} tokens")
                if self._scores is not None and keep_scores:
                    rows = np.frombuffer(ffi.buffer(lib.llama_get_logits(ctx), len(chunk) * self._n_vocab * 4),
                                         dtype=np.float32).reshape(len(chunk), self._n_vocab)
                    self._scores[len(self._tokens):len(self._tokens) + len(chunk)] = rows
                self._tokens.extend(chunk)
        finally:
            if interruptible:
                lib.llama_set_abort_callback(ctx, ffi.NULL, ffi.NULL)

    def _batch(self) -> Batch:
        if self._batch_handle is None:
            self._batch_handle = Batch(self.context_params.n_batch)
        return self._batch_handle

    @property
    def scores(self) -> np.ndarray:
        """With ``logits_all=True``: the logits of every evaluated token (row i for token i)."""
        if self._scores is None:
            raise RuntimeError("scores are kept only with Llama(logits_all=True)")
        return self._scores[: len(self._tokens)]

    @property
    def eval_logits(self) -> np.ndarray:
        return self.scores

    def _shift_context(self, incoming: int) -> None:
        """Make room for ``incoming`` tokens by discarding old ones after the first n_keep."""
        ctx = self._live_ctx()
        n_ctx = self.n_ctx()
        mem = lib.llama_get_memory(ctx)
        if not lib.llama_memory_can_shift(mem):
            raise RuntimeError(
                f"the context is full ({len(self._tokens)} + {incoming} > n_ctx {n_ctx}) and this model's "
                "memory cannot shift; increase n_ctx"
            )
        n_past = len(self._tokens)
        required = n_past + incoming - n_ctx
        keep = min(self.n_keep, n_past - required)  # n_keep >= n_ctx would leave nothing to discard
        discard = max(required, (n_past - keep) // 2)
        lib.llama_memory_seq_rm(mem, 0, keep, keep + discard)
        lib.llama_memory_seq_add(mem, 0, keep + discard, -1, -discard)
        if self._scores is not None:  # the logits rows move with their tokens
            self._scores[keep:n_past - discard] = self._scores[keep + discard:n_past]
        del self._tokens[keep:keep + discard]

    def _token_list(self, tokens: Sequence[int]) -> list[int]:
        """Token ids as Python ints (numpy integers welcome), each checked against the vocabulary."""
        try:
            ids = [operator.index(t) for t in tokens]
        except TypeError:
            raise TypeError("token ids must be integers") from None
        for t in ids:
            if not 0 <= t < self._n_vocab:
                raise ValueError(f"token id {t} is outside the vocabulary (0..{self._n_vocab - 1})")
        return ids

    def eval(self, tokens: Sequence[int], active_loras: Sequence[dict[str, Any]] | None = None,
             control_vector: dict[str, Any] | None = None, copy_logits: bool = True) -> None:
        """Evaluate ``tokens`` after those already in the context.

        ``active_loras``/``control_vector`` choose the adapters these tokens
        are evaluated with (omitted: the constructor's ``lora_path`` and no
        vector).  With ``logits_all``, ``copy_logits=False`` leaves their rows
        of ``scores`` unfilled.
        """
        self._note_adapters(self._use_adapters(active_loras, control_vector))
        self._eval(self._token_list(tokens), copy_logits)

    def _note_adapters(self, key: AdapterKey) -> None:
        """Tokens are about to be appended under ``key``: remember what the ledger was evaluated with."""
        if not self._tokens:
            self._kv_adapters = key
        elif key != self._kv_adapters:
            self._kv_adapters = None  # a mix of adapters: never reused as a prefix

    def _eval(self, tokens: list[int], keep_scores: bool = True) -> None:
        if len(self._tokens) + len(tokens) > self.n_ctx():
            if len(tokens) > self.n_ctx():
                raise ValueError(f"{len(tokens)} tokens do not fit in the context window of {self.n_ctx()}")
            self._shift_context(len(tokens))
        self._decode(tokens, keep_scores)

    def _prepare(self, tokens: Sequence[int], adapters: AdapterKey) -> None:
        """Reuse the longest common prefix with the KV cache, evaluate the rest.

        Only a prefix evaluated with the same adapters is reused.
        """
        ctx = self._live_ctx()
        if self._tokens and adapters != self._kv_adapters:
            lib.llama_memory_clear(lib.llama_get_memory(ctx), True)
            self._tokens = []
        self._kv_adapters = adapters
        prefix = self.longest_token_prefix(self._tokens, tokens)
        if prefix == len(tokens):
            prefix -= 1  # the last token must be evaluated again to get its logits
        if prefix < len(self._tokens):
            mem = lib.llama_get_memory(ctx)
            if prefix <= 0 or not lib.llama_memory_seq_rm(mem, 0, prefix, -1):
                lib.llama_memory_clear(mem, True)
                prefix = 0
            del self._tokens[prefix:]
        self._eval(list(tokens[prefix:]))

    def _sampling(self, overrides: dict[str, Any]) -> SamplingParams:
        values = {k: v for k, v in overrides.items() if v is not None}
        if values.get("seed") is None:
            values["seed"] = self._seed
        elif values["seed"] < 0:
            values["seed"] = LLAMA_DEFAULT_SEED
        return SamplingParams(**values)

    def _chain(self, params: SamplingParams) -> SamplerChain:
        return SamplerChain(ChainContext(params=params, vocab=self._vocab, n_vocab=self._n_vocab, n_ctx=self.n_ctx(),
                                         eog_tokens=self._eog_tokens() if params.ignore_eos else (),
                                         history=tuple(self._tokens)))

    def generate(self, tokens: Sequence[int], *, reset: bool = True,
                 logits_processor: Callable[..., Any] | None = None,
                 stopping_criteria: Callable[..., bool] | None = None,
                 active_loras: Sequence[dict[str, Any]] | None = None,
                 control_vector: dict[str, Any] | None = None,
                 **sampling: Any) -> Generator[int, Any, None]:
        """Yield sampled tokens after evaluating ``tokens``, until an end-of-generation token.

        Sampling keywords are those of :class:`~llama_cpp.sampling.SamplingParams`
        (``temp`` is accepted for ``temperature``).  ``send(tokens)`` to the
        generator evaluates extra tokens after the one just yielded.
        ``active_loras``/``control_vector`` as for ``eval``.
        """
        if "temp" in sampling:
            sampling["temperature"] = sampling.pop("temp")
        params = self._sampling(sampling)
        token_list = self._token_list(tokens)
        if not token_list:
            raise ValueError("generate() needs at least one token to start from")
        return self._generate(token_list, params, reset, logits_processor, stopping_criteria,
                              self._adapter_request(active_loras, control_vector))

    def _adapter_request(self, active_loras: Sequence[dict[str, Any]] | None,
                         control_vector: dict[str, Any] | None) -> tuple[Any, Any]:
        """Validate a request's adapters now (not when a lazy generator first runs)."""
        adapters = self._adapters
        if adapters is None:
            raise RuntimeError("this Llama instance is closed")
        return adapters.select(active_loras), adapters.control_vector(control_vector)

    def sample(self, idx: int = -1, **sampling: Any) -> int:
        """Sample one token from the logits of the last evaluated token (or output ``idx``) and accept it.

        The sampling keywords are those of ``generate``; a chain is built for
        this one call, so stateful samplers (mirostat, penalties) start fresh.
        """
        ctx = self._live_ctx()
        if not self._tokens:
            raise RuntimeError("sample() needs evaluated tokens: call eval() first")
        if "temp" in sampling:
            sampling["temperature"] = sampling.pop("temp")
        chain = self._chain(self._sampling(sampling))
        try:
            if chain.biased_argmax and len(chain.active) == 1:
                return int(self.logits_view().argmax()) if idx == -1 else chain.sample(ctx, idx)
            return chain.sample(ctx, idx)
        finally:
            chain.close()

    def logits_view(self) -> np.ndarray:
        """The logits of the last evaluated token: a zero-copy float32 view, valid until the next decode."""
        ptr = lib.llama_get_logits_ith(self._live_ctx(), -1)
        if ptr == ffi.NULL:
            raise RuntimeError("no logits are available: nothing was evaluated yet")
        return np.frombuffer(ffi.buffer(ptr, self._n_vocab * 4), dtype=np.float32)

    def _generate(self, tokens: list[int], params: SamplingParams, reset: bool = True,
                  logits_processor: Callable[..., Any] | None = None,
                  stopping_criteria: Callable[..., bool] | None = None,
                  adapters: tuple[Any, Any] | None = None) -> Generator[int, Any, None]:
        ctx = self._live_ctx()
        if not self._lock.acquire(blocking=False):
            raise RuntimeError("another generation is already running on this Llama instance")
        try:
            self._abort.clear()
            key = self._adapters.apply(ctx, *(adapters or self._adapter_request(None, None)))  # type: ignore
            try:
                if reset:
                    self._prepare(tokens, key)
                else:
                    self._note_adapters(key)
                    self._eval(tokens)
            except GenerationAborted:
                return
            chain = self._chain(params)
            try:
                vocab = self._vocab
                tok_buf = self._tok_buf
                one = lib.llama_batch_get_one(tok_buf, 1)  # reused: it points at tok_buf
                sample, decode, is_eog = lib.llama_sampler_sample, lib.llama_decode, lib.llama_vocab_is_eog
                chain_ptr = chain.ptr
                stop_on_eog = not params.ignore_eos
                aborted = self._abort.is_set
                n_ctx = self.n_ctx()
                ledger = self._tokens
                python_hooks = logits_processor is not None or stopping_criteria is not None
                ids = _TokenArray(ledger) if python_hooks else None
                # A chain that is only argmax needs no candidate array of the whole
                # vocabulary: numpy's argmax over the logits view picks the same token
                # (the first maximum, as llama.cpp's greedy sampler does) in a tenth of the time.
                argmax = chain.biased_argmax and logits_processor is None
                if argmax:
                    bias = effective_logit_bias(params, self._n_vocab, self._eog_tokens() if params.ignore_eos else ())
                    bias_ids = np.fromiter(bias.keys(), dtype=np.intp, count=len(bias))
                    bias_values = np.fromiter(bias.values(), dtype=np.float32, count=len(bias))
                get_logits, n_bytes, logits_ptr, view = lib.llama_get_logits_ith, self._n_vocab * 4, None, None
                while not aborted():
                    if logits_processor is not None:
                        view = self.logits_view()
                        edited = logits_processor(ids.view(), view)
                        if edited is not view and edited is not None:
                            view[:] = edited
                    if argmax:
                        ptr = get_logits(ctx, -1)
                        if ptr != logits_ptr:
                            logits_ptr, view = ptr, np.frombuffer(ffi.buffer(ptr, n_bytes), dtype=np.float32)
                        if len(bias_ids):
                            view[bias_ids] += bias_values
                        token = int(view.argmax())
                    else:
                        token = sample(chain_ptr, ctx, -1)
                    if stop_on_eog and is_eog(vocab, token):
                        return
                    if stopping_criteria is not None:
                        ids.append(token)
                        stop = stopping_criteria(ids.view(), self.logits_view())
                        ids.pop()
                        if stop:
                            return
                    sent = yield token
                    if len(ledger) + 1 > n_ctx:
                        self._shift_context(1)
                        ledger = self._tokens
                        if ids is not None:
                            ids = _TokenArray(ledger)
                    tok_buf[0] = token
                    rc = decode(ctx, one)
                    if rc != 0:
                        raise RuntimeError(f"llama_decode failed ({rc})")
                    if self._scores is not None:
                        self._scores[len(ledger)] = self.logits_view()
                    ledger.append(token)
                    if ids is not None:
                        ids.append(token)
                    if sent:  # generator.send(tokens): evaluate extra tokens after the sampled one
                        self._eval(self._token_list(sent))
                        if ids is not None:
                            ids = _TokenArray(self._tokens)
                        ledger = self._tokens
            finally:
                chain.close()
        finally:
            self._lock.release()
