"""The generation engine: one loop, many sequences.

The parts, one module each:

- ``model``: the weights and vocabulary (no context);
- ``context``: the ``llama_context`` and the batch builder that feeds it;
- ``ledger``: what one sequence holds in memory, its prefix, shifts and snapshots;
- ``sampler``: one sequence's sampling state (native chain, hooks, argmax fast path);
- ``step``: what a running sequence feeds into a tick and takes out (the speculative seam);
- ``request``: a generation as the scheduler sees it, and its token events;
- ``normalize``: request normalisation shared by completion, chat and the server;
- ``scheduler``: admission, batching, one ``llama_decode`` per tick, finishing.
- ``embedder``: embeddings over the same context, many inputs per decode, on idle sequences only.
- ``scope``: the requests of one piece of work, held to its limits and cancelled together (a server).

``Llama`` is a facade over them; docs/engine.md draws one tick.
"""

from .context import BatchBuilder, Context, RowMode
from .ledger import Ledger, SequenceSnapshot
from .model import Model
from .request import Request, RequestState, TokenEvent
from .scope import RequestScope
from .sampler import SequenceSampler
from .scheduler import EngineStats, Scheduler
from .step import PlainStep, Sampled, Step

__all__ = [
    "BatchBuilder",
    "Context",
    "EngineStats",
    "Ledger",
    "Model",
    "PlainStep",
    "Request",
    "RequestScope",
    "RequestState",
    "RowMode",
    "Sampled",
    "Scheduler",
    "SequenceSampler",
    "SequenceSnapshot",
    "Step",
    "TokenEvent",
]
