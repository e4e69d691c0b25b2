"""The routing ingress of a Ray Serve deployment: each request tokenized once, then sent to a replica by a
request router that can read its route.

Without it, Serve's HTTP proxy hands each request to a replica by queue length alone (the power of two choices):
a chat's second turn lands on a replica that never saw its first, and every replica evaluates the same long system
prompts again.  With ``--routing prefix`` the proxy hands every request to :class:`RoutingIngress`, which

- renders and tokenizes the prompt of the routes that have one (chat completions, completions, llama-server's
  ``/completion``, Anthropic's messages, OpenAI's responses) with a vocabulary-only copy of the model, the
  replica's own chat template, and hashes it into blocks as the replicas' prefix summaries are hashed
  (:meth:`RouteMaker.route_of`);
- sends what names a stored response (``previous_response_id``, ``/v1/responses/{id}``) to the replica that
  stored it, which the response's id says (:func:`.response_store.home_of`);
- calls the replicas' :meth:`LlamaServer.forward <llama_cpp_server.ray_serve.LlamaServer.forward>` through a
  deployment handle with that route as the ``llama_cpp_route`` keyword, which
  :class:`~llama_cpp_server.ray_prefix_router.PrefixRequestRouter` reads;
- streams the replica's answer back as it comes, and cancels the replica's work when the client goes away;
- sends a request again, to another replica, when the one it went to died before the first part of its answer's
  body (a request that had started streaming is not repeated: its client has part of an answer).

``--routing pow2`` and ``round-robin`` use the same ingress with Serve's default router or
:class:`RoundRobinRequestRouter`, so that routing policies can be compared on equal terms.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from typing import Any, AsyncIterator, List, Optional

import attrs
from ray import serve
from ray.exceptions import ActorUnavailableError, RayActorError
from ray.serve.handle import DeploymentHandle, DeploymentResponseGenerator
from ray.serve.request_router import FIFOMixin, PendingRequest, RequestRouter, RunningReplica
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import ASGIApp, Message

from llama_cpp import Llama
from llama_cpp.engine.normalize import text_prompt_tokens
from llama_cpp.engine.origin import model_fingerprint
from llama_cpp.engine.prefix_summary import prompt_hashes

from . import anthropic_messages, openai_responses, response_store
from .app import error_shapes
from .errors import APIError
from .guards import body_too_large
from .models import chat_kwargs
from .response_store import home_of
from .settings import Settings

#: Times a request is sent to a replica, when the ones before died before answering anything; the wait before
#: each new attempt doubles from RETRY_WAIT_S (Serve takes a moment to see a replica gone).
MAX_ATTEMPTS = 5
RETRY_WAIT_S = 0.1
CHAT_PATHS = frozenset({"/v1/chat/completions", "/chat/completions"})
COMPLETION_PATHS = frozenset({"/v1/completions", "/completion", "/completions"})
MESSAGES_PATH = "/v1/messages"
RESPONSES_PATH = "/v1/responses"
INPUT_TOKENS_PATH = "/v1/responses/input_tokens"
#: ``GET``/``DELETE /v1/responses/{id}`` and ``GET /v1/responses/{id}/input_items``
STORED_RESPONSE_PATH = re.compile(rf"/v1/responses/({response_store.ID.pattern})(?:/input_items)?")


@attrs.frozen
class ForwardedRequest:
    """An HTTP request as the ingress hands it to a replica."""

    method: str
    path: str
    query_string: bytes
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes


@attrs.frozen
class ResponseStart:
    """The first part of a forwarded answer; its body follows as ``bytes`` parts."""

    status: int
    headers: tuple[tuple[bytes, bytes], ...]


async def run_forwarded(app: ASGIApp, request: ForwardedRequest) -> AsyncIterator[ResponseStart | bytes]:
    """Run ``app`` on ``request``: its :class:`ResponseStart`, then its body as it is sent.  Closing the
    iterator early is the client going away: the app's ``receive`` says ``http.disconnect`` and the app is
    waited for (it cancels its generation)."""
    sent: asyncio.Queue[Message] = asyncio.Queue()
    disconnected = asyncio.Event()
    body_given = False

    async def receive() -> Message:
        nonlocal body_given
        if not body_given:
            body_given = True
            return {"type": "http.request", "body": request.body, "more_body": False}
        await disconnected.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        await sent.put(message)

    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
             "method": request.method, "scheme": "http", "path": request.path,
             "raw_path": request.path.encode("latin-1"), "query_string": request.query_string, "root_path": "",
             "headers": [list(pair) for pair in request.headers], "client": ("127.0.0.1", 0),
             "server": ("127.0.0.1", 80)}
    task = asyncio.ensure_future(app(scope, receive, send))
    try:
        while True:
            getter = asyncio.ensure_future(sent.get())
            await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
            if not getter.done():  # the app returned (or failed) with nothing more sent
                getter.cancel()
                task.result()
                if sent.empty():
                    return
                continue
            message = getter.result()
            if message["type"] == "http.response.start":
                yield ResponseStart(int(message["status"]),
                                    tuple((bytes(k), bytes(v)) for k, v in message.get("headers", ())))
            elif message["type"] == "http.response.body":
                if message.get("body"):
                    yield bytes(message["body"])
                if not message.get("more_body", False):
                    return
    finally:
        disconnected.set()
        if not task.done():
            try:
                await asyncio.wait_for(asyncio.shield(task), timeout=10)
            except asyncio.TimeoutError:
                task.cancel()


class RouteMaker:
    """A request's route (``{"model", "hashes", "conversation", "home"}``) as the replicas' engines would hash its
    prompt: a vocabulary-only copy of each model renders and tokenizes it; ``home`` is that of the stored response
    it continues or names, if any.  Anything it cannot read gets no route (the replica answers the error)."""

    def __init__(self, settings: Settings) -> None:
        self.vocabularies: dict[str, tuple[Llama, str]] = {}
        for model in settings.model_list():
            if model.model is None:  # a Hub model or the default one: its requests are routed by load
                continue
            vocab = Llama(model.model, vocab_only=True, verbose=False,
                          chat_template_kwargs=model.chat_template_kwargs or {}, **chat_kwargs(model))
            self.vocabularies[model.name] = (vocab, model_fingerprint(model.model))

    def route_of(self, path: str, body: bytes) -> dict[str, Any] | None:
        stored = STORED_RESPONSE_PATH.fullmatch(path)
        if stored is not None:
            return {"model": "", "hashes": [], "conversation": "", "home": home_of(stored.group(1))}
        try:
            fields = json.loads(body) if body else None
            if not isinstance(fields, dict):
                return None
            return self._route(path, fields)
        except (ValueError, TypeError, KeyError, NotImplementedError, APIError):
            return None

    def _model(self, fields: dict[str, Any]) -> tuple[str, Llama, str] | None:
        name = fields.get("model")
        if name in self.vocabularies:
            vocab, fingerprint = self.vocabularies[name]
            return name, vocab, fingerprint
        if len(self.vocabularies) == 1:  # one model serves every name, as the server's own rule
            (only, (vocab, fingerprint)), = self.vocabularies.items()
            return only, vocab, fingerprint
        return None

    def _route(self, path: str, fields: dict[str, Any]) -> dict[str, Any] | None:
        home = home_of(fields.get("previous_response_id")) if path in (RESPONSES_PATH, INPUT_TOKENS_PATH) else None
        if home is not None:  # its prompt begins with a conversation only the replica that stored it has
            return {"model": "", "hashes": [], "conversation": "", "home": home}
        model = self._model(fields)
        if model is None:
            return None
        name, vocab, fingerprint = model
        conversation = ""
        if path in CHAT_PATHS or path in (MESSAGES_PATH, RESPONSES_PATH):
            if path == MESSAGES_PATH:
                chat = anthropic_messages.generating_chat_request(anthropic_messages.MessagesRequest.model_validate(
                    fields))
                messages, tools, kwargs = chat.messages, chat.tools, chat.chat_template_kwargs
            elif path == RESPONSES_PATH:
                chat = openai_responses.generating_chat_request(
                    openai_responses.ResponsesRequest.model_validate(fields), [])
                messages, tools, kwargs = chat.messages, chat.tools, chat.chat_template_kwargs
            else:
                messages, tools, kwargs = fields["messages"], fields.get("tools"), fields.get("chat_template_kwargs")
            rendered = vocab.render_chat_prompt(messages, tools=tools, chat_template_kwargs=kwargs)
            tokens = text_prompt_tokens(vocab, rendered.prompt, starts_with_bos=bool(rendered.added_special))
            conversation = conversation_key(name, messages)
        elif path in COMPLETION_PATHS and isinstance(fields.get("prompt"), str):
            tokens = text_prompt_tokens(vocab, fields["prompt"])
        else:
            return None
        return {"model": name, "hashes": prompt_hashes(fingerprint, tokens), "conversation": conversation}


def conversation_key(model: str, messages: list[dict[str, Any]]) -> str:
    """What stays the same over a conversation's turns: the model and its messages up to the first user one."""
    opening = []
    for message in messages:
        opening.append(message)
        if isinstance(message, dict) and message.get("role") == "user":
            break
    text = json.dumps([model, opening], sort_keys=True, default=str)
    return hashlib.blake2b(text.encode("utf-8"), digest_size=12).hexdigest()


