"""The distribution: found through its entry point, loaded by the plugin host, registering its handlers by
the seed's chat_format names, and giving the seed's import paths their classes."""

from __future__ import annotations

import llama_cpp_multimodal
from llama_cpp.plugins import MultimodalHandler, get_host

# the seed README's table of chat_format names and classes, and the two generic handlers
SEED_NAMES = {
    "llava-1-5": "Llava15ChatHandler", "llava-1-6": "Llava16ChatHandler", "obsidian": "ObsidianChatHandler",
    "moondream2": "MoondreamChatHandler", "nanollava": "NanoLlavaChatHandler",
    "llama-3-vision-alpha": "Llama3VisionAlphaChatHandler", "minicpm-v-2.6": "MiniCPMv26ChatHandler",
    "minicpm-v-4.0": "MiniCPMv26ChatHandler", "minicpm-v-4.5": "MiniCPMv45ChatHandler",
    "minicpm-v-4.6": "MiniCPMV46ChatHandler", "gemma3": "Gemma3ChatHandler", "gemma4": "Gemma4ChatHandler",
    "glm4.1v": "GLM41VChatHandler", "glm4.6v": "GLM46VChatHandler", "granite-docling": "GraniteDoclingChatHandler",
    "lfm2-vl": "LFM2VLChatHandler", "lfm2.5-vl": "LFM25VLChatHandler", "paddleocr": "PaddleOCRChatHandler",
    "qwen2.5-vl": "Qwen25VLChatHandler", "qwen3-asr": "Qwen3ASRChatHandler", "qwen3-vl": "Qwen3VLChatHandler",
    "qwen3.5": "Qwen35ChatHandler", "qwen3.6": "Qwen35ChatHandler", "step3-vl": "Step3VLChatHandler",
    "generic": "GenericMTMDChatHandler", "mtmd": "MTMDChatHandler",
}


def test_the_plugin_registers_every_seed_handler_by_its_name() -> None:
    host = get_host()
    info = next(i for i in host.infos() if i.name == "multimodal")
    assert (info.distribution, info.error) == ("llama-cpp-multimodal", None)
    records = host.records(MultimodalHandler)
    for name, class_name in SEED_NAMES.items():
        assert records[name].factory.__name__ == class_name, name
        assert host.plugin_of(MultimodalHandler, name) == "multimodal"


def test_the_seed_import_paths_give_the_classes() -> None:
    from llama_cpp import llama_chat_format, llama_multimodal

    for name in [*set(SEED_NAMES.values()), "NanollavaChatHandler", "Llama3VisionAlpha", "MiniCPMv46ChatHandler"]:
        cls = getattr(llama_multimodal, name)
        assert cls is getattr(llama_chat_format, name) is getattr(llama_cpp_multimodal, name)
    assert llama_multimodal.NanollavaChatHandler is llama_multimodal.NanoLlavaChatHandler
    assert llama_multimodal.Llama3VisionAlpha is llama_multimodal.Llama3VisionAlphaChatHandler
