"""The token layout of a (query, document) pair for a reranker, as llama.cpp's llama-embedding builds it.

A model whose GGUF carries a ``rerank`` chat template (Qwen3 rerankers, for
example) gets that template with ``{query}`` and ``{document}`` replaced,
tokenized with the model's special tokens added and parsed (as
llama-embedding does).  Any other reranker gets the layout of a
cross-encoder's pair: ``[BOS] query [EOS][SEP] document [EOS][SEP]``, each
bracketed token present when the vocabulary adds it to a single text (a
BERT: ``[CLS] query [SEP] document [SEP]``), with query and document
tokenized as plain text.
"""

from __future__ import annotations

from llama_cpp_native import ffi, lib

from .engine.model import Model


def rerank_template(model: Model) -> str | None:
    """The model's ``rerank`` chat template, if its GGUF has one."""
    ptr = lib.llama_model_chat_template(model.ptr, b"rerank")
    return None if ptr == ffi.NULL else ffi.string(ptr).decode("utf-8", "replace")


def rerank_tokens(model: Model, template: str | None, query: str, document: str) -> list[int]:
    """The tokens a reranker scores for ``(query, document)``."""
    if template is not None:
        prompt = template.replace("{query}", query).replace("{document}", document)
        return model.tokenize(prompt.encode("utf-8"), True, True)
    vocab = model.vocab
    closing = []  # what the vocabulary appends to a single text: EOS, then SEP
    if lib.llama_vocab_get_add_eos(vocab) and lib.llama_vocab_eos(vocab) >= 0:
        closing.append(lib.llama_vocab_eos(vocab))
    if lib.llama_vocab_get_add_sep(vocab) and lib.llama_vocab_sep(vocab) >= 0:
        closing.append(lib.llama_vocab_sep(vocab))
    head = [model.bos] if model.adds_bos else []
    return [*head, *model.tokenize(query.encode("utf-8"), False, False), *closing,
            *model.tokenize(document.encode("utf-8"), False, False), *closing]
