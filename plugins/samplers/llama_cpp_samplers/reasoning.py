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

``force()`` (through the chain's ``controls["reasoning_budget"]``) ends a
block that is COUNTING now.  Each transition is reported through the chain's
``log``, as llama-cpp-python prints them.

Tags are matched on text, not token ids, so a tag that the model spells with
several tokens is found too.  Forcing masks every other candidate with -inf
after the penalties and biases and before the truncation samplers, which then
keep the single survivor.
"""

from __future__ import annotations

import enum
from typing import Any, Callable

import numpy as np

_CANDIDATE = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])


class State(enum.Enum):
    IDLE = "idle"
    COUNTING = "counting"
    FORCING = "forcing"
    PASSTHROUGH = "passthrough"


class ReasoningBudget:
    """The state machine; ``accept`` sees each sampled token, ``forced_token`` says what to force."""

    def __init__(self, params: Any, piece: Any, tokenize: Any, log: Any = lambda message: None) -> None:
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
        self._log = log
        if self.state is State.COUNTING and self.budget == 0:
            self.state = State.FORCING
        self._report(f"initialized (state={self.state.name}, budget={self.budget}, "
                     f"start_max_tokens={self.window})")

    def _report(self, message: str) -> None:
        self._log(f"reasoning budget: {message}")

    def _enter(self, state: State, why: str) -> None:
        self.state = state
        self._report(f"{why}; entering {state.name}")

    def force(self) -> bool:
        """End the reasoning block now (its end is forced next); only a block that is COUNTING can be,
        so a forced end is never restarted.  Whether it was."""
        if self.state is not State.COUNTING:
            return False
        self._enter(State.FORCING, "forced by the caller")
        return True

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
                self._enter(State.PASSTHROUGH, "forced end written")
            return
        self.seen += 1
        self.text += self.piece(token)
        if state is State.IDLE:
            at = self.text.find(self.start)
            if at >= 0:
                self.seen = 0
                self.text = self.text[at + len(self.start):]
                self._enter(State.COUNTING, f"reasoning_start seen (budget {self.budget})")
                if self.budget == 0:
                    self._enter(State.FORCING, "budget is 0")
            elif self.window is not None and self.seen >= self.window:
                self._enter(State.PASSTHROUGH, f"no reasoning_start in the first {self.window} tokens")
            else:
                self.text = self.text[-len(self.start):]  # only a partial tag can matter later
            return
        if self.end in self.text:
            self._enter(State.PASSTHROUGH, "reasoning_end seen")
        elif self.seen >= self.budget:
            self._enter(State.FORCING, f"budget of {self.budget} tokens spent")
        else:
            self.text = self.text[-len(self.end):]


def token_text(ctx: Any) -> Callable[[int], str]:
    """The text of a token of ``ctx``'s vocabulary, control tokens included (how a stage follows markers)."""
    lib, ffi = ctx.lib, ctx.ffi
    buf = ffi.new("char[]", 256)
    ctx.keep.append(buf)

    def piece(token: int) -> str:
        n = lib.llama_token_to_piece(ctx.vocab, token, buf, 256, 0, True)
        return ffi.buffer(buf, max(n, 0))[:].decode("utf-8", "replace")

    return piece


def reasoning_budget_stage(ctx: Any) -> list[Any]:
    """Build the native sampler when ``reasoning_budget >= 0``."""
    params = ctx.params
    if params.reasoning_budget < 0:
        return []
    lib, ffi = ctx.lib, ctx.ffi
    piece = token_text(ctx)

    def tokenize(text: str) -> list[int]:
        data = text.encode("utf-8")
        out = ffi.new("llama_token[]", len(data) + 8)
        n = lib.llama_tokenize(ctx.vocab, data, len(data), out, len(data) + 8, False, True)
        if n <= 0:
            raise ValueError(f"reasoning_end {params.reasoning_end!r} tokenizes to nothing")
        return list(out[0:n])

    machine = ReasoningBudget(params, piece, tokenize, ctx.log)
    ctx.controls["reasoning_budget"] = machine

    def apply(_smpl: Any, cur_p: Any) -> None:
        token = machine.forced_token()
        if token is None:
            return
        candidates = np.frombuffer(ffi.buffer(cur_p.data, cur_p.size * _CANDIDATE.itemsize), dtype=_CANDIDATE)
        logits = candidates["logit"]
        logits[candidates["id"] != token] = -np.inf
        cur_p.sorted = False  # the masked logits no longer follow any earlier order

    def accept(_smpl: Any, token: int) -> None:
        machine.accept(token)

    name = ffi.new("char[]", b"reasoning-budget")
    iface = ffi.new("struct llama_sampler_i *")
    # through ctx.callback: what the machine raises inside llama.cpp ends the request with that error
    iface.name = ctx.callback("const char *(*)(const struct llama_sampler *)", lambda _smpl: name)
    iface.accept = ctx.callback("void(struct llama_sampler *, llama_token)", accept)
    iface.apply = ctx.callback("void(struct llama_sampler *, llama_token_data_array *)", apply)
    ctx.keep.extend((iface, name, machine))
    return [lib.llama_sampler_init(iface, ffi.NULL)]
