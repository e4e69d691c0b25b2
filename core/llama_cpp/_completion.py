"""``create_completion`` / ``__call__``: prompts in, OpenAI text_completion objects out.

Kept apart from the Llama facade because it is about shaping requests and
responses (infill prompts, stop strings, logprobs, chunks), not about the
model: everything here goes through ``Llama.tokenize`` and ``Llama._generate``.
"""

from __future__ import annotations

import itertools
import time
import uuid
from typing import TYPE_CHECKING, Any, Callable, Iterator

import numpy as np
from llama_cpp_native import lib

from ._text import StopScanner
from .sampling import SamplingParams

if TYPE_CHECKING:
    from .llama import Llama

SAMPLING_FIELDS = frozenset(f.name for f in SamplingParams.__attrs_attrs__)  # type: ignore[attr-defined]


def _logprob_entry(logits: np.ndarray, token: int, top_n: int, piece_of: Callable[[int], str]) -> tuple[float, dict]:
    """log softmax of ``token`` and the ``top_n`` best tokens, computed from the logits in place."""
    peak = float(logits.max())
    log_norm = peak + float(np.log(np.exp(logits - peak).sum()))
    top: dict[str, float] = {}
    if top_n > 0:
        best = np.argpartition(logits, -top_n)[-top_n:]
        for t in best[np.argsort(-logits[best])]:
            top[piece_of(int(t))] = float(logits[t]) - log_norm
    return float(logits[token]) - log_norm, top


