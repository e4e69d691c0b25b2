"""The context: one ``llama_context``, the batch builder that feeds it, and its memory calls.

Every sequence of a Llama lives in this one context; a sequence is a
``seq_id`` in the batch rows and in llama.cpp's memory (the KV cache, or the
recurrent state).  Only the thread that runs the scheduler's tick touches a
context (its graph computes may start from the context's compute thread while
that thread waits: :mod:`.compute_thread`), so nothing here locks.
"""

from __future__ import annotations

import enum
import threading
from typing import Any, Callable, Sequence

import numpy as np
from llama_cpp_native import ffi, lib

from .. import _foreign_writes
from .._handles import Batch, NativeHandle
from .._logger import hush_when_aborted
from .compute_thread import ComputeThread
from .origin import StateOrigin

DECODE_ABORTED = 2  # llama_decode's status when the abort callback stopped it


class RowMode(enum.Enum):
    """Which rows of a sequence's tokens in a batch want logits."""

    NONE = "none"  # a prompt chunk before the last
    LAST = "last"  # the last row only: a prompt's end, a plain decode step
    ALL = "all"  # every row: a draft being verified, logits_all, embeddings


class BatchBuilder:
    """Rows of one ``llama_decode``: token, position, sequence id, and whether the row wants logits.

    Tokens, positions and logit flags are written through numpy views
    (``tokens``, ``positions``, ``outputs``; read-only to anyone else), so a
    prompt chunk costs a few vectorised copies; only the sequence id is set
    row by row (llama.cpp allocates each row's id array separately).
    """

    __slots__ = ("_batch", "capacity", "n", "tokens", "positions", "_n_seq_id", "outputs", "_seq_rows", "_c_token",
                 "_c_pos", "_c_logits")

    def __init__(self, capacity: int, n_seq_max: int) -> None:
        self._batch = Batch(capacity, n_seq_max)
        b = self._batch.batch
        self.capacity = capacity
        self.n = 0
        self.tokens = np.frombuffer(ffi.buffer(b.token, capacity * 4), dtype=np.int32)
        self.positions = np.frombuffer(ffi.buffer(b.pos, capacity * 4), dtype=np.int32)
        self._n_seq_id = np.frombuffer(ffi.buffer(b.n_seq_id, capacity * 4), dtype=np.int32)
        self.outputs = np.frombuffer(ffi.buffer(b.logits, capacity), dtype=np.int8)
        self._n_seq_id[:] = 1
        self._seq_rows = [b.seq_id[i] for i in range(capacity)]
        self._c_token, self._c_pos, self._c_logits = b.token, b.pos, b.logits  # for one row at a time

    def add(self, tokens: Sequence[int], first_pos: int, seq_id: int, logits: RowMode) -> int:
        """Append ``tokens`` of ``seq_id`` at positions ``first_pos...``; returns the first row's index.

        ``logits`` says which of these rows llama.cpp computes logits for.
        """
        start, count = self.n, len(tokens)
        end = start + count
        if end > self.capacity:
            raise ValueError(f"{count} more tokens do not fit in a batch of {self.capacity} ({start} used)")
        self.tokens[start:end] = tokens
        self.positions[start:end] = np.arange(first_pos, first_pos + count, dtype=np.int32)
        self.outputs[start:end] = 1 if logits is RowMode.ALL else 0
        if logits is RowMode.LAST and count:
            self.outputs[end - 1] = 1
        rows = self._seq_rows
        for i in range(start, end):
            rows[i][0] = seq_id
        self.n = end
        return start

    def add_one(self, token: int, pos: int, seq_id: int, logits: bool) -> int:
        """Append one token (the decode step's usual row) without numpy's per-call overhead."""
        i = self.n
        if i >= self.capacity:
            raise ValueError(f"the batch of {self.capacity} tokens is full")
        self._c_token[i] = token
        self._c_pos[i] = pos
        self._c_logits[i] = logits
        self._seq_rows[i][0] = seq_id
        self.n = i + 1
        return i

    def native(self) -> Any:
        self._batch.batch.n_tokens = self.n
        return self._batch.batch

    def close(self) -> None:
        self._batch.close()


class AbortSwitch:
    """What stops a running decode between two graph nodes: :meth:`set` from any thread, or a
    KeyboardInterrupt on the decoding thread (Ctrl-C during a long prompt).  The interrupt lands in the
    abort callback, the only Python code that runs during a compute; cffi would print it as ignored and go
    on, so it aborts the compute instead and is raised again once ``llama_decode`` has returned."""

    __slots__ = ("_event", "_interrupts", "callback")

    def __init__(self) -> None:
        self._event = threading.Event()
        self._interrupts: list[BaseException] = []
        flag, interrupts = self._event.is_set, self._interrupts

        def interrupted(_type: object, exc: BaseException, _traceback: object) -> bool:
            interrupts.append(exc)
            return True  # abort the compute

        self.callback = ffi.callback("ggml_abort_callback", lambda _data: flag(), onerror=interrupted)

    def set(self) -> None:
        self._event.set()

    def clear(self) -> None:
        self._event.clear()

    def is_set(self) -> bool:
        return self._event.is_set() or bool(self._interrupts)

    def raise_interrupt(self) -> None:
        """Raise the interrupt that aborted the last decode, if one did."""
        if self._interrupts:
            raise self._interrupts.pop()


