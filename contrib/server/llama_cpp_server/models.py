"""The models a server serves: loaded on first use, at most ``max_loaded_models`` at once, the least
recently used idle one unloaded first; each with its admission count (its sequences plus a bounded queue).

The first model is loaded when the server starts, in the background: ``/health`` answers 503 until it is
ready.  A model's ``Llama`` is shared by every request for it, which the engine batches together.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
from typing import Any, Callable

from starlette.concurrency import run_in_threadpool

from llama_cpp import Llama
from llama_cpp.llama_embedding import LlamaEmbedding

from .errors import APIError
from .settings import ModelSettings, ServerSettings

log = logging.getLogger("llama_cpp_server")


def llama_kwargs(model: ModelSettings, server: ServerSettings) -> dict[str, Any]:
    """``Llama``'s keywords for ``model``: its settings, and the server's media policy for a projector."""
    kwargs: dict[str, Any] = {
        "n_ctx": model.n_ctx, "n_seq_max": model.n_seq_max, "n_batch": model.n_batch, "n_ubatch": model.n_ubatch,
        "n_gpu_layers": model.n_gpu_layers, "seed": model.seed, "embeddings": model.embeddings,
        "verbose": model.verbose, "chat_format": model.chat_format,
    }
    if model.n_threads is not None:
        kwargs["n_threads"] = model.n_threads
    if model.n_threads_batch is not None:
        kwargs["n_threads_batch"] = model.n_threads_batch
    if model.cache:
        kwargs["cache"] = {"strategy": model.cache_type, "capacity_bytes": model.cache_size}
    if model.speculative:
        kwargs["speculative"] = dict(model.speculative)
    if model.mmproj_path:
        from llama_cpp.llama_multimodal import MediaPolicy

        policy = MediaPolicy(allow_remote=server.allow_remote_media, allow_private_addresses=server.allow_private_media,
                             allow_local_files=server.allow_local_media)
        kwargs["mmproj_path"] = model.mmproj_path
        kwargs["chat_handler_kwargs"] = {"media_policy": policy, "verbose": model.verbose}
    kwargs.update(model.llama_kwargs)
    return kwargs


def load_llama(model: ModelSettings, server: ServerSettings) -> Llama:
    """Load ``model`` (its file, a Hub download, or the default model).  An ``embeddings`` model is a
    ``LlamaEmbedding``: unit-length vectors as OpenAI's and llama-server's embeddings are, and ``rank`` for a
    reranker (/v1/rerank)."""
    kwargs = llama_kwargs(model, server)
    cls = LlamaEmbedding if model.embeddings else Llama
    if model.hf_repo:
        return cls.from_pretrained(model.hf_repo, model.hf_file, **kwargs)
    path = model.model
    if path is None:
        from llama_cpp.default_model import smollm2_path

        path = str(smollm2_path(quiet=not model.verbose))
    return cls(path, **kwargs)


class Served:
    """A loaded model and what the server counts for it."""

    def __init__(self, name: str, settings: ModelSettings, llama: Llama, max_queue: int) -> None:
        self.name = name
        self.settings = settings
        self.llama = llama
        self.capacity = llama.scheduler.ctx.n_seq_max + max_queue
        self.in_flight = 0  # requests admitted and not finished (running or queued in the engine)

    @property
    def queued(self) -> int:
        return max(0, self.in_flight - self.llama.scheduler.ctx.n_seq_max)


class Lease:
    """One request's hold on a model: ``release()`` (idempotent) gives its place back."""

    def __init__(self, pool: ModelPool, served: Served) -> None:
        self._pool = pool
        self.served = served
        self._released = False

    @property
    def llama(self) -> Llama:
        return self.served.llama

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._pool._release(self.served)


class ModelPool:
    """Loads, lends and unloads the configured models (see the module's docstring)."""

    def __init__(self, models: list[ModelSettings], server: ServerSettings,
                 loader: Callable[[ModelSettings, ServerSettings], Llama] = load_llama) -> None:
        if not models:
            raise ValueError("no model to serve")
        self.specs: dict[str, ModelSettings] = {}
        for spec in models:
            if spec.name in self.specs:
                raise ValueError(f"two models are called {spec.name!r}; give one a model_alias")
            self.specs[spec.name] = spec
        self.server = server
        self._loader = loader
        self._loaded: collections.OrderedDict[str, Served] = collections.OrderedDict()  # least recent first
        self._lock = threading.Lock()
        self._loading: dict[str, asyncio.Future[Served]] = {}
        self.ready = False
        self.failure: str | None = None

    @property
    def names(self) -> list[str]:
        return list(self.specs)

    @property
    def loaded(self) -> list[Served]:
        with self._lock:
            return list(self._loaded.values())

    def resolve(self, name: str | None) -> str:
        """The configured model called ``name`` (None or empty: the first one); 404 if there is none."""
        if not name:
            return self.names[0]
        if name in self.specs:
            return name
        raise APIError(404, f"model {name!r} not found; available: {', '.join(self.names)}", param="model",
                       code="model_not_found")

    async def warm_up(self) -> None:
        """Load the first model (at startup); ``ready`` once it is."""
        try:
            await self._get(self.names[0])
            self.ready = True
        except Exception as exc:  # noqa: BLE001 - /health reports it; requests retry the load
            self.failure = f"{type(exc).__name__}: {exc}"
            log.error("loading %s failed: %s", self.names[0], self.failure)

    async def _get(self, name: str) -> Served:
        with self._lock:
            served = self._loaded.get(name)
            if served is not None:
                self._loaded.move_to_end(name)
                return served
        pending = self._loading.get(name)
        if pending is None:
            pending = self._loading[name] = asyncio.ensure_future(self._load(name))
        try:
            return await asyncio.shield(pending)
        finally:
            if pending.done():
                self._loading.pop(name, None)

    async def _load(self, name: str) -> Served:
        spec = self.specs[name]
        llama = await run_in_threadpool(self._loader, spec, self.server)
        served = Served(name, spec, llama, self.server.max_queue)
        with self._lock:
            self._loaded[name] = served
        self._unload_idle()
        return served

    def _unload_idle(self) -> None:
        """Close the least recently used idle models past ``max_loaded_models``."""
        with self._lock:
            excess = len(self._loaded) - self.server.max_loaded_models
            victims = [s for s in self._loaded.values() if s.in_flight == 0][:max(0, excess)]
            for served in victims:
                del self._loaded[served.name]
        for served in victims:
            log.info("unloading %s (max_loaded_models=%d)", served.name, self.server.max_loaded_models)
            served.llama.close()

    async def admit(self, name: str | None) -> Lease:
        """The model for a request, admitted until the lease is released (a stream holds it to its end);
        429 with Retry-After when the model's sequences and queue are full."""
        served = await self._get(self.resolve(name))
        with self._lock:
            if served.in_flight >= served.capacity:
                raise APIError(429, f"model {served.name!r} is busy: {served.in_flight} requests are running or "
                               f"queued (n_seq_max + max_queue = {served.capacity}); retry later",
                               code="server_busy", headers={"Retry-After": "1"})
            served.in_flight += 1
        return Lease(self, served)

    def _release(self, served: Served) -> None:
        with self._lock:
            served.in_flight -= 1
        self._unload_idle()

    def close(self) -> None:
        with self._lock:
            loaded, self._loaded = list(self._loaded.values()), collections.OrderedDict()
        for served in loaded:
            served.llama.close()
