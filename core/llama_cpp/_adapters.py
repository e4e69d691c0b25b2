"""LoRA adapters and control vectors: loaded once, chosen per request.

A model keeps a registry of loaded LoRA adapters (``Llama.load_lora``); each
request names the ones it wants (``active_loras``) and may bring a control
vector.  What is set on the context is remembered as an :class:`AdapterKey`,
for two reasons: llama.cpp re-reserves its compute graph whenever adapters
change, so an unchanged selection must not be set again on every decode; and
the KV cache holds activations computed under the adapters active when each
token was evaluated, so a cached prefix may only be reused under the same key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import attrs
import numpy as np
from llama_cpp_native import ffi, lib

from ._handles import NativeHandle, SharedHandle
from .engine.normalize import check_lora_scale
from ._logger import capture_messages


@attrs.frozen
class ControlVector:
    """A validated control vector: per-layer directions from layer 1, applied to layers start..end (inclusive)."""

    data: np.ndarray = attrs.field(eq=False)
    layer_start: int
    layer_end: int
    digest: bytes  # the data's bytes: two vectors with equal values are the same key

    @property
    def key(self) -> tuple[Any, ...]:
        return (self.digest, self.layer_start, self.layer_end)


@attrs.frozen
class AdapterKey:
    """What a context evaluates with: LoRA (name, path, scale) triples and the control vector's key."""

    loras: tuple[tuple[str, str, float], ...] = ()
    control_vector: tuple[Any, ...] | None = None


NO_ADAPTERS = AdapterKey()


