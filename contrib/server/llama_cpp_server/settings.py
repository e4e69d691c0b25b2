"""The server's settings: command-line flags, environment variables and a config file, checked by pydantic.

``python -m llama_cpp.server --model m.gguf --n_ctx 8192`` (the reference server's flag spelling, lists
included: ``--tensor_split 0.6 0.4``), the same names as environment variables (``MODEL``, ``N_CTX``,
``API_KEYS``...), or ``--config_file server.yaml`` (JSON, YAML or TOML) with the server's keys and a
``models`` list for several models.  Flags win over the environment, which wins over the file.

Every keyword of ``Llama`` is a model setting under its own name; one left out is not passed, so the model
gets ``Llama``'s default (the server chooses only the few defaults in :class:`ModelSettings`).  The
reference server's own settings are accepted under their names too: docs/server.md says which of them mean
something here and what, and which are accepted without effect, and why.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import typing
from pathlib import Path
from typing import Any, Literal, Sequence, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from llama_cpp.llama_cpp import llama_flash_attn_type

from .llama_server_flags import translate

__all__ = ["ConfigFileSettings", "ModelSettings", "ServerSettings", "Settings", "load_settings",
           "read_config_file"]

# the chat formats the reference server builds from Hugging Face tokenizer files, and the setting each needs
HF_CHAT_FORMATS = {"hf-autotokenizer": "hf_pretrained_model_name_or_path",
                   "hf-tokenizer-config": "hf_tokenizer_config_path"}
# the reference server's speculative decoding methods (draft_model) and the engine that does each here
DRAFT_METHODS = {"prompt-lookup-decoding": "prompt-lookup"}

# how the reference writes a typed kv_overrides value: "type:value"
_KV_TYPES: dict[str, Any] = {"bool": lambda text: text.lower() in ("true", "1"), "int": int, "float": float,
                             "str": str}


def _llama(description: str, **constraints: Any) -> Any:
    """A ``Llama`` keyword as a setting: not given, it is not passed (the model gets ``Llama``'s default)."""
    return Field(None, description=f"{description} (Llama's keyword; default: Llama's)", **constraints)


def _typed_kv(key: str, value: Any) -> Any:
    """A kv_overrides value: the reference's ``type:value`` text (``int:32``, ``bool:false``) as that type;
    any other value as it is (a JSON number, boolean or string)."""
    if isinstance(value, str):
        kind, sep, text = value.partition(":")
        if sep and kind in _KV_TYPES:
            try:
                return _KV_TYPES[kind](text)
            except ValueError:
                raise ValueError(f"kv_overrides {key!r}: {text!r} is not a {kind}") from None
    return value


class LoraAdapterSetting(BaseModel):
    """One LoRA adapter of a served model (llama-server's ``--lora``, ``--lora-scaled``)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    path: str
    scale: float = 1.0


class ModelSettings(BaseModel):
    """One model the server serves: the file, its name for clients, and how it is loaded (every ``Llama``
    keyword, and the reference server's names for some of them)."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    # -- the file and its names ------------------------------------------------------------------------
    model: str | None = Field(None, description="path to the GGUF model (none: the default model); with "
                                                "hf_model_repo_id, the glob of its file in that repository")
    model_alias: str | None = Field(None, description="the name clients use in 'model' (default: the file name)")
    hf_repo: str | None = Field(None, description="fetch the model from this Hugging Face repository ...")
    hf_file: str | None = Field(None, description="... the file matching this glob")
    hf_model_repo_id: str | None = Field(None, description="the reference's spelling of hf_repo: fetch the model "
                                                           "from this repository, the file matching the glob "
                                                           "in model")
    mmproj_path: str | None = Field(None, description="multimodal projector GGUF (images, audio); with a model "
                                                      "from the Hub, the glob of its file in the same repository")
    clip_model_path: str | None = Field(None, description="the reference's name of mmproj_path")
    chat_format: str | None = Field(None, description="a named chat format or multimodal family (default: the "
                                                      "model's template); hf-autotokenizer and "
                                                      "hf-tokenizer-config use the two settings below")
    chat_template: str | None = Field(None, description="a Jinja chat template's text, rendered in place of the "
                                                        "model's (llama-server's --chat-template, "
                                                        "--chat-template-file)")
    hf_pretrained_model_name_or_path: str | None = Field(
        None, description="a Hugging Face tokenizer (name or folder, as AutoTokenizer.from_pretrained takes): "
                          "the model's tokenizer, and its template with chat_format hf-autotokenizer "
                          "(needs transformers)")
    hf_tokenizer_config_path: str | None = Field(None, description="a tokenizer_config.json whose chat template "
                                                                   "renders the chat (chat_format "
                                                                   "hf-tokenizer-config)")

    # -- what the server chooses for a shared context --------------------------------------------------
    n_ctx: int = Field(8192, ge=0, description="context size, shared by the sequences")
    n_seq_max: int = Field(4, ge=1, le=256, description="sequences decoded together (continuous batching)")
    n_batch: int = Field(2048, ge=1)
    n_ubatch: int = Field(512, ge=1)
    n_threads: int | None = Field(None, ge=1, description="-1: every core")
    n_threads_batch: int | None = Field(None, ge=1, description="-1: every core")
    n_gpu_layers: int | str = "auto"
    seed: int = -1
    embeddings: bool = Field(False, description="also serve /v1/embeddings and /v1/rerank from this model")
    verbose: bool = False

    # -- the server's names for Llama's cache and speculation ------------------------------------------
    cache: bool = Field(False, description="a prompt cache shared by the sequences")
    cache_type: Literal["ram", "trie", "disk"] = "ram"
    cache_size: int = Field(2 << 30, ge=1)
    speculative: dict[str, Any] | None = Field(None, description="a speculative engine by name, as "
                                                                 "Llama(speculative={...}) takes it")
    draft_model: Literal["prompt-lookup-decoding"] | None = Field(
        None, description="the reference's speculative decoding: prompt-lookup-decoding is the prompt-lookup "
                          "engine (speculative is the general setting)")
    draft_model_num_pred_tokens: int | None = Field(None, ge=1, description="tokens each draft proposes "
                                                                            "(draft_model; default 10)")
    scheduling: dict[str, Any] | None = Field(None, description="a scheduling policy by name with its options, as "
                                                                "Llama(scheduling={...}) takes it: {\"policy\": "
                                                                "\"fair-share\", \"weights\": {\"key-1\": 2}}")
    scheduling_policy: str | None = Field(None, description="which waiting request runs first: fcfs (default), "
                                                            "priority (the request's 'priority' field), "
                                                            "fair-share (between API keys, or 'user' without "
                                                            "keys), or any installed policy")

    # -- Llama's other keywords, passed only when given ------------------------------------------------
    split_mode: int | None = _llama("how layers are split over GPUs (llama_split_mode)")
    main_gpu: int | None = _llama("the GPU for a model that is not split")
    tensor_split: list[float] | None = _llama("the share of each GPU")
    load_mode: int | None = _llama("llama_load_mode: mmap, mlock, direct I/O")
    lazy_mode: int | None = _llama("llama_lazy_mode")
    kv_overrides: dict[str, Union[bool, int, float, str]] | None = _llama(
        "model metadata to override: key=type:value (type bool, int, float or str), or a JSON object")
    vocab_only: bool | None = _llama("load the vocabulary only")
    check_tensors: bool | None = _llama("validate the tensor data")
    use_extra_bufts: bool | None = _llama("extra buffer types (weight repacking)")
    no_host: bool | None = _llama("bypass the host buffer")
    no_alloc: bool | None = _llama("load without allocating tensor data")
    load_mtp: bool | None = _llama("load the model's multi-token-prediction layers")
    cpu_moe: bool | None = _llama("keep every expert tensor on the CPU")
    n_cpu_moe: int | None = _llama("keep the expert tensors of the first n layers on the CPU")
    numa: Union[bool, int] | None = _llama("NUMA strategy")
    n_keep: int | None = _llama("tokens kept when the context shifts")
    n_rs_seq: int | None = _llama("recurrent states per sequence")
    n_outputs_max: int | None = _llama("largest number of outputs of one decode")
    n_outputs_max_per_seq: int | None = _llama("largest number of outputs per sequence")
    ctx_type: int | None = _llama("llama_context_type")
    rope_scaling_type: int | None = _llama("llama_rope_scaling_type")
    pooling_type: int | None = _llama("llama_pooling_type of embeddings")
    attention_type: int | None = _llama("llama_attention_type")
    flash_attn_type: int | None = _llama("llama_flash_attn_type: -1 auto, 0 off, 1 on")
    flash_attn: bool | None = Field(None, description="the older spelling of flash_attn_type: true is 1 (on), "
                                                      "false 0 (off)")
    rope_freq_base: float | None = _llama("RoPE base frequency")
    rope_freq_scale: float | None = _llama("RoPE frequency scaling factor")
    yarn_ext_factor: float | None = _llama("YaRN extrapolation mix factor")
    yarn_attn_factor: float | None = _llama("YaRN magnitude scaling factor")
    yarn_beta_fast: float | None = _llama("YaRN low correction dim")
    yarn_beta_slow: float | None = _llama("YaRN high correction dim")
    yarn_orig_ctx: int | None = _llama("YaRN original context size")
    logits_all: bool | None = _llama("keep the logits of every token")
    offload_kqv: bool | None = _llama("KV cache and KQV ops on the GPU")
    op_offload: bool | None = _llama("offload host tensor operations to the device")
    swa_full: bool | None = _llama("full-size sliding-window KV cache")
    kv_unified: bool | None = _llama("one KV buffer shared by every sequence")
    type_k: int | None = _llama("ggml type of the K cache")
    type_v: int | None = _llama("ggml type of the V cache")
    no_perf: bool | None = _llama("no performance timings")
    last_n_tokens_size: int | None = _llama("tokens the repeat penalties look back on")
    ctx_checkpoints: int | None = _llama("context checkpoints kept per sequence (recurrent and SWA models)")
    checkpoint_interval: int | None = _llama("tokens between checkpoints of a long prompt")
    checkpoint_on_device: bool | None = _llama("keep checkpoints in device memory")
    chat_template_kwargs: dict[str, Any] | None = _llama("variables every chat template render gets")
    chat_template_name: str | None = _llama("a named template of the model's metadata")
    chat_handler_kwargs: dict[str, Any] | None = _llama("keywords of the multimodal handler mmproj_path makes "
                                                        "(the media policy is the server's)")
    spm_infill: bool | None = _llama("suffix/prefix/middle order for infill")
    overlap_decode: bool | None = _llama("start each next decode before the last tokens are handed out "
                                         "(default: on when layers are offloaded to a GPU)")
    verbosity: Union[int, str] | None = _llama("log level (0-5 or a name)")
    log_filters: list[str] | None = _llama("log lines containing one of these are dropped")
    log_filters_case_sensitive: bool | None = _llama("log_filters match case")
    lora_path: str | None = _llama("a LoRA adapter applied to every request")
    lora_scale: float | None = _llama("lora_path's scale")
    lora_adapters: list[LoraAdapterSetting] = Field(default_factory=list, description="LoRA adapters by id, after "
                                                    "lora_path (llama-server's --lora, --lora-scaled): GET/POST "
                                                    "/lora-adapters, a request's lora")
    lora_init_without_apply: bool = Field(False, description="the adapters start at scale 0 (llama-server's "
                                                             "--lora-init-without-apply)")
    use_mmap: bool | None = _llama("deprecated: load_mode")
    use_mlock: bool | None = _llama("deprecated: load_mode")
    use_direct_io: bool | None = _llama("deprecated: load_mode")
    embedding: bool | None = Field(None, description="the older spelling of embeddings")
    lora_base: str | None = _llama("accepted, no effect: llama.cpp applies an adapter to the loaded model")
    mul_mat_q: bool | None = _llama("accepted, no effect: llama.cpp chooses its kernels")
    rpc_servers: str | None = _llama("accepted, no effect: RPC is chosen when llama.cpp is built "
                                     "(CMAKE_ARGS=-DGGML_RPC=on)")

    @field_validator("n_threads", "n_threads_batch", mode="before")
    @classmethod
    def _every_core(cls, value: Any) -> Any:
        """-1 is every core, as the reference's settings say."""
        return (os.cpu_count() or 1) if value in (-1, "-1") else value

    @field_validator("kv_overrides", mode="before")
    @classmethod
    def _kv_overrides(cls, value: Any) -> Any:
        """The reference's list of ``key=type:value`` texts, or a mapping (its values typed as they are, or
        written ``type:value``: a flag ``--kv_overrides key=int:8`` arrives as ``{"key": "int:8"}``)."""
        if isinstance(value, (list, tuple)):
            pairs = {}
            for item in value:
                key, sep, typed = str(item).partition("=")
                if not sep or typed.partition(":")[0] not in _KV_TYPES:
                    raise ValueError(f"kv_overrides: {item!r} is not key=type:value (type bool, int, float or str)")
                pairs[key] = typed
            value = pairs
        if isinstance(value, dict):
            return {key: _typed_kv(key, item) for key, item in value.items()}
        return value

    @model_validator(mode="after")
    def _one_meaning_each(self) -> ModelSettings:
        """Settings with two names (the reference's and ours) become one; the reference's translations are
        made here, so that a conflict is an error when the server starts.  Running it again on its own
        result changes nothing (``Settings.model_list`` validates the values once more)."""
        if self.kv_unified is None and "n_seq_max" not in self.model_fields_set:
            # llama-server's automatic --parallel: 4 sequences in one KV buffer, each may use the whole context
            self.kv_unified = True
        if self.mmproj_path is None:
            self.mmproj_path = self.clip_model_path
        elif self.clip_model_path not in (None, self.mmproj_path):
            raise ValueError("mmproj_path and clip_model_path (its reference name) name different files")
        if self.hf_model_repo_id is not None:
            if self.model is None:
                raise ValueError("hf_model_repo_id needs model: the glob of the file to fetch ('*q8_0.gguf')")
            if self.hf_repo not in (None, self.hf_model_repo_id) or self.hf_file not in (None, self.model):
                raise ValueError("hf_model_repo_id (with model) and hf_repo/hf_file name different files; use one")
            self.hf_repo, self.hf_file = self.hf_model_repo_id, self.model
        elif self.hf_repo is not None and self.model is not None:
            raise ValueError("model and hf_repo both name the model: a local file, or hf_repo with hf_file")
        if (self.hf_repo is None) != (self.hf_file is None):
            raise ValueError("hf_repo and hf_file go together")
        if self.chat_template is not None:
            if not self.chat_template.strip():
                raise ValueError("chat_template is empty: give a Jinja template's text")
            for other in ("chat_format", "chat_template_name", "hf_tokenizer_config_path"):
                if getattr(self, other) is not None:
                    raise ValueError(f"chat_template and {other} both choose the chat template; use one")
        paths = [self.lora_path] * (self.lora_path is not None) + [a.path for a in self.lora_adapters]
        if len(set(paths)) != len(paths):
            raise ValueError("lora_adapters: an adapter is listed twice (with lora_path or in the list)")
        if self.hf_tokenizer_config_path is not None and self.chat_format is None:
            self.chat_format = "hf-tokenizer-config"
        needs = HF_CHAT_FORMATS.get(self.chat_format or "")
        if needs is not None and getattr(self, needs) is None:
            raise ValueError(f"chat_format {self.chat_format} needs {needs}")
        if self.hf_tokenizer_config_path is not None and self.chat_format != "hf-tokenizer-config":
            raise ValueError(f"hf_tokenizer_config_path is a chat template (chat_format hf-tokenizer-config), "
                             f"but chat_format is {self.chat_format}")
        if self.flash_attn is not None:
            wanted = int(llama_flash_attn_type.LLAMA_FLASH_ATTN_TYPE_ENABLED if self.flash_attn
                         else llama_flash_attn_type.LLAMA_FLASH_ATTN_TYPE_DISABLED)
            if self.flash_attn_type not in (None, wanted):
                raise ValueError(f"flash_attn={self.flash_attn} and flash_attn_type={self.flash_attn_type} disagree")
            self.flash_attn_type = wanted
        if self.embedding:
            self.embeddings = True
        if self.draft_model is not None:
            engine: dict[str, Any] = {"engine": DRAFT_METHODS[self.draft_model]}
            if self.draft_model_num_pred_tokens is not None:
                engine["num_pred_tokens"] = self.draft_model_num_pred_tokens
            if self.speculative not in (None, engine):
                raise ValueError("draft_model and speculative both choose the speculative decoding; use one")
            self.speculative = engine
        elif self.draft_model_num_pred_tokens is not None:
            raise ValueError("draft_model_num_pred_tokens goes with draft_model")
        if self.scheduling_policy is not None:
            named = (self.scheduling or {}).get("policy", self.scheduling_policy)
            if named != self.scheduling_policy:
                raise ValueError(f"scheduling_policy {self.scheduling_policy!r} and scheduling's policy {named!r} "
                                 "disagree; use one")
            self.scheduling = {**(self.scheduling or {}), "policy": self.scheduling_policy}
        return self

    @property
    def name(self) -> str:
        """The model's name in requests and /v1/models."""
        if self.model_alias:
            return self.model_alias
        if self.model:
            return Path(self.model).name
        if self.hf_repo:
            return f"{self.hf_repo}/{self.hf_file}"
        return "default"


_DURATION_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")


def keep_alive_seconds(value: object) -> float:
    """Ollama's ``keep_alive`` as ``sleep_idle_seconds``: seconds as a number, or a duration as Ollama writes it
    (``"5m"``, ``"1h30m"``, ``"90s"``); a negative one keeps models loaded (-1).  ValueError for anything else,
    and for 0 (Ollama's "free right after each request", which this server's idle timer does not do)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"keep_alive must be seconds or a duration such as '5m', got {value!r:.40}")
    text = str(value).strip()
    try:
        seconds = float(text)
    except ValueError:
        body = text.removeprefix("-")
        parts = _DURATION.findall(body)
        if not parts or "".join(number + unit for number, unit in parts) != body:
            raise ValueError(f"keep_alive must be seconds or a duration such as '5m' or '1h30m', got {text!r:.40}") \
                from None
        seconds = sum(float(number) * _DURATION_UNITS[unit] for number, unit in parts)
        seconds = -seconds if text.startswith("-") else seconds
    if seconds < 0:
        return -1
    if seconds == 0:
        raise ValueError("keep_alive 0 (free a model right after each request) is not supported: give how long "
                         "a model may stay idle, or -1 to keep it loaded")
    return seconds


class ServerSettings(BaseModel):
    """How the server listens and what it lets through."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    ssl_keyfile: str | None = None
    ssl_certfile: str | None = None
    root_path: str = ""
    api_keys: list[str] = Field(default_factory=list, description="accepted keys (Bearer or X-Api-Key); none: open")
    api_key: str | None = Field(None, description="one key (the reference server's setting)")
    cors_origins: list[str] = Field(default_factory=lambda: ["*"],
                                    description="origins allowed by CORS ('*': any, as llama-server and the "
                                                "reference allow; 'localhost': pages from this machine); "
                                                "an empty list: CORS off")
    cors_allow_credentials: bool = False
    max_body_bytes: int = Field(8 << 20, ge=1024, description="largest request body")
    max_prompt_tokens: int | None = Field(None, ge=1, description="longest prompt (default: the context)")
    max_n: int = Field(8, ge=1, description="largest 'n' (choices per prompt)")
    max_queue: int = Field(64, ge=0, description="requests that may wait for a sequence; more get 429")
    request_timeout: float = Field(600.0, gt=0, description="seconds a request may take, waiting included")
    max_loaded_models: int = Field(1, ge=1, description="models kept loaded; the least recently used goes")
    sleep_idle_seconds: float = Field(-1, description="free a model after that long without requests; the next "
                                                      "request loads it again (llama-server's "
                                                      "--sleep-idle-seconds; -1: never)")
    allow_remote_media: bool = Field(True, description="fetch http(s) media URLs (public addresses only)")
    allow_private_media: bool = Field(False, description="let media URLs reach private and loopback addresses")
    allow_local_media: bool = Field(False, description="let media parts name files on this machine")
    chat_page: bool = Field(True, description="serve the chat page at /")
    disable_ping_events: bool = Field(False, description="no ': ping' comment every 15 s in event streams "
                                                         "(some clients cannot read comments)")
    slots_endpoint: bool = Field(True, description="serve GET /slots (llama-server's --slots / --no-slots)")
    props_endpoint: bool = Field(False, description="answer POST /props (llama-server's --props): it changes "
                                                    "nothing, as llama-server's changes nothing; off: 501")
    slot_save_path: str | None = Field(None, description="the folder POST /slots/{id}?action=save|restore reads "
                                                         "and writes (llama-server's --slot-save-path); none: 501")
    responses_max_count: int = Field(1000, ge=1, description="stored responses of /v1/responses kept (store: "
                                                             "true); the least recently used go first")
    responses_max_bytes: int = Field(64 << 20, ge=1024, description="bytes of stored responses kept")
    responses_folder: str | None = Field(None, description="a folder where stored responses are also written "
                                                           "(JSON), so they outlive a restart; none: memory only")
    # request defaults for what a request leaves out (llama-server's --temp, --top-k, --top-p, --min-p, -n);
    # None: the library's own default
    default_temperature: float | None = Field(None, ge=0.0, description="the temperature of requests that set none")
    default_top_k: int | None = Field(None, ge=0, description="the top_k of requests that set none")
    default_top_p: float | None = Field(None, ge=0.0, le=1.0, description="the top_p of requests that set none")
    default_min_p: float | None = Field(None, ge=0.0, le=1.0, description="the min_p of requests that set none")
    default_max_tokens: int | None = Field(None, ge=-1, description="the token limit of requests that set none "
                                                                     "(-1: up to the end of the context)")
    default_reasoning_budget: int | None = Field(None, ge=-1, description="the reasoning_budget of requests that "
                                                 "set none (llama-server's --reasoning-budget; -1: unlimited)")
    reasoning_format: Literal["none", "deepseek", "deepseek-legacy", "auto"] = Field(
        "auto", description="the reasoning_format of chat requests that set none (llama-server's "
                            "--reasoning-format): the thinking of a reasoning model in reasoning_content")
    prefill_assistant: bool = Field(True, description="llama-server's --prefill-assistant: a chat request whose "
                                    "last message is the assistant's continues that message (its text ends the "
                                    "prompt) instead of answering it; a request's assistant_prefill decides "
                                    "for itself")
    reasoning_preserve: bool = Field(True, description="llama-server's --reasoning-preserve: chat templates "
                                     "keep the thinking of earlier assistant turns (preserve_reasoning, and the "
                                     "clear_thinking... names templates read it by); a request's "
                                     "chat_template_kwargs may set preserve_reasoning itself")
    interrupt_requests: bool = Field(True, description="the reference's switch to cut a running stream short "
                                                       "when another request comes; accepted, no effect: "
                                                       "requests run side by side, none waits for another")

    @field_validator("slot_save_path")
    @classmethod
    def _existing_folder(cls, value: str | None) -> str | None:
        if value is not None and not Path(value).is_dir():
            raise ValueError(f"slot_save_path {value!r} is not an existing folder")
        return value

    @model_validator(mode="before")
    @classmethod
    def _keep_alive(cls, values: Any) -> Any:
        """Ollama's name for the sleep bound (``keep_alive: 5m`` in a config file, ``Settings(keep_alive=...)``)."""
        if isinstance(values, dict) and "keep_alive" in values:
            values = dict(values)
            if values.get("sleep_idle_seconds") not in (None, -1):
                raise ValueError("keep_alive and sleep_idle_seconds are two names of one setting: give one")
            values["sleep_idle_seconds"] = keep_alive_seconds(values.pop("keep_alive"))
        return values

    @field_validator("sleep_idle_seconds")
    @classmethod
    def _sleep_bound(cls, value: float) -> float:
        if value != -1 and value <= 0:
            raise ValueError(f"sleep_idle_seconds must be more than 0 seconds, or -1 for never; got {value:g}")
        return value

    @model_validator(mode="after")
    def _cors_and_keys(self) -> ServerSettings:
        if self.api_key and self.api_key not in self.api_keys:
            self.api_keys = [*self.api_keys, self.api_key]
        if "*" in self.cors_origins and self.cors_allow_credentials:
            raise ValueError("cors_origins '*' with cors_allow_credentials: browsers refuse it, and it would let "
                             "any site act with a user's credentials; list the origins")
        return self


class ConfigFileSettings(ServerSettings):
    """The reference's config file: the server's keys and a ``models`` list.  ``create_app(server_settings=
    config, model_settings=config.models)`` serves it; :func:`load_settings` also reads files that hold one
    model's keys at the top level."""

    models: list[ModelSettings] = Field(default_factory=list, description="the models to serve")


class Settings(BaseSettings, ServerSettings, ModelSettings):
    """Everything, flat: the server's keys, one model's keys, and ``models`` for several.  Read by
    :func:`load_settings`; also a plain constructor (``Settings(model="m.gguf", n_seq_max=8)``)."""

    model_config = SettingsConfigDict(extra="forbid", protected_namespaces=(), case_sensitive=False,
                                      env_ignore_empty=True, cli_prog_name="python -m llama_cpp.server",
                                      cli_implicit_flags=False, cli_avoid_json=True)

    models: list[ModelSettings] = Field(default_factory=list, description="several models (config file)")
    config_file: str | None = Field(None, description="JSON, YAML or TOML file of settings (env CONFIG_FILE)")

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: Any, env_settings: Any,
                                   dotenv_settings: Any, file_secret_settings: Any) -> tuple[Any, ...]:
        # the flags come first (pydantic-settings puts them there), then the environment, then what the
        # constructor got: load_settings passes the config file's keys that way
        return env_settings, init_settings

    def model_list(self) -> list[ModelSettings]:
        """The models to serve: ``models``, or the one described by the top-level model keys."""
        if self.models:
            return list(self.models)
        return [ModelSettings(**{k: getattr(self, k) for k in ModelSettings.model_fields})]

    def server(self) -> ServerSettings:
        """The server's own keys."""
        return ServerSettings(**{k: getattr(self, k) for k in ServerSettings.model_fields})


def read_config_file(path: str) -> dict[str, Any]:
    """A config file's keys: JSON, YAML or TOML by its extension."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"config_file {path!r} not found")
    text = p.read_text(encoding="utf-8")
    if p.suffix in (".yaml", ".yml"):
        import yaml

        data = yaml.safe_load(text)
    elif p.suffix == ".toml":
        if sys.version_info >= (3, 11):
            import tomllib
        else:
            import tomli as tomllib
        data = tomllib.loads(text)
    else:
        data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError(f"config_file {path!r} must hold a mapping of settings")
    return data


def _takes_many(annotation: Any) -> bool:
    """Whether a setting's type holds several values (a list or a mapping)."""
    if typing.get_origin(annotation) in (list, dict):
        return True
    return any(_takes_many(arg) for arg in typing.get_args(annotation))


def _repeat_list_flags(args: list[str]) -> list[str]:
    """The reference's list flags (argparse's ``nargs``: ``--tensor_split 0.6 0.4``, ``--kv_overrides
    a=int:1 b=str:x``) as the repeated flags pydantic-settings reads as one list or mapping."""
    many = {f"--{name}" for name, field in Settings.model_fields.items() if _takes_many(field.annotation)}
    out: list[str] = []
    flag: str | None = None  # the list flag whose values are being read
    values = 0
    for arg in args:
        if arg.startswith("--"):
            flag, values = (arg if arg in many else None), 0
        elif flag is not None:
            if values:
                out.append(flag)
            values += 1
        out.append(arg)
    return out


def load_settings(argv: Sequence[str] | None = None) -> Settings:
    """Settings from flags (``argv``, default ``sys.argv[1:]``), the environment and the config file named by
    ``--config_file`` or ``CONFIG_FILE``; flags win over the environment, which wins over the file."""
    args = _repeat_list_flags(translate(list(sys.argv[1:] if argv is None else argv)))
    peek = argparse.ArgumentParser(add_help=False)
    peek.add_argument("--config_file", "--config-file")
    path = peek.parse_known_args(args)[0].config_file or os.environ.get("CONFIG_FILE")
    from_file = read_config_file(path) if path else {}
    return Settings(_cli_parse_args=args, **from_file)
