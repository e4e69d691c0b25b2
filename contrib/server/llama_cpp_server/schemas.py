"""The request bodies, in OpenAI's shapes plus every sampler parameter the core has.

Unknown fields are refused (422 naming the field), so a typo never becomes a silently ignored setting;
the fields OpenAI's clients send that change nothing here (``store``, ``metadata``...) are accepted;
``user`` names the tenant when the server has no API keys.  Values are checked twice: types and plain bounds here, meaning by the library (a ``ValueError``
that becomes a 400 naming the parameter).
"""

from __future__ import annotations

from typing import Any, Literal, Union

from llama_cpp.engine.policy import MAX_TENANT_LENGTH
from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator

Prompt = Union[str, list[str], list[StrictInt], list[list[StrictInt]]]  # (JSON's true is not token 1)


class _Body(BaseModel):
    # JSON has no NaN or infinity, but Python's parser reads them: a number must be finite
    model_config = ConfigDict(extra="forbid", protected_namespaces=(), allow_inf_nan=False)


class StreamOptions(_Body):
    include_usage: bool = False


class LoraEntry(_Body):
    """One adapter's scale, llama-server's ``{"id": 0, "scale": 0.5}`` (``id``: its place in ``GET
    /lora-adapters``), in a request's ``lora`` or the body of ``POST /lora-adapters``."""

    id: int = Field(ge=0)
    scale: float


class SamplerFields(_Body):
    """The core's sampler parameters (``llama_cpp.sampling.SamplingParams``); None: the library's default."""

    temperature: float | None = Field(None, ge=0.0)
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    typical_p: float | None = None
    min_keep: int | None = Field(None, ge=0)
    top_n_sigma: float | None = None
    dynatemp_range: float | None = None
    dynatemp_exponent: float | None = None
    penalty_last_n: int | None = None
    repeat_penalty: float | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    mirostat_mode: int | None = Field(None, ge=0, le=2)
    mirostat_tau: float | None = None
    mirostat_eta: float | None = None
    xtc_probability: float | None = None
    xtc_threshold: float | None = None
    adaptive_target: float | None = None
    adaptive_decay: float | None = None
    dry_multiplier: float | None = None
    dry_base: float | None = None
    dry_allowed_length: int | None = None
    dry_penalty_last_n: int | None = None
    dry_seq_breakers: list[str] | None = None
    logit_bias: dict[str, float] | None = Field(None, description="token id (as a string, OpenAI's shape) -> bias")
    ignore_eos: bool | None = None
    grammar: str | None = Field(None, description="a GBNF grammar")
    grammar_lazy: bool | None = None
    grammar_triggers: list[Union[str, int]] | None = None
    reasoning_budget: int | None = None
    reasoning_start: str | None = None
    reasoning_end: str | None = None
    reasoning_budget_message: str | None = None
    reasoning_start_in_prompt: bool | None = None
    reasoning_start_max_tokens: int | None = None
    use_infill: bool | None = None
    extra: dict[str, Any] | None = Field(None, description="parameters of plugin sampler stages, by name")
    seed: int | None = None
    samplers: Union[list[str], str, None] = Field(None, description="the filter stages in order: the core's or "
                                                  "llama-server's names, or llama-server's letters (\"kypmt\")")
    extra_samplers: list[str] | None = None


class LlamaServerFields(_Body):
    """llama-server's own fields, which its clients send on the OpenAI routes too (its web UI, llama.vim's
    instruct, llama.vscode's edits): those with a meaning here are taken under their OpenAI names; the others
    are accepted and change nothing here (docs/server.md says why for each)."""

    n_predict: int | None = Field(None, ge=-1, description="max_tokens, llama-server's name (-1: no limit)")
    typ_p: float | None = Field(None, description="typical_p, llama-server's name")
    repeat_last_n: int | None = Field(None, ge=-1, description="penalty_last_n, llama-server's name")
    cache_prompt: bool | None = Field(None, description="no effect: the engine reuses a cached prefix anyway")
    id_slot: int | None = Field(None, description="no effect: the planner places a chat where its prefix is cached")
    return_progress: bool | None = Field(None, description="no effect: no prompt_progress events on this route")
    timings_per_token: bool | None = Field(None, description="no effect: timings come with the last chunk")
    response_fields: list[str] | None = Field(None, description="no effect: the answer is OpenAI's whole object")
    backend_sampling: bool | None = Field(None, description="no effect: sampling runs in the engine's chain")


