"""A lazy grammar that waits for its trigger outside the reasoning block, as llama-server's does.

llama.cpp's lazy grammar looks for its trigger in everything sampled.  A reasoning model may write the
trigger (a tool call's ``<tool_call>``) while it thinks; the grammar would then force a call into the
thinking and end the reply there.  llama-server hands its lazy grammar only the tokens outside the
reasoning block (its reasoning-budget sampler follows the block).  Here the grammar stage wraps the lazy
grammar in a sampler that follows the first block between ``reasoning_start`` and ``reasoning_end``
(:class:`ReasoningBlock`) and passes the grammar the tokens outside it (:class:`GrammarFeed`); while the
grammar waits its ``apply`` changes nothing, so it is always passed on.

The wrapper keeps its state per sampler (``llama_sampler.ctx`` is a handle to it), so a clone of the chain
(``LlamaSamplingContext.cp``) gets its own copy of the grammar and of the block's state, and each copy
frees its grammar once.
"""

from __future__ import annotations

import copy
import enum
from typing import Any, Callable

from .reasoning import token_text


class Place(enum.Enum):
    BEFORE = "before"  # the block may still begin
    INSIDE = "inside"
    AFTER = "after"  # it ended, or never began in time


class ReasoningBlock:
    """Where the output is with respect to its first reasoning block: it begins at ``start`` (found in the
    first ``window`` tokens; None: any time), or at the first token when the prompt opened it, and ends at
    ``end``.  The marker's tokens count as inside."""

    def __init__(self, start: str, end: str, opened: bool, window: int | None) -> None:
        self.start, self.end, self.opened, self.window = start, end, opened, window
        self.reset()

    def reset(self) -> None:
        self.place = Place.INSIDE if self.opened else Place.BEFORE
        self.text = ""  # the end of the output that may hold a marker's beginning
        self.seen = 0

    def outside(self, piece: str) -> bool:
        """Take the next token's text; whether that token is outside the block."""
        if self.place is Place.AFTER:
            return True
        self.text += piece
        if self.place is Place.BEFORE:
            self.seen += 1
            at = self.text.find(self.start)
            if at < 0:
                if self.window is not None and self.seen >= self.window:
                    self.place = Place.AFTER
                self.text = self.text[-len(self.start):]
                return True
            self.place, self.text = Place.INSIDE, self.text[at + len(self.start):]
        if self.end in self.text:
            self.place = Place.AFTER
        else:
            self.text = self.text[-len(self.end):]
        return False


class GrammarFeed:
    """Which tokens a lazy grammar is given: every token but those of the first reasoning block, and every
    token once the grammar has started (a trigger before the block: what follows is the grammar's, and a
    grammar that constrains must see each token it allowed)."""

    def __init__(self, block: ReasoningBlock, words: tuple[str, ...], tokens: frozenset[int]) -> None:
        self.block, self.words, self.tokens = block, words, tokens
        self.keep = max(map(len, words), default=1) - 1
        self.recent = ""  # the end of the text given before the block (where a word may be half written)

    def reset(self) -> None:
        self.block.reset()
        self.recent = ""

    def takes(self, token: int, piece: str) -> bool:
        """Take the next token; whether the grammar is given it."""
        if self.block.place is Place.BEFORE:
            text = self.recent + piece
            if token in self.tokens or any(word in text for word in self.words):
                self.block.place = Place.AFTER  # the grammar starts here
                return True
            self.recent = text[len(text) - self.keep:] if self.keep else ""
        return self.block.outside(piece)


class _Gate:
    """One wrapper's state: the lazy grammar it owns and what it gives it."""

    def __init__(self, grammar: Any, feed: GrammarFeed) -> None:
        self.grammar, self.feed = grammar, feed

    def copied(self, lib: Any) -> _Gate:
        feed = copy.copy(self.feed)
        feed.block = copy.copy(self.feed.block)
        return _Gate(lib.llama_sampler_clone(self.grammar), feed)

    def close(self, lib: Any) -> None:
        grammar, self.grammar = self.grammar, None
        if grammar is not None:
            lib.llama_sampler_free(grammar)


def outside_reasoning(ctx: Any, grammar: Any) -> Any:
    """A sampler that owns the lazy ``grammar`` (a native sampler) and feeds it only the tokens outside the
    reasoning block of ``ctx.params``."""
    lib, ffi, p = ctx.lib, ctx.ffi, ctx.params
    piece: Callable[[int], str] = token_text(ctx)

    def gate_of(smpl: Any) -> _Gate:
        return ffi.from_handle(smpl.ctx)

    def accept(smpl: Any, token: int) -> None:
        gate = gate_of(smpl)
        if gate.feed.takes(token, piece(token)):
            lib.llama_sampler_accept(gate.grammar, token)

    def reset(smpl: Any) -> None:
        gate = gate_of(smpl)
        gate.feed.reset()
        lib.llama_sampler_reset(gate.grammar)

    name = ffi.new("char[]", b"grammar-outside-reasoning")
    iface = ffi.new("struct llama_sampler_i *")

    def made(gate: _Gate) -> Any:
        handle = ffi.new_handle(gate)
        ctx.keep.append(handle)  # alive while any chain that may hold this sampler lives
        return lib.llama_sampler_init(iface, handle)

    iface.name = ctx.callback("const char *(*)(const struct llama_sampler *)", lambda _smpl: name)
    iface.accept = ctx.callback("void(struct llama_sampler *, llama_token)", accept)
    iface.apply = ctx.callback("void(struct llama_sampler *, llama_token_data_array *)",
                               lambda smpl, cur_p: lib.llama_sampler_apply(gate_of(smpl).grammar, cur_p))
    iface.reset = ctx.callback("void(struct llama_sampler *)", reset)
    iface.clone = ctx.callback("struct llama_sampler *(*)(const struct llama_sampler *)",
                               lambda smpl: made(gate_of(smpl).copied(lib)))
    iface.free = ctx.callback("void(struct llama_sampler *)", lambda smpl: gate_of(smpl).close(lib))
    ctx.keep.extend((iface, name))
    block = ReasoningBlock(p.reasoning_start, p.reasoning_end, p.reasoning_start_in_prompt,
                           p.reasoning_start_max_tokens)
    words = tuple(t for t in p.grammar_triggers if isinstance(t, str))
    tokens = frozenset(t for t in p.grammar_triggers if isinstance(t, int))
    return made(_Gate(grammar, GrammarFeed(block, words, tokens)))


__all__ = ["GrammarFeed", "Place", "ReasoningBlock", "outside_reasoning"]
