"""Each real template of the pinned llama.cpp source writes a call its own way: the way a model trained on it
calls a tool.  That text, cut out of the template's rendering of a conversation whose assistant turn made the
call, is read back as the same call.  llama-server refuses a grammar with tools, so it cannot be given the
same forced reply; the template is the oracle here, as it is the source of llama.cpp's own parsers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llama_cpp.testing import llama_cpp_source_dir
from llama_cpp_chat_formats import Jinja2ChatFormatter
from llama_cpp_chat_formats.tool_calls import parse_tool_calls

TEMPLATES = sorted((llama_cpp_source_dir() / "models" / "templates").glob("*.jinja"))
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather of a city",
                                           "parameters": {"type": "object", "properties": {
                                               "city": {"type": "string"}, "days": {"type": "integer"}},
                                               "required": ["city"]}}}]
ARGUMENTS = {"city": "Carcassonne", "days": 2}
ASKED = [{"role": "user", "content": "Weather in Paris?"}]
CALLED = [*ASKED, {"role": "assistant", "content": "", "tool_calls": [
    {"id": "call00001", "type": "function", "function": {"name": "get_weather", "arguments": json.dumps(ARGUMENTS)}}]}]
# what ends a turn after the call, in the templates' spellings (not the model's words)
TURN_ENDS = ("<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end|>", "</s>", "<end_of_turn>", "<|END_OF_TURN_TOKEN|>",
             "<|end_of_msg|>", "<|return|>", "<|call|>", "<|endoftext|>", "<turn|>", "<|end_of_text|>",
             "<｜end▁of▁sentence｜>", "<|eos|>", "<|message_sep|>", "<|END_RESPONSE|>", "<seed:eos>", "<sep>",
             "<end_of_sentence>", "<|role_end|>", "</assistant>", "<|calls|>", "<|tool_response>")

# templates whose call is not read back, and why
NOT_READ = {
    "meetkai-functionary-medium-v3.2": "its generation prompt writes the \">>>\" a call begins with: the functionary "
                                       "handler reads these replies, with the prompt's opening",
}


def written_call(path: Path) -> str:
    """The text the template writes for the assistant's call: the rendering of the conversation with the call,
    after what it shares with the generation prompt (from a tag or line boundary), less the turn's end."""
    formatter = Jinja2ChatFormatter(path.read_text(encoding="utf-8"), eos_token="</s>", bos_token="<s>")
    prompt = formatter(messages=ASKED, tools=TOOLS).prompt
    rendered = formatter(messages=CALLED, tools=TOOLS, add_generation_prompt=False).prompt
    shared = 0
    while shared < min(len(prompt), len(rendered)) and prompt[shared] == rendered[shared]:
        shared += 1
    while shared > 0 and rendered[shared - 1] not in ">\n":
        shared -= 1
    call = rendered[shared:].rstrip()
    while any(call.endswith(end) for end in TURN_ENDS):
        call = next(call[:-len(end)].rstrip() for end in TURN_ENDS if call.endswith(end))
    return call


# templates that write no call of an assistant's turn (they drop it, or render no tools)
SILENT = ["HuggingFaceTB-SmolLM3-3B", "LFM2-8B-A1B", "LFM2.5-Instruct", "deepseek-ai-DeepSeek-R1-Distill-Llama-8B",
          "google-gemma-2-2b-it", "ibm-granite-granite-3.3-2B-Instruct", "llama-cpp-rwkv-world",
          "microsoft-Phi-3.5-mini-instruct"]


@pytest.mark.parametrize("path", [p for p in TEMPLATES if p.stem not in NOT_READ and p.stem not in SILENT],
                         ids=lambda p: p.stem)
def test_a_templates_own_call_is_read_back(path: Path) -> None:
    call = written_call(path)
    content, calls = parse_tool_calls(call, TOOLS)
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("get_weather", ARGUMENTS)], call
    assert "Carcassonne" not in (content or "")  # the call is not left in the text


def test_the_templates_that_write_no_call_are_the_known_ones() -> None:
    assert sorted(p.stem for p in TEMPLATES if p.stem not in NOT_READ and "Carcassonne" not in written_call(p)) == SILENT
