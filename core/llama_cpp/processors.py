"""Python hooks into generation: logits processors and stopping criteria.

A logits processor gets ``(input_ids, scores)``: the tokens so far (prompt and
generated) and a zero-copy numpy view of the current logits.  It may edit the
view in place or return a new array; either way its result is what the native
sampler chain then works on, so later stages (bias, penalties, top-k...) build
on the processor's edits instead of overwriting them.

A stopping criterion gets the same arguments after a token was sampled, with
``input_ids`` ending in that token, and stops generation by returning True.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, List

import numpy as np
import numpy.typing as npt

LogitsProcessor = Callable[[npt.NDArray[np.intc], npt.NDArray[np.single]], npt.NDArray[np.single]]
StoppingCriteria = Callable[[npt.NDArray[np.intc], npt.NDArray[np.single]], bool]


class LogitsProcessorList(List[LogitsProcessor]):
    """Applies each processor in order."""

    def __call__(self, input_ids: npt.NDArray[np.intc], scores: npt.NDArray[np.single]) -> npt.NDArray[np.single]:
        for processor in self:
            scores = processor(input_ids, scores)
        return scores


class StoppingCriteriaList(List[StoppingCriteria]):
    """Stops when any criterion does."""

    def __call__(self, input_ids: npt.NDArray[np.intc], logits: npt.NDArray[np.single]) -> bool:
        return any(criterion(input_ids, logits) for criterion in self)


def as_hook(hook: object, kind: type[list[Any]], name: str) -> Any:
    """``hook`` as one callable: a plain list or tuple of callables becomes a ``kind`` (which calls each in
    turn), since passing ``[fn]`` where a ``StoppingCriteriaList([fn])`` is expected is the usual slip; None
    stays None, and anything else that is not callable is a TypeError naming the parameter."""
    if hook is None or callable(hook):
        return hook
    if isinstance(hook, (list, tuple)) and all(callable(h) for h in hook):
        return kind(hook)
    raise TypeError(f"{name} must be a callable or a list of callables (a {kind.__name__}), "
                    f"got {type(hook).__name__}: {hook!r:.80}")


class MinTokensLogitsProcessor:
    """Forbids the end-of-sequence token until ``min_tokens`` tokens were generated."""

    def __init__(self, min_tokens: int, token_eos: int) -> None:
        self.min_tokens = min_tokens
        self.token_eos = token_eos
        self.prompt_tokens: int | None = None

    def __call__(self, input_ids: npt.NDArray[np.intc], scores: npt.NDArray[np.single]) -> npt.NDArray[np.single]:
        if self.prompt_tokens is None:
            self.prompt_tokens = len(input_ids)
        if len(input_ids) - self.prompt_tokens < self.min_tokens:
            scores[self.token_eos] = -np.inf
        return scores


class AbortCriteria:
    """Stops generation once ``event`` is set (any thread may set it): llama-cpp-python's helper for
    cancelling a generation from outside.  Unlike the reference, the library never appends one to the
    caller's list: ``Llama.abort()`` and closing a stream cancel a generation without it."""

    def __init__(self, event: threading.Event | None = None) -> None:
        self.event = event if event is not None else threading.Event()

    def __call__(self, input_ids: npt.NDArray[np.intc], logits: npt.NDArray[np.single]) -> bool:
        return self.event.is_set()
