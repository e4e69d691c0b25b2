"""llama-server's ``timings`` object: how long the prompt and the generation took, and at what rate.

llama-server adds it to every final answer, on its own routes (``/completion``) and on the OpenAI ones (a
whole completion or chat answer, and the last event of a stream); clients and front-ends written for it
show the rates.  The first generated token comes with the prompt's evaluation, so the generation rate counts
the tokens after it, and the end-of-generation token counts as generated.
"""

from __future__ import annotations

from typing import Any, Sequence

from llama_cpp.completion_events import CompletionEnd


def timings(n_prompt: int, n_cached: int, n_generated: int, prompt_ms: float, predicted_ms: float) -> dict[str, Any]:
    """The object, in llama-server's key order, for a prompt of ``n_prompt`` tokens of which ``n_cached``
    came from memory."""
    prompt_n, predicted_ms = n_prompt - n_cached, max(predicted_ms, 0.001)
    return {"cache_n": n_cached, "prompt_n": prompt_n, "prompt_ms": prompt_ms,
            "prompt_per_token_ms": prompt_ms / prompt_n if prompt_n else 0.0,
            "prompt_per_second": 1000.0 / prompt_ms * prompt_n if prompt_ms else 0.0,
            "predicted_n": n_generated, "predicted_ms": predicted_ms,
            "predicted_per_token_ms": predicted_ms / (n_generated - 1) if n_generated > 1 else 0.0,
            "predicted_per_second": 1000.0 / predicted_ms * (n_generated - 1) if n_generated > 1 else 0.0}


def of_end(end: CompletionEnd) -> dict[str, Any]:
    """The timings of one choice of :meth:`Llama.completion_events`."""
    return timings(end.n_prompt, end.n_cached, end.n_generated, end.prompt_ms, end.predicted_ms)


def of_requests(requests: Sequence[Any]) -> dict[str, Any] | None:
    """The timings of a call's engine requests (its request scope's), None if none ran.  Several (``n``
    choices, which llama-server does not serve) share their prompt: it is the first one's, and the
    generation is all of theirs, from the first token of any to the end of the last."""
    ran = [r for r in requests if r.started and r.first_token]
    if not ran:
        return None
    first = ran[0]
    n_generated = sum(r.n_generated + (r.eog_token is not None) for r in ran)
    first_token = min(r.first_token for r in ran)
    ended = max(r.ended or first_token for r in ran)
    return timings(len(first.prompt), max(0, len(first.prompt) - first.n_prompt_evaluated), n_generated,
                   (first.first_token - first.started) * 1000.0, (ended - first_token) * 1000.0)
