"""Media in a sequence: chunks that occupy several positions and are evaluated outside the token batch.

A multimodal prompt is text tokens with media chunks between them (an image's embeddings, an audio
clip's).  llama.cpp's mtmd evaluates a chunk with its own decodes (encoder, then the embeddings, with
non-causal attention where the model wants it), and the chunk takes ``n_pos`` positions of the sequence:
its token count on most models, fewer on M-RoPE ones (Qwen2-VL), whose next text token continues at
``n_past + n_pos``.

The ledger stays a list of integers, one per position, so everything built on it (prefix reuse, cache
lookups, snapshots, state files) works unchanged: a chunk is written as ``n_pos`` *media entries*,
negative numbers that text tokens never are.  The first entry of a chunk (its *start*) differs from the
rest (its *continuation*), so a prefix can always be cut back to a chunk boundary from the integers
alone; both carry the chunk's ``key``, a hash of what was encoded (the media's bytes and the projector),
so the same image in the next turn of a chat matches the entries already in memory and is not encoded
again, while another image at the same place does not match.
"""

from __future__ import annotations

import abc
import hashlib
from typing import Any, Mapping, Sequence

import attrs

#: Keys are this many bits: entries are ``-(2 * key + 1)`` (start) and ``-(2 * key + 2)`` (continuation),
#: all within a signed 32-bit token id.
KEY_BITS = 30


def media_key(*parts: str) -> int:
    """The key of a chunk from what determines its embeddings (content id, projector, options)."""
    digest = hashlib.sha256("\0".join(parts).encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "little") >> (32 - KEY_BITS)


def media_entries(key: int, n_pos: int) -> list[int]:
    """The ledger entries of a chunk of ``key`` over ``n_pos`` positions."""
    if not 0 <= key < 1 << KEY_BITS:
        raise ValueError(f"media key {key} is outside 0..{(1 << KEY_BITS) - 1}")
    if n_pos < 1:
        raise ValueError(f"a media chunk takes at least one position, not {n_pos}")
    return [-(2 * key + 1)] + [-(2 * key + 2)] * (n_pos - 1)


def is_media(entry: int) -> bool:
    return entry < 0


def is_continuation(entry: int) -> bool:
    """An entry inside a chunk, after its first: a prefix may not end just before it."""
    return entry < 0 and not entry & 1


def chunk_boundary(tokens: Sequence[int], n: int) -> int:
    """The largest cut ``<= n`` of ``tokens`` that does not split a media chunk."""
    while 0 < n < len(tokens) and is_continuation(tokens[n]):
        n -= 1
    return n


class MediaChunk(abc.ABC):
    """One media chunk of a prompt, as a multimodal handler made it.

    ``evaluate`` puts it into the sequence's memory at ``n_past`` (the engine calls it on the thread that
    owns the context, with the request's adapters applied, and never concurrently with a decode).
    """

    #: the chunk's key (:func:`media_key`)
    key: int
    #: positions it takes in the sequence
    n_pos: int
    #: embeddings it puts into memory (KV cells; ``n_pos`` or more)
    n_tokens: int

    @abc.abstractmethod
    def evaluate(self, ctx: Any, n_past: int, seq_id: int) -> None:
        """Encode the media and decode its embeddings into ``seq_id`` from position ``n_past``; raise (with
        nothing of the chunk left in memory) if that fails."""


def _check_media(instance: MediaPrompt, attribute: attrs.Attribute[Mapping[int, MediaChunk]],
                 media: Mapping[int, MediaChunk]) -> None:
    tokens = instance.tokens
    expected = sum(1 for t in tokens if is_media(t) and not is_continuation(t))
    if expected != len(media):
        raise ValueError(f"the prompt has {expected} media chunks in its tokens but {len(media)} chunk objects")
    for start, chunk in media.items():
        if tokens[start:start + chunk.n_pos] != media_entries(chunk.key, chunk.n_pos):
            raise ValueError(f"the media chunk at position {start} does not match the prompt's entries there")
    if not tokens or is_media(tokens[-1]):
        raise ValueError("a prompt with media must end with text (the generation prompt), not with a media chunk")


@attrs.frozen(eq=False)
class MediaPrompt:
    """A prompt with media: one entry per position (:func:`media_entries` for each chunk) and the chunks
    by the position they start at.  ``text`` is the rendered prompt, for ``echo``."""

    tokens: list[int]
    media: Mapping[int, MediaChunk] = attrs.field(validator=_check_media)
    text: str = ""

    @property
    def n_tokens(self) -> int:
        """Text tokens plus media embeddings: what the prompt costs (``usage.prompt_tokens``)."""
        return sum(1 for t in self.tokens if not is_media(t)) + sum(c.n_tokens for c in self.media.values())


def next_chunk(media: Mapping[int, MediaChunk], at: int, default: int) -> int:
    """The start of the first chunk of ``media`` at or after position ``at`` (``default`` if none): where a
    prompt's text run from ``at`` ends."""
    return min((s for s in media if s >= at), default=default)


def text_only(tokens: Sequence[int]) -> list[int]:
    """``tokens`` without media entries (what samplers' penalty history and drafters can read)."""
    return [t for t in tokens if t >= 0]
