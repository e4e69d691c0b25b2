"""The models a server serves: loaded on first use, at most ``max_loaded_models`` at once, the least
recently used idle one unloaded first; each with its admission count (its sequences plus a bounded queue).

The first model is loaded when the server starts, in the background: ``/health`` answers 503 until it is
ready.  A model's ``Llama`` is shared by every request for it, which the engine batches together.  With
``sleep_idle_seconds`` a model nobody used for that long is freed (it is "sleeping"); the next request for it
loads it again and waits for it.  ``POST /models/load`` and ``/models/unload`` do the same by hand.  A model is
only ever freed with no request admitted on it: admission and unloading take the same lock, and an admitted
request holds the model until its answer is sent.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from starlette.concurrency import run_in_threadpool

from llama_cpp import Llama
from llama_cpp.llama_embedding import LlamaEmbedding

from .errors import APIError
from .llama_server_lora import LoraTable
from .settings import ModelSettings, ServerSettings

__all__ = ["LlamaProxy", "Loader", "ModelPool", "StatusFeed", "llama_kwargs", "load_llama"]

log = logging.getLogger("llama_cpp_server")


# ModelSettings fields that are not Llama keywords as they stand: the model file and its names, which the
# server reads itself; the settings it turns into other Llama keywords below; and the reference's spellings
# that ModelSettings already turned into Llama's (embedding, flash_attn, draft_model).  Every other field is
# passed to Llama under its own name when it is set (chat_handler_kwargs too, with the server's media
# policy added for a projector).
NOT_PASSED = frozenset({
    "model", "model_alias", "hf_repo", "hf_file", "hf_model_repo_id", "mmproj_path", "clip_model_path",
    "chat_format", "chat_template", "hf_pretrained_model_name_or_path", "hf_tokenizer_config_path", "cache", "cache_type",
    "cache_size", "embedding", "flash_attn", "lora_adapters", "lora_init_without_apply", "draft_model", "draft_model_num_pred_tokens", "scheduling_policy",
})
PASSED = tuple(name for name in ModelSettings.model_fields if name not in NOT_PASSED)


def chat_kwargs(model: ModelSettings) -> dict[str, Any]:
    """``chat_format``, a Jinja template given as text (``chat_template``: its handler), or for the reference's
    Hugging Face formats the handler (and tokenizer) they stand for."""
    kwargs: dict[str, Any] = {}
    if model.hf_pretrained_model_name_or_path is not None:  # the reference loads it whatever the chat format
        from llama_cpp.llama_tokenizer import LlamaHFTokenizer

        kwargs["tokenizer"] = LlamaHFTokenizer.from_pretrained(model.hf_pretrained_model_name_or_path)
    if model.chat_template is not None and model.mmproj_path is None:  # with a projector: the handler's option
        from llama_cpp.llama_chat_format import ChatTemplateHandler

        kwargs["chat_handler"] = ChatTemplateHandler(model.chat_template)
    elif model.chat_format == "hf-autotokenizer":
        from llama_cpp.llama_chat_format import hf_autotokenizer_to_chat_completion_handler

        kwargs["chat_handler"] = hf_autotokenizer_to_chat_completion_handler(model.hf_pretrained_model_name_or_path)
    elif model.chat_format == "hf-tokenizer-config":
        from llama_cpp.llama_chat_format import hf_tokenizer_config_to_chat_completion_handler

        config = json.loads(Path(model.hf_tokenizer_config_path or "").read_text(encoding="utf-8"))
        kwargs["chat_handler"] = hf_tokenizer_config_to_chat_completion_handler(config)
    else:
        kwargs["chat_format"] = model.chat_format
    return kwargs


def llama_kwargs(model: ModelSettings, server: ServerSettings) -> dict[str, Any]:
    """``Llama``'s keywords for ``model``: every setting it gave, and the server's media policy for a projector."""
    kwargs = {name: value for name in PASSED if (value := getattr(model, name)) is not None}
    kwargs.update(chat_kwargs(model))
    if model.cache:
        kwargs["cache"] = {"strategy": model.cache_type, "capacity_bytes": model.cache_size}
    if model.mmproj_path:
        from llama_cpp.llama_multimodal import MediaPolicy

        policy = MediaPolicy(allow_remote=server.allow_remote_media, allow_private_addresses=server.allow_private_media,
                             allow_local_files=server.allow_local_media)
        kwargs["mmproj_path"] = model.mmproj_path
        kwargs["chat_handler_kwargs"] = {"verbose": model.verbose, **(model.chat_handler_kwargs or {}),
                                         "media_policy": policy}
        if model.chat_template is not None:  # the generic handler's explicit template
            kwargs["chat_handler_kwargs"]["chat_format"] = model.chat_template
    return kwargs


def load_llama(model: ModelSettings, server: ServerSettings,
               progress: Callable[[float], object] | None = None) -> Llama:
    """Load ``model`` (its file, a Hub download, or the default model).  An ``embeddings`` model is a
    ``LlamaEmbedding``: unit-length vectors as OpenAI's and llama-server's embeddings are, and ``rank`` for a
    reranker (/v1/rerank).  A model from the Hub takes its projector from the same repository, as the
    reference's ``clip_model_path`` with ``hf_model_repo_id`` does.  ``progress(fraction)`` is told how far
    the model file's load is (``Llama(progress_callback=...)``)."""
    kwargs = llama_kwargs(model, server)
    if progress is not None:
        kwargs["progress_callback"] = progress
    cls = LlamaEmbedding if model.embeddings else Llama
    if model.hf_repo:
        assert model.hf_file is not None  # the settings refuse one without the other
        if model.mmproj_path:
            from llama_cpp._hub import hub_download

            kwargs["mmproj_path"] = hub_download(model.hf_repo, model.mmproj_path)[0]
        llm = cls.from_pretrained(model.hf_repo, model.hf_file, **kwargs)
    else:
        path = model.model
        if path is None:
            from llama_cpp.default_model import smollm2_path

            path = str(smollm2_path(quiet=not model.verbose))
        llm = cls(path, **kwargs)
    try:
        for adapter in model.lora_adapters:  # named by their paths, as Llama names lora_path's
            llm.load_lora(adapter.path, adapter.path)
    except BaseException:
        llm.close()
        raise
    return llm


