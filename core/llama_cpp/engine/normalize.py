"""Request normalisation, once, before the engine: what completion, chat and the server all need.

Each function turns one loosely typed argument of the seed API into the one
form the engine takes, or raises a ValueError that says what was wrong and
what is allowed.  (The sampling keywords are folded into
:class:`~llama_cpp.sampling.SamplingParams` by ``sampling_arguments``.)
"""

from __future__ import annotations

import math
import operator
from typing import Any, Sequence, overload

from ..sampling import LLAMA_DEFAULT_SEED
from .media import MediaPrompt


#: Bounds on what a request may list.  Every stop string is searched for in each generated piece, and
#: every tool is rendered into the prompt and, when forced, into a grammar; OpenAI's API allows 128 tools.
MAX_STOPS = 64
MAX_STOP_CHARS = 4096
MAX_TOOLS = 128


def stop_list(stop: str | Sequence[str] | None) -> list[str]:
    """``stop`` as a list of non-empty strings (a string is one stop; None is none)."""
    if stop is None:
        return []
    if not isinstance(stop, (str, list, tuple)):
        raise ValueError(f"stop must be a string or a list of strings, got {type(stop).__name__}")
    stops = [stop] if isinstance(stop, str) else list(stop)
    if len(stops) > MAX_STOPS:
        raise ValueError(f"stop has {len(stops)} strings; at most {MAX_STOPS} are allowed")
    for s in stops:
        if not isinstance(s, str):
            raise ValueError(f"stop must be a string or a list of strings, got {s!r} in it")
        if len(s) > MAX_STOP_CHARS:
            raise ValueError(f"a stop string has {len(s)} characters; at most {MAX_STOP_CHARS} are allowed")
    return [s for s in stops if s]

# the largest magnitude llama.cpp's 32-bit scale holds (a bigger one would be infinite there)
_FLOAT32_MAX = 3.4028234663852886e38  # numpy.finfo(numpy.float32).max


def check_lora_scale(scale: Any, what: str) -> float:
    """``scale`` as the float llama.cpp applies an adapter with; a ValueError naming ``what`` unless it is a
    number that a 32-bit float holds (not NaN, not infinite there: 1e300 is finite only in Python)."""
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale) \
            or abs(scale) > _FLOAT32_MAX:
        raise ValueError(f"{what} must be a finite number within a 32-bit float's range (|scale| <= "
                         f"{_FLOAT32_MAX:.4g}), got {scale!r}")
    return float(scale)



def check_tools(tools: Any, functions: Any) -> None:
    """ValueError naming the entry, unless ``tools`` (OpenAI's ``[{"type": "function", "function": {...}}]``)
    and the legacy ``functions`` (``[{...}]``) each hold at most ``MAX_TOOLS`` functions, every one with a
    name and, if given, a JSON schema object as its parameters."""
    for field, entries in (("tools", tools), ("functions", functions)):
        if entries is None:
            continue
        if not isinstance(entries, list):
            raise ValueError(f"{field} must be a list, got {type(entries).__name__}")
        if len(entries) > MAX_TOOLS:
            raise ValueError(f"{field} has {len(entries)} entries; at most {MAX_TOOLS} are allowed")
        named: dict[str, str] = {}
        for i, entry in enumerate(entries):
            where = f"{field}[{i}]"
            if field == "tools":
                if not isinstance(entry, dict) or entry.get("type", "function") != "function":
                    raise ValueError(f"{where} must be {{'type': 'function', 'function': {{...}}}}, got {entry!r:.80}")
                entry, where = entry.get("function"), f"{where}.function"
            _check_function(entry, where)
            if entry["name"] in named:  # a call names its tool: two of one name could not be told apart
                raise ValueError(f"{where}.name {entry['name']!r} is also {named[entry['name']]}'s: tool names must "
                                 "be unique")
            named[entry["name"]] = where


def check_tool_choice(tools: Any, functions: Any, tool_choice: Any, function_call: Any, grammar: Any,
                      response_format: Any) -> None:
    """ValueError for a choice that forces a call with no tools to call (OpenAI's 400), or a forced call with
    a grammar or a response format of the caller's own, which the call's grammar would replace (llama-server
    refuses a grammar with tools)."""
    forcing = "tool_choice" if tool_choice == "required" or isinstance(tool_choice, dict) else \
        "function_call" if isinstance(function_call, dict) else None
    if forcing is None:
        return
    if not tools and not functions:
        raise ValueError(f"{forcing} forces a call, but no tools (or functions) were given to call")
    if grammar is not None or (isinstance(response_format, dict) and response_format.get("type") not in (None, "text")):
        raise ValueError("a forced tool call cannot take a grammar or response_format as well: the call's own "
                         "grammar constrains the reply (leave them out, or use tool_choice 'auto')")


