"""The seed's names in llama_cpp.llama_chat_format: format functions, handlers, template constants."""

from __future__ import annotations

from pathlib import Path

from llama_cpp import Llama
from llama_cpp import llama_chat_format as lcf

# the seed's format_* functions (its vicuna formatter is called ``format``: docs/differences.md)
SEED_FORMAT_FUNCTIONS = {
    "llama-2": "format_llama2", "llama-3": "format_llama3", "llama-4": "format_llama4", "alpaca": "format_alpaca",
    "qwen": "format_qwen", "oasst_llama": "format_oasst_llama", "baichuan-2": "format_baichuan2",
    "baichuan": "format_baichuan", "openbuddy": "format_openbuddy", "redpajama-incite": "format_redpajama_incite",
    "snoozy": "format_snoozy", "phind": "format_phind", "intel": "format_intel", "open-orca": "format_open_orca",
    "mistrallite": "format_mistrallite", "zephyr": "format_zephyr", "pygmalion": "format_pygmalion",
    "chatml": "format_chatml", "mistral-instruct": "format_mistral_instruct", "chatglm3": "format_chatglm3",
    "openchat": "format_openchat", "saiga": "format_saiga", "gemma": "format_gemma", "vicuna": "format_vicuna",
}
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]


def test_format_functions_under_the_seeds_names() -> None:
    for name, function in SEED_FORMAT_FUNCTIONS.items():
        assert "Hi" in getattr(lcf, function)(messages=MESSAGES).prompt, name


def test_handlers_are_the_registered_ones() -> None:
    assert lcf.chatml_function_calling is lcf.get_chat_completion_handler("chatml-function-calling")
    assert lcf.functionary_chat_handler is lcf.get_chat_completion_handler("functionary")
    assert lcf.functionary_v1_v2_chat_handler is lcf.get_chat_completion_handler("functionary-v2")


def test_templates_and_the_guess() -> None:
    assert (lcf.CHATML_BOS_TOKEN, lcf.CHATML_EOS_TOKEN) == ("<s>", "<|im_end|>")
    guess = lcf.guess_chat_format_from_gguf_metadata
    assert guess({"tokenizer.chat_template": lcf.CHATML_CHAT_TEMPLATE}) == "chatml"
    assert guess({"tokenizer.chat_template": lcf.MISTRAL_INSTRUCT_CHAT_TEMPLATE}) == "mistral-instruct"
    assert guess({"tokenizer.chat_template": lcf.MIXTRAL_INSTRUCT_CHAT_TEMPLATE}) == "mistral-instruct"
    assert guess({"tokenizer.chat_template": lcf.LLAMA3_INSTRUCT_CHAT_TEMPLATE}) == "llama-3"
    assert guess({"tokenizer.chat_template": "{{ messages }}"}) is None and guess({}) is None
    # the ChatML template renders as the chatml format does
    jinja = lcf.Jinja2ChatFormatter(lcf.CHATML_CHAT_TEMPLATE, eos_token=lcf.CHATML_EOS_TOKEN,
                                    bos_token=lcf.CHATML_BOS_TOKEN)
    assert jinja(messages=MESSAGES).prompt == lcf.format_chatml(messages=MESSAGES).prompt
    for name in ("LLAMA4_INSTRUCT_CHAT_TEMPLATE", "LLAMA4_INSTRUCT_BOS_TOKEN", "LLAMA4_INSTRUCT_EOS_TOKEN",
                 "GPT_OSS_BOS_TOKEN", "GPT_OSS_EOS_TOKEN", "GPT_OSS_PAD_TOKEN", "MISTRAL_INSTRUCT_BOS_TOKEN",
                 "MISTRAL_INSTRUCT_EOS_TOKEN"):
        assert isinstance(getattr(lcf, name), str)


def test_a_jinja_formatter_becomes_a_chat_handler(tiny_model_path: Path) -> None:
    jinja = lcf.Jinja2ChatFormatter("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}<a>",
                                    eos_token="</s>", bos_token="<s>")
    with Llama(str(tiny_model_path), n_ctx=256, verbose=False, chat_handler=jinja.to_chat_handler()) as llm:
        out = llm.create_chat_completion(MESSAGES, max_tokens=3, temperature=0.0)
        assert out["object"] == "chat.completion"
        assert out["usage"]["prompt_tokens"] == len(llm.tokenize(b"<system>Be brief.<user>Hi<a>"))
