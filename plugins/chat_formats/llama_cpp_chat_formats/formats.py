"""The 24 named chat formats of llama-cpp-python, as prompt formatters.

A formatter turns OpenAI-style messages into the prompt text of one model
family and names the strings that end the assistant's turn.  Where llama.cpp's
``llama_chat_apply_template`` knows the format (``src/llama-chat.cpp``), the
text equals llama.cpp's, so a model gets the same prompt from llama_cpp as
from llama.cpp's own tools; the formats llama.cpp does not know follow their
model cards.

Shared rules, so that every format treats a conversation alike:

- No format injects a default system prompt: the messages are the whole
  conversation, as in llama.cpp.
- ``content`` may be a string, ``None`` (an assistant turn that only called
  tools) or a list of parts; text parts are joined by newlines, as llama.cpp's
  server joins them, and other parts (images...) have no text form here
  (:func:`llama_cpp.chat_messages.content_text`; ``create_chat_completion``
  refuses them before a format sees them).
- ``tool`` (and the legacy ``function``) results use the format's own tool
  role where it has one, otherwise they are rendered as a user turn, since
  the tool's answer is input to the model.  ``developer`` is OpenAI's newer
  name for ``system`` (:data:`llama_cpp.chat_messages.ROLE_ALIASES`).
- The stop strings are what ends an assistant turn in the format: its
  end-of-turn marker, or, where it has none, the header of the next user turn.
- ``added_special`` is true only when the prompt starts with the BOS text, so
  that the caller does not add a second BOS.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from llama_cpp.chat_messages import ROLE_ALIASES, content_text
from llama_cpp.llama_chat_format import ChatFormatterResponse

Message = Mapping[str, Any]
Turn = tuple[str, str]  # the text before and after a message's content

_ROLES = frozenset({"system", "user", "assistant", "tool"})
_ROLE_ALIASES = {"function": "tool", **ROLE_ALIASES}
# llama.cpp trims with C's isspace(); Python's str.strip() would also remove Unicode spaces.
_C_WHITESPACE = " \t\n\v\f\r"


def message_text(message: Message) -> str:
    """The text of a message, whatever form its ``content`` takes."""
    return content_text(message.get("content"))


def message_role(message: Message) -> str:
    """The message's role among system/user/assistant/tool; an unknown role is an error, not a guess."""
    role = _ROLE_ALIASES.get(message["role"], message["role"])
    if role not in _ROLES:
        raise ValueError(f"unsupported chat message role {message['role']!r}")
    return role


def _trim(text: str) -> str:
    """Strip whitespace exactly as llama.cpp's trim() does."""
    return text.strip(_C_WHITESPACE)


def _response(prompt: str, stop: tuple[str, ...], bos: str = "") -> ChatFormatterResponse:
    """The formatter's answer; ``bos`` is the format's BOS text when its prompts may begin with it."""
    return ChatFormatterResponse(prompt=prompt, stop=list(stop), added_special=bool(bos) and prompt.startswith(bos))


@dataclass(frozen=True, eq=False)  # compared and hashed by identity, as functions are
class _Turns:
    """A format in which every message is wrapped on its own, by role.

    ``turns`` maps a role to the text around its content; a role it lacks
    (``tool`` in most formats) is rendered as a user turn.  ``opener`` starts
    the assistant's turn (``add_generation_prompt``), ``start`` precedes the
    first message, ``trim`` strips each content as llama.cpp does for the
    formats that strip, and ``bos`` is the BOS text that starts the prompt.
    """

    turns: Mapping[str, Turn]
    opener: str
    stop: tuple[str, ...]
    start: str = ""
    trim: bool = False
    bos: str = ""

    def __call__(self, *, messages: list[Message], add_generation_prompt: bool = True,
                 **kwargs: Any) -> ChatFormatterResponse:
        parts = [self.start]
        for message in messages:
            before, after = self.turns.get(message_role(message), self.turns["user"])
            text = message_text(message)
            parts += [before, _trim(text) if self.trim else text, after]
        if add_generation_prompt:
            parts.append(self.opener)
        return _response("".join(parts), self.stop, self.bos)


