"""The messages llama.cpp's family handlers hand their templates: an earlier turn's thinking under the name
the template reads (the oracle comparison is contrib/server/tests/test_llama_server_real_templates.py)."""

from __future__ import annotations

from llama_cpp_chat_formats.family_messages import adapted

TURN = {"role": "assistant", "content": "Hello!", "reasoning_content": "A greeting."}
CALL = {"role": "assistant", "content": "", "reasoning_content": "Look it up.",
        "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}
USER = {"role": "user", "content": "Hi"}


def test_gpt_oss_reads_thinking_and_a_calling_turn_loses_its_content() -> None:
    out = adapted("{{ '<|channel|>' }}", [USER, TURN, CALL])
    assert out[0] is USER and out[1] == {**TURN, "thinking": "A greeting."}
    assert out[2] == {"role": "assistant", "reasoning_content": "Look it up.", "thinking": "Look it up.",
                      "tool_calls": CALL["tool_calls"]}


def test_lfm2_reads_thinking() -> None:
    for template in ("<|tool_list_start|>...<|tool_list_end|>", "List of tools: ["):
        assert adapted(template, [USER, TURN]) == [USER, {**TURN, "thinking": "A greeting."}]


def test_ministral_3_reads_a_thinking_block_before_the_text() -> None:
    template = "[SYSTEM_PROMPT] [TOOL_CALLS] [ARGS]"
    system = {"role": "system", "content": [{"type": "text", "text": "Be brief."}]}
    assert adapted(template, [system, USER, TURN]) == [
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]}, USER,
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "A greeting."},
                                          {"type": "text", "text": "Hello!"}]}]
    assert adapted(template + " [CALL_ID]", [TURN]) == [TURN]  # Mistral's later templates are not Ministral 3's


def test_other_templates_get_the_messages_unchanged() -> None:
    messages = [USER, TURN]
    assert adapted("{% for m in messages %}{{ m.content }}{% endfor %}", messages) is messages
