"""The reasoning budget: a cap on the first visible reasoning block (``<think>...</think>``).

A custom native sampler (llama.cpp's ``llama_sampler_i`` with Python
callbacks) that follows the generated text:

IDLE      waits for ``reasoning_start`` in the output (for at most
          ``reasoning_start_max_tokens`` tokens, then gives up: PASSTHROUGH);
COUNTING  counts tokens inside the block; ``reasoning_end`` ends it naturally
          (PASSTHROUGH), reaching ``reasoning_budget`` starts FORCING;
FORCING   lets only the next token of ``reasoning_budget_message +
          reasoning_end`` through, one per step, then PASSTHROUGH;
PASSTHROUGH does nothing: later reasoning blocks are not touched.

Tags are matched on text, not token ids, so a tag that the model spells with
several tokens is found too.  Forcing masks every other candidate with -inf
after the penalties and biases and before the truncation samplers, which then
keep the single survivor.
"""

from __future__ import annotations

import enum
from typing import Any

import numpy as np

_CANDIDATE = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])


class State(enum.Enum):
    IDLE = "idle"
    COUNTING = "counting"
    FORCING = "forcing"
    PASSTHROUGH = "passthrough"


class ReasoningBudget:
    """The state machine; ``accept`` sees each sampled token, ``forced_token`` says what to force."""

    def __init__(self, params: Any, piece: Any, tokenize: Any) -> None:
        self.budget = params.reasoning_budget
        self.start = params.reasoning_start
        self.end = params.reasoning_end
        self.window = params.reasoning_start_max_tokens
        self.forced = tokenize((params.reasoning_budget_message or "") + params.reasoning_end)
        self.piece = piece
        self.state = State.COUNTING if params.reasoning_start_in_prompt else State.IDLE
        self.seen = 0  # tokens accepted in the current state
        self.text = ""  # output text since the block started (or since generation started, in IDLE)
        self.forced_at = 0
        if self.state is State.COUNTING and self.budget == 0:
            self.state = State.FORCING

    def forced_token(self) -> int | None:
        return self.forced[self.forced_at] if self.state is State.FORCING else None

    def accept(self, token: int) -> None:
        state = self.state
        if state is State.PASSTHROUGH:
            return
        if state is State.FORCING:
            if token == self.forced[self.forced_at]:
                self.forced_at += 1
            if self.forced_at >= len(self.forced):
                self.state = State.PASSTHROUGH
            return
        self.seen += 1
        self.text += self.piece(token)
        if state is State.IDLE:
            at = self.text.find(self.start)
            if at >= 0:
                self.state, self.seen = State.COUNTING, 0
                self.text = self.text[at + len(self.start):]
                if self.budget == 0:
                    self.state = State.FORCING
            elif self.window is not None and self.seen >= self.window:
                self.state = State.PASSTHROUGH
            else:
                self.text = self.text[-len(self.start):]  # only a partial tag can matter later
            return
        if self.end in self.text:
            self.state = State.PASSTHROUGH
        elif self.seen >= self.budget:
            self.state = State.FORCING
        else:
            self.text = self.text[-len(self.end):]


def reasoning_budget_stage(ctx: Any) -> list[Any]:
    """Build the native sampler when ``reasoning_budget >= 0``."""
    params = ctx.params
    if params.reasoning_budget < 0:
        return []
    lib, ffi = ctx.lib, ctx.ffi
    buf = ffi.new("char[]", 256)

    def piece(token: int) -> str:
        n = lib.llama_token_to_piece(ctx.vocab, token, buf, 256, 0, True)
        return ffi.buffer(buf, max(n, 0))[:].decode("utf-8", "replace")

    def tokenize(text: str) -> list[int]:
        data = text.encode("utf-8")
        out = ffi.new("llama_token[]", len(data) + 8)
        n = lib.llama_tokenize(ctx.vocab, data, len(data), out, len(data) + 8, False, True)
        if n <= 0:
            raise ValueError(f"reasoning_end {params.reasoning_end!r} tokenizes to nothing")
        return list(out[0:n])

    machine = ReasoningBudget(params, piece, tokenize)

    @ffi.callback("void(struct llama_sampler *, llama_token_data_array *)")
    def apply(_smpl: Any, cur_p: Any) -> None:
        token = machine.forced_token()
        if token is None:
            return
        candidates = np.frombuffer(ffi.buffer(cur_p.data, cur_p.size * _CANDIDATE.itemsize), dtype=_CANDIDATE)
        logits = candidates["logit"]
        logits[candidates["id"] != token] = -np.inf
        cur_p.sorted = False  # the masked logits no longer follow any earlier order

    @ffi.callback("void(struct llama_sampler *, llama_token)")
    def accept(_smpl: Any, token: int) -> None:
        machine.accept(token)

    name = ffi.new("char[]", b"reasoning-budget")

    @ffi.callback("const char *(*)(const struct llama_sampler *)")
    def get_name(_smpl: Any) -> Any:
        return name

    iface = ffi.new("struct llama_sampler_i *")
    iface.name, iface.accept, iface.apply = get_name, accept, apply
    ctx.keep.extend((iface, apply, accept, get_name, name, buf, machine))
    return [lib.llama_sampler_init(iface, ffi.NULL)]
