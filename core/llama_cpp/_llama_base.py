"""``LlamaBase``: the model, its context and engine, tokenization and state; everything of ``Llama`` but
its completion, chat and embedding methods.

Those methods (``_completion``, ``_chat``, ``_embedding``) subclass this class, and ``llama_cpp.llama.Llama``
joins them: each API module then sees the facade's members as its own, typed, and this module needs none of
them.
"""

from __future__ import annotations

import contextlib
import warnings
from pathlib import Path
from typing import Any, Callable, Generator, Iterator, Mapping, Sequence

from typing_extensions import Self

import attrs
import numpy as np
from llama_cpp_native import ffi, lib

from . import _compose, _hub, _logger, _speculation, state_file
from . import _params as P
from ._adapters import NO_ADAPTERS, AdapterKey, Adapters
from ._chat_handlers import multimodal_handler, named_template_format
from ._embedding_context import check_embedding_context
from ._handles import Closing, as_pointer, load_model, new_context
from .engine import Context, Model, Request, Scheduler, SequenceSampler, SequenceSnapshot
from .engine.checkpoints import Checkpoint, HybridCheckpointCache
from .engine.ledger import Ledger
from .engine.prefix import common_prefix
from .engine.model import learned_positions
from .engine.origin import state_origin
from .engine.policy import Policy
from .engine.prefix_summary import BLOCK_TOKENS, MAX_HASHES, PrefixSummary
from .engine.scheduler import CLOSED
from .engine.sampler import chain_context
from .engine.slot import SequenceInfo, Slot
from .engine.speculative import SpeculativeStep, empty_stats
from .llama_grammar import LlamaGrammar
from .llama_tokenizer import BaseLlamaTokenizer, LlamaTokenizer
from .plugins import get_host
from .sampling import LLAMA_DEFAULT_SEED, SamplerChain, SamplingParams, normalize_seed, sampling_arguments


class LlamaDecodeAbort(RuntimeError):
    """``Llama.eval`` was stopped by ``abort()`` before all its tokens were evaluated: the end of that request.

    The sequence holds the tokens evaluated before the interrupted batch (``n_tokens``): the engine
    takes the interrupted batch back out of llama.cpp's memory, so nothing needs resetting.
    """


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
    # the LoRA adapters / control vector the cached tokens were evaluated with; None: under a mix of them
    adapters: AdapterKey | None = NO_ADAPTERS
    # partial states of a recurrent / hybrid / windowed memory along the tokens (engine.checkpoints), so that
    # a prompt that shares only part of the tokens continues from the last checkpoint before they differ
    checkpoints: tuple[Checkpoint, ...] = ()


_UNLIMITED = 1 << 62  # no max_tokens: generate() runs until end of generation or until the reader stops


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

