"""The generation engine: one loop, many sequences.

The parts, one module each:

- ``model``: the weights and vocabulary (no context);
- ``context``: the ``llama_context`` and the batch builder that feeds it;
- ``ledger``: what one sequence holds in memory, its prefix, shifts and snapshots;
- ``sampler``: one sequence's sampling state (native chain, hooks, argmax fast path);
- ``step``: what a running sequence feeds into a tick and takes out (the speculative seam);
- ``choices``: choices made by separate calls (a server's chat ``n``) sharing one prompt evaluation;
- ``request``: a generation as the scheduler sees it, and its token events;
- ``normalize``: request normalisation shared by completion, chat and the server;
- ``policy``: the scheduling policy's contract (which request takes a sequence, which gives one up);
- ``slot``: a sequence and its request, and the rows and plan a tick passes between its parts;
- ``planner``: admission, prefix reuse, preemption, and each tick's plan;
- ``runner``: executes a plan on the native context (media chunks, one ``llama_decode``);
- ``update``: applies a decoded tick to ledgers, samplers, requests and counters;
- ``stats``: the engine's counters;
- ``scheduler``: the callers' side (submit, wait for tokens, cancel) and the tick that joins the three;
- ``embedder``: embeddings over the same context, many inputs per decode, on idle sequences only.
- ``scope``: the requests of one piece of work, held to its limits and cancelled together (a server).

``Llama`` is a facade over them; docs/engine.md draws one tick.
"""

from .choices import ChoiceGroup
from .context import BatchBuilder, Context, RowMode
from .ledger import Ledger, SequenceSnapshot
from .model import Model
from .request import PromptProgress, Request, RequestState, TokenEvent
from .runner import ContextRunner, Decoded, Runner
from .sampler import SequenceSampler
from .scope import RequestScope
from .scheduler import Scheduler
from .slot import BatchRow, RowKind, SequenceInfo, Slot, TickPlan
from .stats import EngineStats
from .step import DecodedBatch, DraftWanted, PlainStep, Sampled, Step

__all__ = [
    "BatchBuilder",
    "BatchRow",
    "ChoiceGroup",
    "Context",
    "ContextRunner",
    "Decoded",
    "DecodedBatch",
    "DraftWanted",
    "EngineStats",
    "Ledger",
    "Model",
    "PlainStep",
    "Request",
    "RequestScope",
    "RequestState",
    "RowKind",
    "RowMode",
    "Runner",
    "Sampled",
    "Scheduler",
    "SequenceInfo",
    "SequenceSampler",
    "SequenceSnapshot",
    "Slot",
    "Step",
    "TickPlan",
    "PromptProgress",
    "TokenEvent",
]
