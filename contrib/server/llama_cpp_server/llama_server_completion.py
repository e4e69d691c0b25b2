"""llama-server's own completion API (``POST /completion``, ``/completions``): its field names in, its shapes out.

Scripts, editor plugins and chat front-ends written for llama-server post ``prompt`` with ``n_predict``,
``cache_prompt``, ``n_probs``, ``samplers``... and read ``content``, ``tokens``, ``stop_type``, ``timings``.
The request is mapped onto :meth:`Llama.completion_events` (the same engine requests and stop rules as the
OpenAI routes); the events are shaped as llama-server writes them (keys in its order; a stream of one event per
generated token, end-of-generation token included, then the final object; no ``[DONE]``).

Where this differs from llama-server, docs/server.md says so (``n_keep`` and ``n_discard``, say, change nothing:
a completion here never shifts its context, as llama-server's does not without ``--context-shift``).
"""

from __future__ import annotations

import math
from typing import Any, Iterator, Union

from llama_cpp.completion_events import CompletionEvent
from llama_cpp.llama_grammar import LlamaGrammar
from pydantic import BaseModel, ConfigDict, Field, StrictInt

from . import llama_server_timings
from .errors import APIError
from .llama_server_samplers import SERVER_NAMES, llama_server_samplers
from .llama_server_text import Mixed, mixed_tokens, prompt_text
from .schemas import LoraEntry
from .settings import ServerSettings

# one prompt (a text, or texts and token ids mixed), or several: a list of those
NativePrompt = Union[Mixed, list[Mixed]]

DEFAULT_SAMPLERS = ("penalties", "dry", "top_n_sigma", "top_k", "typical_p", "top_p", "min_p", "xtc", "temperature")
RANDOM_SEED = 0xFFFFFFFF  # llama-server's "no seed" (-1 as a uint32)


class GrammarTrigger(BaseModel):
    """One of llama-server's ``grammar_triggers``: ``{"type": 0, "value": text, "token": id}`` (a token) or
    ``{"type": 1, "value": word}``; types 2 and 3 (regular expressions) are llama-server's, not served here."""

    model_config = ConfigDict(extra="forbid")

    type: int = Field(ge=0, le=3)
    value: str
    token: StrictInt | None = None


