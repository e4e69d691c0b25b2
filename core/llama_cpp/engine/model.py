"""The model: weights and vocabulary, shared by every sequence; no context.

Everything here is read-only once loaded, so any thread may call it while
another runs a decode.  Calls made on the callers' threads go through the
handle's ``calling``, so that ``close()`` on another thread waits for them
instead of freeing the model under them.
"""

from __future__ import annotations

import contextlib
import functools
import operator
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence, TypeVar

from llama_cpp_native import ffi, lib

from .._handles import SharedHandle

_T = TypeVar("_T")


class Model:
    """A loaded ``llama_model`` and its vocabulary, owned through ``handle``."""

    __slots__ = ("handle", "ptr", "vocab", "n_vocab", "is_eog", "_eog", "_pieces")

    def __init__(self, handle: SharedHandle) -> None:
        self.handle = handle
        self.ptr = handle.ptr
        self.vocab = lib.llama_model_get_vocab(self.ptr)
        self.n_vocab: int = lib.llama_vocab_n_tokens(self.vocab)
        # whether a token ends a generation: the C call bound to the vocabulary (no Python frame per token)
        self.is_eog: Callable[[int], bool] = functools.partial(lib.llama_vocab_is_eog, self.vocab)
        self._eog: list[int] | None = None
        # each token's bytes once asked for, by ``special``: a generated token's text is a dict lookup,
        # not a C call into a fresh buffer (at most n_vocab entries each; a dict's get and set are atomic)
        self._pieces: tuple[dict[int, bytes], dict[int, bytes]] = ({}, {})

    @property
    def model(self) -> int:
        """The ``llama_model *`` as the low-level API takes it (the value of ``Llama.model``): code written
        for llama-cpp-python reaches the model as ``llm._model.model``."""
        return int(ffi.cast("uintptr_t", self.ptr))

    def close(self) -> None:
        """Free the model once the calls in progress on other threads have returned (idempotent); what was
        made from it must be freed first or be told."""
        self.handle.close()

    @property
    def calling(self) -> contextlib.AbstractContextManager[Any]:
        """``with model.calling:`` around native calls made with the model or its vocabulary on a caller's
        thread (``SharedHandle.calling``): ``close()`` on another thread waits for them."""
        return self.handle.calling

    def read(self, fn: Callable[..., _T], *args: Any) -> _T:
        """``fn(llama_model *, *args)``, a call that ``close()`` on another thread waits for."""
        with self.calling as ptr:
            return fn(ptr, *args)

    def read_vocab(self, fn: Callable[..., _T], *args: Any) -> _T:
        """``fn(llama_vocab *, *args)``, a call that ``close()`` on another thread waits for."""
        with self.calling:
            return fn(self.vocab, *args)

    # -- vocabulary -----------------------------------------------------------
    @property
    def bos(self) -> int:
        return self.read_vocab(lib.llama_vocab_bos)

    @property
    def adds_bos(self) -> bool:
        """Whether the vocabulary wants BOS in front of a text prompt (and has one)."""
        return bool(self.read_vocab(lib.llama_vocab_get_add_bos)) and self.bos >= 0

    def eog_tokens(self) -> list[int]:
        """Every end-of-generation token (computed once: it scans the vocabulary)."""
        if self._eog is None:
            with self.calling:
                self._eog = [t for t in range(self.n_vocab) if self.is_eog(t)]
        return self._eog

    def tokenize(self, text: bytes, add_bos: bool, special: bool) -> list[int]:
        capacity = len(text) + 2
        buf = ffi.new("llama_token[]", capacity)
        with self.calling:
            n = lib.llama_tokenize(self.vocab, text, len(text), buf, capacity, add_bos, special)
            if n < 0:
                capacity = -n
                buf = ffi.new("llama_token[]", capacity)
                n = lib.llama_tokenize(self.vocab, text, len(text), buf, capacity, add_bos, special)
        if n < 0:
            raise RuntimeError(f"tokenization failed for {len(text)} bytes")
        return list(buf[0:n])

    def piece(self, token: int, special: bool = False) -> bytes:
        """The bytes of one token."""
        pieces = self._pieces[1] if special else self._pieces[0]
        piece = pieces.get(token)
        if piece is None:
            piece = pieces[token] = self._native_piece(token, special)
        return piece

    def _native_piece(self, token: int, special: bool) -> bytes:
        """llama.cpp's bytes of one token (a fresh buffer per call, so threads never share one)."""
        if not 0 <= token < self.n_vocab:  # the cache must not fill with ids llama.cpp would reject
            raise ValueError(f"token id {token} is not in the vocabulary (0..{self.n_vocab - 1})")
        buf = ffi.new("char[]", 64)
        with self.calling:
            n = lib.llama_token_to_piece(self.vocab, token, buf, 64, 0, special)
            if n < 0:
                buf = ffi.new("char[]", -n)
                n = lib.llama_token_to_piece(self.vocab, token, buf, -n, 0, special)
        return ffi.buffer(buf, n)[:]

    def detokenize(self, tokens: Sequence[int], special: bool = False, text_start: bool = True) -> bytes:
        """The text of ``tokens`` (valid ids): their pieces, one after the other.

        A SentencePiece tokenizer puts a space in front of the text after BOS (``b"Hello World"`` is
        ``[1, 15043, 2787]``: BOS, "▁Hello", "▁World"); at the start of a text (``text_start``) that
        space comes off again, as llama-cpp-python does, so the text round-trips.  Without a leading
        BOS nothing shows where the text starts, and the space stays: ``[15043]`` is ``b" Hello"``,
        so that tokens detokenized one at a time add up to the text.
        """
        if not (text_start and tokens and tokens[0] == self.bos >= 0):
            return b"".join(self.piece(t, special) for t in tokens)
        # llama.cpp's llama_detokenize takes the space prefix off the first token it is given, when the
        # vocabulary adds one (its add_space_prefix, which no other call reports): given the tokens after BOS
        rest = list(tokens[1:])
        ids = ffi.new("llama_token[]", rest)
        capacity = 8 * len(rest) + 16
        buf = ffi.new("char[]", capacity)
        with self.calling:
            n = lib.llama_detokenize(self.vocab, ids, len(rest), buf, capacity, False, special)
            if n < 0:
                capacity = -n
                buf = ffi.new("char[]", capacity)
                n = lib.llama_detokenize(self.vocab, ids, len(rest), buf, capacity, False, special)
        return self.piece(tokens[0], special) + ffi.buffer(buf, n)[:]

    def token_ids(self, tokens: Sequence[Any]) -> list[int]:
        """Token ids as Python ints (numpy integers welcome), each checked against the vocabulary."""
        try:
            ids = [operator.index(t) for t in tokens]
        except TypeError:
            raise TypeError("token ids must be integers") from None
        n_vocab = self.n_vocab
        for t in ids:
            if not 0 <= t < n_vocab:
                raise ValueError(f"token id {t} is outside the vocabulary (0..{n_vocab - 1})")
        return ids


@contextlib.contextmanager
def gguf_header(path: str | Path) -> Iterator[Any]:
    """A GGUF file's header (metadata and tensor descriptions) parsed by ggml, no tensor data read."""
    params = ffi.new("struct gguf_init_params *")
    params.no_alloc = True
    params.ctx = ffi.NULL
    gguf = lib.gguf_init_from_file(str(path).encode(), params[0])
    if gguf == ffi.NULL:
        raise ValueError(f"{str(path)!r} is not a readable GGUF file")
    try:
        yield gguf
    finally:
        lib.gguf_free(gguf)


def learned_positions(path: str | Path, model_ptr: Any) -> int | None:
    """How many positions a model with a learned position table (GPT-2, BERT: a ``position_embd`` tensor
    of one row per trained position) can address; None for the others (RoPE, ALiBi, recurrent), which
    llama.cpp runs past their trained context."""
    with gguf_header(path) as gguf:
        if lib.gguf_find_tensor(gguf, b"position_embd.weight") < 0:
            return None
    return int(lib.llama_model_n_ctx_train(model_ptr))
