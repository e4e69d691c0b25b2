"""``llama_cpp.reasoning.template_variables``: the chat template's variables as llama-server hands them over,
``reasoning_effort`` and llama.cpp's ``preserve_reasoning`` switch turned into the names templates read."""

from __future__ import annotations

import pytest

from llama_cpp.reasoning import template_variables


def test_reasoning_effort_reaches_the_template_under_both_names() -> None:
    assert template_variables({}, "high") == {"reasoning_effort": "high", "reasoning_strength": "high"}
    assert template_variables({"reasoning_effort": "low"}) == {"reasoning_effort": "low", "reasoning_strength": "low"}
    assert template_variables({"reasoning_effort": "low", "enable_thinking": True}, "none") == \
        {"enable_thinking": False}
    assert template_variables({"x": 1}) == {"x": 1}
    with pytest.raises(ValueError, match="reasoning_effort must be a string"):
        template_variables({}, 3)  # type: ignore[arg-type]


@pytest.mark.parametrize("preserve", [True, False])
def test_preserve_reasoning_becomes_the_names_templates_read(preserve: bool) -> None:
    assert template_variables({"preserve_reasoning": preserve}) == {
        "preserve_reasoning": preserve, "preserve_thinking": preserve, "clear_thinking": not preserve,
        "truncate_history_thinking": not preserve, "drop_thinking": not preserve}
    # a name the caller set itself is kept
    assert template_variables({"preserve_reasoning": preserve, "clear_thinking": "mine"})["clear_thinking"] == "mine"
    assert "preserve_thinking" not in template_variables({"preserve_reasoning": "yes"})  # only a boolean switches


def test_a_chat_reads_the_thinking_of_earlier_turns_when_asked(tiny_model_factory) -> None:
    """GLM 4.7's template keeps the thinking of turns before the last user message only when
    ``clear_thinking`` is false: ``preserve_reasoning`` in ``chat_template_kwargs`` sets it, as in llama.cpp."""
    from llama_cpp import Llama
    from llama_cpp.testing import llama_cpp_source_dir

    template = (llama_cpp_source_dir() / "models" / "templates" / "GLM-4.7-Flash.jinja").read_text()
    messages = [{"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello!", "reasoning_content": "A greeting."},
                {"role": "user", "content": "Bye"}]
    with Llama(str(tiny_model_factory(chat_template=template)), n_ctx=512, verbose=False) as llm:
        kept = llm.render_chat_prompt(messages, chat_template_kwargs={"preserve_reasoning": True}).prompt
        dropped = llm.render_chat_prompt(messages).prompt
    assert "<think>A greeting.</think>Hello!" in kept and "A greeting." not in dropped
