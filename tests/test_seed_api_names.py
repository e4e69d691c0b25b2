"""Every name SEED-API.md documents for a module is importable from that module, as from the seed.

The inventory (SEED-API.md, the seed's API written from its code) is prose, so the names it documents
for a module are read from it by these rules:

- The module: the "Package surface" paragraph is ``llama_cpp``; a ``## `` heading that names a module
  (``llama_cpp.x`` in backticks) starts that module's section; in the low-level section a paragraph
  that opens with ``**`llama_cpp.x`**`` starts that module's part.  The other headings (the ``Llama``
  class's sections, the seed's tests) document no module.
- The names: backticked spans whose identifier is a class (CamelCase), a constant (UPPER_CASE), a
  call (``name(``) or a C name (``llama_*``, ``mtmd_*``, ``ggml_*``, ``gguf_*``).  ``PREFIX_{A, B=1}`` stands for ``PREFIX_A`` and ``PREFIX_B``; ``name(_n)`` and
  ``name(s)`` for the name with and without the suffix; spans with ``*`` or ``/`` are patterns, and
  spans ending in ``:`` quote template text.  Other lowercase names without a call (parameters,
  fields, dictionary keys) are not checked: the prose cannot tell them from module names.
- A name resolves when it is an attribute of the module; a method or constant of a class the
  inventory documents (or of ``Llama``); a name of the C API (``llama_cpp.llama_cpp``), which the
  prose cites anywhere; or one of the few names the prose mentions in a section but which belong to
  another module (MENTIONED, SHORTHANDS).

What the seed has and this project leaves out on purpose is in DELIBERATELY_ABSENT, each entry with the
sentence of docs/differences.md (or of the page it sends the reader to) that says so; the test checks
that the sentence is there.
"""

from __future__ import annotations

import builtins
import importlib
import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

import llama_cpp

ROOT = Path(__file__).resolve().parents[1]
# the inventory, kept with the tests so that a clone checks itself; where the project's shared folder sits
# beside the checkout (the original), the copy must equal it (test_the_copy_of_the_inventory_is_current)
SEED_API = ROOT / "tests" / "data" / "SEED-API.md"
SHARED_SEED_API = ROOT.parent / "shared" / "SEED-API.md"

_SPAN = re.compile(r"`([^`]+)`")
_MODULE = re.compile(r"^llama_cpp(\.\w+)*$")
_IDENT = re.compile(r"^([A-Za-z_]\w*)(?=$|[(={ ])")
_CLASS = re.compile(r"^_?[A-Z]\w*[a-z]\w*$")
_CONSTANT = re.compile(r"^[A-Z][A-Z0-9_]+$")
_C_NAME = re.compile(r"^(llama|mtmd|ggml|gguf)_\w+$")

# Names a section mentions that belong to another module, and where they are.
MENTIONED = {
    "Llama": "llama_cpp",  # every section speaks of `Llama(...)`
    "MinTokensLogitsProcessor": "llama_cpp",  # the server section: the server uses it
    "LlamaPromptLookupDecoding": "llama_cpp.llama_speculative",  # the server section: it refers to it
    "Singleton": "llama_cpp._utils",  # the _internals paragraph: "Also `_utils.suppress_stdout_stderr`, `Singleton`"
}
# Words the prose backticks that stand for another name, and that name.
SHORTHANDS = {
    "ON_DEVICE": ("llama_cpp.llama_cpp", "LLAMA_STATE_SEQ_FLAGS_ON_DEVICE"),
    "MiniCPMv46": ("llama_cpp.llama_multimodal", "MiniCPMv46ChatHandler"),  # "README spells it `MiniCPMv46`"
    "sha256": ("hashlib", "sha256"),  # the checkpoint hash
}
# Environment variables the prose names (not Python names).
ENVIRONMENT = {"CONFIG_FILE", "LLAMA_CPP_LIB_PATH", "CUDA_PATH", "HIP_PATH", "VULKAN_SDK", "MTMD_CPP_LIB",
               "KMP_DUPLICATE_LIB_OK"}
# A module the project does not have, and the module its names are in (with the page that says so).
MOVED = {"llama_cpp._ggml": ("llama_cpp.llama_cpp", "docs/low-level.md",
                             "| `llama_cpp._ggml`                              | the ggml functions are in `llama_cpp.llama_cpp`")}

