"""The plugin host of llama_cpp (pluggy project and entry-point group ``llama_cpp``)."""

from .hookspecs import hookimpl, hookspec
from .host import PluginHost, PluginInfo, get_host, seed_exports
from .records import (CacheStrategy, ChatFormat, MultimodalHandler, ReasoningFamily, SamplerStage, SchedulingPolicy,
                      SpeculativeEngine)

__all__ = [
    "CacheStrategy",
    "ChatFormat",
    "MultimodalHandler",
    "PluginHost",
    "PluginInfo",
    "ReasoningFamily",
    "SamplerStage",
    "SchedulingPolicy",
    "SpeculativeEngine",
    "get_host",
    "hookimpl",
    "hookspec",
    "seed_exports",
]
