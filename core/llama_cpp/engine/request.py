"""A request to the engine: a prompt, how to sample, when to stop, and where its tokens go.

A request is created by the facade (``Llama.generate``, ``create_completion``
and everything built on them) from already normalised input, handed to the
scheduler, and read by exactly one consumer.  The scheduler's tick writes
its events; the consumer takes them.  Both sides meet under the engine's
lock, which is the only state they share.
"""

from __future__ import annotations

import collections
import enum
import threading
import time
from typing import Any, Callable, Mapping, NamedTuple

import attrs
import numpy as np

from .._adapters import NO_ADAPTERS, AdapterKey
from ..sampling import SamplingParams
from .choices import ChoiceGroup
from .ledger import SequenceSnapshot
from .media import MediaChunk
from .policy import Ticket
from .sampler import SequenceSampler


class TokenEvent(NamedTuple):
    """One generated token, with its logprob and the top alternatives when the request asked for them."""

    token: int
    logprob: float | None = None
    top: tuple[tuple[int, float], ...] = ()


class PromptProgress(NamedTuple):
    """How far a request's prompt is evaluated (llama-server's ``prompt_progress``): of its ``total`` tokens,
    ``cached`` were in memory when it got its sequence and ``processed`` are now; ``ms`` since it got it."""

    total: int
    cached: int
    processed: int
    ms: float


class PrefixPin(NamedTuple):
    """A prompt-cache breakpoint (Anthropic's ``cache_control``): once the first ``n_tokens`` of the prompt are in
    its sequence, the sequence's snapshot goes into the prompt cache, pinned for ``seconds``."""

    n_tokens: int
    seconds: float


class Suspended(NamedTuple):
    """A request that gave its sequence up to a more urgent one: what it resumes from."""

    snapshot: SequenceSnapshot  # its sequence's memory
    state: RequestState  # PREFILL or RUNNING
    pending: list[int]  # the tokens it was to decode next
    prefill_at: int  # the next prompt token to evaluate
    step_state: Any  # what the step kept for it


class RequestState(enum.Enum):
    WAITING = "waiting"  # not yet given a sequence (or suspended: waiting to resume)
    PREFILL = "prefill"  # its prompt is being evaluated
    FORKED = "forked"  # one of n choices: waits for the first choice's prompt, then copies it
    RUNNING = "running"  # generating
    DONE = "done"


