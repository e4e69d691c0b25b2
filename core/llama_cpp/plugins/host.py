"""The plugin host: entry-point discovery, guarded loading and the by-name registry.

Entry points of the ``llama_cpp`` group are loaded lazily (on the first
question to the registry, not at ``import llama_cpp``) and once.  A plugin
that fails to import is reported with its name, distribution and version, and
everything else keeps working.

Environment:

* ``LLAMA_CPP_DISABLE_PLUGIN_AUTOLOAD=1``: load no entry point (plugins can
  still be registered in code with :func:`register`).
* ``LLAMA_CPP_PLUGINS=name1,name2``: load only these entry points (by entry
  point name or distribution name).
"""

from __future__ import annotations

import os
import threading
import warnings
from importlib import metadata
from typing import Any, Callable, Iterator, Protocol, TypeVar

import attrs
import pluggy

from . import hookspecs
from .records import (CacheStrategy, ChatFormat, MultimodalHandler, ReasoningFamily, SamplerStage, SchedulingPolicy,
                      SpeculativeEngine)

GROUP = hookspecs.PROJECT
DISABLE_ENV = "LLAMA_CPP_DISABLE_PLUGIN_AUTOLOAD"
ALLOW_ENV = "LLAMA_CPP_PLUGINS"

class _Named(Protocol):
    """What every record has: the name users choose it by."""

    @property
    def name(self) -> str: ...


R = TypeVar("R", bound=_Named)

# record type -> (hook name, what users call it)
_KINDS: dict[type, tuple[str, str]] = {
    SamplerStage: ("llama_cpp_sampler_stages", "sampler stage"),
    ChatFormat: ("llama_cpp_chat_formats", "chat format"),
    MultimodalHandler: ("llama_cpp_multimodal_handlers", "multimodal handler"),
    SpeculativeEngine: ("llama_cpp_speculative_engines", "speculative engine"),
    CacheStrategy: ("llama_cpp_cache_strategies", "cache strategy"),
    SchedulingPolicy: ("llama_cpp_scheduling_policies", "scheduling policy"),
    ReasoningFamily: ("llama_cpp_reasoning_families", "reasoning family"),
}


@attrs.frozen
class PluginInfo:
    """What ``python -m llama_cpp plugins`` shows for one entry point."""

    name: str
    distribution: str
    version: str
    module: str
    error: str | None = None