class LlamaBase(Closing):
    """A llama.cpp model and context: the part of :class:`llama_cpp.Llama` that its API methods build on.

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
        ctx_type: int | None = lib.LLAMA_CONTEXT_TYPE_DEFAULT,
        n_threads: int | None = None,
        n_threads_batch: int | None = None,
        rope_scaling_type: int | None = lib.LLAMA_ROPE_SCALING_TYPE_UNSPECIFIED,
        pooling_type: int = lib.LLAMA_POOLING_TYPE_UNSPECIFIED,
        attention_type: int | None = lib.LLAMA_ATTENTION_TYPE_UNSPECIFIED,
        flash_attn_type: int | None = lib.LLAMA_FLASH_ATTN_TYPE_AUTO,
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
        tokenizer: BaseLlamaTokenizer | None = None,
        # capabilities: objects, or dicts that name a plugin (see llama_cpp._compose)
        chat_format: str | None = None,
        chat_handler: Any = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        chat_template_name: str | None = None,
        chat_handler_kwargs: dict[str, Any] | None = None,
        cache: Any = None,
        speculative: Any = None,
        scheduling: Any = None,
        overlap_decode: bool | None = None,
        draft_model: Any = None,
        spm_infill: bool = False,
        verbose: bool = True,
        progress_callback: Callable[[float], object] | None = None,
        verbosity: int | str | None = None,
        log_filters: Sequence[str] | None = None,
        log_filters_case_sensitive: bool = True,
        **legacy: Any,
    ) -> None:
        self._closed = True  # until fully constructed, close() has nothing to free
        self._threadpools: tuple[Any, Any] | None = None  # the caller's ggml threadpools, while attached
        self._owned_handler: Any = None  # the multimodal handler mmproj_path made: closed with this Llama
        self._model: Model | None = None
        self._ctx: Context | None = None
        self._scheduler: Scheduler | None = None
        self._spec_step: SpeculativeStep | None = None
        self._adapters: Adapters | None = None
        code = LlamaBase.__init__.__code__
        known = list(code.co_varnames[1:code.co_argcount + code.co_kwonlyargcount])
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
        self.mmproj_path = None if mmproj_path is None else str(mmproj_path)
        owned_handler = None
        if mmproj_path is not None:  # before the model loads: a wrong projector fails fast
            if chat_handler is not None:  # the seed's rule: the handler mmproj_path makes replaces it
                warnings.warn("mmproj_path makes a multimodal chat handler, which replaces the chat_handler "
                              "passed (as in llama-cpp-python); pass only one of them", UserWarning, stacklevel=2)
            # the handler chooses its template (chat_format names a family)
            owned_handler = multimodal_handler(mmproj_path, chat_format, chat_template_name,
                                               dict(chat_handler_kwargs or {}), verbose)
        self.model_path = str(path)
        self.verbose = verbose

        spec_engine = _speculation.resolve(speculative, draft_model)

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
        mparams.load_mtp = bool(load_mtp) or (spec_engine is not None and spec_engine.needs_target_mtp())
        self._buft_overrides = P.moe_cpu_overrides(cpu_moe, n_cpu_moe)
        if self._buft_overrides is not None:
            mparams.tensor_buft_overrides = self._buft_overrides.array

        # context params
        P.check_int("n_ctx", n_ctx, 0)
        P.check_int("n_batch", n_batch, 1)
        P.check_int("n_ubatch", n_ubatch, 1)
        P.check_int("n_seq_max", n_seq_max, 1, lib.llama_max_parallel_sequences())
        gen_threads, batch_threads = P.default_threads()
        n_threads = gen_threads if n_threads is None or n_threads == -1 else P.check_int("n_threads", n_threads, 1)
        n_threads_batch = (batch_threads if n_threads_batch is None or n_threads_batch == -1
                           else P.check_int("n_threads_batch", n_threads_batch, 1))
        self._seed = normalize_seed(seed)
        self.n_keep = P.check_int("n_keep", n_keep, 0)
        self.last_n_tokens_size = P.check_int("last_n_tokens_size", last_n_tokens_size, 0)
        self.logits_all = bool(logits_all)
        self.spm_infill = spm_infill
        self.chat_format = chat_format
        self.chat_handler = chat_handler
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        cache = _compose.resolve("cache", cache)
        policy = _compose.scheduling_policy(scheduling)

        cparams = lib.llama_context_default_params()
        cparams.n_ctx = n_ctx
        cparams.n_batch = n_batch if n_ctx == 0 else min(n_ctx, n_batch)
        cparams.n_ubatch = min(cparams.n_batch, n_ubatch)
        cparams.n_seq_max = n_seq_max
        cparams.n_rs_seq = P.check_int("n_rs_seq", n_rs_seq, 0)
        cparams.n_outputs_max = P.check_int("n_outputs_max", n_outputs_max, 0)
        if 0 < n_outputs_max < n_seq_max:  # llama.cpp asserts (and aborts the process) otherwise
            raise ValueError(f"n_outputs_max must be 0 (n_batch) or at least n_seq_max ({n_seq_max}): every "
                             f"sequence may need its logits in one decode; got {n_outputs_max}")
        cparams.n_outputs_max_per_seq = P.check_int("n_outputs_max_per_seq", n_outputs_max_per_seq, 0)
        cparams.ctx_type = P.enum_value("ctx_type", ctx_type, lib.LLAMA_CONTEXT_TYPE_DEFAULT, 0, 1)
        cparams.n_threads = n_threads
        cparams.n_threads_batch = n_threads_batch
        # the seed types these Optional: None is llama.cpp's default (follow the model, or auto)
        cparams.rope_scaling_type = P.enum_value("rope_scaling_type", rope_scaling_type,
                                                 lib.LLAMA_ROPE_SCALING_TYPE_UNSPECIFIED, -1,
                                                 lib.LLAMA_ROPE_SCALING_TYPE_MAX_VALUE)
        cparams.pooling_type = int(pooling_type)
        cparams.attention_type = P.enum_value("attention_type", attention_type, lib.LLAMA_ATTENTION_TYPE_UNSPECIFIED,
                                              -1, lib.LLAMA_ATTENTION_TYPE_NON_CAUSAL)
        cparams.flash_attn_type = P.enum_value("flash_attn_type",
                                               P.legacy_flash_attn(legacy.get("flash_attn"), flash_attn_type),
                                               lib.LLAMA_FLASH_ATTN_TYPE_AUTO, -1, 1)
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

        self._model = Model(load_model(path, mparams, quiet=not verbose, progress=progress_callback))
        self.context_params = cparams
        self.model_params = mparams
        self._closed = False
        self._adapters = Adapters(self._model.handle, lib.llama_model_n_embd(self._model.ptr),
                                  lib.llama_model_n_layer(self._model.ptr), quiet=not verbose)
        model_ptr = self._model.ptr
        # llama-cpp-python's names for what the architecture is (code written for it reads them)
        self._is_recurrent = bool(lib.llama_model_is_recurrent(model_ptr))
        self._is_hybrid = bool(lib.llama_model_is_hybrid(model_ptr))
        recurrent = self._is_recurrent or self._is_hybrid
        overlap = P.overlap_decode(overlap_decode, n_gpu_layers=mparams.n_gpu_layers, recurrent=recurrent)
        windowed = lib.llama_model_n_swa(model_ptr) > 0
        if not windowed:
            cparams.swa_full = False  # no window: nothing to keep full size (the seed does the same)
        # a memory that cannot always drop a suffix: recurrent state, or a window that prunes old cells
        self.is_hybrid = recurrent or (windowed and not cparams.swa_full)
        self.ctx_checkpoints = P.check_int("ctx_checkpoints", ctx_checkpoints, 0)
        self.checkpoint_interval = P.check_int("checkpoint_interval", checkpoint_interval, 1)
        self.checkpoint_on_device = bool(checkpoint_on_device)
        if spec_engine is not None:
            _speculation.size_context(spec_engine, cparams, recurrent=recurrent)
        if not vocab_only:
            if cparams.embeddings:
                check_embedding_context(model_ptr, cparams)
            self._ctx = Context(new_context(self._model.handle, cparams, quiet=not verbose), self._model.n_vocab,
                                swa_full=bool(cparams.swa_full), max_positions=learned_positions(path, model_ptr))
            self._ctx.origin = state_origin(path, cparams, self._ctx.ptr)
            if spec_engine is not None:
                self._spec_step = _speculation.make_step(spec_engine, self._model, self._ctx, cparams,
                                                         recurrent=recurrent, verbose=verbose)
            checkpoints: bool | dict[str, Any] = self.is_hybrid and {
                "max_checkpoints": self.ctx_checkpoints, "interval": self.checkpoint_interval,
                "on_device": self.checkpoint_on_device, "verbose": verbose}
            self._scheduler = Scheduler(self._model, self._ctx, self._adapters, n_keep=self.n_keep,
                                        logits_all=self.logits_all, max_outputs=cparams.n_outputs_max,
                                        step=self._spec_step, checkpoints=checkpoints, policy=policy,
                                        overlap=overlap)
        self.set_cache(cache)
        self.metadata = self._read_metadata()
        if tokenizer is not None and not all(callable(getattr(tokenizer, m, None)) for m in ("tokenize", "detokenize")):
            raise TypeError(f"tokenizer must be a llama_cpp.llama_tokenizer.BaseLlamaTokenizer (tokenize and "
                            f"detokenize methods), got {type(tokenizer).__name__}")
        self._tokenizer = tokenizer  # the caller's (Llama(tokenizer=...)), which tokenize/detokenize use
        self.chat_template_name = chat_template_name
        self.chat_handler_kwargs = dict(chat_handler_kwargs or {})
        if mmproj_path is not None:
            self.chat_handler = self._owned_handler = owned_handler
        elif self.chat_handler_kwargs:
            warnings.warn("chat_handler_kwargs are passed to the multimodal handler that mmproj_path creates; "
                          "without mmproj_path they are not used", UserWarning, stacklevel=2)
        if mmproj_path is None and chat_template_name is not None:
            self.chat_format = named_template_format(self.metadata, chat_template_name, chat_format)
        elif mmproj_path is None and self.chat_format is None:  # a plugin for this family may claim its format
            self.chat_format = get_host().hook().llama_cpp_chat_format_from_metadata(metadata=dict(self.metadata))
        if legacy.get("lora_path"):
            # the constructor's adapter is the default of every request that names none
            lora_path = str(legacy["lora_path"])
            self._adapters.load(lora_path, lora_path)
            self._adapters.default = ((lora_path, float(legacy.get("lora_scale", 1.0))),)

    def __getstate__(self) -> dict[str, Any]:
        """The constructor's arguments and the loaded LoRA adapters: unpickling loads them again.

        The KV cache is not carried.
        """
        if self._closed:
            raise RuntimeError("a closed Llama cannot be pickled")
        default = {name for name, _scale in self._loaded_adapters.default}
        loras = [(name, path) for name, path in self._loaded_adapters.paths().items() if name not in default]
        return {"model_path": self.model_path, **self._init_args, "__loras__": loras}

    def __setstate__(self, state: dict[str, Any]) -> None:
        state = dict(state)
        loras = state.pop("__loras__", [])
        self.__init__(state.pop("model_path"), **state)  # type: ignore[misc]  # unpickling: construct in place
        for name, path in loras:
            self.load_lora(name, path)

    @classmethod
    def from_pretrained(cls, repo_id: str, filename: str, additional_files: list[str] | None = None,
                        local_dir: str | None = None, local_dir_use_symlinks: bool | str = "auto",
                        cache_dir: str | None = None, **kwargs: Any) -> Self:
        """Download the file of ``repo_id`` matching the glob ``filename`` from the Hugging Face Hub and load
        it with ``kwargs``.

        ``filename`` (and each glob of ``additional_files``) must match exactly one
        file of the repository.  When it matches the first shard of a split model,
        every shard is downloaded.  Files go to the Hugging Face cache
        (``cache_dir``) or to ``local_dir``.  ``local_dir_use_symlinks`` is passed on
        only to the huggingface_hub versions that still accept it.
        """
        return _hub.from_pretrained(cls, repo_id, filename, additional_files, local_dir, local_dir_use_symlinks,
                                    cache_dir, **kwargs)

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | str | Path, **overrides: Any) -> Self:
        """Build a Llama from a dict or a TOML file of constructor keywords.

        ``model = "default"`` (or no model at all) uses the default model; a
        relative ``model_path`` in a TOML file is relative to that file.
        ``overrides`` replace the configuration's values (the command line's
        flags do this); a ``model_path`` among them is taken as it is.
        """
        model_path, values = _compose.constructor_arguments(config, overrides)
        return cls(model_path, **values)

    @property
    def last_speculative_stats(self) -> dict[str, Any]:
        """Counters and timings of the last finished generation's speculation (the seed's 46 keys; all
        zero without speculation).  docs/speculative.md says what each one counts."""
        if self._spec_step is None:
            return empty_stats()
        return dict(self._spec_step.last_stats)

    @property
    def speculative_totals(self) -> dict[str, Any]:
        """Speculation counters over every finished generation, under llama-server's metric names
        (``spec_decode_num_draft_tokens_total``...); all zero without speculation."""
        if self._spec_step is None:
            return {"spec_decode_num_draft_tokens_total": 0, "spec_decode_num_accepted_tokens_total": 0,
                    "spec_decode_num_drafts_total": 0, "spec_decode_num_accepted_tokens_per_pos_total": []}
        return self._spec_step.totals()

    def prefix_summary(self, block_tokens: int = BLOCK_TOKENS, max_hashes: int = MAX_HASHES) -> PrefixSummary:
        """The prefixes this Llama can reuse (its sequences' and its prompt cache's) as chained block hashes,
        for a router that sends a prompt where its prefix already is (:mod:`llama_cpp.engine.prefix_summary`)."""
        return self._live_scheduler().prefix_summary(block_tokens, max_hashes)

    @property
    def _hybrid_cache_mgr(self) -> HybridCheckpointCache | None:
        """The seed's name for the checkpoint keeper of a recurrent, hybrid or pruned-window memory
        (None for other models)."""
        return self._scheduler.checkpoints if self._scheduler is not None else None

    @property
    def speculative_engine(self) -> Any:
        """The speculative engine this Llama drafts with (None without speculation)."""
        return self._spec_step.engine if self._spec_step is not None else None

    @property
    def scheduling_policy(self) -> Policy | None:
        """The policy that orders this Llama's requests (``scheduling=``; None for a vocab_only Llama)."""
        return self._scheduler.policy if self._scheduler is not None else None

    def set_cache(self, cache: Any) -> None:
        """Attach a prompt cache (an object, or a dict naming a cache strategy plugin); None detaches.

        One cache serves every sequence: when a request takes a sequence, the cached snapshot sharing the
        longest prefix with its prompt is restored if it beats what the sequence holds; when a generation
        ends, the sequence's snapshot is stored.
        """
        self.cache = _compose.resolve("cache", cache)
        if self._scheduler is not None:
            self._scheduler.cache = self.cache

    # -- lifecycle ----------------------------------------------------------
    def close(self) -> None:
        """Free the context, the adapters and the model (idempotent); a multimodal handler made by
        ``mmproj_path`` is closed, one passed in only lets go of what it made for this model.  A generation
        running or waiting on another thread ends first (its decode aborted and waited for): its reader
        raises a RuntimeError.  Called from a hook inside a generation, it raises instead."""
        if self._scheduler is not None:  # a generation on another thread ends first (its reader raises)
            self._scheduler.close()
        if not self._closed:
            handler = self.chat_handler
            if handler is not None and handler is self._owned_handler:
                handler.close()
            elif callable(getattr(handler, "release", None)):
                handler.release(self)
        self._closed = True
        if self._spec_step is not None:  # its draft context refers to ours: it goes first
            self._spec_step.close()
        if self._ctx is not None:
            self._ctx.close()
        if self._adapters is not None:  # after the context that used them, before their model
            self._adapters.close()
        if self._model is not None:
            self._model.close()

    @property
    def _loaded_model(self) -> Model:
        """The model: loaded by the constructor and kept until ``close()`` (its calls raise after that)."""
        if self._model is None:
            raise RuntimeError("this Llama instance has no model: its construction failed")
        return self._model

    @property
    def _loaded_adapters(self) -> Adapters:
        """The adapter set, made with the model (``_loaded_model``)."""
        if self._adapters is None:
            raise RuntimeError("this Llama instance has no model: its construction failed")
        return self._adapters

    def _live_ctx(self) -> Any:
        return self._live_scheduler().ctx.ptr

    def _settled_ctx(self) -> Any:
        """The ``llama_context *`` for a call that reads its logits or memory: no decode of ours is still
        running on it (the overlap's, docs/engine.md)."""
        scheduler = self._live_scheduler()
        scheduler.settle()
        return scheduler.ctx.ptr

    def _live_scheduler(self) -> Scheduler:
        if self._closed:
            raise RuntimeError(CLOSED)
        if self._scheduler is None:
            raise RuntimeError("this Llama instance was loaded with vocab_only=True: it tokenizes and reads the "
                               "model's metadata, but has no context to evaluate, generate or embed with")
        return self._scheduler

    def _live_model(self) -> Model:
        """The model, unless ``close()`` was called; its native calls go through ``Model.read`` (and its
        own methods), which ``close()`` on another thread waits for."""
        if self._closed:
            raise RuntimeError(CLOSED)
        return self._loaded_model

    @property
    def _vocab(self) -> Any:
        return self._loaded_model.vocab

    @property
    def _n_vocab(self) -> int:
        return self._loaded_model.n_vocab

    @property
    def _n_ctx(self) -> int:
        """llama-cpp-python's attribute for ``n_ctx()``, which code written for it reads."""
        return self.n_ctx()

    # -- LoRA adapters and control vectors ------------------------------------
    def load_lora(self, name: str, path: str | Path) -> None:
        """Load a LoRA adapter under ``name``; requests apply it with ``active_loras=[{"name": name}]``.

        Loading the same file under the same name again does nothing; another
        file under a loaded name is a ValueError (``unload_lora`` it first).
        """
        self._live_model()
        self._loaded_adapters.load(name, str(path))

    def unload_lora(self, name: str) -> None:
        """Free the adapter loaded as ``name`` (taking it off the context first); unknown names are ignored.

        An adapter a running generation uses is a RuntimeError: it would be
        freed under that generation.
        """
        with self._adapters_idle([name]):
            self._loaded_adapters.unload(name, self._ctx.ptr if self._ctx is not None else None)

    def unload_all_loras(self) -> None:
        """Free every loaded adapter, including the constructor's ``lora_path``."""
        with self._adapters_idle(self.list_loras()):
            self._loaded_adapters.unload_all(self._ctx.ptr if self._ctx is not None else None)

    @contextlib.contextmanager
    def _adapters_idle(self, names: Sequence[str]) -> Iterator[None]:
        """Own the context (no tick runs) and check that no running generation uses these adapters."""
        self._live_model()
        if self._scheduler is None:
            yield
            return
        with self._scheduler.exclusive():
            for slot in self._scheduler.slots:
                if slot.request is not None and self._scheduler.busy(slot):
                    used = {lora[0] for lora in slot.request.adapter_key.loras}
                    if used & set(names):
                        raise RuntimeError(f"LoRA adapter(s) {sorted(used & set(names))} are in use by a running "
                                           "generation; unload them when it has finished")
            yield

    def list_loras(self) -> list[str]:
        """Names of the loaded adapters (the constructor's ``lora_path`` is named by its path)."""
        return self._adapters.names() if self._adapters is not None else []

    # -- model information --------------------------------------------------
    def _read_metadata(self) -> dict[str, str]:
        """GGUF metadata as strings (untrusted: undecodable bytes are replaced)."""
        out: dict[str, str] = {}
        buf_size = 1024
        buf = ffi.new("char[]", buf_size)
        with self._live_model().handle.calling as model:
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
        return self._live_model().read(lib.llama_model_n_ctx_train)

    def n_embd(self) -> int:
        return self._live_model().read(lib.llama_model_n_embd)

    def n_layer(self) -> int:
        return self._live_model().read(lib.llama_model_n_layer)

    def n_head(self) -> int:
        return self._live_model().read(lib.llama_model_n_head)

    def n_vocab(self) -> int:
        self._live_model()
        return self._n_vocab

    def n_params(self) -> int:
        return self._live_model().read(lib.llama_model_n_params)

    def add_bos_token(self) -> bool:
        """Whether a text prompt starts with BOS: the vocabulary asks for it and has one (llama.cpp's rule)."""
        self._live_model()
        return self._loaded_model.adds_bos

    def token_bos(self) -> int:
        return self._live_model().read_vocab(lib.llama_vocab_bos)

    def token_eos(self) -> int:
        return self._live_model().read_vocab(lib.llama_vocab_eos)

    def token_eot(self) -> int:
        return self._live_model().read_vocab(lib.llama_vocab_eot)

    def token_sep(self) -> int:
        return self._live_model().read_vocab(lib.llama_vocab_sep)

    def token_nl(self) -> int:
        return self._live_model().read_vocab(lib.llama_vocab_nl)

    def token_pad(self) -> int:
        return self._live_model().read_vocab(lib.llama_vocab_pad)

    def n_head_kv(self) -> int:
        return self._live_model().read(lib.llama_model_n_head_kv)

    def n_embd_inp(self) -> int:
        return self._live_model().read(lib.llama_model_n_embd_inp)

    def n_embd_out(self) -> int:
        return self._live_model().read(lib.llama_model_n_embd_out)

    def n_layer_nextn(self) -> int:
        return self._live_model().read(lib.llama_model_n_layer_nextn)

    def n_swa(self) -> int:
        return self._live_model().read(lib.llama_model_n_swa)

    def token_mask(self) -> int:
        return self._live_model().read_vocab(lib.llama_vocab_mask)

    def pooling_type(self) -> int:
        return int(lib.llama_pooling_type(self._live_ctx()))

    @property
    def model(self) -> int:
        """The ``llama_model *`` as the low-level API (``llama_cpp.llama_cpp``, ctypes) takes it: an int.
        For the cffi functions: ``ffi.cast("struct llama_model *", llm.model)``."""
        self._live_model()
        return self._loaded_model.model

    @property
    def ctx(self) -> int:
        """The ``llama_context *`` as the low-level API takes it: an int.  Decoding on it, or editing its
        memory, through ``llama_cpp.llama_cpp`` is allowed between calls: the engine then re-evaluates
        the next prompt instead of trusting what it remembered (docs/low-level.md)."""
        scheduler = self._live_scheduler()
        scheduler.settle()  # no decode of ours is still running when the caller's low-level calls start
        return scheduler.ctx.ctx

    @property
    def n_batch(self) -> int:
        """The logical batch size: llama.cpp's (which caps it at ``n_ctx``), or the one asked for
        without a context (``vocab_only``)."""
        return self._ctx.n_batch if self._ctx is not None else int(self.context_params.n_batch)

    @property
    def n_threads(self) -> int:
        return int(self.context_params.n_threads)

    @property
    def n_threads_batch(self) -> int:
        return int(self.context_params.n_threads_batch)

    @property
    def scheduler(self) -> Scheduler:
        """The engine's scheduler: its sequences (``slots``), queue and counters (docs/engine.md)."""
        return self._live_scheduler()

    @property
    def eval_tokens(self) -> list[int]:
        """The tokens the current sequence holds in memory (a copy)."""
        return list(self._settled_ledger().tokens)

    @property
    def loaded_lora_count(self) -> int:
        return len(self.list_loras())

    @property
    def tokenizer_(self) -> BaseLlamaTokenizer:
        """The tokenizer this Llama tokenizes with: the one given to the constructor, else a
        ``LlamaTokenizer`` over the model's own vocabulary (made on each access, so that it holds no
        reference cycle that would keep the model loaded after the last reference to the Llama goes)."""
        return self._tokenizer if self._tokenizer is not None else LlamaTokenizer(self)

    @tokenizer_.setter
    def tokenizer_(self, tokenizer: BaseLlamaTokenizer | None) -> None:
        self._tokenizer = tokenizer

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
        return common_prefix(a, b)

    def _eog_tokens(self) -> list[int]:
        return self._loaded_model.eog_tokens()

    @property
    def n_tokens(self) -> int:
        """How many tokens the current sequence holds (the one the last request or eval used)."""
        return len(self._settled_ledger())

    @property
    def input_ids(self) -> np.ndarray:
        return np.asarray(self._settled_ledger().tokens, dtype=np.intc)

    def _settled_ledger(self) -> Ledger:
        """The current sequence's ledger, after a stopped reader's unread tokens have left memory
        (``Scheduler.settle``): a stream cut by a stop string holds what it held when its last token read
        was sampled, as llama-cpp-python's does, not what a burst decoded past it."""
        scheduler = self._live_scheduler()
        scheduler.settle()
        return scheduler.current.ledger

    # -- tokens ---------------------------------------------------------------
    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> list[int]:
        """Token ids of ``text`` (bytes, as in llama-cpp-python)."""
        if isinstance(text, str):
            raise TypeError("tokenize() takes bytes; encode the text first (text.encode('utf-8'))")
        self._live_model()
        if self._tokenizer is not None:
            return list(self._tokenizer.tokenize(text, add_bos=add_bos, special=special))
        return self._loaded_model.tokenize(text, add_bos, special)

    def _piece(self, token: int, special: bool = False) -> bytes:
        return self._loaded_model.piece(token, special)

    def detokenize(self, tokens: Sequence[int], prev_tokens: Sequence[int] | None = None,
                   special: bool = False) -> bytes:
        """The bytes of ``tokens``; with ``prev_tokens``, as they continue that text.

        As in llama-cpp-python, the space a SentencePiece tokenizer puts in front of the text after BOS
        comes off again (``[1, 15043, 2787]`` is ``b"Hello World"``); elsewhere spaces stay, so tokens
        detokenized one at a time add up to the text (``[15043]`` is ``b" Hello"``).
        """
        self._live_model()
        if self._tokenizer is not None:
            return bytes(self._tokenizer.detokenize(list(tokens), prev_tokens=prev_tokens, special=special))
        return self._loaded_model.detokenize(self._token_list(tokens), special,
                                      text_start=not prev_tokens)

    # -- evaluation -----------------------------------------------------------
    def reset(self) -> None:
        """Forget the evaluated tokens: the memory of every sequence no generation is using is cleared."""
        scheduler = self._live_scheduler()
        with scheduler.exclusive():
            scheduler.clear_idle()

    def set_seed(self, seed: int) -> None:
        self._seed = normalize_seed(seed)

    # -- state ------------------------------------------------------------------
    def save_state(self) -> LlamaState:
        """A snapshot of the context (every sequence's memory, the RNG) and the current sequence's tokens."""
        scheduler = self._live_scheduler()
        with scheduler.exclusive():
            ledger = scheduler.current.ledger
            data = scheduler.ctx.state()
            tokens = np.asarray(ledger.tokens, dtype=np.intc)
            adapters = ledger.adapters
            checkpoints = tuple(c for c in ledger.checkpoints if not c.on_device)
        return LlamaState(input_ids=tokens, n_tokens=len(tokens), llama_state=data, llama_state_size=len(data),
                          seed=self._seed, adapters=adapters, checkpoints=checkpoints)

    def load_state(self, state: LlamaState) -> None:
        """Restore a snapshot taken by ``save_state`` on a context of the same model and size.

        It replaces the whole context, so no generation may be running.
        """
        scheduler = self._live_scheduler()
        data = state.llama_state
        if len(data) != state.llama_state_size:
            raise ValueError(f"corrupt LlamaState: {len(data)} bytes of state, header says {state.llama_state_size}")
        with scheduler.exclusive():
            if any(scheduler.busy(slot) for slot in scheduler.slots):
                raise RuntimeError("load_state replaces the whole context, and a generation is running on it; "
                                   "finish or close it first")
            read = scheduler.load_state(data, state.input_ids[: state.n_tokens].tolist(), state.adapters,
                                        state.checkpoints)
            if read != len(data):
                raise RuntimeError(f"llama.cpp did not accept the saved state ({read} of {len(data)} bytes read); "
                                   "was it saved from another model or context size?")
        self._seed = state.seed

    def snapshot_sequence(self, seq_id: int | None = None) -> SequenceSnapshot:
        """One sequence's tokens and memory (``llama_state_seq_get_data``); default: the current sequence."""
        scheduler = self._live_scheduler()
        with scheduler.exclusive():
            return self._slot(seq_id).ledger.snapshot(scheduler.ctx)

    def restore_sequence(self, snapshot: SequenceSnapshot, seq_id: int | None = None) -> None:
        """Put a ``snapshot_sequence`` back into a sequence no generation is using (default: the current one)."""
        scheduler = self._live_scheduler()
        with scheduler.exclusive():
            slot = self._slot(seq_id)
            if scheduler.busy(slot):
                raise RuntimeError(f"sequence {slot.seq_id} is in use by a running generation")
            scheduler.restore_sequence(slot, snapshot)

    def erase_sequence(self, seq_id: int) -> int:
        """Empty one sequence no generation is using; returns how many tokens it held."""
        scheduler = self._live_scheduler()
        with scheduler.exclusive():
            slot = self._slot(seq_id)
            if scheduler.busy(slot):
                raise RuntimeError(f"sequence {slot.seq_id} is in use by a running generation")
            return scheduler.clear_sequence(slot)

    def sequences(self) -> list[SequenceInfo]:
        """What each sequence of the context holds now, and whether a generation is using it."""
        scheduler = self._live_scheduler()
        with scheduler.exclusive():
            return [SequenceInfo(slot.seq_id, len(slot.ledger), scheduler.busy(slot)) for slot in scheduler.slots]

    def save_session(self, path: str | Path, seq_id: int | None = None) -> None:
        """Write one sequence (default: the current one) to ``path`` as a state file (docs/caches.md has
        the format): its tokens, adapters, checkpoints and llama.cpp's state, with the model and context
        it belongs to and a checksum.  The file is replaced atomically."""
        state_file.write_state_file(path, self.snapshot_sequence(seq_id))

    def load_session(self, path: str | Path, seq_id: int | None = None) -> None:
        """Put a ``save_session`` file back into a sequence no generation is using (default: the current
        one).  A file that is damaged, not a state file, or of another model or context raises a
        :class:`llama_cpp.state_file.StateFileError` (a ValueError) before the sequence is touched."""
        snapshot = state_file.read_state_file(path, origin=self._live_scheduler().ctx.origin)
        self.restore_sequence(snapshot, seq_id)

    def _slot(self, seq_id: int | None) -> Slot:
        scheduler = self._live_scheduler()
        if seq_id is None:
            return scheduler.current
        if isinstance(seq_id, bool) or not isinstance(seq_id, int) or not 0 <= seq_id < len(scheduler.slots):
            raise ValueError(f"seq_id must be in 0..{len(scheduler.slots) - 1} (n_seq_max {len(scheduler.slots)}), "
                             f"got {seq_id!r}")
        return scheduler.slots[seq_id]

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
        """Stop every running or waiting generation (finish_reason "abort"), from any thread.

        A long prompt being evaluated is interrupted too; generations started
        afterwards run normally.
        """
        self._live_scheduler().abort()

    def attach_threadpool(self, threadpool: Any, threadpool_batch: Any = None) -> None:
        """Compute this context on ggml threadpools the caller made (``ggml_threadpool_new``): ``threadpool``
        for single tokens, ``threadpool_batch`` for prompts (the first one when omitted).

        The pools stay the caller's: this Llama neither makes nor frees them, and keeps a reference while
        they are attached.  Detach (``detach_threadpool``) before freeing a pool.  A handle is cffi cdata
        or the int the low-level API (``llama_cpp.llama_cpp``) hands out.
        """
        scheduler = self._live_scheduler()
        pool = as_pointer(threadpool, "struct ggml_threadpool *")
        batch_pool = ffi.NULL if threadpool_batch is None else as_pointer(threadpool_batch,
                                                                          "struct ggml_threadpool *")
        with scheduler.exclusive():  # no decode runs while the pools change
            lib.llama_synchronize(scheduler.ctx.ptr)
            lib.llama_attach_threadpool(scheduler.ctx.ptr, pool, batch_pool)
            self._threadpools = (threadpool, threadpool_batch)

    def detach_threadpool(self) -> None:
        """Back to llama.cpp's own threads (``n_threads``/``n_threads_batch``), once pending work is done."""
        scheduler = self._live_scheduler()
        with scheduler.exclusive():
            lib.llama_synchronize(scheduler.ctx.ptr)
            lib.llama_detach_threadpool(scheduler.ctx.ptr)
            self._threadpools = None

    @property
    def scores(self) -> np.ndarray:
        """The logits of the current sequence's evaluated tokens (row i for token i) with ``logits_all=True``;
        without it only the last decode's last row is kept, as with llama-cpp-python: a (1, n_vocab) copy
        (none before anything was evaluated)."""
        scheduler = self._live_scheduler()
        scheduler.settle()
        ledger = scheduler.current.ledger
        if not self.logits_all:
            if not len(ledger):
                return np.zeros((0, self._n_vocab), dtype=np.float32)
            return scheduler.ctx.logits_row(-1)[None, :].copy()
        if ledger.scores is None:
            return np.zeros((0, self._n_vocab), dtype=np.float32)
        return ledger.scores[: len(ledger)]

    @property
    def eval_logits(self) -> np.ndarray:
        return self.scores

    def _token_list(self, tokens: Sequence[int]) -> list[int]:
        """Token ids as Python ints (numpy integers welcome), each checked against the vocabulary."""
        return self._loaded_model.token_ids(tokens)

    def eval(self, tokens: Sequence[int], active_loras: Sequence[dict[str, Any]] | None = None,
             control_vector: dict[str, Any] | None = None, copy_logits: bool = True) -> None:
        """Evaluate ``tokens`` after those the current sequence holds.

        ``active_loras``/``control_vector`` choose the adapters these tokens
        are evaluated with (omitted: the constructor's ``lora_path`` and no
        vector).  With ``logits_all``, ``copy_logits=False`` leaves their rows
        of ``scores`` unfilled.  The context shifts when it is full.

        ``abort()`` from another thread stops it, even inside a long batch: it
        then raises :class:`LlamaDecodeAbort`.
        """
        ids = self._token_list(tokens)
        limit = self._live_scheduler().ctx.n_ctx_seq
        if len(ids) > limit:
            raise ValueError(f"{len(ids)} tokens do not fit in the context window of {limit}")
        if not ids:
            return
        request = self._request(ids, SamplingParams(), self._adapter_request(active_loras, control_vector),
                                max_tokens=0, continues=True, read_ahead=0, keep_scores=copy_logits)
        scheduler = self._live_scheduler()
        scheduler.submit(request)
        try:
            scheduler.next_event(request)
        finally:
            scheduler.cancel(request)
        if request.finish_reason == "abort":
            raise LlamaDecodeAbort(f"abort() stopped eval() before its {len(ids)} tokens were all evaluated; the "
                                   f"sequence holds the {self.n_tokens} tokens evaluated before")

    def _sampling(self, overrides: dict[str, Any]) -> SamplingParams:
        values = {k: v for k, v in overrides.items() if v is not None}
        values["seed"] = self._seed if values.get("seed") is None else normalize_seed(values["seed"])
        return SamplingParams(**values)

    def _chain(self, params: SamplingParams) -> SamplerChain:
        """A native chain for ``params``, primed with the current sequence's tokens."""
        scheduler = self._live_scheduler()
        return SamplerChain(chain_context(self._loaded_model, scheduler.ctx.n_ctx_seq, params,
                                          scheduler.current.ledger.tokens))

    def _request(self, prompt: list[int], params: SamplingParams, adapters: tuple[Any, Any], *,
                 max_tokens: int, **options: Any) -> Request:
        """An engine request for ``prompt`` (validated tokens) with these sampling parameters and adapters."""
        key = self._loaded_adapters.key(*adapters)
        return Request(prompt=prompt, params=params, max_tokens=max_tokens, adapters=adapters, adapter_key=key,
                       **options)

    def generate(
        self,
        tokens: Sequence[int],
        top_k: int = 40,
        top_p: float = 0.95,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        temp: float = 0.8,
        repeat_penalty: float = 1.0,
        reset: bool = True,
        frequency_penalty: float = 0.0,
        presence_penalty: float | None = None,
        *,
        present_penalty: float = 0.0,
        temperature: float | None = None,
        min_keep: int = 0,
        top_n_sigma: float = -1.0,
        dynatemp_range: float = 0.0,
        dynatemp_exponent: float = 1.0,
        penalty_last_n: int = 64,
        mirostat_mode: int = 0,
        mirostat_tau: float = 5.0,
        mirostat_eta: float = 0.1,
        xtc_probability: float = 0.0,
        xtc_threshold: float = 0.1,
        adaptive_target: float = -1.0,
        adaptive_decay: float = 0.9,
        dry_multiplier: float = 0.0,
        dry_base: float = 1.75,
        dry_allowed_length: int = 2,
        dry_penalty_last_n: int = 64,
        dry_seq_breakers: Sequence[str] = ("\n", ":", '"', "*"),
        seed: int | None = None,
        logit_bias: dict[int, float] | None = None,
        ignore_eos: bool = False,
        grammar: LlamaGrammar | None = None,
        grammar_lazy: bool = False,
        grammar_triggers: Sequence[str | int] = (),
        use_infill: bool = False,
        reasoning_budget: int = -1,
        reasoning_start: str = "<think>",
        reasoning_end: str = "</think>",
        reasoning_budget_message: str | None = None,
        reasoning_start_in_prompt: bool = False,
        reasoning_start_max_tokens: int | None = 32,
        samplers: Sequence[str] | None = None,
        extra_samplers: Sequence[str] = (),
        extra: Mapping[str, Any] | None = None,
        logits_processor: Callable[..., Any] | None = None,
        stopping_criteria: Callable[..., bool] | None = None,
        active_loras: Sequence[dict[str, Any]] | None = None,
        control_vector: dict[str, Any] | None = None,
    ) -> Generator[int, Any, None]:
        """Yield sampled tokens after evaluating ``tokens``, until an end-of-generation token.

        The sampling keywords are those of :class:`~llama_cpp.sampling.SamplingParams`
        (``temperature`` is accepted for ``temp``, ``presence_penalty`` for
        ``present_penalty``).  ``send(tokens)`` to the generator evaluates
        extra tokens after the one just yielded.  ``active_loras`` and
        ``control_vector`` as for ``eval``.
        """
        params = self._sampling(sampling_arguments(LlamaBase.generate, locals()))
        token_list = self._token_list(tokens)
        if not token_list:
            raise ValueError("generate() needs at least one token to start from")
        return self._generate(token_list, params, reset, logits_processor, stopping_criteria,
                              self._adapter_request(active_loras, control_vector))

    def _adapter_request(self, active_loras: Sequence[dict[str, Any]] | None,
                         control_vector: dict[str, Any] | None) -> tuple[Any, Any]:
        """Validate a request's adapters now (not when a lazy generator first runs)."""
        adapters = self._adapters
        if adapters is None or self._closed:
            raise RuntimeError(CLOSED)
        return adapters.select(active_loras), adapters.control_vector(control_vector)

    def sample(
        self,
        top_k: int = 40,
        top_p: float = 0.95,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        temp: float = 0.8,
        repeat_penalty: float = 1.0,
        frequency_penalty: float = 0.0,
        presence_penalty: float | None = None,
        *,
        present_penalty: float = 0.0,
        temperature: float | None = None,
        min_keep: int = 0,
        top_n_sigma: float = -1.0,
        dynatemp_range: float = 0.0,
        dynatemp_exponent: float = 1.0,
        penalty_last_n: int = 64,
        mirostat_mode: int = 0,
        mirostat_tau: float = 5.0,
        mirostat_eta: float = 0.1,
        xtc_probability: float = 0.0,
        xtc_threshold: float = 0.1,
        adaptive_target: float = -1.0,
        adaptive_decay: float = 0.9,
        dry_multiplier: float = 0.0,
        dry_base: float = 1.75,
        dry_allowed_length: int = 2,
        dry_penalty_last_n: int = 64,
        dry_seq_breakers: Sequence[str] = ("\n", ":", '"', "*"),
        seed: int | None = None,
        logit_bias: dict[int, float] | None = None,
        ignore_eos: bool = False,
        grammar: LlamaGrammar | None = None,
        grammar_lazy: bool = False,
        grammar_triggers: Sequence[str | int] = (),
        use_infill: bool = False,
        reasoning_budget: int = -1,
        reasoning_start: str = "<think>",
        reasoning_end: str = "</think>",
        reasoning_budget_message: str | None = None,
        reasoning_start_in_prompt: bool = False,
        reasoning_start_max_tokens: int | None = 32,
        samplers: Sequence[str] | None = None,
        extra_samplers: Sequence[str] = (),
        extra: Mapping[str, Any] | None = None,
        logits_processor: Callable[..., Any] | None = None,
        idx: int | None = None,
    ) -> int:
        """Sample one token from the logits of the last decode (or its output ``idx``) and accept it.

        The sampling keywords are those of ``generate``; a chain is built for
        this one call, primed with the current sequence's tokens, so stateful
        samplers (mirostat) start fresh.  ``logits_processor(input_ids,
        logits)`` may edit the logits first.  As in llama-cpp-python,
        ``penalty_last_n=0`` here means the constructor's ``last_n_tokens_size``.
        """
        scheduler = self._live_scheduler()
        if penalty_last_n == 0:  # the seed's rule for sample(): no history length given is last_n_tokens_size
            penalty_last_n = self.last_n_tokens_size
        params = self._sampling(sampling_arguments(LlamaBase.sample, locals()))
        with scheduler.exclusive():
            history = scheduler.current.ledger.tokens
            if not history:
                raise RuntimeError("sample() needs evaluated tokens: call eval() first")
            chain = chain_context(self._loaded_model, scheduler.ctx.n_ctx_seq, params, history)
            sampler = SequenceSampler(params, chain, history, logits_processor)
            try:
                return sampler.sample(scheduler.ctx, -1 if idx is None else idx)[0]
            finally:
                sampler.close()

    def logits_view(self) -> np.ndarray:
        """The logits of the last evaluated token: a zero-copy float32 view, valid until the next decode."""
        return self._logits_at(-1)

    def _logits_at(self, idx: int) -> np.ndarray:
        scheduler = self._live_scheduler()
        scheduler.settle()  # the last decode is then the last one the ledger holds
        return scheduler.ctx.logits_row(idx)

    def _generate(self, tokens: list[int], params: SamplingParams, reset: bool = True,
                  logits_processor: Callable[..., Any] | None = None,
                  stopping_criteria: Callable[..., bool] | None = None,
                  adapters: tuple[Any, Any] | None = None) -> Generator[int, Any, None]:
        """The tokens of one engine request, read as they are needed (``send`` adds input after the last one).

        The request is submitted when the first token is asked for, so a
        generator that is never started holds nothing; closing it (or letting
        it be collected) frees its sequence.
        """
        scheduler = self._live_scheduler()
        request = self._request(tokens, params, adapters or self._adapter_request(None, None),
                                max_tokens=_UNLIMITED, continues=not reset, logits_processor=logits_processor,
                                stopping_criteria=stopping_criteria, read_ahead=0)
        scheduler.submit(request)
        try:
            while True:
                event = scheduler.next_event(request)
                if event is None:
                    return
                sent = yield event.token
                if sent:  # generator.send(tokens): evaluate extra tokens after the one just read
                    request.sent.extend(self._token_list(sent))
        finally:
            scheduler.cancel(request)
