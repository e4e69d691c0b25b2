"""Small helpers over the low-level (ctypes) C API shared by the low-level tests."""

from __future__ import annotations

from pathlib import Path

from llama_cpp import llama_cpp as C

C.llama_backend_init()


def load_model(path: Path, *, vocab_only: bool = False):
    params = C.llama_model_default_params()
    params.vocab_only = vocab_only
    model = C.llama_model_load_from_file(str(path).encode(), params)
    assert model, f"failed to load {path}"  # a handle is an int; NULL is None
    return model


def tokenize(vocab, text: bytes, *, add_special: bool, parse_special: bool) -> list[int]:
    capacity = len(text) + 8
    buf = (C.llama_token * capacity)()
    n = C.llama_tokenize(vocab, text, len(text), buf, capacity, add_special, parse_special)
    if n < 0:  # the buffer was too small: -n is the size needed
        capacity = -n
        buf = (C.llama_token * capacity)()
        n = C.llama_tokenize(vocab, text, len(text), buf, capacity, add_special, parse_special)
    assert n >= 0
    return list(buf[0:n])


def rss_bytes() -> int:
    """Resident set size of this process (Linux /proc)."""
    with open("/proc/self/statm") as fh:
        pages = int(fh.read().split()[1])
    import os

    return pages * os.sysconf("SC_PAGE_SIZE")
