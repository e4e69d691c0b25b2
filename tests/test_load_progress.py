"""``Llama(progress_callback=...)``: llama.cpp's model-load progress, on the loading thread; a callback that
returns False cancels the load, one that raises cancels it and its exception comes out of the constructor."""

from __future__ import annotations

from pathlib import Path

import pytest
from llama_cpp import Llama


def test_the_load_reports_its_progress_up_to_one(tiny_model_path: Path) -> None:
    seen: list[float] = []
    with Llama(str(tiny_model_path), n_ctx=64, verbose=False, progress_callback=seen.append) as llm:
        assert llm.n_vocab() > 0
    assert seen and seen == sorted(seen) and seen[-1] == 1.0 and all(0.0 <= f <= 1.0 for f in seen)


def test_returning_false_cancels_the_load(tiny_model_path: Path) -> None:
    with pytest.raises(ValueError, match="failed to load model from .*cancel"):
        Llama(str(tiny_model_path), n_ctx=64, verbose=False, progress_callback=lambda fraction: False)


def test_an_exception_in_the_callback_cancels_the_load_and_is_raised(tiny_model_path: Path) -> None:
    class Stop(Exception):
        pass

    def stop(fraction: float) -> None:
        raise Stop(f"stopped at {fraction}")

    with pytest.raises(Stop, match="stopped at 0"):
        Llama(str(tiny_model_path), n_ctx=64, verbose=False, progress_callback=stop)
