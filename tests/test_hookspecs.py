"""Every hook is documented, has a runnable example, and is exercised."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from llama_cpp import Llama
from llama_cpp.plugins import (CacheStrategy, ChatFormat, MultimodalHandler, ReasoningFamily, SamplerStage,
                               SchedulingPolicy, SpeculativeEngine, get_host, hookimpl, hookspecs)
from llama_cpp.testing import registered_plugin

HOOKS = [name for name, fn in inspect.getmembers(hookspecs, inspect.isfunction) if name.startswith("llama_cpp_")]
DOCS = Path(__file__).resolve().parents[1] / "docs" / "plugins.md"


def test_there_are_hooks_for_every_capability() -> None:
    assert set(HOOKS) == {
        "llama_cpp_sampler_stages", "llama_cpp_chat_formats", "llama_cpp_chat_format_from_metadata",
        "llama_cpp_multimodal_handlers", "llama_cpp_speculative_engines", "llama_cpp_cache_strategies",
        "llama_cpp_scheduling_policies", "llama_cpp_reasoning_families",
    }


@pytest.mark.parametrize("name", HOOKS)
def test_hook_is_documented_with_an_example(name: str) -> None:
    doc = inspect.getdoc(getattr(hookspecs, name)) or ""
    assert "Example::" in doc and "@llama_cpp.hookimpl" in doc, name
    assert f"`{name}(" in DOCS.read_text(), f"{name} is missing from docs/plugins.md"


class EverythingPlugin:
    """One plugin implementing every registration hook."""

    @hookimpl
    def llama_cpp_sampler_stages(self):
        return [SamplerStage("everything-stage", lambda ctx: [], order=1, default=False)]

    @hookimpl
    def llama_cpp_chat_formats(self):
        return [ChatFormat("everything-format", handler=lambda **kw: kw)]

    @hookimpl
    def llama_cpp_multimodal_handlers(self):
        return [MultimodalHandler("everything-vlm", factory=dict)]

    @hookimpl
    def llama_cpp_speculative_engines(self):
        return [SpeculativeEngine("everything-draft", factory=dict)]

    @hookimpl
    def llama_cpp_cache_strategies(self):
        return [CacheStrategy("everything-cache", factory=dict)]

    @hookimpl
    def llama_cpp_scheduling_policies(self):
        return [SchedulingPolicy("everything-policy", factory=dict)]

    @hookimpl
    def llama_cpp_reasoning_families(self):
        return [ReasoningFamily("everything-family", start="<r>", end="</r>", detect=lambda facts: False)]

    @hookimpl
    def llama_cpp_chat_format_from_metadata(self, metadata):
        return "everything-format" if metadata.get("general.name") == "tiny-llama" else None


def test_every_registration_hook_reaches_the_registry(tiny_model_path: Path) -> None:
    host = get_host()
    with registered_plugin(EverythingPlugin(), name="everything"):
        for kind, name in ((SamplerStage, "everything-stage"), (ChatFormat, "everything-format"),
                           (MultimodalHandler, "everything-vlm"), (SpeculativeEngine, "everything-draft"),
                           (CacheStrategy, "everything-cache"), (SchedulingPolicy, "everything-policy"),
                           (ReasoningFamily, "everything-family")):
            assert host.choose(kind, name).name == name
            assert host.plugin_of(kind, name) == "everything"
        with Llama(str(tiny_model_path), vocab_only=True, verbose=False) as llm:
            assert llm.chat_format == "everything-format"  # claimed from the GGUF metadata
        with Llama(str(tiny_model_path), vocab_only=True, verbose=False, chat_format="chatml") as llm:
            assert llm.chat_format == "chatml"  # an explicit choice wins
    assert "everything-stage" not in host.records(SamplerStage)


def test_a_record_of_the_wrong_type_is_refused() -> None:
    class Wrong:
        @hookimpl
        def llama_cpp_cache_strategies(self):
            return [ChatFormat("not-a-cache", handler=dict)]

    with registered_plugin(Wrong(), name="wrong"):
        with pytest.raises(TypeError, match="expected CacheStrategy"):
            get_host().records(CacheStrategy)


def test_record_names_are_validated() -> None:
    with pytest.raises(ValueError, match="non-empty name"):
        SamplerStage(" padded ", lambda ctx: [])
