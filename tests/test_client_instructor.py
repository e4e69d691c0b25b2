"""instructor runs unchanged on our ``Llama``, the way its llama-cpp-python guide shows.

The guide builds ``Llama(..., chat_format="chatml", draft_model=LlamaPromptLookupDecoding(num_pred_tokens=2),
logits_all=True)`` and patches the in-process OpenAI-compatible method:
``instructor.patch(create=llm.create_chat_completion_openai_v1, mode=instructor.Mode.JSON_SCHEMA)``. instructor
then sends ``response_format={"type": "json_schema", "json_schema": {"name": ..., "schema": ...}}`` (OpenAI's
shape), reads ``choices[0].message.content`` and ``finish_reason`` from the ``openai`` ChatCompletion object
that ``create_chat_completion_openai_v1`` returns, and validates the JSON against the pydantic model; with
``stream=True`` and ``instructor.Partial[Model]`` it reads ChatCompletionChunk deltas. ``Mode.TOOLS`` (instructor's
default) sends the schema as a forced tool call (``tools`` + ``tool_choice``) and parses the call's arguments.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import instructor
import openai.types.chat as oai
import pytest
from pydantic import BaseModel

import llama_cpp
from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

MESSAGES = [{"role": "user", "content": "Extract `Jason is 30 years old`"}]


class UserDetail(BaseModel):
    name: str
    age: int


@pytest.fixture(scope="module")
def llm(smollm2_model_path: Path) -> Any:
    with warnings.catch_warnings():
        # draft_model= is this project's deprecated spelling of speculative=; the guide still uses it
        warnings.simplefilter("ignore", DeprecationWarning)
        model = llama_cpp.Llama(
            model_path=str(smollm2_model_path),
            chat_format="chatml",
            n_ctx=1024,
            draft_model=LlamaPromptLookupDecoding(num_pred_tokens=2),
            logits_all=True,
            verbose=False,
        )
    with model:
        yield model


class _Spy:
    """The create function instructor patches, recording what it was asked and what it returned."""

    def __init__(self, llm: llama_cpp.Llama) -> None:
        self.llm = llm
        self.calls: list[dict[str, Any]] = []
        self.responses: list[Any] = []

    def __call__(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        response = self.llm.create_chat_completion_openai_v1(**kwargs)
        self.responses.append(response)
        return response


def test_json_schema_mode_gives_the_pydantic_object(llm: llama_cpp.Llama) -> None:
    create = instructor.patch(create=llm.create_chat_completion_openai_v1, mode=instructor.Mode.JSON_SCHEMA)
    user = create(messages=MESSAGES, response_model=UserDetail, max_tokens=60, temperature=0)
    assert isinstance(user, UserDetail)
    assert user.model_dump() == {"name": "Jason", "age": 30}


def test_json_schema_mode_sends_openai_s_response_format_and_gets_openai_s_objects(llm: llama_cpp.Llama) -> None:
    spy = _Spy(llm)
    create = instructor.patch(create=spy, mode=instructor.Mode.JSON_SCHEMA)
    user = create(messages=MESSAGES, response_model=UserDetail, max_tokens=60, temperature=0)
    assert user.model_dump() == {"name": "Jason", "age": 30}
    assert len(spy.calls) == 1, "the first answer validated: no retry"
    response_format = spy.calls[0]["response_format"]
    assert response_format["type"] == "json_schema"
    assert response_format["json_schema"]["schema"]["required"] == ["name", "age"]
    response = spy.responses[0]
    assert isinstance(response, oai.ChatCompletion)
    assert response.choices[0].finish_reason == "stop"
    assert UserDetail.model_validate_json(response.choices[0].message.content).model_dump() == user.model_dump()


def test_partial_streaming_ends_with_the_whole_object(llm: llama_cpp.Llama) -> None:
    create = instructor.patch(create=llm.create_chat_completion_openai_v1, mode=instructor.Mode.JSON_SCHEMA)
    stream = create(messages=MESSAGES, response_model=instructor.Partial[UserDetail], max_tokens=60,
                    temperature=0, stream=True)
    partials = [p.model_dump() for p in stream]
    assert len(partials) > 1, "the object should grow as the JSON streams in"
    assert partials[0] != partials[-1]
    assert partials[-1] == {"name": "Jason", "age": 30}


def test_tools_mode_parses_the_forced_tool_call(llm: llama_cpp.Llama) -> None:
    spy = _Spy(llm)
    create = instructor.patch(create=spy, mode=instructor.Mode.TOOLS)
    user = create(messages=MESSAGES, response_model=UserDetail, max_tokens=60, temperature=0)
    assert isinstance(user, UserDetail)
    assert user.age == 30
    call = spy.calls[-1]
    assert call["tool_choice"] == {"type": "function", "function": {"name": "UserDetail"}}
    (tool_call,) = spy.responses[-1].choices[0].message.tool_calls
    assert isinstance(tool_call, oai.ChatCompletionMessageToolCall)
    assert tool_call.function.name == "UserDetail"
    assert UserDetail.model_validate_json(tool_call.function.arguments).model_dump() == user.model_dump()