class CompletionAPI:
    """The text-completion methods of :class:`llama_cpp.Llama`."""

    def _infill_tokens(self: "Llama", prompt: str, suffix: str) -> list[int] | None:
        """Fill-in-the-middle prompt (PSM, or SPM with ``spm_infill``); None if the model has no FIM tokens."""
        vocab = self._vocab
        pre, suf, mid = lib.llama_vocab_fim_pre(vocab), lib.llama_vocab_fim_suf(vocab), lib.llama_vocab_fim_mid(vocab)
        if min(pre, suf, mid) < 0:
            return None
        prefix_tokens = self.tokenize(prompt.encode("utf-8"), add_bos=False, special=False)
        suffix_tokens = self.tokenize(suffix.encode("utf-8"), add_bos=False, special=False)
        body = ([suf, *suffix_tokens, pre, *prefix_tokens] if self.spm_infill
                else [pre, *prefix_tokens, suf, *suffix_tokens])
        head = [self.token_bos()] if lib.llama_vocab_get_add_bos(vocab) and self.token_bos() >= 0 else []
        return [*head, *body, mid]

    def create_completion(
        self: "Llama",
        prompt: str | list[int],
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
        presence_penalty: float = 0.0,
        repeat_penalty: float = 1.0,
        top_k: int = 40,
        stream: bool = False,
        seed: int | None = None,
        model: str | None = None,
        logit_bias: dict[int, float] | None = None,
        ignore_eos: bool = False,
        penalty_last_n: int | None = None,
        logits_processor: Callable[..., Any] | None = None,
        stopping_criteria: Callable[..., bool] | None = None,
        active_loras: list[dict[str, Any]] | None = None,
        control_vector: dict[str, Any] | None = None,
        **sampling: Any,
    ) -> dict[str, Any] | Iterator[dict[str, Any]]:
        """Complete ``prompt`` in the OpenAI text_completion shape (a chunk iterator with ``stream``).

        ``max_tokens`` None or <= 0 means the rest of the context.  With a
        ``suffix``, models with fill-in-the-middle tokens complete the middle;
        for other models the suffix is appended to the returned text (OpenAI's
        meaning of the field).  ``active_loras`` (``[{"name": ..., "scale": ...}]``
        of adapters loaded with ``load_lora``) and ``control_vector`` apply to
        this request only; omitted, the constructor's ``lora_path`` applies.
        """
        if "temp" in sampling:
            sampling["temperature"] = sampling.pop("temp")
        else:
            sampling["temperature"] = temperature
        unknown = set(sampling) - SAMPLING_FIELDS
        if unknown:
            raise TypeError(f"create_completion() got unexpected keyword arguments: {', '.join(sorted(unknown))}")
        if logprobs is not None and (isinstance(logprobs, bool) or not isinstance(logprobs, int) or logprobs < 0):
            raise ValueError(f"logprobs must be a non-negative integer (the number of top tokens), got {logprobs!r}")
        params = self._sampling(dict(
            top_p=top_p, min_p=min_p, typical_p=typical_p, top_k=top_k,
            frequency_penalty=frequency_penalty, presence_penalty=presence_penalty, repeat_penalty=repeat_penalty,
            seed=seed, logit_bias=logit_bias, ignore_eos=ignore_eos, penalty_last_n=penalty_last_n, **sampling,
        ))
        ctx_ptr = self._live_ctx()
        adapters = self._adapter_request(active_loras, control_vector)
        trailing_suffix = ""
        if isinstance(prompt, str):
            prompt_text = prompt
            infill = self._infill_tokens(prompt, suffix) if suffix is not None else None
            if infill is not None:
                prompt_tokens = infill
            else:
                trailing_suffix = suffix or ""
                add_bos = bool(lib.llama_vocab_get_add_bos(self._vocab))
                prompt_tokens = self.tokenize(prompt.encode("utf-8"), add_bos=add_bos, special=True)
        else:
            if suffix is not None:
                raise ValueError("suffix needs a text prompt, not token ids")
            prompt_tokens = self._token_list(prompt)
            prompt_text = self.detokenize(prompt_tokens).decode("utf-8", "replace")
        if not prompt_tokens:  # an empty prompt starts from BOS, the only context it can have
            if self.token_bos() < 0:
                raise ValueError("the prompt is empty and this model has no BOS token to start from")
            prompt_tokens = [self.token_bos()]
        n_ctx = lib.llama_n_ctx(ctx_ptr)
        if len(prompt_tokens) >= n_ctx:
            raise ValueError(f"the prompt has {len(prompt_tokens)} tokens, more than fit in the context window "
                             f"of {n_ctx} tokens (n_ctx)")
        room = n_ctx - len(prompt_tokens)
        if max_tokens is None or max_tokens <= 0 or max_tokens > room:
            max_tokens = room
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        chunks = self._completion_chunks(
            prompt_tokens, prompt_text, params, max_tokens, stops, echo, logprobs, trailing_suffix,
            model or self.model_path, logits_processor, stopping_criteria, adapters,
        )
        if stream:
            return chunks
        return _merge_chunks(list(chunks))

    def _completion_chunks(
        self: "Llama", prompt_tokens: list[int], prompt_text: str, params: SamplingParams, max_tokens: int,
        stops: list[str], echo: bool, logprobs: int | None, trailing_suffix: str, model: str,
        logits_processor: Callable[..., Any] | None, stopping_criteria: Callable[..., bool] | None,
        adapters: tuple[Any, Any],
    ) -> Iterator[dict[str, Any]]:
        completion_id = f"cmpl-{uuid.uuid4()}"
        created = int(time.time())
        offset = 0  # characters of text handed out so far (for logprobs' text_offset)

        def chunk(text: str, finish: str | None, lp: dict[str, list] | None = None,
                  usage: dict[str, int] | None = None) -> dict[str, Any]:
            out: dict[str, Any] = {
                "id": completion_id, "object": "text_completion", "created": created, "model": model,
                "choices": [{"text": text, "index": 0, "logprobs": lp, "finish_reason": finish}],
            }
            if usage is not None:
                out["usage"] = usage
            return out

        def piece_text(token: int) -> str:
            return self._piece(token).decode("utf-8", "replace")

        def lp_block(tokens: list[str], offsets: list[int], values: list[float | None], tops: list) -> dict:
            return {"tokens": tokens, "text_offset": offsets, "token_logprobs": values, "top_logprobs": tops}

        scanner = StopScanner(stops)
        finish = "length"
        hit_stop = False
        n_generated = 0
        pending_lp: list[tuple[str, float, dict]] = []

        def take_logprobs() -> dict[str, list] | None:
            """The logprobs of the tokens whose text is being handed out now."""
            nonlocal offset, pending_lp
            if not pending_lp:
                return None
            block = lp_block([p[0] for p in pending_lp], [], [p[1] for p in pending_lp], [p[2] for p in pending_lp])
            for p in pending_lp:
                block["text_offset"].append(offset)
                offset += len(p[0])
            pending_lp = []
            return block

        if self.cache is not None:
            self._restore_from_cache(prompt_tokens, self._adapters.key(*adapters))
        gen = self._generate(prompt_tokens, params, True, logits_processor, stopping_criteria, adapters)
        tokens: Iterator[int] = gen
        try:
            if echo:
                # the prompt is evaluated when the first token is drawn; with logits_all its
                # logits rows are then in self.scores and the echoed tokens can be scored
                first = next(gen, None)
                lp = None
                if logprobs is not None:
                    texts = [piece_text(t) for t in prompt_tokens]
                    values, tops = self._prompt_logprobs(prompt_tokens, logprobs, piece_text)
                    offsets = [int(o) for o in np.cumsum([0] + [len(t) for t in texts[:-1]])]
                    lp = lp_block(texts, offsets, values, tops)
                yield chunk(prompt_text, None, lp)
                offset = len(prompt_text)
                tokens = itertools.chain([] if first is None else [first], gen)
            if max_tokens > 0:
                for token in tokens:
                    n_generated += 1
                    piece = self._piece(token)
                    if logprobs is not None:
                        value, top = _logprob_entry(self.logits_view(), token, logprobs, piece_text)
                        pending_lp.append((piece.decode("utf-8", "replace"), value, top))
                    out, hit = scanner.feed(piece)
                    if out:
                        yield chunk(out.decode("utf-8", "replace"), None, take_logprobs())
                    if hit:
                        finish, hit_stop = "stop", True
                        break
                    if n_generated >= max_tokens:
                        break
                else:
                    finish = "abort" if self._abort.is_set() else "stop"
        finally:
            gen.close()
        if hit_stop:
            pending_lp = []  # those tokens only formed the stop string, which is not part of the text
        if self.cache is not None and not self._closed:
            self.cache[list(self._tokens)] = self.save_state()
        rest = scanner.flush().decode("utf-8", "replace") + trailing_suffix
        if rest or pending_lp:
            yield chunk(rest, None, take_logprobs())
        usage = {"prompt_tokens": len(prompt_tokens), "completion_tokens": n_generated,
                 "total_tokens": len(prompt_tokens) + n_generated}
        yield chunk("", finish, None, usage)

    def _prompt_logprobs(self: "Llama", prompt_tokens: list[int], top_n: int,
                         piece_of: Callable[[int], str]) -> tuple[list[float | None], list[dict | None]]:
        """Logprobs of each prompt token given the ones before it (None without logits_all)."""
        values: list[float | None] = [None]
        tops: list[dict | None] = [None]
        scores = self._scores
        for i in range(1, len(prompt_tokens)):
            if scores is None:
                values.append(None)
                tops.append(None)
                continue
            value, top = _logprob_entry(scores[i - 1], prompt_tokens[i], top_n, piece_of)
            values.append(value)
            tops.append(top)
        return values, tops

    def _restore_from_cache(self: "Llama", prompt_tokens: list[int], adapters: Any) -> None:
        """Load the cached state whose tokens share a longer prefix with the prompt than the live context.

        A state evaluated with other adapters than this request's is of no use.
        """
        if prompt_tokens not in self.cache:
            return
        state = self.cache[prompt_tokens]
        if getattr(state, "adapters", adapters) != adapters:
            return
        cached = [int(t) for t in state.input_ids[: state.n_tokens]]
        live = self.longest_token_prefix(self._tokens, prompt_tokens) if self._kv_adapters == adapters else 0
        if self.longest_token_prefix(cached, prompt_tokens) > live:
            self.load_state(state)

    def __call__(self: "Llama", prompt: str, suffix: str | None = None, max_tokens: int | None = 128,
                 **kwargs: Any) -> dict[str, Any] | Iterator[dict[str, Any]]:
        """``create_completion`` with llama-cpp-python's ``__call__`` default of 128 tokens."""
        return self.create_completion(prompt, suffix=suffix, max_tokens=max_tokens, **kwargs)


def _merge_chunks(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """One text_completion object from the stream of chunks."""
    final = chunks[-1]
    choice = final["choices"][0]
    choice["text"] = "".join(c["choices"][0]["text"] for c in chunks)
    blocks = [c["choices"][0]["logprobs"] for c in chunks if c["choices"][0]["logprobs"]]
    if blocks:
        merged: dict[str, list] = {"tokens": [], "text_offset": [], "token_logprobs": [], "top_logprobs": []}
        for block in blocks:
            for key in merged:
                merged[key].extend(block[key])
        choice["logprobs"] = merged
    return final