class NativeCompletionRequest(BaseModel):
    """The body of llama-server's ``/completion``; the defaults are llama-server's."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=(), allow_inf_nan=False)

    prompt: NativePrompt
    model: str | None = None
    n_predict: int = Field(-1, ge=-1, description="-1: up to the end of the context")
    max_tokens: int | None = Field(None, ge=-1, description="llama-server's alias of n_predict")
    stream: bool = False
    cache_prompt: bool = True
    return_tokens: bool = False
    timings_per_token: bool = False
    response_fields: list[str] = Field(default_factory=list)
    stop: Union[str, list[str], None] = None
    n_probs: int = Field(0, ge=0, le=100)
    post_sampling_probs: bool = Field(False, description="n_probs as probabilities (prob, top_probs) of what the "
                                                         "sampler chain left, not the model's logprobs")
    n_cmpl: int = Field(1, ge=1, description="choices of each prompt (n is its alias)")
    n: int | None = Field(None, ge=1)
    seed: int = -1
    temperature: float = Field(0.8, ge=0.0)
    dynatemp_range: float = 0.0
    dynatemp_exponent: float = 1.0
    top_k: int = Field(40, ge=0)
    top_p: float = Field(0.95, ge=0.0, le=1.0)
    min_p: float = Field(0.05, ge=0.0, le=1.0)
    top_n_sigma: float = -1.0
    typical_p: float = 1.0
    xtc_probability: float = Field(0.0, ge=0.0, le=1.0)
    xtc_threshold: float = Field(0.1, ge=0.0, le=1.0)
    repeat_last_n: int = Field(64, ge=0)
    repeat_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    dry_multiplier: float = 0.0
    dry_base: float = 1.75
    dry_allowed_length: int = Field(2, ge=0)
    dry_penalty_last_n: int = Field(64, ge=0)
    dry_sequence_breakers: list[str] = Field(default_factory=lambda: ["\n", ":", '"', "*"], min_length=1)
    mirostat: int = Field(0, ge=0, le=2)
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1
    adaptive_target: float = Field(-1.0, le=1.0)
    adaptive_decay: float = Field(0.9, ge=0.0, le=0.99)
    min_keep: int = Field(0, ge=0)
    ignore_eos: bool = False
    logit_bias: Union[list[list[Any]], dict[str, Any], None] = None
    samplers: Union[list[str], str, None] = None
    grammar: str | None = None
    json_schema: dict[str, Any] | None = None
    grammar_lazy: bool = False
    grammar_triggers: list[GrammarTrigger] = Field(default_factory=list, description="what starts a lazy grammar")
    preserved_tokens: list[str] = Field(default_factory=list, description="texts of tokens whose text the reply "
                                                                           "keeps (control tokens)")
    n_indent: int = Field(0, ge=0, description="stop at the first line after the first indented less (code "
                                               "completion)")
    t_max_predict_ms: float = Field(-1, description="stop at a line break once generating has taken that long")
    t_max_prompt_ms: float = Field(-1, description="accepted and unused, as llama-server leaves it unused")
    id_slot: int = Field(-1, ge=-1, description="the engine sequence to run in, waiting for it (-1: any)")
    return_progress: bool = Field(False, description="stream events with prompt_progress (total, cache, "
                                                     "processed, time_ms) before the first token")
    # what llama-server's context shift keeps and drops (its --context-shift, off by default): a completion here
    # stops at the end of the context, as there without the flag, so they change nothing (docs/server.md)
    n_keep: int = Field(0, ge=-1, description="tokens kept when the context shifts (-1: the prompt); no shift here")
    n_discard: int = Field(0, ge=0, description="tokens dropped when the context shifts (0: half); no shift here")
    n_cache_reuse: int = Field(0, ge=0, description="after the prefix the prompt shares with its sequence, runs of "
                                                     "at least this many held tokens moved into place, not evaluated")
    lora: list[LoraEntry] | None = None

    @property
    def choices(self) -> tuple[str, int]:
        """(the field that sets the choices of each prompt, their number): ``n`` where given, else ``n_cmpl``."""
        return ("n", self.n) if self.n is not None else ("n_cmpl", self.n_cmpl)


def native_with_server_defaults(body: NativeCompletionRequest, server: ServerSettings) -> NativeCompletionRequest:
    """``body`` with the server's request defaults (llama-server's ``--temp``, ``--top-k``, ``--top-p``,
    ``--min-p``, ``-n``) in the fields it did not set (``max_tokens`` counts as setting ``n_predict``)."""
    given = body.model_fields_set | ({"n_predict"} if "max_tokens" in body.model_fields_set else set())
    wanted = {"temperature": server.default_temperature, "top_k": server.default_top_k,
              "top_p": server.default_top_p, "min_p": server.default_min_p, "n_predict": server.default_max_tokens}
    unset = {name: value for name, value in wanted.items() if value is not None and name not in given}
    return body.model_copy(update=unset) if unset else body


def _prompts(body: NativeCompletionRequest, llm: Any) -> list[str | list[int]]:
    """llama-server's prompt rules: a list with no number at its top level is several prompts; a list with
    numbers is one prompt of token ids and texts (:func:`.llama_server_text.mixed_tokens`)."""
    value = body.prompt
    several = isinstance(value, list) and not any(isinstance(item, int) for item in value)
    items = value if several else [value]
    assert isinstance(items, list)
    if not items:
        raise APIError(400, "prompt must not be empty", param="prompt")
    prompts: list[str | list[int]] = []
    for item in items:
        if isinstance(item, str):
            prompts.append(item)
        elif isinstance(item, list):
            prompts.append(mixed_tokens(llm, item, add_bos=llm.add_bos_token(), special=True, field="prompt"))
        else:
            raise APIError(400, "prompt: a list of prompts holds texts or lists of tokens and texts, not bare "
                           "token ids", param="prompt")
    return prompts


def _logit_bias(value: list[list[Any]] | dict[str, Any] | None, llm: Any) -> dict[int, float] | None:
    """llama-server's two forms (``[[token or text, bias], ...]`` or ``{"token or text": bias}``); ``false`` is
    -inf, a text biases each of its tokens."""
    if value is None:
        return None
    pairs = list(value.items()) if isinstance(value, dict) else value
    bias: dict[int, float] = {}
    for pair in pairs:
        if len(pair) != 2:
            raise APIError(400, f"logit_bias: {pair!r} is not a [token or text, bias] pair", param="logit_bias")
        key, amount = pair
        if amount is False:
            amount = float("-inf")
        if isinstance(amount, bool) or not isinstance(amount, (int, float)):
            raise APIError(400, f"logit_bias: the bias of {key!r} must be a number or false", param="logit_bias")
        if isinstance(key, int) or (isinstance(key, str) and key.lstrip("-").isdigit()):
            tokens = [int(key)]
        elif isinstance(key, str):
            tokens = llm.tokenize(key.encode("utf-8"), add_bos=False, special=False)
        else:
            raise APIError(400, f"logit_bias: {key!r} is neither a token id nor a text", param="logit_bias")
        for token in tokens:
            if not 0 <= token < llm.n_vocab():
                raise APIError(400, f"logit_bias: token {token} is outside the vocabulary (0..{llm.n_vocab() - 1})",
                               param="logit_bias")
            bias[token] = float(amount)
    return bias


def _n_predict(body: NativeCompletionRequest) -> int:
    """``n_predict``, or its alias ``max_tokens`` when only that was given; -1 for no limit but the context, and
    0 samples one token in llama-server (its limit is checked after a token exists)."""
    n_predict = body.max_tokens if body.max_tokens is not None and "n_predict" not in body.model_fields_set \
        else body.n_predict
    return -1 if n_predict < 0 else max(1, n_predict)


def native_arguments(body: NativeCompletionRequest, llm: Any, tenant: str,
                     active_loras: list[dict[str, Any]]) -> dict[str, Any]:
    """:meth:`Llama.completion_events`'s keywords for a ``/completion`` body; ``active_loras`` the adapters it
    runs under (:meth:`.llama_server_lora.LoraTable.active_loras`)."""
    n_predict = _n_predict(body)
    grammar = None
    try:
        if body.grammar:
            grammar = LlamaGrammar.from_string(body.grammar, verbose=False)
        elif body.json_schema is not None:
            grammar = LlamaGrammar.from_json_schema(body.json_schema, verbose=False)
    except ValueError as exc:
        field = "grammar" if body.grammar else "json_schema"
        raise APIError(400, f"{field}: {exc}", param=field) from None
    stop = _stops(body)
    preserved = _preserved(body, llm)
    return dict(
        prompt=_prompts(body, llm), stop=stop, n=body.choices[1],
        max_tokens=None if n_predict < 0 else n_predict, logprobs=body.n_probs or None, seed=_seed(body),
        temperature=body.temperature, dynatemp_range=body.dynatemp_range, dynatemp_exponent=body.dynatemp_exponent,
        top_k=body.top_k, top_p=body.top_p, min_p=body.min_p, top_n_sigma=body.top_n_sigma,
        typical_p=body.typical_p, xtc_probability=body.xtc_probability, xtc_threshold=body.xtc_threshold,
        penalty_last_n=body.repeat_last_n, repeat_penalty=body.repeat_penalty,
        presence_penalty=body.presence_penalty, frequency_penalty=body.frequency_penalty,
        dry_multiplier=body.dry_multiplier, dry_base=body.dry_base, dry_allowed_length=body.dry_allowed_length,
        dry_penalty_last_n=body.dry_penalty_last_n, dry_seq_breakers=tuple(body.dry_sequence_breakers),
        mirostat_mode=body.mirostat, mirostat_tau=body.mirostat_tau, mirostat_eta=body.mirostat_eta,
        adaptive_target=body.adaptive_target, adaptive_decay=body.adaptive_decay, min_keep=body.min_keep,
        ignore_eos=body.ignore_eos, logit_bias=_logit_bias(body.logit_bias, llm), samplers=llama_server_samplers(body.samplers),
        grammar=grammar, grammar_lazy=body.grammar_lazy, grammar_triggers=_triggers(body, llm, preserved),
        preserved_tokens=preserved, tenant=tenant, active_loras=active_loras,
        n_indent=body.n_indent, t_max_predict_ms=body.t_max_predict_ms,
        sequence=_sequence(body, llm), return_progress=body.return_progress and body.stream,
        post_sampling_probs=body.post_sampling_probs, n_cache_reuse=body.n_cache_reuse)


def _preserved(body: NativeCompletionRequest, llm: Any) -> frozenset[int]:
    """``preserved_tokens`` as llama-server reads them: each text that is one token, that token."""
    ids = (llm.tokenize(text.encode("utf-8"), add_bos=False, special=True) for text in body.preserved_tokens)
    return frozenset(one[0] for one in ids if len(one) == 1)


def _triggers(body: NativeCompletionRequest, llm: Any, preserved: frozenset[int]) -> tuple[str | int, ...]:
    """``grammar_triggers`` as the core's (words and token ids), by llama-server's rules: a word that is one
    token is that token, which must be preserved (its text would be left out of the reply otherwise)."""
    triggers: list[str | int] = []
    for i, trigger in enumerate(body.grammar_triggers):
        field = f"grammar_triggers[{i}]"
        if trigger.type == 0:
            if trigger.token is None:
                raise APIError(400, f"{field}: a token trigger (type 0) needs its token", param=field)
            triggers.append(trigger.token)
        elif trigger.type == 1:
            one = llm.tokenize(trigger.value.encode("utf-8"), add_bos=False, special=True)
            if len(one) == 1 and one[0] not in preserved:
                raise APIError(400, f"{field}: Grammar trigger word should be marked as preserved token: "
                               f"{trigger.value}", param=field)
            triggers.append(one[0] if len(one) == 1 else trigger.value)
        else:
            raise APIError(400, f"{field}: pattern triggers (types 2 and 3) are not served here; words (1) and "
                           "tokens (0) are", param=field)
    return tuple(triggers)


def _sequence(body: NativeCompletionRequest, llm: Any) -> int | None:
    """``id_slot`` as an engine sequence (None: any); one past the server's sequences wraps around, as
    llama-server's does (llama.vim sends a request counter there)."""
    if body.id_slot < 0:
        return None
    return int(body.id_slot) % llm.scheduler.ctx.n_seq_max


