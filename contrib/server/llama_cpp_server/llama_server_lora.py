"""llama-server's LoRA adapters: ``GET/POST /lora-adapters`` and a request's ``lora``.

A model is served with adapters (``lora_path``, ``lora_adapters``; llama-server's ``--lora``,
``--lora-scaled``), each known by its place in the list (``id``).  The server keeps a scale per adapter, which
``POST /lora-adapters`` changes for the requests that come after it; a request's ``lora`` replaces those scales
for itself alone (an empty one is none).  Either way an adapter left out gets scale 0, as llama-server reads
both.  The engine takes a
set of adapters per request (``active_loras``) and decodes each tick under one set, so requests under
different sets run side by side, taking turns (docs/engine.md); a cached prefix is reused only under the same
adapters and scales.
"""

from __future__ import annotations

import threading
from typing import Any, Sequence

from pydantic import TypeAdapter, ValidationError

from llama_cpp.engine.normalize import check_lora_scale

from .errors import APIError, json_body
from .schemas import LoraEntry

_ENTRIES = TypeAdapter(list[LoraEntry])


class LoraTable:
    """The adapters of one served model, by id: the name each was loaded under, its path, and the scale
    requests get unless they say otherwise."""

    def __init__(self, adapters: Sequence[tuple[str, float]], applied: bool = True) -> None:
        """``adapters``: (path, scale) in id order, loaded under their paths; ``applied`` false starts every
        scale at 0 (llama-server's ``--lora-init-without-apply``)."""
        self._paths = [path for path, _ in adapters]
        self._scales = [scale if applied else 0.0 for _, scale in adapters]
        self._lock = threading.Lock()

    def listing(self) -> list[dict[str, Any]]:
        """``GET /lora-adapters``: llama-server's entries (``task_name`` and ``prompt_prefix`` are the adapter
        file's metadata there; empty here, where they are not read)."""
        with self._lock:
            scales = list(self._scales)
        return [{"id": i, "path": path, "scale": scale, "task_name": "", "prompt_prefix": ""}
                for i, (path, scale) in enumerate(zip(self._paths, scales))]

    def scales(self, entries: Sequence[LoraEntry], field: str) -> list[float]:
        """The scale of every adapter under ``entries`` (the others 0); an unknown or repeated id is a 400
        naming ``field`` (llama-server ignores an unknown one, and the last of a repeated one wins)."""
        scales = [0.0] * len(self._paths)
        seen: set[int] = set()
        for entry in entries:
            try:  # (before the id: a scale no adapter could take is refused whatever it names)
                scale = check_lora_scale(entry.scale, f"{field}: the scale of adapter {entry.id}")
            except ValueError as exc:
                raise APIError(400, str(exc), param=field) from None
            if entry.id >= len(self._paths):
                raise APIError(400, f"{field}: no adapter {entry.id}; this model has "
                               f"{len(self._paths) or 'no'} adapter(s) (GET /lora-adapters lists them)", param=field)
            if entry.id in seen:
                raise APIError(400, f"{field}: adapter {entry.id} is listed twice", param=field)
            seen.add(entry.id)
            scales[entry.id] = scale
        return scales

    def set_scales(self, body: bytes) -> dict[str, Any]:
        """``POST /lora-adapters``: the body (``[{"id", "scale"}, ...]``) becomes the scales of the requests
        that come after it; answered as llama-server answers."""
        data = json_body(body)
        if not isinstance(data, list):
            raise APIError(400, "the request body must be an array of {\"id\", \"scale\"} objects",
                           code="invalid_body")
        try:
            entries = _ENTRIES.validate_python(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in first["loc"])
            raise APIError(422, f"{where}: {first['msg']}", param=where) from None
        scales = self.scales(entries, "body")
        with self._lock:
            self._scales = scales
        return {"success": True}

    def active_loras(self, entries: Sequence[LoraEntry] | None, field: str = "lora") -> list[dict[str, Any]]:
        """The library's ``active_loras`` for a request with ``lora`` = ``entries`` (None or empty: the
        server's scales, as llama-server reads an empty list); adapters at scale 0 are left out, which
        computes the same and shares cached prefixes with requests that have none."""
        if entries:
            scales = self.scales(entries, field)
        else:
            with self._lock:
                scales = list(self._scales)
        return [{"name": path, "scale": scale} for path, scale in zip(self._paths, scales) if scale != 0.0]
