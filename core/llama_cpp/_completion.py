"""``create_completion`` / ``__call__``: prompts in, OpenAI text_completion objects out.

Kept apart from the Llama facade because it is about shaping requests and
responses (infill prompts, stop strings, logprobs, several prompts and
choices, chunks), not about the model: it builds engine requests through
``Llama._request`` and reads their token events.
"""

from __future__ import annotations

import inspect
import time
import uuid
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, Sequence, overload

import attrs
import numpy as np
from llama_cpp_native import lib

from ._llama_base import LlamaBase
from ._text import StopScanner
from .cache_breakpoints import pins_for
from .completion_events import CompletionEnd, CompletionEvent, FimTokens, StopType
from .engine import PromptProgress, Request, TokenEvent
from .engine.media import MediaPrompt, text_only
from .engine.policy import check_priority, check_tenant, current_tags
from .engine.normalize import choice_count, choice_seed, new_token_limit, prompt_list, stop_list, text_prompt_tokens
from .engine.sampler import token_logprob
from .line_limits import LineLimits
from .preserved_tokens import current_preserved, preserving
from .sampling import sampling_arguments

if TYPE_CHECKING:
    from .llama_grammar import LlamaGrammar


@attrs.define
class _Prompt:
    """One prompt of a completion request, normalised."""

    tokens: list[int]
    text: str
    trailing_suffix: str  # a suffix for a model without fill-in-the-middle tokens is appended to the text
    media: MediaPrompt | None = None  # a multimodal handler's prompt: ``tokens`` has its media entries

    @property
    def n_tokens(self) -> int:
        """What the prompt costs (``usage.prompt_tokens``): media count their embeddings."""
        return self.media.n_tokens if self.media is not None else len(self.tokens)


#: a ``logprobs`` object of a text completion: ``tokens``, ``text_offset``, ``token_logprobs``, ``top_logprobs``
Logprobs = dict[str, list[Any]]
#: one token's entry: its text, its logprob (None for the first prompt token) and its top alternatives
_TokenLogprob = tuple[str, float | None, dict[str, float] | None]


class _Choice:
    """One choice of a completion: its request, and the text, stop strings and logprobs handed out so far."""

    def __init__(self, llama: LlamaBase, index: int, prompt: _Prompt, request: Request, stops: list[str],
                 echo: bool, logprobs: int | None) -> None:
        self.piece = llama._loaded_model.piece  # bytes of a token: once per token, so bound once
        self.preserved = current_preserved()  # control tokens whose text the reply keeps (a family's markers)
        self.index = index
        self.prompt = prompt
        self.request = request
        self.scanner = StopScanner(stops)
        self.echo_pending = echo
        self.logprobs = logprobs
        self.offset = 0  # characters handed out so far (logprobs' text_offset)
        self.pending_lp: list[_TokenLogprob] = []
        self.finish: str | None = None
        self.n_read = 0  # tokens read (a stream may have run a few ahead of a stop string: those do not count)

    def piece_text(self, token: int) -> str:
        return self.piece(token).decode("utf-8", "replace")

    def take_logprobs(self) -> Logprobs | None:
        """The logprobs of the tokens whose text is handed out now."""
        if not self.pending_lp:
            return None
        block: Logprobs = {"tokens": [], "text_offset": [], "token_logprobs": [], "top_logprobs": []}
        for text, value, top in self.pending_lp:
            block["tokens"].append(text)
            block["text_offset"].append(self.offset)
            block["token_logprobs"].append(value)
            block["top_logprobs"].append(top)
            self.offset += len(text)
        self.pending_lp = []
        return block

    def echo_block(self) -> tuple[str, Logprobs | None]:
        """The echoed prompt and, with logprobs, its tokens' logprobs (None without logits_all)."""
        self.echo_pending = False
        text = self.prompt.text
        self.offset = len(text)
        if self.logprobs is None:
            return text, None
        tokens = self.prompt.tokens
        texts = [self.piece_text(t) for t in tokens]
        values: list[float | None] = [None]
        tops: list[dict[str, float] | None] = [None]
        rows = self.request.prompt_logits
        for i in range(1, len(tokens)):
            if rows is None:
                values.append(None)
                tops.append(None)
                continue
            value, top = token_logprob(rows[i - 1], tokens[i], self.logprobs)
            values.append(value)
            tops.append({self.piece_text(t): v for t, v in top})
        offsets = [int(o) for o in np.cumsum([0] + [len(t) for t in texts[:-1]])]
        return text, {"tokens": texts, "text_offset": offsets, "token_logprobs": values, "top_logprobs": tops}

    def feed(self, event: TokenEvent) -> tuple[str, bool]:
        """The text this token releases, and whether a stop string was hit."""
        self.n_read += 1
        token = event.token
        piece = self.piece(token, True) if self.preserved and token in self.preserved else self.piece(token)
        if self.logprobs is not None:
            top = {self.piece_text(t): v for t, v in event.top}
            self.pending_lp.append((piece.decode("utf-8", "replace"), event.logprob, top))
        out, hit = self.scanner.feed(piece)
        return out.decode("utf-8", "replace"), hit