class _Generation(SamplerFields, LlamaServerFields):
    model: str | None = None
    max_tokens: int | None = Field(None, ge=0, description="0 or none: up to the end of the context")
    stop: Union[str, list[str], None] = None
    n: int = Field(1, ge=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = Field(None, max_length=MAX_TENANT_LENGTH, description="the end user; with no API keys configured, the "
                                                             "tenant a fair-share policy shares between")
    priority: int | None = Field(None, ge=-(2**31), le=2**31 - 1, description="lower runs sooner, with a priority "
                                                                              "scheduling policy (vLLM's field)")
    store: bool | None = None
    metadata: dict[str, Any] | None = None
    service_tier: str | None = None
    lora: list[LoraEntry] | None = Field(None, description="this request's adapter scales (llama-server's); the "
                                                           "adapters it leaves out get 0")


class CompletionRequest(_Generation):
    prompt: Prompt = ""
    suffix: str | None = None
    echo: bool = False
    logprobs: int | None = Field(None, ge=0, le=20)
    best_of: int | None = Field(None, ge=1)


class ChatRequest(_Generation):
    messages: list[dict[str, Any]] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: Union[str, dict[str, Any], None] = None
    parallel_tool_calls: bool | None = None
    functions: list[dict[str, Any]] | None = None
    function_call: Union[str, dict[str, Any], None] = None
    response_format: dict[str, Any] | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    max_completion_tokens: int | None = Field(None, ge=0)
    chat_template_kwargs: dict[str, Any] | None = None
    add_generation_prompt: bool = True
    assistant_prefill: Union[bool, Literal["content", "reasoning_content"], None] = Field(
        None, description="continue a trailing assistant message instead of answering it (true: its content, or "
                          "its thinking where it has thinking and no content; 'content' or 'reasoning_content': "
                          "that one); unset: the server's prefill_assistant (true by default, as llama-server "
                          "continues it)")
    continue_final_message: Union[bool, Literal["content", "reasoning_content"], None] = Field(
        None, description="llama-server's and vLLM's name for assistant_prefill (with add_generation_prompt "
                          "false): continue the last message, true as the message asks, or 'content' or "
                          "'reasoning_content'; false: as unset")
    @field_validator("assistant_prefill", "continue_final_message", mode="before")
    @classmethod
    def _continuation(cls, value: object) -> object:
        if value is None or isinstance(value, bool) or value in ("content", "reasoning_content"):
            return value
        raise ValueError(f"must be true, false, 'content' or 'reasoning_content', got {value!r}")

    reasoning_effort: str | None = Field(None, description="given to the template (gpt-oss reads it); 'none': "
                                                           "enable_thinking false, as llama-server")
    reasoning_format: Literal["none", "deepseek", "deepseek-legacy", "auto"] | None = Field(
        None, description="llama-server's: the thinking of a reasoning model in message.reasoning_content "
                          "(none: left in content); default: the server's reasoning_format")
    modalities: list[str] | None = None


class EmbeddingRequest(_Body):
    input: Prompt = Field(description="text, token ids, or a list of either; none of them empty")
    model: str | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(None, ge=1)
    user: str | None = None


class RerankRequest(_Body):
    query: str
    documents: list[str] = Field(min_length=1)
    model: str | None = None
    top_n: int | None = Field(None, ge=1)
    return_documents: bool = True


class TokenizeRequest(_Body):
    """``/tokenize`` (llama-server's ``content``: a text, or texts and token ids mixed) and ``/extras/tokenize``
    (the reference's ``input``)."""

    content: Union[str, list[Union[int, str]], None] = None
    input: str | None = None
    model: str | None = None
    add_special: bool | None = Field(None, description="BOS and the like in front (default: no on /tokenize, as "
                                                       "llama-server; yes on /extras/tokenize, as the reference)")
    parse_special: bool = Field(True, description="special tokens spelled in the text are tokens")
    with_pieces: bool = False


class DetokenizeRequest(_Body):
    tokens: list[StrictInt]
    model: str | None = None


def body_fields() -> set[str]:
    """Every field name of every request body (the names a library error may be about)."""
    return {name for body in (CompletionRequest, ChatRequest, EmbeddingRequest, RerankRequest, TokenizeRequest,
                              DetokenizeRequest) for name in body.model_fields}
