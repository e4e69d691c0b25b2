"""The FastAPI application: routes in OpenAI's shapes over the engine, and the server's guards.

``create_app(settings)`` (or the reference's ``create_app(server_settings=..., model_settings=[...])``)
wires the model pool, the guards (API keys, CORS, body size), the error handlers,
the routes and the chat page.  Every generation goes through the model's engine (many requests share one
context, up to ``n_seq_max`` at once; the rest wait in the engine's queue, up to ``max_queue``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterator

from fastapi import Depends, FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

import llama_cpp
from llama_cpp.engine import RequestScope

from . import (anthropic_messages, anthropic_schema, bridge, errors, llama_server_schema, llama_server_timings,
               openai_responses, openai_responses_schema, responses)
from .anthropic_messages import CountTokensRequest, MessagesRequest
from .openai_responses import InputTokensRequest, ResponsesRequest, ResponsesView
from .response_store import ResponseStore
from .bridge import EventFormat, ResponseView, Served, Workers, open_stream, run_call, sse_events
from .guards import BodyLimit, JsonBodies, key_index, request_tenant, require_api_key
from .choices import chat_choice_streams, chat_choices
from .metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from .metrics import render_metrics
from .models import Lease, ModelPool
from .llama_server_completion import (NativeCompletionRequest, NativeShaper, generation_settings, native_arguments,
                     native_with_server_defaults)
from .llama_server_embeddings import NativeEmbeddingRequest, embedding_inputs, native_embeddings
from .llama_server_infill import NativeInfillRequest, infill_prompt
from .llama_server_props import post_props, props
from .llama_server_template import apply_template, input_tokens
from .llama_server_text import mixed_tokens, pieces_text, token_piece
from .slots import slot_action, slot_list
from .requests import (chat_arguments, check_embedding_input, check_generations, completion_arguments, prompt_count,
                       stream_shaper, with_server_defaults)
from .schemas import (ChatRequest, CompletionRequest, DetokenizeRequest, EmbeddingRequest, RerankRequest,
                      TokenizeRequest, body_fields)
from .settings import ModelSettings, ServerSettings, Settings, load_settings

STATIC = Path(__file__).parent / "static"
LOCAL_ORIGINS = r"https?://(localhost|127\.0\.0\.1|\[::1\])(:\d+)?"

__all__ = ["create_app"]


def error_shapes() -> errors.ErrorShapes:
    """The error object each path answers with: OpenAI's, Anthropic's under its routes."""
    return errors.ErrorShapes({"/v1/messages": anthropic_messages.error_shape})


def create_app(settings: Settings | None = None, server_settings: ServerSettings | None = None,
               model_settings: list[ModelSettings] | None = None, *, pool: ModelPool | None = None) -> FastAPI:
    """The server's app for ``settings`` (everything in one), or for ``server_settings`` with
    ``model_settings`` (the reference's form: what its config file holds, :class:`ConfigFileSettings`).
    With neither, the settings of the environment and of the config file it names (``CONFIG_FILE``), as
    ``uvicorn llama_cpp.server.app:create_app --factory`` runs it."""
    if (server_settings is None) != (model_settings is None):
        raise ValueError("server_settings and model_settings go together")
    if server_settings is None or model_settings is None:
        settings = settings or load_settings([])
        server_settings, model_settings = settings.server(), settings.model_list()
    elif settings is not None:
        raise ValueError("pass settings, or server_settings with model_settings, not both")
    server = server_settings
    pool = pool or ModelPool(model_settings, server)
    workers = Workers()
    stored = ResponseStore(server.responses_max_count, server.responses_max_bytes, server.responses_folder)
    ping_interval = None if server.disable_ping_events else bridge.PING_INTERVAL

    async def sleep_idle_models() -> None:
        """Every so often, free the models idle past ``sleep_idle_seconds``."""
        period = min(1.0, server.sleep_idle_seconds / 4)
        while True:
            await asyncio.sleep(period)
            await run_in_threadpool(pool.sleep_idle)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        warm = asyncio.ensure_future(pool.warm_up())
        sleeper = asyncio.ensure_future(sleep_idle_models()) if server.sleep_idle_seconds > 0 else None
        try:
            yield
        finally:
            warm.cancel()
            if sleeper is not None:
                sleeper.cancel()
            if await workers.stop(timeout=10.0):
                pool.close()
            else:  # a thread may still be in a model call outside the engine (tokenizing): the exit frees it
                errors.log.warning("requests still running at shutdown: the models are left loaded")

    app = FastAPI(title="llama_cpp server", version=llama_cpp.__version__, lifespan=lifespan,
                  root_path=server.root_path, docs_url=None, redoc_url=None,
                  openapi_url=None)  # both served below, /openapi.json keyed
    responses.install(app, (*anthropic_schema.REFERENCED, *openai_responses_schema.REFERENCED,
                           *llama_server_schema.REFERENCED))
    app.state.pool = pool
    app.state.workers = workers  # (the command ends their requests as soon as a shutdown signal comes)
    app.state.settings = server
    app.state.responses = stored  # (a Serve replica gives it its home: ray_serve.LlamaServer)
    which_key = key_index(server.api_keys)
    shapes = error_shapes()
    errors.install(app, body_fields(), (lambda request: which_key(request) is not None) if server.api_keys else None,
                   shapes)
    app.add_middleware(JsonBodies)
    app.add_middleware(BodyLimit, max_bytes=server.max_body_bytes, shapes=shapes)
    if server.cors_origins:
        # llama-server's shorthand "localhost": a page served from this machine, on any port
        local = LOCAL_ORIGINS if "localhost" in server.cors_origins else None
        # any request header: browser clients send their own (the OpenAI SDK's x-stainless-*, Anthropic's
        # anthropic-version), and a preflight that refuses one fails the request
        app.add_middleware(CORSMiddleware, allow_origins=[o for o in server.cors_origins if o != "localhost"],
                           allow_origin_regex=local, allow_credentials=server.cors_allow_credentials,
                           allow_methods=["GET", "POST", "DELETE", "OPTIONS"], allow_headers=["*"])
        if "*" in server.cors_origins and not server.api_keys:
            errors.log.warning("CORS allows every origin and no API key is set: any web page a user of this "
                               "machine opens can use this server (set api_keys, or list cors_origins)")
    app.add_middleware(errors.CatchAll, shapes=shapes)  # outermost: whatever fails below it still answers
    keyed = [Depends(require_api_key(server.api_keys))]
    timeout = server.request_timeout

    def scope() -> RequestScope:
        return RequestScope(max_prompt_tokens=server.max_prompt_tokens)

    async def answer(request: Request, lease: Lease, call: Callable[[], Any],
                     request_scope: RequestScope | None = None) -> Any:
        """A non-streamed answer; the lease is released when it is ready (or the client has gone)."""
        try:
            result = await run_call(request, call, timeout=timeout, scope=request_scope or scope(), workers=workers)
        finally:
            lease.release()
        return Response(status_code=499) if result is None else result

    async def stream(lease: Lease, make: Callable[[], Iterator[Any]], shape: Callable[[Any], list[Any]],
                     form: EventFormat = bridge.OPENAI, request_scope: RequestScope | None = None) -> StreamingResponse:
        """A streamed answer (SSE, written in the route's ``form``); the lease is held until the stream ends."""
        request_scope = request_scope or scope()
        try:
            items = await open_stream(make, timeout=timeout, scope=request_scope, workers=workers,
                                      ping_interval=ping_interval)
            first = await items.__anext__()
        except BaseException:
            lease.release()
            raise

        async def body() -> AsyncIterator[bytes]:
            try:
                async for event in sse_events(first, items, shape, request_scope, form):
                    yield event
            finally:
                lease.release()

        return StreamingResponse(body(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    async def generate(body: CompletionRequest | ChatRequest, request: Request,
                       arguments: Callable[[Any, Any, str, str], Any],
                       streamed: Callable[[Any, Any], Iterator[Any]], whole: Callable[[Any, Any], Any],
                       view: ResponseView | None = None) -> Any:
        """A completions or chat request: admitted on its model, its library keywords made on a worker
        thread (a grammar is checked there, off the event loop; a bad value releases the model at once),
        then streamed or answered whole, with llama-server's ``timings`` of the call's engine requests;
        ``view`` shapes the answer for another API (Anthropic's) instead."""
        check_generations(prompt_count(body.prompt) if isinstance(body, CompletionRequest) else 1, ("n", body.n),
                          server.max_n)
        body = with_server_defaults(body, server)
        lease = await pool.admit(body.model)
        llm = lease.llama
        try:
            adapters = lease.served.lora.active_loras(body.lora)
            prepared = await run_in_threadpool(arguments, body, llm, lease.served.name,
                                               request_tenant(request, body.user))
            for call in prepared if isinstance(prepared, list) else [prepared]:
                call["active_loras"] = adapters
        except BaseException:
            lease.release()
            raise
        request_scope = scope()

        def measured() -> dict[str, Any] | None:
            return llama_server_timings.of_requests(request_scope.requests)

        served = Served(request_scope, lease.served.name, llm)
        if body.stream:
            shape = view.stream(served) if view is not None else stream_shaper(body, measured)
            return await stream(lease, lambda: streamed(llm, prepared), shape,
                                form=view.form if view is not None else bridge.OPENAI, request_scope=request_scope)
        result = await answer(request, lease, lambda: whole(llm, prepared), request_scope)
        if view is not None:
            return result if isinstance(result, Response) else view.whole(result, served)
        if isinstance(result, dict) and (timings := measured()) is not None:
            result["timings"] = timings
        return result

    async def embedder(model: str | None, refusal: int) -> Lease:
        """The model for an embeddings request, admitted; ``refusal`` (the route's status) when it was not
        loaded to serve embeddings."""
        lease = await pool.admit(model)
        if not lease.served.settings.embeddings:
            lease.release()
            raise errors.APIError(refusal, f"model {lease.served.name!r} does not serve embeddings (load it with "
                                  "embeddings: true; llama-server's --embeddings)", param="model")
        return lease

    # -- OpenAI routes ----------------------------------------------------------------------------
    @app.post("/v1/completions", dependencies=keyed, responses=responses.COMPLETIONS)
    @app.post("/v1/engines/copilot-codex/completions", dependencies=keyed, include_in_schema=False)
    async def completions(body: CompletionRequest, request: Request) -> Any:
        return await generate(body, request, completion_arguments,
                              lambda llm, kwargs: llm.create_completion(stream=True, **kwargs),
                              lambda llm, kwargs: llm.create_completion(**kwargs))

    @app.post("/v1/chat/completions", dependencies=keyed, responses=responses.CHAT)
    @app.post("/chat/completions", dependencies=keyed, include_in_schema=False)  # llama-server serves both
    async def chat_completions(body: ChatRequest, request: Request) -> Any:
        return await generate(body, request, chat_arguments, chat_choice_streams, chat_choices)

    # -- Anthropic's Messages API, on the chat route's path ------------------------------------------
    @app.post("/v1/messages", dependencies=keyed, responses=anthropic_schema.MESSAGES)
    async def messages(body: MessagesRequest, request: Request) -> Any:
        chat = anthropic_messages.generating_chat_request(body)
        return await generate(chat, request, chat_arguments, chat_choice_streams, chat_choices,
                              anthropic_messages.MessagesView())

    @app.post("/v1/messages/count_tokens", dependencies=keyed, responses=anthropic_schema.COUNT_TOKENS)
    async def messages_count_tokens(body: CountTokensRequest) -> Any:
        counted = await rendering(anthropic_messages.chat_request(body), input_tokens)
        return {"input_tokens": counted["input_tokens"]}

    # -- OpenAI's Responses API, on the chat route's path, with stored responses ---------------------------
    def stored_response(response_id: str, request: Request) -> Any:
        record = stored.get(response_id, request_tenant(request, None))
        if record is None:  # another key's response is as unknown as one that never existed
            raise errors.APIError(404, f"no stored response {response_id!r}", param="response_id")
        return record

    def history(body: Any, request: Request) -> list[dict[str, Any]]:
        if body.previous_response_id is None:
            return []
        record = stored.get(body.previous_response_id, request_tenant(request, None))
        if record is None:
            raise errors.APIError(404, f"previous_response_id: no stored response {body.previous_response_id!r} "
                                  "(made with store: true, by this API key, and not deleted or evicted)",
                                  param="previous_response_id")
        return list(record.conversation)

    @app.post("/v1/responses", dependencies=keyed, responses=openai_responses_schema.CREATE)
    async def create_response(body: ResponsesRequest, request: Request) -> Any:
        chat = openai_responses.generating_chat_request(body, history(body, request))
        view = ResponsesView(body, stored, request_tenant(request, None), chat.messages)
        return await generate(chat, request, chat_arguments, chat_choice_streams, chat_choices, view)

    @app.post("/v1/responses/input_tokens", dependencies=keyed, responses=openai_responses_schema.INPUT_TOKENS)
    async def response_input_tokens(body: InputTokensRequest, request: Request) -> Any:
        counted = await rendering(openai_responses.chat_request(body, history(body, request)), input_tokens)
        return {"object": "response.input_tokens", "input_tokens": counted["input_tokens"]}

    @app.get("/v1/responses/{response_id}", dependencies=keyed, responses=openai_responses_schema.GET)
    async def get_response(response_id: str, request: Request) -> Any:
        return stored_response(response_id, request).response

    @app.delete("/v1/responses/{response_id}", dependencies=keyed, responses=openai_responses_schema.DELETE)
    async def delete_response(response_id: str, request: Request) -> Any:
        if not stored.delete(response_id, request_tenant(request, None)):
            raise errors.APIError(404, f"no stored response {response_id!r}", param="response_id")
        return {"id": response_id, "object": "response", "deleted": True}

    @app.get("/v1/responses/{response_id}/input_items", dependencies=keyed,
             responses=openai_responses_schema.INPUT_ITEMS)
    async def response_input_items(response_id: str, request: Request, limit: int = 20, order: str = "desc",
                                   after: str | None = None, before: str | None = None) -> Any:
        if not 1 <= limit <= 100:
            raise errors.APIError(400, f"limit: 1 to 100, got {limit}", param="limit")
        if order not in ("asc", "desc"):
            raise errors.APIError(400, f"order: 'asc' or 'desc', got {order!r}", param="order")
        return openai_responses.input_items_page(stored_response(response_id, request), limit, order, after,
                                                 before)

    @app.post("/v1/embeddings", dependencies=keyed, responses=responses.EMBEDDINGS)
    async def embeddings(body: EmbeddingRequest, request: Request) -> Any:
        lease = await embedder(body.model, 400)
        llm = lease.llama
        if llm.pooling_type() == llama_cpp.LLAMA_POOLING_TYPE_NONE:  # as llama-server refuses it
            lease.release()
            raise errors.APIError(400, f"model {lease.served.name!r} has pooling type 'none' (a vector per token), "
                                  "which OpenAI's embeddings do not have: load it with --pooling mean, cls or last, "
                                  "or ask /embedding for the vectors per token", param="model")
        if body.dimensions is not None and body.dimensions != llm.n_embd():
            lease.release()
            raise errors.APIError(400, f"dimensions={body.dimensions}: this model's embeddings have "
                                  f"{llm.n_embd()} dimensions", param="dimensions")
        try:
            check_embedding_input(body.input)
        except BaseException:
            lease.release()
            raise
        return await answer(request, lease, lambda: llm.create_embedding(
            body.input, model=lease.served.name, encoding_format=body.encoding_format, truncate=False))

    @app.post("/v1/rerank", dependencies=keyed, responses=responses.RERANK)
    @app.post("/v1/reranking", dependencies=keyed, include_in_schema=False)  # llama-server's other spellings
    @app.post("/rerank", dependencies=keyed, include_in_schema=False)
    @app.post("/reranking", dependencies=keyed, include_in_schema=False)
    async def rerank(body: RerankRequest, request: Request) -> Any:
        lease = await pool.admit(body.model)
        llm = lease.llama
        rank = getattr(llm, "rank", None)  # a LlamaEmbedding's (a plain Llama has none)
        if not callable(rank):
            lease.release()
            raise errors.APIError(400, f"model {lease.served.name!r} is not a reranker (load it with "
                                  "embeddings: true and a rank pooling type)", param="model")
        scores = await answer(request, lease, lambda: rank(body.query, body.documents))
        if isinstance(scores, Response):
            return scores
        order = sorted(range(len(scores)), key=lambda i: scores[i], reverse=True)[:body.top_n or len(scores)]
        results = [{"index": i, "relevance_score": scores[i],
                    **({"document": {"text": body.documents[i]}} if body.return_documents else {})} for i in order]
        return {"object": "list", "model": lease.served.name, "results": results,
                "usage": {"prompt_tokens": 0, "total_tokens": 0}}

    @app.get("/v1/models", dependencies=keyed, responses=responses.MODELS)
    @app.get("/models", dependencies=keyed, include_in_schema=False)
    async def models() -> Any:
        created = int(app.state.started)
        return {"object": "list", "data": [{"id": name, "object": "model", "created": created,
                                            "owned_by": "llamacpp", "status": {"value": pool.status(name)}}
                                           for name in pool.names]}

    async def named_model(request: Request) -> str:
        """The ``model`` of a ``/models/load`` or ``/models/unload`` body."""
        body = errors.json_body(await request.body(), empty={})
        name = body.get("model") if isinstance(body, dict) else None
        if not isinstance(name, str) or not name:
            raise errors.APIError(400, f"model: required, one of {', '.join(pool.names)}", param="model")
        return name

    @app.post("/models/load", dependencies=keyed, responses=llama_server_schema.LOAD,
              openapi_extra=llama_server_schema.LOAD_BODY)
    async def load_model(request: Request) -> Any:
        await pool.load(await named_model(request))
        return {"success": True}

    @app.post("/models/unload", dependencies=keyed, responses=llama_server_schema.UNLOAD,
              openapi_extra=llama_server_schema.UNLOAD_BODY)
    async def unload_model(request: Request) -> Any:
        name = await named_model(request)
        await run_in_threadpool(pool.unload, name)
        return {"success": True}

    @app.get("/models/sse", dependencies=keyed, response_class=StreamingResponse,
             responses=llama_server_schema.MODEL_EVENTS)
    async def models_events() -> Any:
        """llama-server's ``/models/sse``: each model's current status first (so a client knows where it
        starts), then every status change and load progress as it happens, pings between them."""
        async def events() -> AsyncIterator[bytes]:
            with pool.feed.subscribe() as queue:
                for name in pool.names:
                    yield bridge.sse({"model": name, "event": "model_status", "data": {"status": pool.status(name)}})
                while True:
                    try:
                        message = await asyncio.wait_for(queue.get(), timeout=bridge.PING_INTERVAL)
                    except asyncio.TimeoutError:
                        yield bridge.ping_event()
                        continue
                    yield bridge.sse(message)

        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    # -- llama-server's own routes ---------------------------------------------------------------
    @app.post("/completions", dependencies=keyed, responses=llama_server_schema.COMPLETION)
    @app.post("/completion", dependencies=keyed, include_in_schema=False)  # llama-server's legacy path
    async def native_completion(body: NativeCompletionRequest, request: Request) -> Any:
        check_generations(prompt_count(body.prompt), body.choices, server.max_n)
        body = native_with_server_defaults(body, server)
        lease = await pool.admit(body.model)
        llm = lease.llama
        try:
            arguments = await run_in_threadpool(native_arguments, body, llm, request_tenant(request, None),
                                                lease.served.lora.active_loras(body.lora))
        except BaseException:
            lease.release()
            raise
        shaper = NativeShaper(llm, body, arguments, lease.served.name)
        if body.stream:
            return await stream(lease, lambda: llm.completion_events(**arguments), shaper.stream_events,
                                form=bridge.LLAMA_SERVER)
        return await answer(request, lease, lambda: shaper.whole(llm.completion_events(**arguments)))

    @app.post("/infill", dependencies=keyed, responses=llama_server_schema.INFILL)
    async def native_infill(body: NativeInfillRequest, request: Request) -> Any:
        check_generations(1, body.choices, server.max_n)
        lease = await pool.admit(body.model)
        try:
            n_predict = server.default_max_tokens if server.default_max_tokens is not None else -1
            tokens = await run_in_threadpool(infill_prompt, body, lease.llama, lease.served.settings.n_batch,
                                             n_predict)
        finally:
            lease.release()
        return await native_completion(body.model_copy(update={"prompt": tokens}), request)

    async def rendering(body: ChatRequest, render: Callable[[Any, ChatRequest], Any]) -> Any:
        """A render-only chat route: the body's prompt made by the model's chat handler, on a worker thread,
        with the server's defaults as the chat route has them (its template variables among them)."""
        chat = with_server_defaults(body, server)
        assert isinstance(chat, ChatRequest)
        lease = await pool.admit(body.model)
        try:
            return await run_in_threadpool(render, lease.llama, chat)
        finally:
            lease.release()

    @app.post("/apply-template", dependencies=keyed, responses=llama_server_schema.APPLY_TEMPLATE)
    async def post_apply_template(body: ChatRequest) -> Any:
        return await rendering(body, apply_template)

    @app.post("/chat/completions/input_tokens", dependencies=keyed, responses=llama_server_schema.INPUT_TOKENS)
    @app.post("/v1/chat/completions/input_tokens", dependencies=keyed, include_in_schema=False)
    async def post_input_tokens(body: ChatRequest) -> Any:
        return await rendering(body, input_tokens)

    @app.post("/embeddings", dependencies=keyed, responses=llama_server_schema.EMBEDDING)
    @app.post("/embedding", dependencies=keyed, include_in_schema=False)  # llama-server's legacy path
    async def native_embedding(body: NativeEmbeddingRequest, request: Request) -> Any:
        inputs = embedding_inputs(body)
        lease = await embedder(body.model, 501)  # llama-server's code for a feature it was not started with
        llm = lease.llama
        vectors = await answer(request, lease, lambda: llm.embed(inputs, normalize=body.embd_normalize,
                                                                 truncate=False))
        return vectors if isinstance(vectors, Response) else native_embeddings(vectors)

    @app.get("/slots", dependencies=keyed, responses=llama_server_schema.SLOTS)
    async def get_slots(model: str | None = None) -> Any:
        if not server.slots_endpoint:
            raise errors.APIError(501, "the slots endpoint is off (slots_endpoint: false, llama-server's --no-slots)")
        lease = await pool.admit(model)
        try:
            return slot_list(lease.llama, lease.served.settings.speculative is not None)
        finally:
            lease.release()

    @app.post("/slots/{id_slot}", dependencies=keyed, responses=llama_server_schema.SLOT_ACTION,
              openapi_extra=llama_server_schema.SLOT_ACTION_BODY)
    async def post_slot(id_slot: str, request: Request, action: str | None = None, model: str | None = None) -> Any:
        fields = errors.json_body(await request.body(), empty={})
        filename = fields.get("filename") if isinstance(fields, dict) else None
        if filename is not None and not isinstance(filename, str):
            raise errors.APIError(422, "filename: a string", param="filename")
        lease = await pool.admit(model)
        try:
            return await run_in_threadpool(slot_action, lease.llama, id_slot, action, filename,
                                           server.slot_save_path)
        finally:
            lease.release()

    @app.get("/prefixes", dependencies=keyed, responses=llama_server_schema.PREFIXES)
    async def get_prefixes(model: str | None = None, block_tokens: int = 32, max_hashes: int = 4096) -> Any:
        """What the model's engine can reuse, as chained block hashes, for a balancer in front of several
        servers (docs/server.md)."""
        if not 1 <= block_tokens <= 4096:
            raise errors.APIError(400, f"block_tokens: 1 to 4096, got {block_tokens}", param="block_tokens")
        if not 0 <= max_hashes <= 65536:
            raise errors.APIError(400, f"max_hashes: 0 to 65536, got {max_hashes}", param="max_hashes")
        lease = await pool.admit(model)
        try:
            summary = await run_in_threadpool(lease.llama.prefix_summary, block_tokens, max_hashes)
        finally:
            lease.release()
        return {"name": lease.served.name, **summary.to_json()}

    @app.get("/lora-adapters", dependencies=keyed, responses=llama_server_schema.LORA_ADAPTERS)
    async def get_lora_adapters(model: str | None = None) -> Any:
        lease = await pool.admit(model)
        lease.release()
        return lease.served.lora.listing()

    @app.post("/lora-adapters", dependencies=keyed, responses=llama_server_schema.SET_LORA_ADAPTERS,
              openapi_extra=llama_server_schema.SET_LORA_ADAPTERS_BODY)
    async def post_lora_adapters(request: Request, model: str | None = None) -> Any:
        body = await request.body()
        lease = await pool.admit(model)
        lease.release()
        return lease.served.lora.set_scales(body)

    @app.get("/props", dependencies=keyed, responses=llama_server_schema.PROPS)
    async def get_props(model: str | None = None) -> Any:
        lease = await pool.admit(model)
        try:
            llm, served = lease.llama, lease.served
            handler = llm.chat_handler
            modalities = {"vision": bool(handler is not None and getattr(handler, "is_support_vision", bool)()),
                          "video": False,
                          "audio": bool(handler is not None and getattr(handler, "is_support_audio", bool)())}
            return props(llm, served.name, served.settings.model or "", llm.scheduler.ctx.n_seq_max, modalities,
                         generation_settings(native_with_server_defaults(NativeCompletionRequest(prompt=""),
                                                                         server)), server.slots_endpoint,
                         server.props_endpoint, served.settings.chat_template)
        finally:
            lease.release()

    @app.post("/props", dependencies=keyed, responses=llama_server_schema.POST_PROPS,
              openapi_extra=llama_server_schema.POST_PROPS_BODY)
    async def post_props_route(request: Request) -> Any:
        return post_props(server.props_endpoint, await request.body())

    # -- llama-server's and the reference's extras --------------------------------------------------
    async def _tokenize(body: TokenizeRequest, add_special: bool) -> tuple[list[int], Any]:
        """llama-server's rule: text pieces tokenized, token ids kept, only a leading text gets BOS."""
        content = body.content if body.content is not None else body.input
        if content is None:
            raise errors.APIError(422, "content: required (the text to tokenize)", param="content")
        add = add_special if body.add_special is None else body.add_special
        lease = await pool.admit(body.model)
        try:
            llm = lease.llama
            return mixed_tokens(llm, content, add_bos=add, special=body.parse_special, field="content"), llm
        finally:
            lease.release()

    @app.post("/tokenize", dependencies=keyed, responses=responses.TOKENIZE)
    async def tokenize(body: TokenizeRequest) -> Any:
        tokens, llm = await _tokenize(body, add_special=False)
        if body.with_pieces:
            return {"tokens": [{"id": t, "piece": token_piece(llm, t)} for t in tokens]}
        return {"tokens": tokens}

    @app.post("/extras/tokenize", dependencies=keyed, responses=responses.TOKENIZE)
    async def extras_tokenize(body: TokenizeRequest) -> Any:
        tokens, _ = await _tokenize(body, add_special=True)
        return {"tokens": tokens}

    @app.post("/extras/tokenize/count", dependencies=keyed, responses=responses.TOKENIZE_COUNT)
    async def tokenize_count(body: TokenizeRequest) -> Any:
        tokens, _ = await _tokenize(body, add_special=True)
        return {"count": len(tokens)}

    @app.post("/detokenize", dependencies=keyed, responses=responses.DETOKENIZE)
    @app.post("/extras/detokenize", dependencies=keyed, responses=responses.DETOKENIZE)
    async def detokenize(body: DetokenizeRequest) -> Any:
        lease = await pool.admit(body.model)
        try:
            text = pieces_text(lease.llama, body.tokens)
        finally:
            lease.release()
        return {"content": text, "text": text}

    @app.get("/health", responses=responses.HEALTH)
    @app.get("/v1/health", include_in_schema=False)
    async def health() -> Any:
        # ready once the first model has loaded; while it loads again after sleeping, 503 as at startup
        if pool.ready and pool.status(pool.names[0]) != "loading":
            return {"status": "ok"}
        if pool.failure is not None:
            return JSONResponse({"status": "error", "error": errors.error_body(503, pool.failure)["error"]},
                                status_code=503)
        return JSONResponse({"status": "loading model", "error": errors.error_body(503, "loading model")["error"]},
                            status_code=503)

    @app.get("/metrics", dependencies=keyed, response_class=PlainTextResponse, responses=responses.METRICS)
    async def metrics() -> Any:
        # llama-server's headers: its content type (no charset) and when the process started
        return Response(render_metrics(pool), headers={"Content-Type": METRICS_CONTENT_TYPE,
                                                       "Process-Start-Time-Unix": str(int(app.state.started))})

    @app.get("/openapi.json", dependencies=keyed, include_in_schema=False)
    async def openapi_json(request: Request) -> Any:
        return JSONResponse(responses.with_root_path(app.openapi(), request.scope.get("root_path", "")))

    @app.get("/docs", include_in_schema=False)
    async def docs_page() -> Any:
        return FileResponse(STATIC / "docs.html", media_type="text/html")

    if server.chat_page:
        @app.get("/", include_in_schema=False)
        async def chat_page() -> Any:
            return FileResponse(STATIC / "index.html", media_type="text/html")

    app.state.started = time.time()
    return app

