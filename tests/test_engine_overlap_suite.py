"""The engine's end-to-end tests again with the overlap on (``overlap_decode``), as it is by default on a GPU.

CI has no GPU, so without this module the overlap would run only in ``test_engine_overlap.py``.  Every test
of the modules imported below is collected again here, with ``overlap_decode`` chosen on wherever the
model's memory allows it (a recurrent model keeps it off, as the default does).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest
from test_completion import *  # noqa: F403 - collected again, with the overlap on
from test_engine import *  # noqa: F403
from test_engine_media import *  # noqa: F403
from test_scheduling import *  # noqa: F403
from test_speculative import *  # noqa: F403

from llama_cpp import Llama, _params


@pytest.fixture(autouse=True, scope="module")
def _overlap_on() -> Iterator[None]:
    """Module-scoped, so that it is in place before the module-scoped ``Llama`` fixtures are made."""
    chosen = _params.overlap_decode

    def on_unless_recurrent(value: Any, *, n_gpu_layers: int, recurrent: bool) -> bool:
        return chosen(not recurrent if value is None else value, n_gpu_layers=n_gpu_layers, recurrent=recurrent)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_params, "overlap_decode", on_unless_recurrent)
        yield


# The drafters differ in what they propose, not in how the engine verifies it: with the overlap on, one n-gram
# drafter and the draft model stand for all of them (each runs alone in test_speculative.py, overlap off), and
# one comparison with llama-speculative-simple, whose own steps the overlap cannot change.
@pytest.mark.parametrize("spec_type", ["ngram-mod", "draft-simple"])
def test_smollm2_repetitive_prompts_equal_plain_greedy(spec_type: str, smollm2_model_path: Path) -> None:
    check_repetitive_prompts_equal_plain_greedy(spec_type, smollm2_model_path)  # noqa: F405


def test_speculative_steps_match_llama_speculative_simple(smollm2_model_path: Path) -> None:
    check_steps_match_llama_speculative_simple("ngram-map-k", smollm2_model_path)  # noqa: F405


def test_the_overlap_is_on_here(tiny_model_path: Path) -> None:
    with Llama(str(tiny_model_path), verbose=False) as llm:
        assert llm.scheduler.overlap