class RoundRobinRequestRouter(FIFOMixin, RequestRouter):
    """Each request to the next replica in turn (by replica id), whatever it holds: a baseline for comparisons."""

    def initialize_state(self, **kwargs: Any) -> None:
        self.turn = 0

    async def choose_replicas(self, candidate_replicas: List[RunningReplica],
                              pending_request: Optional[PendingRequest] = None) -> List[List[RunningReplica]]:
        if not candidate_replicas:
            return []
        ordered = sorted(candidate_replicas, key=lambda r: r.replica_id.unique_id)
        self.turn += 1
        return [[ordered[self.turn % len(ordered)]]]


@serve.deployment(name="llama_cpp_ingress")
class RoutingIngress:
    """The HTTP entry: every request, tokenized once, to a replica of the server deployment (see the module's
    docstring)."""

    def __init__(self, server: DeploymentHandle[Any], settings: Settings) -> None:
        self.server = server
        self.routes = RouteMaker(settings)
        self.max_body_bytes = settings.max_body_bytes
        self.shapes = error_shapes()

    async def __call__(self, request: Request) -> Response:
        body = bytearray()  # read up to the replicas' own limit: a huge body costs the ingress no more
        async for chunk in request.stream():
            body += chunk
            if len(body) > self.max_body_bytes:
                return body_too_large(self.shapes, request.url.path, self.max_body_bytes)
        forwarded = ForwardedRequest(request.method, request.url.path, request.url.query.encode("latin-1"),
                                     tuple(request.headers.raw), bytes(body))
        route = await run_in_threadpool(self.routes.route_of, forwarded.path, forwarded.body)
        start, first, answer = await self._started(forwarded, route)

        async def body_parts() -> AsyncIterator[bytes]:
            try:
                if first:
                    yield first
                async for part in answer:
                    yield part
            finally:
                answer.cancel()  # type: ignore[no-untyped-call]  # (a no-op once done) the client left: the replica stops

        response = StreamingResponse(body_parts(), status_code=start.status)
        response.raw_headers = [(k, v) for k, v in start.headers]
        return response

    async def _started(self, forwarded: ForwardedRequest, route: dict[str, Any] | None,
                       ) -> tuple[ResponseStart, bytes, DeploymentResponseGenerator[Any]]:
        """The request sent to a replica, the start of its answer and the first part of its body (b"" when it has
        none); sent again (the router choosing anew) when the replica died before any of its body was read, so
        that a client never gets half an answer from a retry."""
        for attempt in range(1, MAX_ATTEMPTS + 1):
            stream = self.server.options(stream=True).forward.remote(forwarded, llama_cpp_route=route)
            assert isinstance(stream, DeploymentResponseGenerator)
            try:
                start = await stream.__anext__()
                try:
                    first = await stream.__anext__()
                except StopAsyncIteration:
                    first = b""
            except (RayActorError, ActorUnavailableError):
                stream.cancel()  # type: ignore[no-untyped-call]  # Ray's cancel() has no annotations
                if attempt == MAX_ATTEMPTS:
                    raise
                await asyncio.sleep(RETRY_WAIT_S * 2 ** (attempt - 1))
                continue
            assert isinstance(start, ResponseStart) and isinstance(first, bytes)
            return start, first, stream
        raise AssertionError("unreachable: the last attempt returns or raises")


__all__ = ["ForwardedRequest", "ResponseStart", "RouteMaker", "RoundRobinRequestRouter", "RoutingIngress",
           "conversation_key", "run_forwarded"]