class Adapters:
    """The LoRA registry of one ``Llama`` and the adapters currently set on its context."""

    def __init__(self, model: SharedHandle, n_embd: int, n_layer: int, quiet: bool = False) -> None:
        self._model = model
        self._quiet = quiet  # llama.cpp's reasons go into the exceptions; with quiet they are not printed too
        self._n_embd = n_embd
        self._n_layer = n_layer
        self._loaded: dict[str, tuple[str, NativeHandle]] = {}
        self.default: tuple[tuple[str, float], ...] = ()  # the constructor's lora_path, used when none is named
        self.applied: AdapterKey = NO_ADAPTERS

    # -- registry -------------------------------------------------------------
    def load(self, name: str, path: str) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"a LoRA adapter needs a non-empty string name, got {name!r}")
        path = str(path)
        if name in self._loaded:
            if self._loaded[name][0] == path:
                return  # loading the same file under the same name again changes nothing
            raise ValueError(f"a LoRA adapter named {name!r} is already loaded from {self._loaded[name][0]!r}; "
                             f"unload_lora({name!r}) first to load {path!r} under that name")
        if not Path(path).is_file():
            raise ValueError(f"LoRA adapter file not found: {path!r}")
        with capture_messages(quiet=self._quiet) as log, self._model.calling as model:
            adapter = lib.llama_adapter_lora_init(model, path.encode("utf-8"))
        if adapter == ffi.NULL:
            raise ValueError(f"failed to load LoRA adapter {name!r} from {path!r}: "
                             f"{log.reason('not a LoRA GGUF for this model')}")
        model = self._model

        def free(ptr: Any) -> None:
            if not model.closed:  # freeing a model frees its adapters: never free one twice
                lib.llama_adapter_lora_free(ptr)

        self._loaded[name] = (path, NativeHandle(adapter, free, "LoRA adapter"))

    def unload(self, name: str, ctx: Any) -> None:
        """Free one adapter (unknown names are ignored), first taking it off the context if it is set there."""
        if name not in self._loaded:
            return
        if any(entry[0] == name for entry in self.applied.loras):
            self._set_loras(ctx, tuple((n, scale) for n, _path, scale in self.applied.loras if n != name))
        self.default = tuple(entry for entry in self.default if entry[0] != name)
        self._loaded.pop(name)[1].close()

    def unload_all(self, ctx: Any) -> None:
        for name in list(self._loaded):
            self.unload(name, ctx)

    def names(self) -> list[str]:
        return list(self._loaded)

    def paths(self) -> dict[str, str]:
        return {name: path for name, (path, _handle) in self._loaded.items()}

    def close(self) -> None:
        """Free every adapter (the context must already be gone or no longer use them)."""
        for _path, handle in self._loaded.values():
            handle.close()
        self._loaded.clear()
        self.default = ()

    # -- per request ------------------------------------------------------------
    def select(self, active_loras: Sequence[Mapping[str, Any]] | None) -> tuple[tuple[str, float], ...]:
        """``active_loras`` as validated (name, scale) pairs; None means the constructor's ``lora_path``."""
        if active_loras is None:
            return self.default
        if isinstance(active_loras, (str, bytes, Mapping)) or not isinstance(active_loras, Iterable):
            raise TypeError("active_loras must be a list of {'name': str, 'scale': float} dicts")
        chosen: dict[str, float] = {}
        for entry in active_loras:
            if not isinstance(entry, Mapping) or "name" not in entry:
                raise TypeError(f"each active_loras entry must be a dict with a 'name' (and a 'scale'), got {entry!r}")
            unknown = set(entry) - {"name", "scale"}
            if unknown:
                raise ValueError(f"active_loras entry {entry!r} has unknown keys {sorted(unknown)}; "
                                 "allowed: 'name', 'scale'")
            name = entry["name"]
            if name not in self._loaded:
                loaded = ", ".join(repr(n) for n in self._loaded) or "none (use load_lora(name, path) first)"
                raise ValueError(f"LoRA adapter {name!r} is not loaded; loaded adapters: {loaded}")
            scale = check_lora_scale(entry.get("scale", 1.0), f"the scale of LoRA adapter {name!r}")
            if name in chosen:
                raise ValueError(f"LoRA adapter {name!r} is listed twice in active_loras")
            chosen[name] = scale
        return tuple(chosen.items())

    def control_vector(self, spec: Mapping[str, Any] | None) -> ControlVector | None:
        """Validate ``{"data": [...], "layer_start": 1, "layer_end": n_layer}``."""
        if spec is None:
            return None
        if not isinstance(spec, Mapping) or "data" not in spec:
            raise TypeError("control_vector must be a dict {'data': [floats], 'layer_start': int, 'layer_end': int}")
        unknown = set(spec) - {"data", "layer_start", "layer_end"}
        if unknown:
            raise ValueError(f"control_vector has unknown keys {sorted(unknown)}; "
                             "allowed: 'data', 'layer_start', 'layer_end'")
        start, end = spec.get("layer_start", 1), spec.get("layer_end", self._n_layer)
        for label, value in (("layer_start", start), ("layer_end", end)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise TypeError(f"control_vector {label} must be an integer, got {value!r}")
        if not 1 <= start <= end <= self._n_layer:
            raise ValueError(f"control_vector layers must satisfy 1 <= layer_start <= layer_end <= n_layer "
                             f"({self._n_layer}), got {start}..{end}")
        try:
            data = np.ascontiguousarray(spec["data"], dtype=np.float32).reshape(-1)
        except (TypeError, ValueError):
            raise TypeError("control_vector data must be a sequence of numbers") from None
        needed = self._n_embd * int(end)
        if data.size < needed:
            raise ValueError(f"control_vector data has {data.size} values; layers 1..{end} need n_embd "
                             f"({self._n_embd}) x {end} = {needed} (data starts at layer 1, pad skipped layers "
                             "with zeros)")
        if not np.isfinite(data).all():
            raise ValueError("control_vector data contains NaN or infinite values")
        return ControlVector(data=data, layer_start=int(start), layer_end=int(end), digest=data.tobytes())

    def key(self, loras: tuple[tuple[str, float], ...], cvec: ControlVector | None) -> AdapterKey:
        return AdapterKey(tuple((name, self._loaded[name][0], scale) for name, scale in loras),
                          cvec.key if cvec is not None else None)

    def apply(self, ctx: Any, loras: tuple[tuple[str, float], ...], cvec: ControlVector | None) -> AdapterKey:
        """Set these adapters on the context unless they already are; returns their key."""
        key = self.key(loras, cvec)
        if key.loras != self.applied.loras:
            self._set_loras(ctx, loras)
        if key.control_vector != self.applied.control_vector:
            if cvec is None:
                rc = lib.llama_set_adapter_cvec(ctx, ffi.NULL, 0, self._n_embd, -1, -1)
            else:
                buf = ffi.from_buffer("float[]", cvec.data)
                with capture_messages(quiet=self._quiet) as log:
                    rc = lib.llama_set_adapter_cvec(ctx, buf, cvec.data.size, self._n_embd, cvec.layer_start,
                                                    cvec.layer_end)
            if rc != 0:
                raise ValueError(f"llama.cpp refused the control vector: {log.reason('no reason was logged')}")
            self.applied = attrs.evolve(self.applied, control_vector=key.control_vector)
        return key

    def _set_loras(self, ctx: Any, loras: tuple[tuple[str, float], ...]) -> None:
        handles = [self._loaded[name][1].ptr for name, _scale in loras]
        adapters = ffi.new("struct llama_adapter_lora *[]", handles) if handles else ffi.NULL
        scales = ffi.new("float[]", [scale for _name, scale in loras]) if handles else ffi.NULL
        with capture_messages(quiet=self._quiet) as log:
            rc = lib.llama_set_adapters_lora(ctx, adapters, len(handles), scales)
        if rc != 0:
            raise ValueError(f"llama.cpp refused the LoRA adapters {[name for name, _ in loras]}: "
                             f"{log.reason('no reason was logged')}")
        self.applied = attrs.evolve(self.applied, loras=self.key(loras, None).loras)
