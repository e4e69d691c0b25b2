"""The seed's chat handler registry, its decorators, and the Hugging Face tokenizer helpers."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from llama_cpp import Llama
from llama_cpp.llama_chat_format import (ChatFormatterResponse, LlamaChatCompletionHandlerNotFoundException,
                                         LlamaChatCompletionHandlerRegistry, get_chat_completion_handler,
                                         register_chat_completion_handler, register_chat_format)

MESSAGES = [{"role": "user", "content": "Hi"}]


@pytest.fixture
def registry():
    reg = LlamaChatCompletionHandlerRegistry()
    before = dict(reg._handlers)
    yield reg
    reg._handlers.clear()
    reg._handlers.update(before)


def test_registry_is_one_per_process_and_refuses_silent_replacement(registry) -> None:
    assert LlamaChatCompletionHandlerRegistry() is registry

    def handler(**kw):
        return {"handled": kw["messages"]}

    registry.register_chat_completion_handler("my-handler", handler)
    assert get_chat_completion_handler("my-handler") is handler
    with pytest.raises(ValueError, match="already registered"):
        registry.register_chat_completion_handler("my-handler", handler)
    with pytest.raises(ValueError, match="already registered"):  # a plugin's format too
        registry.register_chat_completion_handler("chatml", handler)
    registry.register_chat_completion_handler("chatml", handler, overwrite=True)  # shadows the plugin's
    assert get_chat_completion_handler("chatml") is handler
    registry.unregister_chat_handler("chatml")
    assert get_chat_completion_handler("chatml") is not handler  # the plugin's again
    with pytest.raises(ValueError, match="no chat handler 'nope'"):
        registry.unregister_chat_handler("nope")
    with pytest.raises(LlamaChatCompletionHandlerNotFoundException, match="my-handler"):
        get_chat_completion_handler("missing")


def test_decorators_register_handlers_and_formatters_used_by_llama(registry, tiny_model_path: Path) -> None:
    @register_chat_completion_handler("echo-handler")
    def echo(*, llama, messages, **request):
        return {"choices": [{"message": {"role": "assistant", "content": messages[-1]["content"]}}],
                "temperature": request["temperature"]}

    @register_chat_format("brackets")
    def brackets(*, messages, **kwargs):
        return ChatFormatterResponse(prompt="".join(f"[{m['role']}] {m['content']}\n" for m in messages)
                                     + "[assistant] ", stop="\n[")

    with Llama(str(tiny_model_path), chat_format="echo-handler", verbose=False) as llm:
        out = llm.create_chat_completion(MESSAGES, temperature=0.3)
        assert out["choices"][0]["message"]["content"] == "Hi" and out["temperature"] == 0.3
        llm.chat_format = "brackets"
        reply = llm.create_chat_completion(MESSAGES, max_tokens=4, temperature=0.0)
        prompt = "[user] Hi\n[assistant] "
        assert reply["usage"]["prompt_tokens"] == len(llm.tokenize(prompt.encode(), special=True))


def test_tokenizer_config_templates(tiny_model_path: Path) -> None:
    from llama_cpp.llama_chat_format import (hf_tokenizer_config_to_chat_completion_handler,
                                             hf_tokenizer_config_to_chat_formatter)

    config = {"bos_token": {"content": "<s>"}, "eos_token": "</s>", "chat_template": [
        {"name": "default", "template": "{{ bos_token }}{% for m in messages %}{{ m.role }}: {{ m.content }}"
                                        "{{ eos_token }}{% endfor %}{% if add_generation_prompt %}assistant:"
                                        "{% endif %}"},
        {"name": "tool_use", "template": "unused"}]}
    formatter = hf_tokenizer_config_to_chat_formatter(config)
    rendered = formatter(messages=MESSAGES)
    assert rendered.prompt == "<s>user: Hi</s>assistant:"
    with pytest.raises(ValueError, match="no chat_template"):
        hf_tokenizer_config_to_chat_formatter({"eos_token": "</s>"})
    handler = hf_tokenizer_config_to_chat_completion_handler(config)
    with Llama(str(tiny_model_path), chat_handler=handler, verbose=False) as llm:
        out = llm.create_chat_completion(MESSAGES, max_tokens=3, temperature=0.0)
        assert out["usage"]["prompt_tokens"] == len(llm.tokenize(b"<s>user: Hi</s>assistant:", add_bos=False,
                                                                 special=True))


def test_autotokenizer_helpers_render_with_transformers(monkeypatch: pytest.MonkeyPatch) -> None:
    from llama_cpp.llama_chat_format import hf_autotokenizer_to_chat_formatter

    class FakeTokenizer:
        bos_token, eos_token = "<s>", "</s>"

        def apply_chat_template(self, messages, tokenize, add_generation_prompt, **kw):
            assert tokenize is False
            return "<s>" + "|".join(m["content"] for m in messages) + ("=>" if add_generation_prompt else "")

    fake = types.ModuleType("transformers")
    fake.AutoTokenizer = types.SimpleNamespace(from_pretrained=lambda path: FakeTokenizer())
    monkeypatch.setitem(sys.modules, "transformers", fake)
    rendered = hf_autotokenizer_to_chat_formatter("some/repo")(messages=MESSAGES)
    assert (rendered.prompt, rendered.stop, rendered.added_special) == ("<s>Hi=>", "</s>", True)
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(ImportError, match="pip install transformers"):
        hf_autotokenizer_to_chat_formatter("some/repo")