def _headers(template: str, end: str, **roles: str) -> dict[str, Turn]:
    """Turns whose header names the role: ``template`` holds ``{role}``, ``roles`` maps our role to the format's."""
    return {ours: (template.format(role=theirs), end) for ours, theirs in roles.items()}


_CHATML_TURNS = _headers("<|im_start|>{role}\n", "<|im_end|>\n",
                         system="system", user="user", assistant="assistant", tool="tool")
# Open Assistant's tokens; MistralLite was trained on the same ones.
_OPEN_ASSISTANT_TURNS = {"system": ("<|system|>", "</s>"), "user": ("<|prompter|>", "</s>"),
                         "assistant": ("<|assistant|>", "</s>")}

# = llama.cpp "chatml".
format_chatml = _Turns(_CHATML_TURNS, opener="<|im_start|>assistant\n", stop=("<|im_end|>",))

# Qwen (1.x) chat is ChatML; its tokenizer may also end a reply with <|endoftext|>.  = llama.cpp "chatml".
format_qwen = _Turns(_CHATML_TURNS, opener="<|im_start|>assistant\n", stop=("<|im_end|>", "<|endoftext|>"))

# = llama.cpp "llama3" (no <|begin_of_text|>: the caller adds BOS).  Tool results take Llama 3.1's ipython role.
format_llama_3 = _Turns(
    _headers("<|start_header_id|>{role}<|end_header_id|>\n\n", "<|eot_id|>",
             system="system", user="user", assistant="assistant", tool="ipython"),
    opener="<|start_header_id|>assistant<|end_header_id|>\n\n", stop=("<|eot_id|>",), trim=True)

# = llama.cpp "llama4".  Tool results take Llama 4's ipython role.
format_llama_4 = _Turns(
    _headers("<|header_start|>{role}<|header_end|>\n\n", "<|eot|>",
             system="system", user="user", assistant="assistant", tool="ipython"),
    opener="<|header_start|>assistant<|header_end|>\n\n", stop=("<|eot|>",), trim=True)

# = llama.cpp "zephyr" (its <|endoftext|> turn end, as in StableLM Zephyr).
format_zephyr = _Turns(_headers("<|{role}|>\n", "<|endoftext|>\n", system="system", user="user", assistant="assistant"),
                       opener="<|assistant|>\n", stop=("<|endoftext|>",))

# Vicuna v1.1 = llama.cpp "vicuna": the system text is a bare preamble.
format_vicuna = _Turns({"system": ("", "\n\n"), "user": ("USER: ", "\n"), "assistant": ("ASSISTANT: ", "</s>\n")},
                       opener="ASSISTANT:", stop=("</s>",))

# OpenChat 3.5 = llama.cpp "openchat": the system text is a bare turn.
format_openchat = _Turns({"system": ("", "<|end_of_turn|>"), "user": ("GPT4 Correct User: ", "<|end_of_turn|>"),
                          "assistant": ("GPT4 Correct Assistant: ", "<|end_of_turn|>")},
                         opener="GPT4 Correct Assistant:", stop=("<|end_of_turn|>",))

# ChatGLM3 = llama.cpp "chatglm3"; tool results take ChatGLM3's observation role.  [gMASK]sop is the model's
# prompt prefix, not a BOS.  The model ends its turn by opening the next one.
format_chatglm3 = _Turns(
    _headers("<|{role}|>\n ", "", system="system", user="user", assistant="assistant", tool="observation"),
    opener="<|assistant|>", stop=("<|user|>", "<|observation|>"), start="[gMASK]sop")

# Stanford Alpaca: "### Instruction:" / "### Response:" blocks after the system text.
format_alpaca = _Turns({"system": ("", "\n\n"), "user": ("### Instruction:\n", "\n\n"),
                        "assistant": ("### Response:\n", "\n\n")},
                       opener="### Response:\n", stop=("### Instruction:",))

