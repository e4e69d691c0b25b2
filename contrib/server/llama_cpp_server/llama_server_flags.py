"""llama-server's spelling of its common flags, read as this server's settings.

A llama-server user types ``-m model.gguf -c 8192 -np 4 --api-key k --temp 0.7``; :func:`translate` turns such a
command line into the settings' own flags (``--model``, ``--n_ctx``, ``--n_seq_max``...) before they are
parsed, so both spellings work and one command line may mix them. Flags of llama-server that mean nothing here
(``--jinja``: templates are always rendered by Jinja; ``--metrics``: metrics are always served) are accepted and
dropped; those this server cannot honour are refused with the reason, never silently ignored.  Ollama's
``--keep-alive`` (its ``keep_alive``, with its durations: ``5m``, ``1h30m``) is read here too, as
``sleep_idle_seconds``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

_POOLING = {"none": "0", "mean": "1", "cls": "2", "last": "3", "rank": "4"}
_TRUE, _FALSE, _AUTO = ("on", "enabled", "true", "1"), ("off", "disabled", "false", "0"), ("auto", "-1")


def _flash_attn(value: str) -> list[str]:
    lowered = value.lower()
    for choice, words in (("1", _TRUE), ("0", _FALSE), ("-1", _AUTO)):
        if lowered in words:
            return ["--flash_attn_type", choice]
    raise SystemExit(f"--flash-attn: unknown value {value!r}; allowed: on, off, auto")


def _pooling(value: str) -> list[str]:
    if value not in _POOLING:
        raise SystemExit(f"--pooling: unknown type {value!r}; allowed: {', '.join(_POOLING)}")
    return ["--pooling_type", _POOLING[value]]


def _parallel(value: str) -> list[str]:
    """llama-server's "auto" (-1, its default) is 4 sequences in one KV buffer (each may use the whole
    context); a number of sequences given shares the context out."""
    return ["--n_seq_max", "4", "--kv_unified", "true"] if value == "-1" else ["--n_seq_max", value]


def _alias(value: str) -> list[str]:
    """llama-server names a model by the first of its aliases in sorted order."""
    names = sorted(name.strip() for name in value.split(",") if name.strip())
    return ["--model_alias", names[0]] if names else []


def _each(setting: str) -> Callable[[str], list[str]]:
    """A comma-separated list given as one value per repeated flag."""
    return lambda value: [part for item in value.split(",") if item.strip() for part in (setting, item.strip())]


def _api_key_file(value: str) -> list[str]:
    try:
        lines = Path(value).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise SystemExit(f"--api-key-file: cannot read {value!r}: {exc.strerror}") from None
    keys = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    return [part for key in keys for part in ("--api_keys", key)]


def _lora(value: str) -> list[str]:
    """llama-server's comma list of adapter files, each at scale 1."""
    return [part for path in value.split(",") if path.strip()
            for part in ("--lora_adapters", json.dumps({"path": path.strip()}))]


def _lora_scaled(value: str) -> list[str]:
    """llama-server's ``FNAME:SCALE,...``."""
    out = []
    for item in value.split(","):
        path, sep, scale = item.strip().rpartition(":")
        try:
            out += ["--lora_adapters", json.dumps({"path": path, "scale": float(scale)})]
        except ValueError:
            raise SystemExit(f"--lora-scaled: {item!r} is not FNAME:SCALE") from None
        if not sep or not path:
            raise SystemExit(f"--lora-scaled: {item!r} is not FNAME:SCALE")
    return out


# llama-server's built-in template names (llama.cpp's LLM_CHAT_TEMPLATES) that name a chat format here
CHAT_TEMPLATE_NAMES = {"chatml": "chatml", "llama2": "llama-2", "llama3": "llama-3", "llama4": "llama-4",
                       "zephyr": "zephyr", "vicuna": "vicuna", "openchat": "openchat", "chatglm3": "chatglm3",
                       "gemma": "gemma"}


def _chat_template(value: str, flag: str = "--chat-template") -> list[str]:
    """A built-in template's name as the chat format it names here, or a Jinja template's text as the
    ``chat_template`` setting (rendered in place of the model's).  A name this server has no format for is
    refused with the names it has: llama-server (with its default ``--jinja``) would render the name itself
    as a template's text, the same words for every conversation."""
    if value in CHAT_TEMPLATE_NAMES:
        return ["--chat_format", CHAT_TEMPLATE_NAMES[value]]
    if "{{" in value or "{%" in value:
        return ["--chat_template", value]
    raise SystemExit(f"{flag}: {value!r} is neither a Jinja template nor a template name this server knows; "
                     f"names: {', '.join(sorted(CHAT_TEMPLATE_NAMES))} (or --chat_format with one of this "
                     "server's chat formats)")


def _chat_template_file(value: str) -> list[str]:
    try:
        text = Path(value).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SystemExit(f"--chat-template-file: cannot read {value!r}: {exc}") from None
    return _chat_template(text.strip() if text.strip() in CHAT_TEMPLATE_NAMES else text, "--chat-template-file")


def _setting(name: str) -> Callable[[str], list[str]]:
    return lambda value: [f"--{name}", value]


