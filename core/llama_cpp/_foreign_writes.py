"""Which contexts' memory the low-level API changed behind the engine's back.

Code written for llama-cpp-python decodes on ``Llama.ctx`` itself (guidance
evaluates its own batches there and trims the memory with
``llama_memory_seq_rm``).  The engine keeps a ledger of what each sequence's
memory holds; after such a call the ledger is stale, and reusing it would
sample from memory that holds something else.  The low-level functions that
change a context's memory note the context (or memory) address here, and the
engine compares the stamps of its own addresses before it next uses them.

A stamp is a global, increasing number: ``latest`` moves whenever anything is
noted, so the engine's per-tick test is one integer comparison.
"""

from __future__ import annotations

import ctypes
import itertools

_stamps = itertools.count(1)  # next() is atomic under the GIL
_last_write: dict[int, int] = {}
latest = 0  # the stamp of the most recent write to any address


def note(target: object) -> None:
    """``target`` (a ``llama_context *`` or ``llama_memory_t``, as an int or ``c_void_p``) was written."""
    global latest
    address = target.value if isinstance(target, ctypes.c_void_p) else target
    if isinstance(address, int) and address:
        stamp = next(_stamps)
        _last_write[address] = stamp
        latest = stamp


def last_write(address: int) -> int:
    """The stamp of the last noted write to ``address``; 0 if there was none."""
    return _last_write.get(address, 0)
