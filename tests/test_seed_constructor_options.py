"""Constructor options as the seed types them: None for its Optional enums, and ``flash_attn`` (a bool) as
the older spelling of ``flash_attn_type``."""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path

import pytest

from llama_cpp import Llama
from llama_cpp_native import lib


def test_none_is_llama_cpps_default(tiny_model_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        llm = Llama(str(tiny_model_path), n_ctx=256, verbose=False, attention_type=None, flash_attn_type=None,
                    rope_scaling_type=None, ctx_type=None)
    with llm:
        p = llm.context_params
        assert (p.attention_type, p.flash_attn_type, p.rope_scaling_type, p.ctx_type) == (
            lib.LLAMA_ATTENTION_TYPE_UNSPECIFIED, lib.LLAMA_FLASH_ATTN_TYPE_AUTO,
            lib.LLAMA_ROPE_SCALING_TYPE_UNSPECIFIED, lib.LLAMA_CONTEXT_TYPE_DEFAULT)
        copy = pickle.loads(pickle.dumps(llm))
        assert copy.context_params.flash_attn_type == lib.LLAMA_FLASH_ATTN_TYPE_AUTO
        copy.close()


@pytest.mark.parametrize(("flash_attn", "expected"), [(True, "ENABLED"), (False, "DISABLED")])
def test_flash_attn_is_the_older_spelling(tiny_model_path: Path, flash_attn: bool, expected: str) -> None:
    with pytest.warns(DeprecationWarning, match="flash_attn_type"):
        llm = Llama(str(tiny_model_path), n_ctx=256, verbose=False, flash_attn=flash_attn)
    with llm:
        assert llm.context_params.flash_attn_type == getattr(lib, f"LLAMA_FLASH_ATTN_TYPE_{expected}")
        assert llm.create_completion("Hello", max_tokens=2, temperature=0.0)["choices"][0]["finish_reason"]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"flash_attn": True, "flash_attn_type": lib.LLAMA_FLASH_ATTN_TYPE_DISABLED}, "disagree"),
    ({"flash_attn": "yes"}, "flash_attn must be True or False"),
    ({"attention_type": 7}, "attention_type must be in -1..1"),
    ({"rope_scaling_type": 9}, "rope_scaling_type must be in -1..3"),
    ({"flash_attn_type": 2}, "flash_attn_type must be in -1..1"),
])
def test_wrong_values_name_the_field(tiny_model_path: Path, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Llama(str(tiny_model_path), n_ctx=256, verbose=False, **kwargs)