# (module, name) -> (page, the sentence on it that says the name is left out on purpose)
_LOW_LEVEL_FORK = ("docs/low-level.md", "the fork's `llama-ext.h` functions             | not bound")
DELIBERATELY_ABSENT = {
    **{("llama_cpp.llama_cpp", name): _LOW_LEVEL_FORK for name in (
        "llama_graph_reserve", "llama_get_ctx_other", "llama_model_get_tok_embd", "llama_model_target_layer_ids",
        "llama_model_target_layer_ids_n", "llama_model_n_devices", "llama_model_get_device", "llama_model_n_expert",
        "llama_set_nextn_layer_offset", "llama_ftype_get_default_type")},
    ("llama_cpp.llama_cache", "HybridCheckpoint"): (
        "docs/differences.md", "The seed's record `HybridCheckpoint` (`pos`, `data`,\n  `hash_val`, `size`, `seq_id`) "
                               "is deliberately absent"),
    ("llama_cpp.llama_cache", "TrieNode"): ("docs/differences.md", "The seed's `TrieNode` class is deliberately absent"),
    ("llama_cpp.llama_grammar", "GrammarSampler"): (
        "docs/differences.md", "The seed's `GrammarSampler` and `ReasoningBudgetSampler` classes are\n  deliberately absent"),
    ("llama_cpp._internals", "GrammarSampler"): (
        "docs/differences.md", "The seed's `GrammarSampler` and `ReasoningBudgetSampler` classes are\n  deliberately absent"),
    ("llama_cpp._internals", "ReasoningBudgetSampler"): (
        "docs/differences.md", "The seed's `GrammarSampler` and `ReasoningBudgetSampler` classes are\n  deliberately absent"),
    ("llama_cpp._internals", "LlamaLoraAdapter"): (
        "docs/differences.md", "The seed's `LlamaLoraAdapter` (its `_internals` owner of one adapter) is\n  "
                               "deliberately absent"),
    ("llama_cpp.llama_cpp", "llama_params_fit_status"): (
        "docs/low-level.md", "| `llama_params_fit_status`                      | absent: the pinned llama.h has no such enum"),
    ("llama_cpp._internals", "LlamaTokenDataArray"): (
        "docs/differences.md", "Not provided there: the pre-sampler-chain `sample_*` methods of\n`LlamaContext` "
                               "(the reference raises NotImplementedError in them too),\n`LlamaTokenDataArray`"),
}

def _sections(text: str) -> list[tuple[str, str]]:
    """(module, line) for every line of a section that documents a module."""
    out = []
    module: str | None = None
    for line in text.splitlines():
        if line.startswith("**Package surface.**"):
            module = "llama_cpp"
        elif line.startswith("## "):
            named = [s for s in _SPAN.findall(line) if _MODULE.match(s)]
            module = named[0] if named and not line.startswith("## Tests") else None
        else:
            opening = re.match(r"^\*\*`(llama_cpp[\w.]*)`\*\*", line)
            if opening:
                module = opening.group(1)
        if module is not None:
            out.append((module, line))
    return out


def _spans(line: str) -> list[str]:
    out = []
    for span in _SPAN.findall(line):
        if "*" in span or "/" in span or span.endswith(":"):
            continue
        braces = re.match(r"^(\w+_)\{([^}]*)\}$", span)
        suffix = re.match(r"^(\w+)\((_\w+|s)\)$", span)
        if braces:
            out += [braces.group(1) + part.strip().split("=")[0] for part in braces.group(2).split(",")]
        elif suffix:
            out += [suffix.group(1) + "()", suffix.group(1) + suffix.group(2) + "()"]
        else:
            out.append(span)
    return out


def documented_names(text: str) -> dict[str, dict[str, str]]:
    """module -> {name: "class" | "constant" | "call"}, by the rules of the module docstring."""
    names: dict[str, dict[str, str]] = {}
    for module, line in _sections(text):
        for span in _spans(line):
            match = _IDENT.match(span)
            if not match:
                continue
            name = match.group(1)
            if name.startswith("__") or hasattr(builtins, name):
                continue
            kind = ("class" if _CLASS.match(name) else "constant" if _CONSTANT.match(name)
                    else "call" if span[len(name):].startswith("(") else "C name" if _C_NAME.match(name) else None)
            if kind == "C name" and importlib.util.find_spec(f"llama_cpp.{name}") is not None:
                continue  # a module of the package (`llama_types`), not a C name
            if kind:
                names.setdefault(module, {}).setdefault(name, kind)
    return names