#: How a pool loads a model: its settings, the server's, and where to report the load's progress (or None).
Loader = Callable[[ModelSettings, ServerSettings, Optional[Callable[[float], object]]], Llama]
#: A load's progress is reported when it has moved by this much (llama.cpp reports it per tensor).
PROGRESS_STEP = 0.01
#: Events a ``/models/sse`` subscriber may have waiting; past that the oldest are dropped (a stalled client
#: costs the server no more).
MAX_WAITING_EVENTS = 1000


class StatusFeed:
    """llama-server's ``/models/sse`` events: ``{"model", "event", "data"}`` for every model status change and
    load progress, to every subscriber, published from any thread."""

    def __init__(self) -> None:
        self._subscribers: list[tuple[asyncio.AbstractEventLoop, asyncio.Queue[dict[str, Any]]]] = []
        self._lock = threading.Lock()

    def publish(self, model: str, event: str, data: dict[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"model": model, "event": event}
        if data is not None:
            message["data"] = data
        with self._lock:
            subscribers = list(self._subscribers)
        for loop, queue in subscribers:
            try:
                loop.call_soon_threadsafe(_put_latest, queue, message)
            except RuntimeError:  # its loop is closed: it unsubscribes on its way out
                pass

    @contextlib.contextmanager
    def subscribe(self) -> Iterator[asyncio.Queue[dict[str, Any]]]:
        """The events published while the block runs (enter it on the event loop that reads them)."""
        entry = (asyncio.get_running_loop(), asyncio.Queue[dict[str, Any]](maxsize=MAX_WAITING_EVENTS))
        with self._lock:
            self._subscribers.append(entry)
        try:
            yield entry[1]
        finally:
            with self._lock:
                self._subscribers.remove(entry)


def _put_latest(queue: asyncio.Queue[dict[str, Any]], message: dict[str, Any]) -> None:
    if queue.full():
        queue.get_nowait()
    queue.put_nowait(message)


def _status(status: str, **more: Any) -> dict[str, Any]:
    return {"status": status, **more}


def _stage(fraction: float) -> dict[str, Any]:
    """llama-server's load progress: the stages of the load (a text model here: a projector loads with it), the
    current one, and how far it is."""
    return {"stages": ["text_model"], "current": "text_model", "value": round(fraction, 4)}


class Served:
    """A loaded model and what the server counts for it."""

    def __init__(self, name: str, settings: ModelSettings, llama: Llama, max_queue: int) -> None:
        self.name = name
        self.settings = settings
        self.llama = llama
        self.capacity = llama.scheduler.ctx.n_seq_max + max_queue
        adapters = [(settings.lora_path, settings.lora_scale if settings.lora_scale is not None else 1.0)] \
            if settings.lora_path is not None else []
        self.lora = LoraTable(adapters + [(a.path, a.scale) for a in settings.lora_adapters],
                              applied=not settings.lora_init_without_apply)
        self.in_flight = 0  # requests admitted and not finished (running or queued in the engine)
        self.idle_since = time.monotonic()  # when its last request ended (or it was loaded)


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
                 loader: Loader = load_llama) -> None:
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
        self._sleeping: set[str] = set()  # freed after sleep_idle_seconds without a request
        self.feed = StatusFeed()  # what /models/sse streams
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
        """The configured model called ``name`` (None or empty: the first one); 404 if there is none.

        A server of one model serves it whatever a request names, as llama-server and the reference do:
        clients send the OpenAI model names they were written for (``gpt-3.5-turbo-instruct``...)."""
        if not name or len(self.specs) == 1:
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

    def status(self, name: str) -> str:
        """llama-server's state of a model: ``loaded``, ``loading``, ``sleeping`` (freed while idle) or
        ``unloaded``."""
        if name in self._loading:
            return "loading"
        with self._lock:
            if name in self._loaded:
                return "loaded"
        return "sleeping" if name in self._sleeping else "unloaded"

    def _recent(self, name: str) -> Served | None:
        """``name`` if it is loaded, marked as the most recently used."""
        with self._lock:
            served = self._loaded.get(name)
            if served is not None:
                self._loaded.move_to_end(name)
            return served

    async def _get(self, name: str) -> Served:
        served = self._recent(name)
        if served is not None:
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
        reported = [0.0]

        def progress(fraction: float) -> None:
            if fraction - reported[0] >= PROGRESS_STEP or (fraction >= 1.0 > reported[0]):
                reported[0] = fraction
                self.feed.publish(name, "model_status", _status("loading", progress=_stage(fraction)))

        self.feed.publish(name, "model_status", _status("loading", progress=_stage(0.0)))
        try:
            llama = await run_in_threadpool(self._loader, self.specs[name], self.server, progress)
        except BaseException as exc:
            self.feed.publish(name, "model_status", _status("unloaded", exit_code=1, error=f"{type(exc).__name__}: "
                                                                                            f"{exc}"))
            raise
        served = self._register(name, llama)
        self.feed.publish(name, "model_status", _status("loaded"))
        return served

    def _register(self, name: str, llama: Llama) -> Served:
        """``llama``, just loaded for ``name``, among the loaded models (unloading idle ones past the limit)."""
        served = Served(name, self.specs[name], llama, self.server.max_queue)
        with self._lock:
            self._loaded[name] = served
            self._sleeping.discard(name)
        self._unload_idle()
        return served

    async def load(self, name: str) -> None:
        """``POST /models/load``: load ``name`` now (400 if it is loaded already, as llama-server answers)."""
        if name not in self.specs:
            raise APIError(404, f"model {name!r} not found; available: {', '.join(self.names)}", param="model",
                           code="model_not_found")
        if self.status(name) == "loaded":
            raise APIError(400, f"model {name!r} is loaded already", param="model")
        await self._get(name)

    def unload(self, name: str) -> None:
        """``POST /models/unload``: free ``name`` now; 409 while requests are admitted on it (it is never freed
        under them), 400 if it is not loaded."""
        if name not in self.specs:
            raise APIError(404, f"model {name!r} not found; available: {', '.join(self.names)}", param="model",
                           code="model_not_found")
        with self._lock:
            served = self._loaded.get(name)
            if served is None:
                raise APIError(400, f"model {name!r} is not loaded", param="model")
            if served.in_flight:
                raise APIError(409, f"model {name!r} is busy: {served.in_flight} requests are running or queued on "
                               "it; unload it when they have ended", param="model", code="model_busy")
            del self._loaded[name]
        log.info("unloading %s (asked)", name)
        served.llama.close()
        self.feed.publish(name, "model_status", _status("unloaded", exit_code=0))

    def sleep_idle(self, now: float | None = None) -> list[str]:
        """Free the models idle for ``sleep_idle_seconds`` (they are ``sleeping`` until a request loads them
        again); the names freed."""
        bound = self.server.sleep_idle_seconds
        if bound <= 0:
            return []
        now = time.monotonic() if now is None else now
        with self._lock:
            victims = [s for s in self._loaded.values() if s.in_flight == 0 and now - s.idle_since >= bound]
            for served in victims:
                del self._loaded[served.name]
                self._sleeping.add(served.name)
        for served in victims:
            log.info("%s idle for %g s: freed until its next request", served.name, bound)
            served.llama.close()
            self.feed.publish(served.name, "model_status", _status("sleeping"))
        return [served.name for served in victims]

    def _unload_idle(self, room: int = 0) -> None:
        """Close the least recently used idle models past ``max_loaded_models`` (less ``room`` for models
        about to be loaded)."""
        with self._lock:
            excess = len(self._loaded) + room - self.server.max_loaded_models
            victims = [s for s in self._loaded.values() if s.in_flight == 0][:max(0, excess)]
            for served in victims:
                del self._loaded[served.name]
        for served in victims:
            log.info("unloading %s (max_loaded_models=%d)", served.name, self.server.max_loaded_models)
            served.llama.close()
            self.feed.publish(served.name, "model_status", _status("unloaded", exit_code=0))

    async def admit(self, name: str | None) -> Lease:
        """The model for a request, admitted until the lease is released (a stream holds it to its end);
        429 with Retry-After when the model's sequences and queue are full.  A model freed between its load and
        the admission (asked to, asleep, or unloaded for another) is loaded again."""
        resolved = self.resolve(name)
        while True:
            served = await self._get(resolved)
            with self._lock:
                if self._loaded.get(resolved) is not served:
                    continue
                if served.in_flight >= served.capacity:
                    raise APIError(429, f"model {served.name!r} is busy: {served.in_flight} requests are running "
                                   f"or queued (n_seq_max + max_queue = {served.capacity}); retry later",
                                   code="server_busy", headers={"Retry-After": "1"})
                served.in_flight += 1
                return Lease(self, served)

    def _release(self, served: Served) -> None:
        with self._lock:
            served.in_flight -= 1
            served.idle_since = time.monotonic()
        self._unload_idle()

    def close(self) -> None:
        with self._lock:
            loaded, self._loaded = list(self._loaded.values()), collections.OrderedDict()
        for served in loaded:
            served.llama.close()