@attrs.define(eq=False)
class Request:
    """One generation in one sequence.

    ``max_tokens`` bounds the tokens generated (finish "length");
    ``read_ahead`` is how many generated tokens may wait unread before the
    sequence pauses (a stream nobody reads does not run on forever, and does
    not hold the others up: it only keeps its sequence); with 0 the sequence
    advances only while its reader waits for it, which ``generate`` needs so
    that tokens sent into the generator come right after the one just read.
    ``continues`` asks for no prefix matching: the prompt is evaluated after
    what the sequence ``seq_hint`` already holds (``generate(reset=False)``).
    ``sequence`` pins it to one sequence: it waits for that one to be free,
    while the requests behind it take the others.
    ``fork_of`` is the first of the ``n`` choices of one prompt: this one
    copies its evaluated prompt instead of evaluating it again.  ``media``
    holds the prompt's media chunks by the position they start at (the
    prompt has their entries there, :mod:`.media`); the scheduler evaluates
    each one when the prefill reaches it.  ``priority`` and ``tenant`` are
    what a scheduling policy orders requests by (:mod:`.policy`).  ``group``
    is the :class:`.choices.ChoiceGroup` of the call that submitted it, when
    that call is one of several that make one response's choices: it waits
    for the group's other calls and may become the first one's fork.
    ``pins`` are the prompt's cache breakpoints, in increasing order (:class:`PrefixPin`; the prompt is evaluated
    in chunks that end at them).  ``report_progress`` asks for a :class:`PromptProgress` in ``progress``
    when it gets its sequence and after each chunk of its prompt is decoded
    (``Scheduler.next_of(..., progress=True)`` hands them out).
    """

    prompt: list[int]
    params: SamplingParams
    max_tokens: int
    adapters: tuple[Any, Any] = (None, None)  # (LoRA selection, control vector) as Adapters.select/... return
    adapter_key: AdapterKey = NO_ADAPTERS
    logits_processor: Callable[..., Any] | None = None
    stopping_criteria: Callable[..., bool] | None = None
    logprobs: int | None = None  # how many top alternatives to report per token (None: no logprobs)
    # the logprobs are those of what the sampler chain left, not of the model's distribution (llama-server's
    # post_sampling_probs)
    post_sampling_probs: bool = False
    keep_prompt_logits: bool = False  # echo with logits_all: hand the prompt's logits rows over
    keep_scores: bool = True  # with logits_all, keep the rows in the ledger (eval(copy_logits=False) does not)
    read_ahead: int = 8
    continues: bool = False
    seq_hint: int | None = None
    sequence: int | None = None  # the sequence it must run in (llama-server's id_slot); None: the planner's choice
    fork_of: Request | None = None
    media: Mapping[int, MediaChunk] = attrs.field(factory=dict)
    priority: int = 0
    tenant: str = ""
    report_progress: bool = False
    # llama-server's n_cache_reuse: runs of at least this many tokens its sequence holds after the shared
    # prefix are moved into place instead of evaluated again (0: only the prefix is reused)
    cache_reuse: int = 0
    pins: tuple[PrefixPin, ...] = ()
    # filled in by the engine
    sampler: SequenceSampler | None = None  # built when submitted; its slot owns it once the request starts
    state: RequestState = RequestState.WAITING
    seq_id: int | None = None
    events: collections.deque[TokenEvent] = attrs.field(factory=collections.deque)
    progress: collections.deque[PromptProgress] = attrs.field(factory=collections.deque)
    finish_reason: str | None = None
    error: BaseException | None = None
    cancelled: bool = False
    unread_at_cancel: int = 0  # the tokens handed out and not read when it was cancelled (its reader stopped)
    wanted: bool = False  # its reader is waiting for its next token
    owner: int = attrs.field(factory=threading.get_ident)
    sent: list[int] = attrs.field(factory=list)  # tokens the caller sent in, to evaluate after the last one
    prompt_logits: np.ndarray | None = None
    n_generated: int = 0
    eog_token: int | None = None  # the end-of-generation token it stopped at (never handed out as an event)
    stop_string: str | None = None  # the stop string that ended it, set by the reader that found it in the text
    n_prompt_evaluated: int = 0  # prompt tokens actually decoded (the rest came from a reused prefix)
    n_prompt_reused: int = 0  # prompt tokens its sequence held already when it got it (a reused prefix)
    n_prompt_pinned: int = 0  # of the prompt tokens it evaluated, how many a pin it made keeps in the prompt cache
    n_pins_taken: int = 0  # its pins the engine has dealt with
    started: float = 0.0  # time.perf_counter() when it was given a sequence
    first_token: float = 0.0  # time.perf_counter() when its first token was handed out
    ended: float = 0.0  # time.perf_counter() when it finished
    group: ChoiceGroup | None = None  # set when it is submitted, for a choice group's first request of a call
    ticket: Ticket | None = None  # what the scheduling policy sees of it, from its submission on
    suspended: Suspended | None = None  # set while it waits to resume after a preemption

    @property
    def finished(self) -> bool:
        return self.state == RequestState.DONE

    def close_sampler(self) -> None:
        """Free the sampler of a request that never started (idempotent)."""
        sampler, self.sampler = self.sampler, None
        if sampler is not None:
            sampler.close()

    def finish(self, reason: str, error: BaseException | None = None) -> None:
        if self.state != RequestState.DONE:
            self.state = RequestState.DONE
            self.ended = time.perf_counter()
            self.finish_reason = reason
            self.error = error