def _stops(body: NativeCompletionRequest) -> list[str]:
    return [body.stop] if isinstance(body.stop, str) else body.stop or []


def _seed(body: NativeCompletionRequest) -> int | None:
    return None if body.seed in (-1, RANDOM_SEED) else body.seed


def generation_settings(body: NativeCompletionRequest, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
    """The request's settings under llama-server's names, in its order (``generation_settings``); ``arguments``
    what :func:`native_arguments` made of it (its logit biases, triggers and preserved tokens), if it was
    made."""
    made = arguments or {}
    bias = made.get("logit_bias")
    triggers = [{"type": 0, "value": given.value, "token": trigger} if isinstance(trigger, int) else
                {"type": 1, "value": trigger} for given, trigger in zip(body.grammar_triggers,
                                                                         made.get("grammar_triggers", ()))]
    samplers = llama_server_samplers(body.samplers) or DEFAULT_SAMPLERS
    n_predict, seed = _n_predict(body), _seed(body)
    stop = _stops(body)
    return {
        "seed": RANDOM_SEED if seed is None else seed, "temperature": body.temperature,
        "dynatemp_range": body.dynatemp_range, "dynatemp_exponent": body.dynatemp_exponent, "top_k": body.top_k,
        "top_p": body.top_p, "min_p": body.min_p, "top_n_sigma": body.top_n_sigma,
        "xtc_probability": body.xtc_probability, "xtc_threshold": body.xtc_threshold, "typical_p": body.typical_p,
        "repeat_last_n": body.repeat_last_n, "repeat_penalty": body.repeat_penalty,
        "presence_penalty": body.presence_penalty, "frequency_penalty": body.frequency_penalty,
        "dry_multiplier": body.dry_multiplier, "dry_base": body.dry_base,
        "dry_allowed_length": body.dry_allowed_length, "dry_penalty_last_n": body.dry_penalty_last_n,
        "dry_sequence_breakers": list(body.dry_sequence_breakers), "mirostat": body.mirostat,
        "mirostat_tau": body.mirostat_tau, "mirostat_eta": body.mirostat_eta,
        "adaptive_target": body.adaptive_target, "adaptive_decay": body.adaptive_decay,
        "stop": stop, "max_tokens": n_predict, "n_predict": n_predict, "n_keep": body.n_keep,
        "n_discard": body.n_discard, "ignore_eos": body.ignore_eos, "stream": body.stream,
        "logit_bias": [{"bias": None if v == float("-inf") else v, "token": t} for t, v in (bias or {}).items()],
        "n_probs": body.n_probs, "min_keep": body.min_keep, "grammar": body.grammar or "",
        "grammar_lazy": body.grammar_lazy, "grammar_triggers": triggers,
        "preserved_tokens": sorted(made.get("preserved_tokens", ())),
        "chat_format": "Content-only", "reasoning_format": "none", "reasoning_in_content": False,
        "generation_prompt": "", "samplers": [SERVER_NAMES.get(name, name) for name in samplers],
        "speculative.types": "none", "timings_per_token": body.timings_per_token,
        "post_sampling_probs": body.post_sampling_probs, "backend_sampling": False,
        "lora": [{"id": entry.id, "scale": entry.scale} for entry in sorted(body.lora or [], key=lambda e: e.id)],
    }


def _filtered(result: dict[str, Any], fields: list[str]) -> dict[str, Any]:
    """``response_fields``: only those paths (``generation_settings/n_predict``: a key of a nested object),
    named by their whole path, in the order asked; missing ones left out."""
    out: dict[str, Any] = {}
    for path in fields:
        value: Any = result
        for part in path.split("/"):
            if not isinstance(value, dict) or part not in value:
                break
            value = value[part]
        else:
            out[path] = value
    return out


class NativeShaper:
    """The events of one ``/completion`` request in llama-server's shapes (stream events, or whole results)."""

    def __init__(self, llm: Any, body: NativeCompletionRequest, arguments: dict[str, Any], model: str) -> None:
        self.llm = llm
        self.body = body
        self.model = model
        self.settings = generation_settings(body, arguments)
        self.texts: dict[int, list[str]] = {}
        self.tokens: dict[int, list[int]] = {}
        self.probs: dict[int, list[dict[str, Any]]] = {}

    def _piece(self, token: int) -> dict[str, Any]:
        raw = self.llm.detokenize([token], special=False)
        return {"id": token, "token": raw.decode("utf-8", "ignore"), "bytes": list(raw)}

    def _probability(self, event: CompletionEvent) -> dict[str, Any]:
        assert event.token is not None and event.logprob is not None
        if self.body.post_sampling_probs:  # probabilities, of what the sampler chain left
            return {**self._piece(event.token), "prob": math.exp(event.logprob),
                    "top_probs": [{**self._piece(t), "prob": math.exp(v)} for t, v in event.top]}
        return {**self._piece(event.token), "logprob": event.logprob,
                "top_logprobs": [{**self._piece(t), "logprob": v} for t, v in event.top]}

    def token_event(self, event: CompletionEvent) -> dict[str, Any]:
        """A streamed token (``stop: false``); also recorded for the choice's whole result."""
        assert event.token is not None
        index = event.index
        self.texts.setdefault(index, []).append(event.text)
        self.tokens.setdefault(index, []).append(event.token)
        out: dict[str, Any] = {"index": index, "content": event.text, "tokens": [event.token], "stop": False,
                               "id_slot": -1, "tokens_predicted": len(self.tokens[index]),
                               "tokens_evaluated": event.n_prompt}
        if self.body.timings_per_token:
            out["timings"] = llama_server_timings.timings(event.n_prompt, event.n_cached, len(self.tokens[index]),
                                                          event.prompt_ms, event.predicted_ms)
        if self.body.n_probs and event.logprob is not None:
            probability = self._probability(event)
            self.probs.setdefault(index, []).append(probability)
            out["completion_probabilities"] = [probability]
        return out

    def result(self, event: CompletionEvent, *, streamed: bool) -> dict[str, Any]:
        """A choice's final object: the whole text and tokens, or (``streamed``) none, as llama-server's last
        stream event has; ``response_fields`` applied."""
        end = event.end
        assert end is not None
        index = event.index
        self.texts.setdefault(index, []).append(event.text)
        content = "".join(self.texts[index])
        if end.taken_back:  # n_indent's last line, taken back from the whole text (a stream sent it already)
            content = content[:len(content) - end.taken_back]
        prompt = prompt_text(self.llm, end.prompt_tokens)
        out: dict[str, Any] = {
            "index": index, "content": "" if streamed else content,
            "tokens": [] if streamed or not self.body.return_tokens else self.tokens.get(index, []),
            "id_slot": end.sequence, "stop": True, "model": self.model, "tokens_predicted": end.n_generated,
            "tokens_evaluated": end.n_prompt, "generation_settings": self.settings, "prompt": prompt,
            "has_new_line": "\n" in content, "truncated": end.context_full, "stop_type": end.stop_type,
            "stopping_word": end.stopping_word, "tokens_cached": end.n_prompt + end.n_generated - 1,
            "timings": llama_server_timings.of_end(end),
        }
        if not streamed and self.probs.get(index):
            out["completion_probabilities"] = self.probs[index]
        return _filtered(out, self.body.response_fields) if self.body.response_fields else out

    @staticmethod
    def progress_event(event: CompletionEvent) -> dict[str, Any]:
        """A streamed prompt progress report, as llama-server writes it (its ``tokens`` holds token 0)."""
        progress = event.progress
        assert progress is not None
        return {"index": event.index, "content": "", "tokens": [0], "stop": False, "id_slot": -1,
                "tokens_predicted": 0, "tokens_evaluated": event.n_prompt,
                "prompt_progress": {"total": progress.total, "cache": progress.cached,
                                    "processed": progress.processed, "time_ms": int(progress.ms)}}

    def stream_events(self, event: CompletionEvent) -> list[dict[str, Any]]:
        """The SSE events of one event: a token's, a prompt progress report, or a choice's final object."""
        if event.token is not None:
            return [self.token_event(event)]
        if event.progress is not None:
            return [self.progress_event(event)]
        return [self.result(event, streamed=True)]

    def whole(self, events: Iterator[CompletionEvent]) -> dict[str, Any] | list[dict[str, Any]]:
        """The non-streamed answer: one object, or with several prompts or choices a list in index order."""
        results = []
        for event in events:
            if event.token is not None:
                self.token_event(event)
            else:
                results.append(self.result(event, streamed=False))
        results.sort(key=lambda r: r.get("index", 0))
        return results[0] if len(results) == 1 else results
