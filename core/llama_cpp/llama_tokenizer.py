"""Tokenizers for the high-level API (llama-cpp-python's ``llama_cpp.llama_tokenizer``).

``Llama(tokenizer=...)`` takes any :class:`BaseLlamaTokenizer`: then every
``Llama.tokenize`` / ``detokenize`` (prompts, chat templates, stop strings)
goes through it instead of the model's own vocabulary.  The seed's use is
functionary models, whose Hugging Face tokenizer differs from llama.cpp's:
``tokenizer=LlamaHFTokenizer.from_pretrained("meetkai/functionary-small-v2.2-GGUF")``.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from ._llama_base import LlamaBase

__all__ = ["BaseLlamaTokenizer", "LlamaHFTokenizer", "LlamaTokenizer"]


class BaseLlamaTokenizer(abc.ABC):
    """Text (UTF-8 bytes) to token ids and back, as ``Llama`` asks for them."""

    @abc.abstractmethod
    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = True) -> list[int]:
        """The token ids of ``text``; ``add_bos`` adds the start token, ``special`` parses special tokens
        written in the text."""

    @abc.abstractmethod
    def detokenize(self, tokens: Sequence[int], prev_tokens: Sequence[int] | None = None,
                   special: bool = False) -> bytes:
        """The bytes of ``tokens``; with ``prev_tokens``, as they continue that text (a tokenizer that
        merges across token boundaries needs the context)."""


class LlamaTokenizer(BaseLlamaTokenizer):
    """Tokenizes with a Llama's own vocabulary."""

    def __init__(self, llama: LlamaBase) -> None:
        self._model = llama

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> list[int]:
        # special=False like Llama.tokenize: user text that spells a special token stays text
        return self._model.tokenize(text, add_bos=add_bos, special=special)

    def detokenize(self, tokens: Sequence[int], prev_tokens: Sequence[int] | None = None,
                   special: bool = False) -> bytes:
        return self._model.detokenize(tokens, prev_tokens=prev_tokens, special=special)

    def encode(self, text: str, add_bos: bool = True, special: bool = False) -> list[int]:
        return self.tokenize(text.encode("utf-8", errors="ignore"), add_bos=add_bos, special=special)

    def decode(self, tokens: Sequence[int]) -> str:
        return self.detokenize(tokens).decode("utf-8", errors="ignore")

    @classmethod
    def from_ggml_file(cls, path: str) -> LlamaTokenizer:
        from .llama import Llama

        return cls(Llama(model_path=path, vocab_only=True, verbose=False))


class LlamaHFTokenizer(BaseLlamaTokenizer):
    """A Hugging Face tokenizer (``transformers``) in place of the model's vocabulary.

    ``hf_tokenizer`` is any object with ``encode(text, add_special_tokens=...)``
    and ``decode(ids, skip_special_tokens=...)``.  ``add_bos`` maps to the
    tokenizer's own special tokens (``add_special_tokens``), as in
    llama-cpp-python; ``special`` is how Hugging Face tokenizers always work
    (special tokens written in the text are parsed).
    """

    def __init__(self, hf_tokenizer: Any) -> None:
        for method in ("encode", "decode"):
            if not callable(getattr(hf_tokenizer, method, None)):
                raise TypeError(f"hf_tokenizer must have an {method}() method (a transformers tokenizer), got "
                                f"{type(hf_tokenizer).__name__}")
        self.hf_tokenizer = hf_tokenizer

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = True) -> list[int]:
        return list(self.hf_tokenizer.encode(text.decode("utf-8", errors="ignore"), add_special_tokens=add_bos))

    def detokenize(self, tokens: Sequence[int], prev_tokens: Sequence[int] | None = None,
                   special: bool = False) -> bytes:
        skip = not special
        if prev_tokens is None:
            return self.hf_tokenizer.decode(list(tokens), skip_special_tokens=skip).encode("utf-8", errors="ignore")
        # decoded together, then the earlier text cut off: a word split across tokens decodes whole
        both = self.hf_tokenizer.decode([*prev_tokens, *tokens], skip_special_tokens=skip)
        before = self.hf_tokenizer.decode(list(prev_tokens), skip_special_tokens=skip)
        return both.encode("utf-8", errors="ignore")[len(before.encode("utf-8", errors="ignore")):]

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str) -> LlamaHFTokenizer:
        """``transformers.AutoTokenizer.from_pretrained`` (needs the ``transformers`` package)."""
        try:
            from transformers import AutoTokenizer
        except ImportError:
            raise ImportError("LlamaHFTokenizer.from_pretrained needs the transformers package: "
                              "pip install transformers") from None
        return cls(AutoTokenizer.from_pretrained(pretrained_model_name_or_path))