def _check_function(fn: Any, where: str) -> None:
    if not isinstance(fn, dict):
        raise ValueError(f"{where} must be a dict with a 'name' (and 'description', 'parameters'), got {fn!r:.60}")
    name = fn.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"{where}.name is required: a non-empty string, got {name!r:.60}")
    params = fn.get("parameters")
    if params is not None and not isinstance(params, dict):
        raise ValueError(f"{where}.parameters must be a JSON schema object, got {type(params).__name__}")
    description = fn.get("description")
    if description is not None and not isinstance(description, str):
        raise ValueError(f"{where}.description must be a string, got {type(description).__name__}")


def text_prompt_tokens(llama: Any, text: str, *, starts_with_bos: bool = False) -> list[int]:
    """The tokens of a text prompt, raw or rendered from a chat template.

    Special tokens spelled in the text are tokens; BOS goes in front when the
    vocabulary asks for it (as llama.cpp's own tools decide) unless the text
    already starts with it (a template that writes BOS itself).
    """
    add_bos = llama.add_bos_token() and not starts_with_bos
    return llama.tokenize(text.encode("utf-8"), add_bos=add_bos, special=True)


def prompt_list(prompt: Any) -> list[str | list[int] | MediaPrompt]:
    """The prompts of a completion request.

    A prompt is a string or a list of token ids (or a multimodal handler's
    :class:`~llama_cpp.engine.media.MediaPrompt`); OpenAI's completions API
    also takes a list of strings or a list of token lists.
    """
    if isinstance(prompt, (str, MediaPrompt)):
        return [prompt]
    if isinstance(prompt, (bytes, bytearray)):
        raise ValueError("prompt must be text (str) or token ids, not bytes; decode it first")
    try:
        items = list(prompt)
    except TypeError:
        raise ValueError(f"prompt must be a string, a list of token ids, or a list of those; got "
                         f"{type(prompt).__name__}") from None
    if not items or all(_is_token(t) for t in items):
        return [items]
    prompts: list[str | list[int] | MediaPrompt] = []
    for i, item in enumerate(items):
        if isinstance(item, str):
            prompts.append(item)
        elif not isinstance(item, (bytes, bytearray, dict)) and _is_token_list(item):
            prompts.append(list(item))
        else:
            raise ValueError(f"prompt[{i}] is {item!r}: a prompt list holds strings or lists of token ids")
    return prompts


def _is_token(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    try:
        operator.index(value)
    except TypeError:
        return False
    return True


def _is_token_list(value: Any) -> bool:
    try:
        return all(_is_token(t) for t in value)
    except TypeError:
        return False


def choice_count(n: Any) -> int:
    """``n``, the number of choices per prompt: an integer of at least 1."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an integer >= 1 (the number of choices per prompt), got {n!r}")
    return n


@overload
def choice_seed(seed: int, index: int) -> int: ...
@overload
def choice_seed(seed: None, index: int) -> None: ...
def choice_seed(seed: int | None, index: int) -> int | None:
    """The seed of choice ``index`` of one prompt: choice ``j`` samples with ``seed + j`` (wrapping at 32
    bits), so that the choices differ and each repeats with the seed.  Choice 0, no seed (None: the
    instance's) and a random seed (negative, or llama.cpp's ``LLAMA_DEFAULT_SEED``) stay as they are."""
    if seed is None or index == 0 or seed < 0 or seed == LLAMA_DEFAULT_SEED:
        return seed
    return (seed + index) & 0xFFFFFFFF


class PromptTooLongError(ValueError):
    """A prompt that leaves its sequence's context no room to generate: its length and the context's, which a
    server reports (llama-server's ``n_prompt_tokens`` and ``n_ctx``) so that a client can shorten it."""

    def __init__(self, n_prompt_tokens: int, n_ctx: int) -> None:
        super().__init__(f"the prompt has {n_prompt_tokens} tokens, more than fit in the context window of {n_ctx} "
                         "tokens (n_ctx, per sequence)")
        self.n_prompt_tokens = n_prompt_tokens
        self.n_ctx = n_ctx


def new_token_limit(max_tokens: int | None, n_prompt: int, limit: int) -> int:
    """How many tokens a completion may generate: ``max_tokens``, or (None or <= 0) the rest of the
    context, never more than the context has room for after the prompt."""
    if n_prompt >= limit:
        raise PromptTooLongError(n_prompt, limit)
    room = limit - n_prompt
    if max_tokens is None or max_tokens <= 0 or max_tokens > room:
        return room
    return max_tokens
