"""Every public method that samples names every sampling keyword, with the record's defaults.

``SamplingParams`` is the one source of truth: a field added there and
forgotten in a signature (or a keyword added to a signature and not to the
record) fails here.  The seed's ``present_penalty`` and ``presence_penalty``
both work, ``present_penalty`` winning when both are given.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import attrs
import pytest

from llama_cpp import Llama
from llama_cpp.sampling import SAMPLING_ALIASES, SAMPLING_FIELDS, SAMPLING_KEYWORDS, SamplingParams

# what each method takes besides the sampling keywords
OTHER_KEYWORDS = {
    "create_completion": {"self", "prompt", "suffix", "max_tokens", "logprobs", "echo", "stop", "stream", "model", "n",
                          "logits_processor", "stopping_criteria", "active_loras", "control_vector",
                          "priority", "tenant"},
    "create_chat_completion": {"self", "messages", "functions", "function_call", "tools", "tool_choice", "stream",
                               "stop", "response_format", "max_tokens", "model", "logprobs", "top_logprobs",
                               "assistant_prefill", "add_generation_prompt", "chat_template_kwargs",
                               "reasoning_format", "reasoning_effort", "parallel_tool_calls",
                               "logits_processor", "stopping_criteria", "active_loras", "control_vector",
                               "priority", "tenant"},
    "generate": {"self", "tokens", "reset", "logits_processor", "stopping_criteria", "active_loras",
                 "control_vector"},
    "sample": {"self", "logits_processor", "idx"},
}
OTHER_KEYWORDS["__call__"] = OTHER_KEYWORDS["create_completion"]

# where a signature's default is not the record's, and why
SIGNATURE_DEFAULTS = {
    "seed": None,  # None: the instance's seed
    "extra": None,  # the record's default is an empty dict, which cannot be a default value
    "logit_bias": None,
}
RECORD = {f.name: f.default for f in attrs.fields(SamplingParams)}


@pytest.mark.parametrize("method", sorted(OTHER_KEYWORDS))
def test_each_signature_names_exactly_the_sampling_keywords(method: str) -> None:
    parameters = inspect.signature(getattr(Llama, method)).parameters
    sampling = set(parameters) - OTHER_KEYWORDS[method]
    assert sampling - SAMPLING_KEYWORDS == set(), "keywords the sampling record does not know"
    assert SAMPLING_KEYWORDS - sampling == set(), "sampling keywords the signature does not name"
    assert not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()), "no **kwargs"


@pytest.mark.parametrize("method", sorted(OTHER_KEYWORDS))
def test_each_signature_has_the_record_defaults(method: str) -> None:
    parameters = inspect.signature(getattr(Llama, method)).parameters
    primary_temperature = "temp" if method in ("generate", "sample") else "temperature"
    for name in SAMPLING_FIELDS:
        default = parameters[name].default
        if name == "temperature" and primary_temperature == "temp":
            assert default is None and parameters["temp"].default == RECORD["temperature"]
        elif name == "temperature" and method == "create_chat_completion":
            assert default == 0.2  # chat's own default, as in the seed
        elif name == "presence_penalty":
            assert default is None and parameters["present_penalty"].default == RECORD["presence_penalty"]
        elif name in SIGNATURE_DEFAULTS:
            assert default == SIGNATURE_DEFAULTS[name], name
        else:
            assert default == RECORD[name], name
    if primary_temperature == "temperature":
        assert parameters["temp"].default is None
    assert set(SAMPLING_ALIASES) == {"temp", "present_penalty"}


@pytest.mark.parametrize("method", sorted(OTHER_KEYWORDS))
def test_self_is_annotated_with_the_class_name(method: str) -> None:
    annotation = getattr(Llama, method).__annotations__.get("self", "Llama")
    assert annotation == "Llama"


def _sampled(llm: Llama, **kw: object) -> str:
    out = llm.create_completion("Once upon a time", max_tokens=24, temperature=0.9, seed=7, **kw)
    return out["choices"][0]["text"]


def test_present_penalty_and_its_alias(tiny_model_path: Path) -> None:
    with Llama(str(tiny_model_path), n_ctx=256, verbose=False) as llm:
        base = _sampled(llm)
        present = _sampled(llm, present_penalty=1.5)
        assert present != base  # the penalty reaches the sampler
        assert _sampled(llm, presence_penalty=1.5) == present  # the alias alone
        assert _sampled(llm, present_penalty=1.5, presence_penalty=0.3) == present  # both: present_penalty wins
        chat = dict(messages=[{"role": "user", "content": "hi"}], max_tokens=12, seed=3, temperature=0.9)
        with_present = llm.create_chat_completion(**chat, present_penalty=1.5)["choices"][0]["message"]
        with_presence = llm.create_chat_completion(**chat, presence_penalty=1.5)["choices"][0]["message"]
        assert with_present == with_presence
        tokens = llm.tokenize(b"Once upon a time")
        llm.eval(tokens)
        assert llm.sample(temp=0.9, seed=5, present_penalty=1.5) == llm.sample(temp=0.9, seed=5,
                                                                               presence_penalty=1.5)


def test_generate_takes_temp_and_temperature(tiny_model_path: Path) -> None:
    with Llama(str(tiny_model_path), n_ctx=256, verbose=False) as llm:
        tokens = llm.tokenize(b"Once upon a time")

        def first(n: int, **kw: object) -> list[int]:
            gen = llm.generate(tokens, seed=11, **kw)
            out = [next(gen) for _ in range(n)]
            gen.close()
            return out

        assert first(8, temp=0.0) == first(8, temperature=0.0)
        assert first(8, temp=1.5) == first(8, temperature=1.5)


def test_seed_readme_sampling_examples_run(tiny_model_path: Path) -> None:
    with Llama(str(tiny_model_path), n_ctx=512, verbose=False) as model:
        response = model.create_completion(
            prompt="The secret to a happy life is", max_tokens=100, temperature=0.85, top_p=0.90, min_p=0.05,
            dry_multiplier=0.8, dry_base=1.75, dry_allowed_length=3, repeat_penalty=1.1, penalty_last_n=256,
        )
        assert response["choices"][0]["text"]
        for extra in (dict(xtc_probability=0.5, xtc_threshold=0.1), dict(mirostat_mode=2, mirostat_tau=5.0),
                      dict(top_n_sigma=1.0), dict(dynatemp_range=0.5, dynatemp_exponent=1.0),
                      dict(present_penalty=1.5, frequency_penalty=0.2)):
            out = model(prompt="Once upon a time", max_tokens=16, **extra)
            assert out["usage"]["completion_tokens"] > 0, extra


def test_unknown_sampling_keyword_is_a_type_error(tiny_model_path: Path) -> None:
    with Llama(str(tiny_model_path), n_ctx=256, verbose=False) as llm:
        with pytest.raises(TypeError, match="presense_penalty"):
            llm.create_completion("hi", presense_penalty=1.0)  # type: ignore[call-arg]


def test_the_servers_sampler_fields_are_the_records_fields() -> None:
    """The server's request bodies take every sampling field of the record, and no other (both ways)."""
    from llama_cpp_server.schemas import SamplerFields

    fields = set(SamplerFields.model_fields)
    assert set(SAMPLING_FIELDS) - fields == set(), "sampling fields the server's bodies do not take"
    assert fields - set(SAMPLING_FIELDS) - {"samplers", "extra_samplers"} == set(), "fields the record does not know"