# OpenAssistant (LLaMA SFT models): <|prompter|>/<|assistant|>, each turn ended by </s>.
format_oasst_llama = _Turns(_OPEN_ASSISTANT_TURNS, opener="<|assistant|>", stop=("</s>",))

# amazon/MistralLite: Open Assistant's prompter/assistant tokens.
format_mistrallite = _Turns(_OPEN_ASSISTANT_TURNS, opener="<|assistant|>", stop=("</s>",))

# Baichuan 2 chat: the user and assistant tokens (ids 195/196) precede each message; the system text is bare.
format_baichuan_2 = _Turns({"system": ("", ""), "user": ("<reserved_106>", ""), "assistant": ("<reserved_107>", "")},
                           opener="<reserved_107>", stop=("<reserved_106>",))

# Baichuan-13B chat: as Baichuan 2, with that vocabulary's names for ids 195/196.
format_baichuan = _Turns({"system": ("", ""), "user": ("<reserved_102>", ""), "assistant": ("<reserved_103>", "")},
                         opener="<reserved_103>", stop=("<reserved_102>",))

# OpenBuddy: the system text, a blank line, then "User:" / "Assistant:" lines.
format_openbuddy = _Turns({"system": ("", "\n\n"), "user": ("User: ", "\n"), "assistant": ("Assistant: ", "\n")},
                          opener="Assistant:", stop=("User:",))

# RedPajama-INCITE-Chat: "<human>:" / "<bot>:" lines.
format_redpajama_incite = _Turns({"system": ("", "\n"), "user": ("<human>: ", "\n"), "assistant": ("<bot>: ", "\n")},
                                 opener="<bot>:", stop=("<human>:",))

# GPT4All-13B-snoozy: the system text is the "### Instruction:" block, then "### Prompt:" / "### Response:".
format_snoozy = _Turns({"system": ("### Instruction:\n", "\n"), "user": ("### Prompt:\n", "\n"),
                        "assistant": ("### Response:\n", "\n")},
                       opener="### Response:\n", stop=("### Prompt:",))

# Phind-CodeLlama v2: "### System Prompt" / "### User Message" / "### Assistant" sections.
format_phind = _Turns({"system": ("### System Prompt\n", "\n\n"), "user": ("### User Message\n", "\n\n"),
                       "assistant": ("### Assistant\n", "\n\n")},
                      opener="### Assistant\n", stop=("### User Message",))

# Intel neural-chat: "### System:" / "### User:" / "### Assistant:" blocks.
format_intel = _Turns({"system": ("### System:\n", "\n"), "user": ("### User:\n", "\n"),
                       "assistant": ("### Assistant:\n", "\n")},
                      opener="### Assistant:\n", stop=("### User:",))

# OpenOrca x OpenChat: "User:" / "Assistant:" turns ended by <|end_of_turn|>; the system text is prepended,
# followed by a space.
format_open_orca = _Turns({"system": ("", " "), "user": ("User: ", "<|end_of_turn|>"),
                           "assistant": ("Assistant: ", "<|end_of_turn|>")},
                          opener="Assistant:", stop=("<|end_of_turn|>",))

# Pygmalion 2: the role tokens are concatenated with the messages, with nothing in between.
format_pygmalion = _Turns({"system": ("<|system|>", ""), "user": ("<|user|>", ""), "assistant": ("<|model|>", "")},
                          opener="<|model|>", stop=("<|user|>",))

# Saiga (saiga_mistral): every message is "<s>{role}\n{content}</s>", the assistant's role being "bot".  The
# prompt starts with the BOS text, so the caller must not add one.
format_saiga = _Turns({"system": ("<s>system\n", "</s>"), "user": ("<s>user\n", "</s>"),
                       "assistant": ("<s>bot\n", "</s>")},
                      opener="<s>bot\n", stop=("</s>",), bos="<s>")


