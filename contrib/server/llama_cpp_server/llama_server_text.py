"""Text and tokens as llama-server reads and writes them, for its routes here.

One rule reads a "mixed" value (a text, or texts and token ids in one list: ``/completion``'s prompt,
``/tokenize``'s content, ``/infill``'s prefix and suffix): texts are tokenized, ids kept, and only a leading
text may get BOS.  Three rules write tokens back, because llama-server's routes differ: ``/detokenize`` joins
the pieces, ``/completion``'s ``prompt`` is what ``llama_detokenize`` writes, and ``/tokenize``'s pieces are
text or, when not UTF-8 on their own, bytes.
"""

from __future__ import annotations

from typing import Any, Sequence, Union

from pydantic import StrictInt

from .errors import APIError

#: a text, or texts and token ids mixed (JSON's true is not token 1)
Mixed = Union[str, list[Union[StrictInt, str]]]


def mixed_tokens(llm: Any, value: str | Sequence[object], *, add_bos: bool, special: bool, field: str) -> list[int]:
    """The tokens of ``value`` (a :data:`Mixed`; anything else in the list is a 400 naming ``field``): each text
    tokenized (``special``: special tokens spelled in it are tokens), each id kept; with ``add_bos`` a leading
    text gets BOS as the vocabulary wants it."""
    tokens: list[int] = []
    for i, piece in enumerate([value] if isinstance(value, str) else value):
        if isinstance(piece, bool) or not isinstance(piece, (int, str)):
            raise APIError(400, f"{field}: holds token ids and texts only, got {piece!r}", param=field)
        if isinstance(piece, int):
            tokens.append(piece)
        else:
            tokens += llm.tokenize(piece.encode("utf-8"), add_bos=add_bos and i == 0, special=special)
    return tokens


def pieces_text(llm: Any, tokens: Sequence[int]) -> str:
    """Tokens as llama-server's ``/detokenize`` writes them: their pieces (special ones spelled) joined, so a
    SentencePiece space after BOS stays."""
    return b"".join(llm.detokenize([t], special=True) for t in tokens).decode("utf-8", "replace")


def prompt_text(llm: Any, tokens: Sequence[int]) -> str:
    """A prompt as llama-server's ``/completion`` answers it (llama.cpp's ``llama_detokenize``, specials
    spelled): the pieces joined, less the SentencePiece space in front of the first token when it is text (a
    prompt from BOS keeps the space after it).  ``Llama.detokenize`` takes that space off the token after BOS."""
    bos = llm.token_bos()
    if not tokens or bos < 0 or tokens[0] == bos:
        return pieces_text(llm, tokens)
    text = llm.detokenize([bos, *tokens], special=True)
    return text[len(llm.detokenize([bos], special=True)):].decode("utf-8", "replace")


def token_piece(llm: Any, token: int) -> str | list[int]:
    """A token's piece for ``/tokenize``'s ``with_pieces``: its text, or its bytes when they are not UTF-8 alone."""
    raw = llm.detokenize([token], special=True)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return list(raw)