def _said_not_there(text: str) -> set[tuple[str, str]]:
    """(module, name) the inventory says the module does not have ("`LlamaEmbedding` is **not** exported
    at top level")."""
    out = set()
    for module, line in _sections(text):
        out |= {(module, name) for name in re.findall(r"`(\w+)` is \*\*not\*\* exported", line)}
    return out


TEXT = SEED_API.read_text(encoding="utf-8")
DOCUMENTED = documented_names(TEXT)
NOT_THERE = _said_not_there(TEXT)


def _module(name: str) -> ModuleType:
    return importlib.import_module(MOVED[name][0] if name in MOVED else name)


def _classes() -> list[type]:
    """Every class the inventory documents (its methods and constants are documented with it)."""
    found: list[type] = [llama_cpp.Llama]
    for module, names in DOCUMENTED.items():
        mod = _module(module)
        for name, kind in names.items():
            value = getattr(mod, name, None) if kind == "class" else None
            if isinstance(value, type):
                found.append(value)
    return found


def _resolves(module: str, name: str, kind: str, classes: list[type]) -> bool:
    if name in ENVIRONMENT:
        return True
    if name in SHORTHANDS:
        where, real = SHORTHANDS[name]
        return hasattr(importlib.import_module(where), real)
    if name in MENTIONED:
        return hasattr(importlib.import_module(MENTIONED[name]), name)
    from llama_cpp import llama_cpp as c_api

    if hasattr(_module(module), name) or hasattr(c_api, name):
        return True
    return kind != "class" and any(hasattr(cls, name) for cls in classes)


CASES = [(module, name, kind) for module, names in DOCUMENTED.items() for name, kind in names.items()
         if (module, name) not in DELIBERATELY_ABSENT and (module, name) not in NOT_THERE]


def test_the_inventory_is_read() -> None:
    for module in ("llama_cpp", "llama_cpp.llama_grammar", "llama_cpp.llama_speculative", "llama_cpp.llama_cache",
                   "llama_cpp.llama_multimodal", "llama_cpp.server", "llama_cpp.llama_cpp", "llama_cpp.mtmd_cpp",
                   "llama_cpp._internals"):
        assert len(DOCUMENTED.get(module, ())) >= 2, module
    assert len(CASES) > 150
    assert ("llama_cpp", "LlamaEmbedding") in NOT_THERE
    for module, name in DELIBERATELY_ABSENT:
        assert name in DOCUMENTED.get(module, {}), f"{module}.{name} is no longer in the inventory: drop its entry"


@pytest.mark.parametrize(("module", "name", "kind"), [
    pytest.param(*case, id=f"{case[0]}.{case[1]}")
    for case in CASES])
def test_documented_name_is_importable(module: str, name: str, kind: str) -> None:
    assert _resolves(module, name, kind, _classes()), f"{module} has no {name} ({kind}), which SEED-API.md documents"


@pytest.mark.parametrize(("module", "name"), sorted(DELIBERATELY_ABSENT),
                         ids=[f"{m}.{n}" for m, n in sorted(DELIBERATELY_ABSENT)])
def test_what_is_left_out_is_documented_as_left_out(module: str, name: str) -> None:
    page, sentence = DELIBERATELY_ABSENT[(module, name)]
    assert sentence in (ROOT / page).read_text(encoding="utf-8"), f"{page} no longer says {module}.{name} is absent"


def test_what_the_inventory_says_is_not_there_is_not() -> None:
    for module, name in NOT_THERE:
        assert not hasattr(importlib.import_module(module), name), f"the seed's {module} has no {name}"
    for module, (_where, page, sentence) in MOVED.items():
        assert sentence in (ROOT / page).read_text(encoding="utf-8"), f"{page} no longer says where {module} went"


def test_the_top_level_names_are_llama_cpp_llamas() -> None:
    """The seed's top level is ``from .llama import *``: each of its names is one llama.py defines or imports."""
    from llama_cpp import llama as llama_module

    for name in DOCUMENTED["llama_cpp"]:
        if ("llama_cpp", name) not in NOT_THERE:
            assert getattr(llama_module, name) is getattr(llama_cpp, name), name


def test_the_copy_of_the_inventory_is_current() -> None:
    if SHARED_SEED_API.exists():
        assert SHARED_SEED_API.read_text(encoding="utf-8") == TEXT, \
            f"{SHARED_SEED_API} changed: copy it to {SEED_API}"