def format_llama_2(*, messages: list[Message], add_generation_prompt: bool = True,
                   **kwargs: Any) -> ChatFormatterResponse:
    """Llama 2 chat, equal to llama.cpp's "llama2-sys-bos".

    Of llama.cpp's Llama 2 variants this is Meta's own: the system text is a
    <<SYS>> block inside the first [INST], and every later exchange starts
    with <s>, as Meta's reference code encodes each turn with BOS (the
    caller adds the first BOS).  "[/INST]" both ends the user's turn and opens
    the assistant's, so ``add_generation_prompt`` adds nothing.
    """
    parts = ["[INST] "]
    inside_turn = True
    for message in messages:
        role, text = message_role(message), message_text(message)
        if not inside_turn:
            parts.append("<s>[INST] ")
            inside_turn = True
        if role == "system":
            parts.append(f"<<SYS>>\n{text}\n<</SYS>>\n\n")
        elif role == "assistant":
            parts.append(f"{text}</s>")
            inside_turn = False
        else:
            parts.append(f"{text} [/INST]")
    return _response("".join(parts), ("</s>",))


def format_mistral_instruct(*, messages: list[Message], add_generation_prompt: bool = True,
                            **kwargs: Any) -> ChatFormatterResponse:
    """Mistral Instruct, equal to llama.cpp's "mistral-v1".

    v1 is the format of Mistral-7B-Instruct v0.1/v0.2 and Mixtral-8x7B, the
    models this name was made for: their tokenizer has no [INST] control
    token, so "[INST]" is text preceded by a space, and the system text opens
    the first [INST].  (v3 is for the control-token tokenizers of v0.3 and
    later, v7 for [SYSTEM_PROMPT] models.)  "[/INST]" opens the assistant's
    turn, so ``add_generation_prompt`` adds nothing.
    """
    parts: list[str] = []
    inside_turn = False
    for message in messages:
        role, text = message_role(message), message_text(message)
        if not inside_turn:
            parts.append(" [INST] ")
            inside_turn = True
        if role == "system":
            parts.append(f"{text}\n\n")
        elif role == "assistant":
            parts.append(f" {text}</s>")
            inside_turn = False
        else:
            parts.append(f"{text} [/INST]")
    return _response("".join(parts), ("</s>",))


def format_gemma(*, messages: list[Message], add_generation_prompt: bool = True,
                 **kwargs: Any) -> ChatFormatterResponse:
    """Gemma, equal to llama.cpp's "gemma".

    Gemma has no system role, so the system text opens the next user turn,
    and the assistant is "model".  One difference from llama.cpp: a system
    text that no user turn follows becomes a user turn of its own rather
    than being dropped.
    """
    parts: list[str] = []
    system = ""
    for message in messages:
        role, text = message_role(message), _trim(message_text(message))
        if role == "system":
            system += text
        elif role == "assistant":
            parts.append(f"<start_of_turn>model\n{text}<end_of_turn>\n")
        else:
            preamble = f"{system}\n\n" if system else ""
            parts.append(f"<start_of_turn>user\n{preamble}{text}<end_of_turn>\n")
            system = ""
    if system:
        parts.append(f"<start_of_turn>user\n{system}<end_of_turn>\n")
    if add_generation_prompt:
        parts.append("<start_of_turn>model\n")
    return _response("".join(parts), ("<end_of_turn>",))


NAMED_FORMATS: dict[str, Callable[..., ChatFormatterResponse]] = {
    "llama-2": format_llama_2,
    "llama-3": format_llama_3,
    "llama-4": format_llama_4,
    "alpaca": format_alpaca,
    "qwen": format_qwen,
    "vicuna": format_vicuna,
    "oasst_llama": format_oasst_llama,
    "baichuan-2": format_baichuan_2,
    "baichuan": format_baichuan,
    "openbuddy": format_openbuddy,
    "redpajama-incite": format_redpajama_incite,
    "snoozy": format_snoozy,
    "phind": format_phind,
    "intel": format_intel,
    "open-orca": format_open_orca,
    "mistrallite": format_mistrallite,
    "zephyr": format_zephyr,
    "pygmalion": format_pygmalion,
    "chatml": format_chatml,
    "mistral-instruct": format_mistral_instruct,
    "chatglm3": format_chatglm3,
    "openchat": format_openchat,
    "saiga": format_saiga,
    "gemma": format_gemma,
}