class LlamaProxy(ModelPool):
    """The reference's model holder (``llama_cpp.server.model.LlamaProxy``), for code that loads models by
    their settings without the app: ``proxy(name)`` is the ``Llama`` of the model called ``name`` (None:
    the first one, which the constructor loads), loaded on first use.  Before it loads one, it closes the
    least recently used models past ``max_loaded_models`` (default 1: one model at a time, as the reference
    keeps them).  Iterating gives the names, ``proxy[name]`` a model's settings and ``proxy[name] =
    settings`` adds or replaces one; ``free()`` closes every model.

    Difference from the reference: with several models an unknown name raises (it served the first model
    instead).  The app itself does not use this class: its :class:`ModelPool` also counts each model's
    requests, so that a model in use is never unloaded.
    """

    def __init__(self, models: list[ModelSettings], server: ServerSettings | None = None,
                 loader: Loader = load_llama) -> None:
        super().__init__(models, server or ServerSettings(), loader)
        self()

    def __call__(self, model: str | None = None) -> Llama:
        name = self.resolve(model)
        served = self._recent(name)
        if served is None:
            self._unload_idle(room=1)
            served = self._register(name, self._loader(self.specs[name], self.server, None))
        return served.llama

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __getitem__(self, model: str) -> dict[str, Any]:
        return self.specs[model].model_dump()

    def __setitem__(self, model: str, settings: ModelSettings | str | bytes) -> None:
        if isinstance(settings, (str, bytes)):
            settings = ModelSettings.model_validate_json(settings)
        self.specs[model] = settings

    def free(self) -> None:
        self.close()

    @staticmethod
    def load_llama_from_model_settings(settings: ModelSettings) -> Llama:
        """The reference's loader: the ``Llama`` that ``settings`` describe (media policy: the defaults)."""
        return load_llama(settings, ServerSettings())
