"""The distribution: found through its entry point, loaded by the plugin host, registering nothing yet."""

from __future__ import annotations

from llama_cpp.plugins import MultimodalHandler, get_host


def test_the_plugin_loads_cleanly_with_no_hook_implementations() -> None:
    host = get_host()
    info = next(i for i in host.infos() if i.name == "multimodal")
    assert (info.distribution, info.error) == ("llama-cpp-multimodal", None)
    plugin = dict(host.iter_plugins())["multimodal"]
    assert host.pm.get_hookcallers(plugin) == []
    assert all(host.plugin_of(MultimodalHandler, name) != "multimodal" for name in host.records(MultimodalHandler))
