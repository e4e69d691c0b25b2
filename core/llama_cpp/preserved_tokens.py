"""Control tokens whose text a completion keeps: a reasoning family's markers in a real vocabulary.

The detokenizer leaves a control token's text out (a template's ``<|im_start|>`` is not the model's words), so
a family whose markers are control tokens (gpt-oss's ``<|channel|>``, Mistral's ``[THINK]`` in their real
vocabularies) left no trace of its block in the reply, and nothing could split it.  llama-server keeps such
"preserved" tokens' text in the reply; so does a completion made inside :func:`preserving` (the chat layer
preserves the markers of the family it will split by), and only those tokens.
"""

from __future__ import annotations

import contextlib
import contextvars
import weakref
from typing import Any, Iterable, Iterator

_preserved: contextvars.ContextVar[frozenset[int]] = contextvars.ContextVar("llama_cpp_preserved_tokens",
                                                                            default=frozenset())


@contextlib.contextmanager
def preserving(tokens: Iterable[int]) -> Iterator[None]:
    """Completions made inside the block (in this context) keep these tokens' text."""
    token = _preserved.set(frozenset(tokens))
    try:
        yield
    finally:
        _preserved.reset(token)


def current_preserved() -> frozenset[int]:
    return _preserved.get()


_found: weakref.WeakKeyDictionary[Any, dict[tuple[str, ...], frozenset[int]]] = weakref.WeakKeyDictionary()


def control_tokens_of(llama: Any, texts: Iterable[str]) -> frozenset[int]:
    """The control tokens ``texts`` are spelled with in ``llama``'s vocabulary: tokens with a text of their
    own that the detokenizer leaves out.  Asked once per model and set of texts (a request that offers tools
    asks it for every call style's markers): the vocabulary does not change."""
    key = tuple(texts)
    per_model = _found.setdefault(llama, {})
    if key not in per_model:
        per_model[key] = _control_tokens(llama, key)
    return per_model[key]


def _control_tokens(llama: Any, texts: tuple[str, ...]) -> frozenset[int]:
    found: set[int] = set()
    for text in texts:
        if not text:
            continue
        for token in llama.tokenize(text.encode("utf-8"), add_bos=False, special=True):
            if not llama.detokenize([token], special=False) and llama.detokenize([token], special=True):
                found.add(token)
    return frozenset(found)
