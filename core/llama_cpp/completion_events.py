"""A completion token by token, as llama-server reports it: what :meth:`Llama.completion_events` yields.

OpenAI's chunks (``create_completion(stream=True)``) carry text only, and only when there is some. A server
that speaks llama-server's own API (``/completion``) reports every generated token, the end-of-generation
token included, with the text it releases (empty while the text may still grow into a stop string), and at the
end why generation stopped, how much of the prompt came from memory and how long each part took. Both views
are read from the same engine requests by the same loop (``_completion.py``).  :class:`FimTokens` is what
:meth:`Llama.fim_tokens` answers, for servers that lay out an infill prompt themselves (llama-server's ``/infill``).
"""

from __future__ import annotations

from typing import Literal

import attrs

from .engine.request import PromptProgress

#: why a choice ended, in llama-server's words: its end-of-generation token, the token limit (or the end of the
#: context), a stop string, or none of these (a stopping criterion, an error)
StopType = Literal["eos", "limit", "word", "none"]


@attrs.frozen
class CompletionEnd:
    """How one choice ended."""

    stop_type: StopType
    stopping_word: str  # the stop string that ended it ("" unless stop_type is "word")
    prompt_tokens: tuple[int, ...]  # its prompt, as evaluated
    n_cached: int  # of those, how many were already in memory (a reused prefix or a fork's copy)
    n_generated: int  # tokens generated, the end-of-generation token included (llama-server's count)
    prompt_ms: float  # from the moment it got a sequence to its first token
    predicted_ms: float  # from its first token to its last
    context_full: bool  # the token limit was the end of the context, not the request's own limit
    sequence: int  # the engine sequence it ran in (llama-server's slot); -1 if it never got one
    taken_back: int = 0  # characters at the end of its text that a line rule took back (n_indent's last line)

    @property
    def n_prompt(self) -> int:
        return len(self.prompt_tokens)


@attrs.frozen
class CompletionEvent:
    """One generated token of choice ``index`` and the text it releases, or (``token`` None) the choice's end:
    the text still held back then, and ``end``; or, asked for with ``return_progress`` and before its first
    token, how far its prompt's evaluation is (``progress``; no token, no text, no end)."""

    index: int
    token: int | None
    text: str
    n_prompt: int  # the tokens of its prompt
    logprob: float | None = None
    top: tuple[tuple[int, float], ...] = ()  # the top alternatives (token, logprob), with ``logprobs``
    end: CompletionEnd | None = None
    # how the choice stands as this token comes out (llama-server's per-token timings): its prompt's tokens that
    # came from memory, how long the prompt took, how long since its first token
    n_cached: int = 0
    prompt_ms: float = 0.0
    predicted_ms: float = 0.0
    progress: PromptProgress | None = None


@attrs.frozen
class FimTokens:
    """A model's fill-in-the-middle tokens; -1 for one it lacks.  ``repo`` and ``separator`` (optional) lay
    out several files of a repository before the gap, as code models trained on repositories expect."""

    prefix: int
    suffix: int
    middle: int
    repo: int
    separator: int

    @property
    def missing(self) -> list[str]:
        """The names of the three tokens infill needs that the model lacks."""
        return [name for name in ("prefix", "suffix", "middle") if getattr(self, name) < 0]
