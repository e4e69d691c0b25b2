"""A slot (one sequence of the context and the request it serves) and the rows a tick decodes for it.

These are the records the three parts of a tick pass between them: the planner (:mod:`.planner`) fills
slots and packs their rows, the runner (:mod:`.runner`) decodes the rows, and the update (:mod:`.update`)
applies what came out to the slots.
"""

from __future__ import annotations

import enum
from typing import Any, NamedTuple

import attrs

from .._adapters import AdapterKey
from .context import RowMode
from .ledger import Ledger
from .media import MediaChunk
from .request import Request
from .sampler import SequenceSampler


class Slot:
    """A sequence id, its ledger, and the request it serves (if any)."""

    __slots__ = ("seq_id", "ledger", "request", "sampler", "pending", "prefill_at", "last_used", "forks",
                 "step_state", "ended")

    def __init__(self, seq_id: int) -> None:
        self.seq_id = seq_id
        self.ledger = Ledger(seq_id)
        self.request: Request | None = None
        self.sampler: SequenceSampler | None = None
        self.pending: list[int] = []  # tokens to decode next (the last sampled one, and any sent in)
        self.prefill_at = 0  # next prompt token to evaluate
        self.last_used = 0  # the tick it last decoded in: the least recently used slot is reused first
        self.forks: list[Slot] = []  # choices waiting to share this slot's prompt (n > 1)
        self.step_state: Any = None  # what the step keeps for the request it generates (Step.begin's)
        # the finished request whose tokens this idle slot's memory ends with, until anything else changes it:
        # its reader may still stop before reading them all (Planner.retire)
        self.ended: Request | None = None

    @property
    def serving(self) -> Request:
        """The request of a busy slot (the engine asks only where it knows there is one)."""
        request = self.request
        assert request is not None, f"sequence {self.seq_id} serves no request"
        return request

    @property
    def chain(self) -> SequenceSampler:
        """The sampler of a busy slot's request."""
        sampler = self.sampler
        assert sampler is not None, f"sequence {self.seq_id} has no sampler"
        return sampler


@attrs.frozen
class SequenceInfo:
    """What one sequence holds, as ``Llama.sequences()`` reports it (llama-server's ``/slots``)."""

    seq_id: int
    n_tokens: int  # the tokens in its memory
    busy: bool  # a generation is using it


class RowKind(enum.Enum):
    """What a sequence's rows in a batch are."""

    PROMPT = "prompt"  # a chunk of its prompt
    STEP = "step"  # its step's tokens: the pending token, and any draft


class BatchRow(NamedTuple):
    """One sequence's part of a tick's batch: ``fed`` at positions ``position...``, in batch rows
    ``first...``; ``mode`` says which of them want logits."""

    slot: Slot
    fed: list[int]
    position: int
    first: int
    mode: RowMode
    kind: RowKind

    @property
    def rows(self) -> range:
        """The batch row of each fed token."""
        return range(self.first, self.first + len(self.fed))


class MediaRow(NamedTuple):
    """A media chunk of a slot's prompt, evaluated into its sequence at ``position`` before the batch."""

    slot: Slot
    chunk: MediaChunk
    position: int


class Burst(NamedTuple):
    """A lone sequence's tick that goes on after its decode (:data:`.step.Step.bursts`): the runner chooses
    a token from the batch's last row by ``choice`` (its sampler's ``struct llama_cpp_native_choice``), decodes
    it alone, and so on, for at most ``n_max`` tokens and ``budget_s`` seconds, stopping after an
    end-of-generation token of ``stop_vocab`` (``ffi.NULL``: none stops it)."""

    choice: Any
    n_max: int
    budget_s: float
    stop_vocab: Any


class TickPlan(NamedTuple):
    """What one tick runs: media chunks first, then one batch, all under one adapter set (``adapters``, as
    ``Adapters.apply`` takes it, and its ``adapter_key``: every request served shares them); ``refused``
    are the slots whose tokens could not be made to fit, with the reason.  ``ahead``: started before the
    readers had seen the last tokens (the scheduler's overlap), so a reader that stopped meanwhile never
    asked for its rows, and they leave memory.  ``burst``: the plan's one row goes on decoding (:class:`Burst`)."""

    rows: list[BatchRow]
    media: list[MediaRow]
    refused: list[tuple[Slot, BaseException]]
    adapter_key: AdapterKey
    adapters: tuple[Any, Any]
    ahead: bool = False
    burst: Burst | None = None
