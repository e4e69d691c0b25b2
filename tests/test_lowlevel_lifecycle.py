"""Models and contexts load and free through the low-level API without leaking."""

from __future__ import annotations

from pathlib import Path

import pytest
from lowlevel import C, load_model, rss_bytes

CYCLES = 200
LIMIT = 20 * 1024 * 1024


def _load_and_free(path: Path) -> None:
    model = load_model(path)
    cparams = C.llama_context_default_params()
    cparams.n_ctx = 256
    cparams.n_batch = 64
    ctx = C.llama_init_from_model(model, cparams)
    assert ctx  # a handle is an int; NULL is None
    C.llama_free(ctx)
    C.llama_model_free(model)


@pytest.mark.parametrize("which", ["tiny", "smollm2"])
def test_200_load_free_cycles_do_not_grow_memory(which: str, request: pytest.FixtureRequest) -> None:
    path = request.getfixturevalue("tiny_model_path" if which == "tiny" else "smollm2_model_path")
    for _ in range(5):  # allocator pools and one-time backend state settle first
        _load_and_free(path)
    before = rss_bytes()
    for _ in range(CYCLES):
        _load_and_free(path)
    grown = rss_bytes() - before
    assert grown < LIMIT, f"resident memory grew by {grown / 2**20:.1f} MB over {CYCLES} cycles"