def _keep_alive(value: str) -> list[str]:
    from .settings import keep_alive_seconds  # (settings imports this module)

    try:
        return ["--sleep_idle_seconds", repr(keep_alive_seconds(value))]
    except ValueError as exc:
        raise SystemExit(f"--keep-alive: {exc}") from None


def _default(key: str) -> Callable[[str], list[str]]:
    """A server-wide default of the requests that do not set ``key`` themselves (``default_<key>``)."""
    return _setting(f"default_{key}")


# llama-server's flags that take a value, by every spelling, and the settings they become
_VALUED: dict[str, Callable[[str], list[str]]] = {}
for _names, _make in (
    (("-m", "--model"), _setting("model")),
    (("-c", "--ctx-size"), _setting("n_ctx")),
    (("-np", "--parallel"), _parallel),
    (("-t", "--threads"), _setting("n_threads")),
    (("-tb", "--threads-batch"), _setting("n_threads_batch")),
    (("-ngl", "--gpu-layers", "--n-gpu-layers"), _setting("n_gpu_layers")),  # auto, all or a count, as Llama
    (("-b", "--batch-size"), _setting("n_batch")),
    (("-ub", "--ubatch-size"), _setting("n_ubatch")),
    (("-a", "--alias"), _alias),
    (("--api-key",), _each("--api_keys")),
    (("--api-key-file",), _api_key_file),
    (("--cors-origins",), _each("--cors_origins")),
    (("-fa", "--flash-attn"), _flash_attn),
    (("--pooling",), _pooling),
    (("-mm", "--mmproj"), _setting("mmproj_path")),
    (("--lora",), _lora),
    (("--lora-scaled",), _lora_scaled),
    (("-s", "--seed"), _setting("seed")),
    (("-to", "--timeout"), _setting("request_timeout")),
    (("--slot-save-path",), _setting("slot_save_path")),
    (("--sleep-idle-seconds",), _setting("sleep_idle_seconds")),
    (("--keep-alive", "--keep_alive"), _keep_alive),  # Ollama's name, and its durations
    (("--chat-template",), _chat_template),
    (("--chat-template-file",), _chat_template_file),
    (("-n", "--predict", "--n-predict"), _default("max_tokens")),
    (("--temp", "--temperature"), _default("temperature")),
    (("--top-k",), _default("top_k")),
    (("--top-p",), _default("top_p")),
    (("--min-p",), _default("min_p")),
    (("--reasoning-format",), _setting("reasoning_format")),
    (("--reasoning-budget",), _default("reasoning_budget")),
):
    for _name in _names:
        _VALUED[_name] = _make

# flags without a value: what they become ([] for those that change nothing here)
_SWITCHES: dict[str, list[str]] = {
    "--embedding": ["--embeddings", "true"], "--embeddings": ["--embeddings", "true"],
    "--rerank": ["--embeddings", "true", "--pooling_type", _POOLING["rank"]],
    "--reranking": ["--embeddings", "true", "--pooling_type", _POOLING["rank"]],
    "--slots": ["--slots_endpoint", "true"], "--no-slots": ["--slots_endpoint", "false"],
    "--props": ["--props_endpoint", "true"],
    "--lora-init-without-apply": ["--lora_init_without_apply", "true"],
    "--prefill-assistant": ["--prefill_assistant", "true"],
    "--no-prefill-assistant": ["--prefill_assistant", "false"],
    "--reasoning-preserve": ["--reasoning_preserve", "true"],
    "--no-reasoning-preserve": ["--reasoning_preserve", "false"],
    "--jinja": [], "--metrics": [], "-cb": [],
    "--cont-batching": [], "--cache-prompt": [], "--no-cache-prompt": [],
    "--ui": ["--chat_page", "true"], "--webui": ["--chat_page", "true"],
    "--no-ui": ["--chat_page", "false"], "--no-webui": ["--chat_page", "false"],
}

# llama-server's flags that this server does not honour (yet), and why
_REFUSED = {
    "--no-jinja": "chat templates are always rendered by Jinja here",
    "-nocb": "continuous batching is how this server runs", "--no-cont-batching": "continuous batching is how "
                                                                               "this server runs",
}


def translate(args: list[str]) -> list[str]:
    """``args`` with llama-server's flags (``-m x``, ``--ctx-size=8192``, ``--ctx_size 8192``...) turned into
    this server's; every other argument is kept as it is.  A switch followed by a boolean word is this server's
    own flag (``--embeddings true``) and is kept too."""
    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        name, equals, inline = arg.partition("=")
        key = "--" + name[2:].replace("_", "-") if name.startswith("--") else name
        i += 1
        if key in _REFUSED:
            raise SystemExit(f"{name}: {_REFUSED[key]}")
        if key in _SWITCHES:
            if equals or (i < len(args) and args[i].lower() in (*_TRUE, *_FALSE)):
                out.append(arg)  # this server's boolean setting, with its value
            else:
                out += _SWITCHES[key]
            continue
        make = _VALUED.get(key)
        if make is None:
            out.append(arg)
            continue
        if equals:
            value = inline
        elif i < len(args):
            value = args[i]
            i += 1
        else:
            raise SystemExit(f"{name}: a value is needed")
        out += make(value)
    return out