class PluginHost:
    """A pluggy manager plus the records its plugins registered, by kind and name."""

    def __init__(self) -> None:
        self.pm = pluggy.PluginManager(GROUP)
        self.pm.add_hookspecs(hookspecs)
        self._lock = threading.RLock()
        self._loaded = False
        self._infos: list[PluginInfo] = []
        self._records: dict[type, dict[str, tuple[Any, str]]] = {}

    # -- discovery ---------------------------------------------------------
    def _load_entry_points(self) -> None:
        if os.environ.get(DISABLE_ENV, "").strip().lower() in {"1", "true", "yes", "on"}:
            return
        allowed = {n.strip() for n in os.environ.get(ALLOW_ENV, "").split(",") if n.strip()}
        for ep in sorted(metadata.entry_points(group=GROUP), key=lambda e: e.name):
            dist = getattr(ep, "dist", None)
            dist_name = dist.metadata["Name"] if dist is not None else "?"
            version = dist.version if dist is not None else "?"
            if allowed and ep.name not in allowed and dist_name not in allowed:
                continue
            try:
                plugin = ep.load()
                if self.pm.is_registered(plugin):
                    continue
                self.pm.register(plugin, name=ep.name)
            except Exception as exc:  # noqa: BLE001 - any failure of a plugin must not break the host
                message = f"{type(exc).__name__}: {exc}"
                warnings.warn(
                    f"llama_cpp plugin {ep.name!r} ({dist_name} {version}) failed to load and is skipped: {message}",
                    RuntimeWarning,
                    stacklevel=2,
                )
                self._infos.append(PluginInfo(ep.name, dist_name, version, ep.value, error=message))
                continue
            self._infos.append(PluginInfo(ep.name, dist_name, version, ep.value))

    def ensure_loaded(self) -> None:
        if self._loaded:
            return
        with self._lock:
            if not self._loaded:
                self._loaded = True
                self._load_entry_points()

    # -- registration in code ---------------------------------------------
    def register(self, plugin: object, name: str | None = None) -> str:
        """Register a plugin object (a module or an instance with hookimpls)."""
        self.ensure_loaded()
        with self._lock:
            registered = self.pm.register(plugin, name=name)
            self._records.clear()
            if registered is None:
                raise ValueError(f"plugin {name or plugin!r} is already registered")
            return registered

    def unregister(self, plugin: object | None = None, name: str | None = None) -> None:
        with self._lock:
            self.pm.unregister(plugin, name=name)
            self._records.clear()

    # -- the registry ------------------------------------------------------
    def records(self, kind: type[R]) -> dict[str, R]:
        """All records of ``kind`` by name; duplicate names are an error naming both plugins."""
        self.ensure_loaded()
        with self._lock:
            cached = self._records.get(kind)
            if cached is None:
                hook_name, label = _KINDS[kind]
                cached = {}
                hook = getattr(self.pm.hook, hook_name)
                for impl in reversed(hook.get_hookimpls()):  # registration order
                    for record in impl.function() or ():
                        if not isinstance(record, kind):
                            raise TypeError(
                                f"plugin {impl.plugin_name!r} returned {record!r} from {hook_name}; "
                                f"expected {kind.__name__} records"
                            )
                        if record.name in cached:
                            other = cached[record.name][1]
                            raise ValueError(
                                f"{label} {record.name!r} is registered twice, by plugin {other!r} "
                                f"and by plugin {impl.plugin_name!r}"
                            )
                        cached[record.name] = (record, impl.plugin_name)
                self._records[kind] = cached
            return {name: rec for name, (rec, _) in cached.items()}

    def choose(self, kind: type[R], name: str) -> R:
        """The record of ``kind`` called ``name``; a ValueError lists the valid names."""
        records = self.records(kind)
        try:
            return records[name]
        except KeyError:
            label = _KINDS[kind][1]
            valid = ", ".join(sorted(records)) or "(none installed)"
            raise ValueError(f"unknown {label} {name!r}; valid names: {valid}") from None

    def plugin_of(self, kind: type, name: str) -> str:
        self.records(kind)
        return self._records[kind][name][1]

    def infos(self) -> list[PluginInfo]:
        self.ensure_loaded()
        return list(self._infos)

    def hook(self) -> Any:
        self.ensure_loaded()
        return self.pm.hook

    def iter_plugins(self) -> Iterator[tuple[str, object]]:
        self.ensure_loaded()
        yield from self.pm.list_name_plugin()

    def exported(self, marker: str, name: str) -> Any:
        """A seed name that a plugin implements: ``name`` from the first plugin whose set ``marker``
        (``__llama_cache_exports__``...) lists it; AttributeError if none does.

        How a seed module (``llama_cpp.llama_cache``) offers classes that live in a plugin without
        importing it: its module ``__getattr__`` asks here.
        """
        if not name.startswith("__"):  # the import system probes __path__ & co.: never load plugins for those
            for _plugin_name, plugin in self.iter_plugins():
                exported = getattr(plugin, marker, None)
                if exported and name in exported:
                    return getattr(plugin, name)
        raise AttributeError(name)


def seed_exports(module: str, marker: str, distribution: str) -> Callable[[str], Any]:
    """A module ``__getattr__`` for seed names a plugin implements: ``name`` from the plugin whose
    ``marker`` set lists it, else an AttributeError that says which distribution provides them."""

    def __getattr__(name: str) -> Any:
        try:
            return get_host().exported(marker, name)
        except AttributeError:
            raise AttributeError(f"module {module!r} has no attribute {name!r} (is the {distribution} plugin "
                                 "installed?)") from None

    return __getattr__


_host: PluginHost | None = None
_host_lock = threading.Lock()


def get_host() -> PluginHost:
    """The process-wide plugin host."""
    global _host
    if _host is None:
        with _host_lock:
            if _host is None:
                _host = PluginHost()
    return _host