class CompletionAPI(LlamaBase):
    """The text-completion methods of :class:`llama_cpp.Llama`."""

    def fim_tokens(self) -> FimTokens:
        """The model's fill-in-the-middle tokens (-1 for each it lacks)."""
        vocab = self._vocab
        return FimTokens(lib.llama_vocab_fim_pre(vocab), lib.llama_vocab_fim_suf(vocab),
                         lib.llama_vocab_fim_mid(vocab), lib.llama_vocab_fim_rep(vocab), lib.llama_vocab_fim_sep(vocab))

    def supports_infill(self) -> bool:
        """Whether the model has fill-in-the-middle tokens (prefix, suffix, middle): only then does a
        ``suffix`` make the completion fill the gap; otherwise the suffix is appended to the text."""
        return not self.fim_tokens().missing

    def _infill_tokens(self, prompt: str, suffix: str) -> list[int] | None:
        """Fill-in-the-middle prompt (PSM, or SPM with ``spm_infill``); None if the model has no FIM tokens."""
        fim = self.fim_tokens()
        if fim.missing:
            return None
        pre, suf, mid = fim.prefix, fim.suffix, fim.middle
        prefix_tokens = self.tokenize(prompt.encode("utf-8"), add_bos=False, special=False)
        suffix_tokens = self.tokenize(suffix.encode("utf-8"), add_bos=False, special=False)
        body = ([suf, *suffix_tokens, pre, *prefix_tokens] if self.spm_infill
                else [pre, *prefix_tokens, suf, *suffix_tokens])
        head = [self.token_bos()] if self.add_bos_token() else []
        return [*head, *body, mid]

    def create_completion(
        self,
        prompt: str | list[int] | list[str] | list[list[int]],
        suffix: str | None = None,
        max_tokens: int | None = 16,
        temperature: float = 0.8,
        top_p: float = 0.95,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        logprobs: int | None = None,
        echo: bool = False,
        stop: str | list[str] | None = None,
        frequency_penalty: float = 0.0,
        presence_penalty: float | None = None,
        repeat_penalty: float = 1.0,
        top_k: int = 40,
        stream: bool = False,
        seed: int | None = None,
        model: str | None = None,
        logit_bias: dict[int, float] | None = None,
        ignore_eos: bool = False,
        penalty_last_n: int = 64,
        logits_processor: Callable[..., Any] | None = None,
        stopping_criteria: Callable[..., bool] | None = None,
        active_loras: list[dict[str, Any]] | None = None,
        control_vector: dict[str, Any] | None = None,
        *,
        n: int = 1,
        present_penalty: float = 0.0,
        temp: float | None = None,
        min_keep: int = 0,
        top_n_sigma: float = -1.0,
        dynatemp_range: float = 0.0,
        dynatemp_exponent: float = 1.0,
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
        priority: int | None = None,
        tenant: str | None = None,
    ) -> dict[str, Any] | Iterator[dict[str, Any]]:
        """Complete ``prompt`` in the OpenAI text_completion shape (a chunk iterator with ``stream``).

        ``max_tokens`` None or <= 0 means the rest of the context.  With a
        ``suffix``, models with fill-in-the-middle tokens complete the middle;
        for other models the suffix is appended to the returned text (OpenAI's
        meaning of the field).  ``active_loras`` (``[{"name": ..., "scale": ...}]``
        of adapters loaded with ``load_lora``) and ``control_vector`` apply to
        this request only; omitted, the constructor's ``lora_path`` applies.

        As in OpenAI's API, ``prompt`` may be a list of prompts and ``n``
        asks for several choices of each; choice ``i * n + j`` is choice
        ``j`` of prompt ``i``.  The choices of one prompt share its evaluated
        prompt; choice ``j`` samples with ``seed + j``.  Several sequences run
        at once up to the ``n_seq_max`` of the Llama; the others wait.

        ``priority`` (lower runs sooner) and ``tenant`` are what the Llama's
        scheduling policy orders requests by (docs/scheduling.md); None takes
        those of an enclosing :func:`llama_cpp.engine.policy.tagged` block, else
        0 and ``""``.
        """
        choices, n_prompt = self._completion_choices(locals())
        chunks = self._completion_chunks(choices, model or self.model_path, n_prompt)
        if stream:
            return chunks
        return _merge_chunks(list(chunks))

    def completion_events(self, prompt: str | list[int] | list[str] | list[list[int]], *, n_indent: int = 0,
                          t_max_predict_ms: float = -1, sequence: int | None = None, return_progress: bool = False,
                          post_sampling_probs: bool = False, n_cache_reuse: int = 0,
                          preserved_tokens: Iterable[int] = (), **keywords: Any) -> Iterator[CompletionEvent]:
        """The completion of ``prompt`` token by token, as llama-server's ``/completion`` reports it: every
        generated token (the end-of-generation one too) with the text it releases, then per choice an event
        with ``end`` (:mod:`llama_cpp.completion_events`).  ``keywords`` are :meth:`create_completion`'s, but
        ``stream``, ``echo`` and ``model``, which shape OpenAI's objects; ``n_indent`` and ``t_max_predict_ms``
        are llama-server's line rules for code completion (:mod:`llama_cpp.line_limits`); ``sequence`` runs
        each prompt's first choice in that engine sequence (llama-server's ``id_slot``), waiting for it;
        ``return_progress`` adds, before a choice's first token, events with ``progress`` (llama-server's
        ``prompt_progress``): when its prompt gets a sequence, then after each chunk of it is decoded;
        ``post_sampling_probs`` makes ``logprobs``' values those of what the sampler chain left of the
        candidates (every token is then sampled from the whole vocabulary), not the model's;
        ``n_cache_reuse`` (llama-server's): after the prefix a prompt shares with what its sequence holds,
        runs of at least that many held tokens that the prompt goes on with are moved into place (their
        positions shifted) instead of evaluated again, the held tokens the prompt skips dropped;
        ``preserved_tokens`` (llama-server's): token ids whose text the reply keeps where the detokenizer would
        leave it out (control tokens: a lazy grammar's trigger, a tool call's markers)."""
        shaping = sorted({"stream", "echo", "model"} & keywords.keys())
        if shaping:
            raise TypeError(f"completion_events() takes no {', '.join(shaping)} (they shape create_completion's "
                            "OpenAI objects)")
        if isinstance(n_indent, bool) or not isinstance(n_indent, int) or n_indent < 0:
            raise ValueError(f"n_indent must be a whole number of spaces or tabs, 0 for no rule, got {n_indent!r}")
        bound = inspect.signature(CompletionAPI.create_completion).bind(self, prompt, **keywords)
        bound.apply_defaults()
        for name, flag in (("return_progress", return_progress), ("post_sampling_probs", post_sampling_probs)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name} must be True or False, got {flag!r}")
        if isinstance(n_cache_reuse, bool) or not isinstance(n_cache_reuse, int) or n_cache_reuse < 0:
            raise ValueError(f"n_cache_reuse must be a number of tokens, 0 for none, got {n_cache_reuse!r}")
        with preserving(current_preserved() | frozenset(self._token_list(list(preserved_tokens)))):
            choices, _ = self._completion_choices(bound.arguments, sequence)
        for choice in choices:
            choice.request.report_progress = return_progress
            choice.request.post_sampling_probs = post_sampling_probs
            choice.request.cache_reuse = n_cache_reuse
        return self._completion_events(choices, LineLimits(n_indent, t_max_predict_ms), return_progress)

    def _completion_choices(self, call: Mapping[str, Any],
                            sequence: int | None = None) -> tuple[list[_Choice], int]:
        """The choices of a :meth:`create_completion` call whose arguments are ``call`` (its ``locals()``), each
        with its engine request (not yet submitted), and what the prompts cost (each counts once); ``sequence``:
        the engine sequence each prompt's first choice runs in (its forks take others)."""
        prompt, suffix, logprobs, echo = call["prompt"], call["suffix"], call["logprobs"], call["echo"]
        if logprobs is not None and (isinstance(logprobs, bool) or not isinstance(logprobs, int)
                                     or not 0 <= logprobs <= self.n_vocab()):
            raise ValueError(f"logprobs must be an integer in 0..{self.n_vocab()} (the number of top tokens), got "
                             f"{logprobs!r}")
        if echo and logprobs is not None and isinstance(prompt, MediaPrompt):
            raise ValueError("echo with logprobs needs a prompt of tokens; media chunks have no token logprobs")
        params = self._sampling(sampling_arguments(CompletionAPI.create_completion, call))
        tags = current_tags()
        priority = check_priority(call["priority"] if call["priority"] is not None else tags.priority or 0)
        tenant = check_tenant(call["tenant"] if call["tenant"] is not None else tags.tenant or "")
        adapters = self._adapter_request(call["active_loras"], call["control_vector"])
        prompts = prompt_list(prompt)
        n = choice_count(call["n"])
        normalised = [self._prompt(p, suffix) for p in prompts]
        limit = self._live_scheduler().ctx.n_ctx_seq
        stops = stop_list(call["stop"])
        choices: list[_Choice] = []
        for prompt_index, item in enumerate(normalised):
            budget = new_token_limit(call["max_tokens"], len(item.tokens), limit)
            leader: Request | None = None
            for j in range(n):
                request = self._request(
                    item.tokens, attrs.evolve(params, seed=choice_seed(params.seed, j)), adapters, max_tokens=budget,
                    logits_processor=call["logits_processor"], stopping_criteria=call["stopping_criteria"],
                    logprobs=logprobs, keep_prompt_logits=echo and logprobs is not None, fork_of=leader,
                    media=item.media.media if item.media is not None else {}, priority=priority, tenant=tenant,
                    sequence=sequence if leader is None else None,
                    pins=pins_for(item.tokens) if leader is None else ())
                leader = leader or request
                choices.append(_Choice(self, prompt_index * n + j, item, request, stops, echo, logprobs))
        return choices, sum(item.n_tokens for item in normalised)  # each prompt counts once, whatever n is

    def _prompt(self, prompt: str | list[int] | MediaPrompt, suffix: str | None) -> _Prompt:
        """A prompt's tokens: BOS as the vocabulary wants it, infill when a suffix is given."""
        if isinstance(prompt, MediaPrompt):
            if suffix is not None:
                raise ValueError("suffix needs a text prompt, not a prompt with media")
            self._token_list(text_only(prompt.tokens))  # the text tokens are checked as usual
            return _Prompt(list(prompt.tokens), prompt.text, "", prompt)
        if isinstance(prompt, str):
            infill = self._infill_tokens(prompt, suffix) if suffix is not None else None
            if infill is not None:
                tokens, trailing = infill, ""
            else:
                tokens = text_prompt_tokens(self, prompt)
                trailing = suffix or ""
            text = prompt
        else:
            if suffix is not None:
                raise ValueError("suffix needs a text prompt, not token ids")
            tokens = self._token_list(prompt)
            text, trailing = self.detokenize(tokens).decode("utf-8", "replace"), ""
        if not tokens:  # an empty prompt starts from BOS, the only context it can have
            if self.token_bos() < 0:
                raise ValueError("the prompt is empty and this model has no BOS token to start from")
            tokens = [self.token_bos()]
        return _Prompt(tokens, text, trailing)

    @overload
    def _read(self, choices: list[_Choice]) -> Iterator[tuple[_Choice, TokenEvent | None, str]]: ...

    @overload
    def _read(self, choices: list[_Choice],
              progress: bool) -> Iterator[tuple[_Choice, TokenEvent | PromptProgress | None, str]]: ...

    def _read(self, choices: list[_Choice],
              progress: bool = False) -> Iterator[tuple[_Choice, TokenEvent | PromptProgress | None, str]]:
        """Every choice's tokens as they arrive (one engine request per choice, read in turn): ``(choice,
        event, the text it releases)``; a choice's last item has no event and the text still held back, and
        its ``finish`` is set by then.  With ``progress``, its requests' prompt progress reports too (no
        text)."""
        scheduler = self._live_scheduler()
        for choice in choices:
            scheduler.submit(choice.request)
        active = {choice.request: choice for choice in choices}
        order = list(active)  # the requests to read from, rebuilt only when it changes
        try:
            while active:
                request, event = scheduler.next_of(order, progress)
                choice = active[request]
                if isinstance(event, PromptProgress):
                    yield choice, event, ""
                    continue
                hit = False
                if event is not None:
                    text, hit = choice.feed(event)
                    yield choice, event, text
                    if hit:
                        choice.pending_lp = []
                        request.stop_string = choice.scanner.matched
                        scheduler.cancel(request)
                if event is None or hit:
                    del active[request]
                    order = list(active)
                    choice.finish = "stop" if hit else request.finish_reason or "stop"
                    yield choice, None, choice.scanner.flush().decode("utf-8", "replace") + choice.prompt.trailing_suffix
                elif len(active) > 1:  # round robin: the others' tokens come first next time
                    del active[request]
                    active[request] = choice
                    order = list(active)
        finally:
            for choice in choices:
                scheduler.cancel(choice.request)

    def _completion_chunks(self, choices: list[_Choice], model: str,
                           n_prompt: int) -> Iterator[dict[str, Any]]:
        """OpenAI's chunks of every choice, as their text arrives."""
        completion_id = f"cmpl-{uuid.uuid4()}"
        created = int(time.time())

        def chunk(choice: _Choice, text: str, finish: str | None, lp: Logprobs | None = None,
                  usage: dict[str, int] | None = None) -> dict[str, Any]:
            out: dict[str, Any] = {
                "id": completion_id, "object": "text_completion", "created": created, "model": model,
                "choices": [{"text": text, "index": choice.index, "logprobs": lp, "finish_reason": finish}],
            }
            if usage is not None:
                out["usage"] = usage
            return out

        ended = 0
        for choice, event, text in self._read(choices):
            if choice.echo_pending:
                echoed, lp = choice.echo_block()
                yield chunk(choice, echoed, None, lp)
            if event is not None:
                if text:
                    yield chunk(choice, text, None, choice.take_logprobs() if choice.pending_lp else None)
                continue
            if text or choice.pending_lp:
                yield chunk(choice, text, None, choice.take_logprobs())
            ended += 1
            if ended < len(choices):
                yield chunk(choice, "", choice.finish)
        n_completion = sum(c.n_read for c in choices)
        yield chunk(choice, "", choice.finish, None, {"prompt_tokens": n_prompt, "completion_tokens": n_completion,
                                                     "total_tokens": n_prompt + n_completion})

    def _completion_events(self, choices: list[_Choice], rules: LineLimits,
                           progress: bool) -> Iterator[CompletionEvent]:
        """llama-server's view of the same tokens (:meth:`completion_events`); ``rules`` (a template: each choice
        has its own copy) may end a choice at a line, its request cancelled and the tokens read past it left out;
        ``progress``: the prompts' progress reports too."""
        scheduler = self._live_scheduler()
        n_ctx = scheduler.ctx.n_ctx_seq
        watched = {c.index: attrs.evolve(rules) for c in choices} if rules.active else {}
        limited: dict[int, tuple[int, int]] = {}  # choice -> (characters taken back, tokens generated) at its limit
        for choice, event, text in self._read(choices, progress):
            n_prompt = len(choice.prompt.tokens)
            if isinstance(event, PromptProgress):
                yield CompletionEvent(choice.index, None, "", n_prompt, progress=event)
                continue
            request = choice.request
            now = time.perf_counter()
            first = request.first_token or now
            n_cached = max(0, n_prompt - request.n_prompt_evaluated)
            prompt_ms = (first - request.started) * 1000.0 if request.started else 0.0
            predicted_ms = (now - first) * 1000.0
            limit = limited.get(choice.index)
            if event is not None:
                if limit is not None:
                    continue  # read ahead of the line that ended it
                yield CompletionEvent(choice.index, event.token, text, n_prompt, event.logprob, event.top,
                                      n_cached=n_cached, prompt_ms=prompt_ms, predicted_ms=predicted_ms)
                rule = watched.get(choice.index)
                trim = rule.feed(text, predicted_ms) if rule is not None else None
                if trim is not None:
                    limited[choice.index] = (trim, choice.n_read)
                    scheduler.cancel(request)
                continue
            eog = request.eog_token if limit is None else None
            if eog is not None:  # llama-server reports it as a token of no text
                yield CompletionEvent(choice.index, eog, "", n_prompt, n_cached=n_cached, prompt_ms=prompt_ms,
                                      predicted_ms=predicted_ms)
            matched = request.stop_string if limit is None else None
            stop_type: StopType = ("limit" if limit is not None else "word" if matched is not None
                                   else "eos" if eog is not None
                                   else "limit" if request.finish_reason == "length" else "none")
            n_generated = limit[1] if limit is not None else choice.n_read + (eog is not None)
            yield CompletionEvent(choice.index, None, "" if limit is not None else text, n_prompt, end=CompletionEnd(
                stop_type=stop_type, stopping_word=matched or "", prompt_tokens=tuple(choice.prompt.tokens),
                n_cached=n_cached, n_generated=n_generated, prompt_ms=prompt_ms, predicted_ms=predicted_ms,
                context_full=limit is None and stop_type == "limit" and n_prompt + n_generated >= n_ctx,
                sequence=request.seq_id if request.seq_id is not None else -1,
                taken_back=limit[0] if limit is not None else 0))

    def __call__(
        self,
        prompt: str | list[int] | list[str] | list[list[int]],
        suffix: str | None = None,
        max_tokens: int | None = 128,
        temperature: float = 0.8,
        top_p: float = 0.95,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        logprobs: int | None = None,
        echo: bool = False,
        stop: str | list[str] | None = None,
        frequency_penalty: float = 0.0,
        presence_penalty: float | None = None,
        repeat_penalty: float = 1.0,
        top_k: int = 40,
        stream: bool = False,
        seed: int | None = None,
        model: str | None = None,
        logit_bias: dict[int, float] | None = None,
        ignore_eos: bool = False,
        penalty_last_n: int = 64,
        logits_processor: Callable[..., Any] | None = None,
        stopping_criteria: Callable[..., bool] | None = None,
        active_loras: list[dict[str, Any]] | None = None,
        control_vector: dict[str, Any] | None = None,
        *,
        n: int = 1,
        present_penalty: float = 0.0,
        temp: float | None = None,
        min_keep: int = 0,
        top_n_sigma: float = -1.0,
        dynatemp_range: float = 0.0,
        dynatemp_exponent: float = 1.0,
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
    ) -> dict[str, Any] | Iterator[dict[str, Any]]:
        """``create_completion`` with llama-cpp-python's ``__call__`` default of 128 tokens."""
        arguments = dict(locals())
        del arguments["self"]
        return self.create_completion(**arguments)


def _merge_chunks(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """One text_completion object from the stream of chunks: one choice per index, in index order."""
    final = chunks[-1]
    texts: dict[int, list[str]] = {}
    blocks: dict[int, list[Logprobs]] = {}
    finishes: dict[int, str | None] = {}
    for c in chunks:
        part = c["choices"][0]
        index = part["index"]
        texts.setdefault(index, []).append(part["text"])
        if part["logprobs"]:
            blocks.setdefault(index, []).append(part["logprobs"])
        if part["finish_reason"] is not None:
            finishes[index] = part["finish_reason"]
    merged_choices = []
    for index in sorted(texts):
        logprobs: Logprobs | None = None
        if index in blocks:
            logprobs = {"tokens": [], "text_offset": [], "token_logprobs": [], "top_logprobs": []}
            for block in blocks[index]:
                for key in logprobs:
                    logprobs[key].extend(block[key])
        merged_choices.append({"text": "".join(texts[index]), "index": index, "logprobs": logprobs,
                               "finish_reason": finishes.get(index)})
    final["choices"] = merged_choices
    return final
