"""What prefixes an engine can reuse, as chained block hashes: a router's view of a replica's memory.

A request router that sends a conversation's next turn, or a prompt that starts with a long shared system
prompt, to the replica already holding that prefix saves the replica evaluating it again.  It needs to know,
cheaply and without the tokens themselves, which prefixes each replica holds: in its sequences (the ledgers)
and in its prompt cache.  A prefix is cut into blocks of :data:`BLOCK_TOKENS` tokens and each block gets a hash
that covers the block and, through the previous block's hash, everything before it, so a block's hash names
its whole prefix; the chain starts from the model's fingerprint and the adapters the tokens were evaluated
under, so the same tokens of another model or adapter set never match.  The hash is BLAKE2b over the token ids
as little-endian 32-bit integers (8 bytes of digest, as hex): equal in every process, unlike Python's
``hash``.  A summary holds at most ``max_hashes`` of them, the shallowest blocks first (those shared by the
most prompts); a router matches a prompt's block hashes against it (:meth:`PrefixSummary.held`).
"""

from __future__ import annotations

import hashlib
import struct
from typing import Any, Iterable, Sequence

import attrs

from .._adapters import NO_ADAPTERS

BLOCK_TOKENS = 32
MAX_HASHES = 4096


def chain_start(model: str, adapters: Any) -> bytes:
    """Where a prefix's chain starts: the model's fingerprint and the adapters it is evaluated under (their
    ``repr``: LoRA paths and scales, the control vector's key)."""
    return hashlib.blake2b(f"{model}\x00{adapters!r}".encode(), digest_size=8).digest()


def block_hashes(tokens: Sequence[int], start: bytes, block_tokens: int = BLOCK_TOKENS) -> list[str]:
    """The hash of every whole block of ``tokens`` (a partial last block has none), each covering its prefix."""
    if block_tokens < 1:
        raise ValueError(f"block_tokens must be at least 1, got {block_tokens}")
    out: list[str] = []
    previous = start
    layout = struct.Struct(f"<{block_tokens}i")
    for begin in range(0, len(tokens) - block_tokens + 1, block_tokens):
        previous = hashlib.blake2b(previous + layout.pack(*tokens[begin:begin + block_tokens]),
                                   digest_size=8).digest()
        out.append(previous.hex())
    return out


def prompt_hashes(model: str, tokens: Sequence[int], adapters: Any = NO_ADAPTERS,
                  block_tokens: int = BLOCK_TOKENS) -> list[str]:
    """A prompt's block hashes as the summary of an engine of ``model`` (its fingerprint) would list them once it
    held the prompt, evaluated under ``adapters`` (default: none): what a router matches against summaries."""
    return block_hashes(tokens, chain_start(model, adapters), block_tokens)


@attrs.frozen
class PrefixSummary:
    """The block hashes of the prefixes an engine holds, shallowest first."""

    model: str  # the model's fingerprint (:func:`llama_cpp.engine.origin.model_fingerprint`)
    block_tokens: int
    hashes: tuple[str, ...]

    def held(self, prompt_hashes: Sequence[str]) -> int:
        """How many leading blocks of a prompt (its :func:`block_hashes`) the engine holds."""
        known = set(self.hashes)
        n = 0
        for value in prompt_hashes:
            if value not in known:
                break
            n += 1
        return n

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "block_tokens": self.block_tokens, "hashes": list(self.hashes)}


def summarize(model: str, prefixes: Iterable[tuple[Sequence[int], Any]], *, block_tokens: int = BLOCK_TOKENS,
              max_hashes: int = MAX_HASHES) -> PrefixSummary:
    """The summary of ``prefixes`` (``(tokens, adapters)`` each) of ``model``: their blocks' hashes, each
    once, the shallowest first, at most ``max_hashes``."""
    if max_hashes < 0:
        raise ValueError(f"max_hashes must be at least 0, got {max_hashes}")
    depth_of: dict[str, int] = {}
    for tokens, adapters in prefixes:
        for depth, value in enumerate(block_hashes(tokens, chain_start(model, adapters), block_tokens)):
            depth_of.setdefault(value, depth)  # a hash names its whole prefix: its depth is always the same
    kept = sorted(depth_of, key=lambda value: (depth_of[value], value))[:max_hashes]
    return PrefixSummary(model, block_tokens, tuple(kept))