class Context:
    """A ``llama_context`` with its memory, its batch and an abort switch."""

    __slots__ = ("handle", "ptr", "mem", "n_vocab", "n_ctx", "n_ctx_seq", "n_batch", "n_seq_max", "batch",
                 "recurrent", "window", "causal", "max_positions", "_abort", "_abort_gate",
                 "_row_ptr", "_row_view", "origin", "addresses", "_foreign_seen", "_foreign_stamps", "compute",
                 "_decode_batch")

    def __init__(self, handle: NativeHandle, n_vocab: int, *, swa_full: bool = True,
                 max_positions: int | None = None) -> None:
        """``max_positions``: the positions the model can address at all (a learned position table has
        one row per trained position, and llama.cpp aborts the process on a position past it); a sequence
        is then held to that many, whatever ``n_ctx`` allows."""
        self.handle = handle
        self.ptr = handle.ptr
        self.mem = lib.llama_get_memory(self.ptr)
        self.n_vocab = n_vocab
        model = lib.llama_get_model(self.ptr)
        # what the memory cannot take back: a recurrent state (recurrent or hybrid models) keeps only the
        # state after its last token; a sliding-window cache that is not full size (swa_full) prunes the
        # cells that left the window, ``window`` positions behind the newest
        self.recurrent = bool(lib.llama_model_is_recurrent(model) or lib.llama_model_is_hybrid(model))
        self.window: int = 0 if swa_full else max(0, lib.llama_model_n_swa(model))
        self.n_ctx: int = lib.llama_n_ctx(self.ptr)
        self.n_ctx_seq: int = lib.llama_n_ctx_seq(self.ptr)  # the positions one sequence may use
        self.max_positions = max_positions
        if max_positions is not None:
            self.n_ctx_seq = min(self.n_ctx_seq, max_positions)
        # an encoder's attention (BERT) sees the whole input at once: it embeds, it cannot generate
        self.causal = bool(lib.llama_get_causal_attn(self.ptr))
        self.n_batch: int = lib.llama_n_batch(self.ptr)
        self.n_seq_max: int = lib.llama_n_seq_max(self.ptr)
        self.batch = BatchBuilder(self.n_batch, self.n_seq_max)
        self.compute = ComputeThread()  # media chunks evaluated into this context go through it too
        ptr, batch = self.ptr, self.batch
        self._decode_batch: Callable[[], int] = lambda: lib.llama_decode(ptr, batch.native())
        # which model and context parameters this context's sequence states belong to (set by whoever made
        # the context: it knows the model file); None: unknown, no state is refused for its origin
        self.origin: StateOrigin | None = None
        self._abort = AbortSwitch()
        # asks the switch between graph nodes while enabled (big batches only, see decode)
        self._abort_gate = ffi.new("struct llama_cpp_native_abort_gate *")
        self._abort_gate.callback = self._abort.callback
        lib.llama_set_abort_callback(self.ptr, lib.llama_cpp_native_abort_gate_check, self._abort_gate)
        self._row_ptr: Any = None  # the last row handed out, and its view (one sequence reads the same row)
        self._row_view: np.ndarray | None = None
        # the context and memory as the low-level API's callers hold them (Llama.ctx is an int), and the
        # last writes through that API this context has taken into account
        self.addresses = (int(ffi.cast("uintptr_t", self.ptr)), int(ffi.cast("uintptr_t", self.mem)))
        self._foreign_seen = _foreign_writes.latest
        self._foreign_stamps = self._stamps()

    # -- decoding ---------------------------------------------------------------
    def decode(self) -> int:
        """Decode the batch; the status of ``llama_decode`` (``DECODE_ABORTED`` after ``abort``).

        The abort switch is asked once per graph node, a Python call that costs
        more than a one-token decode is worth, so only bigger batches ask it.
        """
        interruptible = self.batch.n > 32
        self._abort_gate.enabled = interruptible
        return self.compute.run(self._decode_interruptible if interruptible else self._decode_batch)

    def decode_burst(self, choice: Any, seq_id: int, position: int, n_max: int, budget_s: float,
                     stop_vocab: Any) -> tuple[int, list[int], int]:
        """Decode the batch, whose last row is ``seq_id``'s, then go on decoding that sequence alone, one
        chosen token at a time from ``position`` on, for at most ``n_max`` chosen tokens and ``budget_s``
        seconds (``llama_cpp_native_decode_burst``): the batch's status, the chosen tokens (the last of them
        not decoded), and a failed choice's code (0 if none failed).  ``choice`` is the sequence's
        ``struct llama_cpp_native_choice``; ``stop_vocab`` the vocabulary whose end-of-generation tokens
        end the burst, or ``ffi.NULL``.  Bursts are one-row batches: never interruptible (see ``decode``)."""
        out = ffi.new("llama_token[]", n_max)
        status, failure = ffi.new("int32_t *"), ffi.new("int32_t *")
        self._abort_gate.enabled = False
        ptr, batch, budget_us = self.ptr, self.batch, int(budget_s * 1e6)
        n = self.compute.run(lambda: lib.llama_cpp_native_decode_burst(
            ptr, batch.native(), choice, seq_id, position, n_max, budget_us, stop_vocab, out, status, failure))
        return status[0], ffi.unpack(out, n), failure[0]

    def _decode_interruptible(self) -> int:
        with hush_when_aborted(self._abort.is_set):
            status = self._decode_batch()
        self._abort.raise_interrupt()
        return status

    def written_outside(self) -> bool:
        """Whether the low-level API decoded on this context or changed its memory since the last call
        (llama_cpp._foreign_writes); then no ledger of it can be trusted, and no logits row handed out."""
        if _foreign_writes.latest == self._foreign_seen:  # nothing was written anywhere: one comparison
            return False
        self._foreign_seen = _foreign_writes.latest
        stamps = self._stamps()
        if stamps == self._foreign_stamps:
            return False
        self._foreign_stamps = stamps
        self._row_ptr = self._row_view = None
        return True

    def _stamps(self) -> tuple[int, int]:
        return _foreign_writes.last_write(self.addresses[0]), _foreign_writes.last_write(self.addresses[1])

    def request_abort(self) -> None:
        """Make a running decode return ``DECODE_ABORTED`` (any thread)."""
        self._abort.set()

    def clear_abort(self) -> None:
        self._abort.clear()

    def logits_row(self, row: int) -> np.ndarray:
        """The logits of batch row ``row`` (-1: the last output): a zero-copy view, valid until the next decode."""
        ptr = lib.llama_get_logits_ith(self.ptr, row)
        view = self._row_view
        if ptr == self._row_ptr and view is not None:
            return view
        if ptr == ffi.NULL:
            raise RuntimeError(f"no logits are available at output {row}: nothing was evaluated there")
        view = np.frombuffer(ffi.buffer(ptr, self.n_vocab * 4), dtype=np.float32)
        self._row_ptr, self._row_view = ptr, view
        return view

    # -- memory -------------------------------------------------------------------
    def seq_rm(self, seq_id: int, p0: int, p1: int = -1) -> bool:
        return bool(lib.llama_memory_seq_rm(self.mem, seq_id, p0, p1))

    def seq_cp(self, src: int, dst: int) -> None:
        lib.llama_memory_seq_cp(self.mem, src, dst, -1, -1)

    def seq_shift(self, seq_id: int, p0: int, delta: int, p1: int = -1) -> None:
        """Move the positions ``p0..p1`` (-1: to the end) of a sequence by ``delta``."""
        lib.llama_memory_seq_add(self.mem, seq_id, p0, p1, delta)

    def can_shift(self) -> bool:
        return bool(lib.llama_memory_can_shift(self.mem))

    def window_holds(self, seq_id: int, n: int) -> bool:
        """Whether the sliding window still holds every cell the token at position ``n`` attends to
        (always, without a pruned window; llama-server's test, one position to spare)."""
        if self.window == 0 or n == 0:
            return True
        pos_min = lib.llama_memory_seq_pos_min(self.mem, seq_id)
        return 0 <= pos_min <= max(0, n - self.window)

    # -- state --------------------------------------------------------------------
    def seq_state(self, seq_id: int, flags: int = 0) -> bytes:
        """llama.cpp's serialized state of one sequence (``LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY``: only the
        part that cannot drop a suffix, the recurrent state or the sliding window)."""
        size = lib.llama_state_seq_get_size_ext(self.ptr, seq_id, flags)
        buf = ffi.new("uint8_t[]", size)
        written = lib.llama_state_seq_get_data_ext(self.ptr, buf, size, seq_id, flags)
        return ffi.buffer(buf, written)[:]

    def set_seq_state(self, seq_id: int, data: bytes, flags: int = 0) -> bool:
        """Load a sequence state into ``seq_id``; False if llama.cpp refused it."""
        return lib.llama_state_seq_set_data_ext(self.ptr, data, len(data), seq_id, flags) == len(data) and len(data) > 0

    def state(self) -> bytes:
        size = lib.llama_state_get_size(self.ptr)
        buf = ffi.new("uint8_t[]", size)
        written = lib.llama_state_get_data(self.ptr, buf, size)
        return ffi.buffer(buf, written)[:]

    def set_state(self, data: bytes) -> int:
        return lib.llama_state_set_data(self.ptr, data, len(data))

    @property
    def ctx(self) -> int:
        """The ``llama_context *`` as the low-level API takes it (the value of ``Llama.ctx``): code written
        for llama-cpp-python reaches the context as ``llm._ctx.ctx``."""
        return self.addresses[0]

    def synchronize(self) -> None:
        """Wait for the last decode to finish: on a GPU ``llama_decode`` returns once its graph is queued, and
        the graph reads its inputs and writes the logits until then (reading the logits also waits)."""
        lib.llama_synchronize(self.ptr)

    def close(self) -> None:
        if not self.handle.closed:  # nothing may still write into what is freed below
            self.synchronize()
        self.compute.close()
        self.batch.close()
        self.handle.close()
