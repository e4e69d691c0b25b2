"""From the event loop to the engine and back: blocking library calls on worker threads, watched.

Each call runs on a worker thread inside a :class:`~llama_cpp.engine.RequestScope`, so that the event loop
can cancel the engine requests it made when the client disconnects or the request's time is up (the
sequence is freed at the engine's next tick, not when the generation would have ended).  Streams are
pulled on the worker thread and handed to the loop chunk by chunk; an error before the first chunk is an
ordinary error response, one after it ends the stream with an error event.  A stream also carries a
``: ping`` comment every :data:`PING_INTERVAL` seconds, as the reference's sse-starlette streams do, so
that a proxy with an idle timeout keeps a stream whose tokens are slow to come.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, AsyncGenerator, AsyncIterator, Callable, Iterator, NamedTuple, Protocol

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from llama_cpp.engine import RequestScope

from .errors import APIError, error_body, value_message


class Workers:
    """The request scopes active on worker threads.  A model must not be freed while a thread still decodes
    with it, and at shutdown uvicorn cancels the tasks of open requests without waiting for their threads:
    :meth:`stop` cancels the scopes and waits for the threads to leave the engine."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: list[RequestScope] = []
        self._stopped = False

    @contextlib.contextmanager
    def active(self, scope: RequestScope) -> Iterator[None]:
        """On a worker thread: ``scope`` active, counted until the block ends (503 once stopping)."""
        with self._lock:
            if self._stopped:
                raise APIError(503, "the server is shutting down")
            self._running.append(scope)
        try:
            with scope.active():
                yield
        finally:
            with self._lock:
                self._running.remove(scope)

    def cancel_all(self) -> None:
        """Cancel every active scope and refuse new ones (any thread; idempotent): their requests end at the
        engine's next tick, and their streams with them."""
        with self._lock:
            self._stopped = True
            running = list(self._running)
        for scope in running:
            scope.cancel()

    async def stop(self, timeout: float) -> bool:
        """Cancel every active scope, refuse new ones, and wait for their threads; False if some are still
        running after ``timeout`` seconds."""
        self.cancel_all()
        deadline = time.monotonic() + timeout
        while self._running and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        return not self._running


async def _disconnected(request: Request) -> None:
    """Returns when the client has gone (the body was read already: only a disconnect can come)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def run_call(request: Request, call: Callable[[], Any], *, timeout: float, scope: RequestScope,
                   workers: Workers) -> Any:
    """``call()`` on a worker thread, cancelled at a disconnect (then None) or after ``timeout`` (504)."""
    def work() -> Any:
        with workers.active(scope):
            return call()

    task = asyncio.ensure_future(run_in_threadpool(work))
    watch = asyncio.ensure_future(_disconnected(request))
    try:
        done, _ = await asyncio.wait({task, watch}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        scope.cancel()  # the server cancelled the request (Ray Serve does when the client goes away)
        raise
    finally:
        watch.cancel()
    if task in done:
        return task.result()
    scope.cancel()  # the engine frees the sequences; the worker returns soon after
    await asyncio.wait({task})
    if watch in done:
        return None
    raise APIError(504, f"the request took longer than request_timeout ({timeout:g} s) and was cancelled",
                   code="timeout")


# Seconds between a stream's pings, counted from its first event: sse-starlette's interval (15 s), which the
# reference server keeps.  The server's disable_ping_events turns them off.
PING_INTERVAL = 15.0


class _Ping:
    """What a stream yields when a ping is due (sent as an SSE comment, which clients skip)."""


PING = _Ping()


class _End:
    """What a stream's worker sends when it is done (``error`` set if it failed)."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error


async def open_stream(make: Callable[[], Iterator[Any]], *, timeout: float, scope: RequestScope,
                      workers: Workers, ping_interval: float | None = None) -> AsyncGenerator[Any, None]:
    """The items of ``make()``'s iterator, produced on a worker thread.  Awaiting the result's first item
    raises what ``make`` raised before producing anything (a bad request is an error response, not a
    stream); the iterator's ``aclose()`` (a disconnect) cancels the engine requests.  With
    ``ping_interval``, :data:`PING` comes in between, that many seconds after the first item and then after
    each ping, however many items flow (sse-starlette's clock, not an idle timer)."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Any] = asyncio.Queue()
    deadline = time.monotonic() + timeout

    def work() -> None:
        # a cancelled scope's requests finish "abort" at once, so the iterator ends by itself, and its last
        # item (the chunk with that finish_reason) is sent too: stopping at the first item after the cancel
        # dropped it whenever the cancel came between two items (a shutdown's streams then ended without it)
        try:
            with workers.active(scope):
                for item in make():
                    loop.call_soon_threadsafe(queue.put_nowait, item)
        except BaseException as exc:  # noqa: BLE001 - handed to the loop, which answers with it
            loop.call_soon_threadsafe(queue.put_nowait, _End(exc))
            return
        loop.call_soon_threadsafe(queue.put_nowait, _End())

    worker = asyncio.ensure_future(run_in_threadpool(work))

    async def items() -> AsyncGenerator[Any, None]:
        next_ping: float | None = None  # none before the first item: until then the answer has not started
        try:
            while True:
                now = time.monotonic()
                if next_ping is not None and ping_interval is not None and now >= next_ping:
                    next_ping = now + ping_interval
                    yield PING
                    continue
                wake = deadline if next_ping is None else min(deadline, next_ping)
                try:
                    item = await asyncio.wait_for(queue.get(), max(0.0, wake - now))
                except asyncio.TimeoutError:
                    if time.monotonic() < deadline:
                        continue  # a ping is due
                    raise APIError(504, f"the request took longer than request_timeout ({timeout:g} s) and was "
                                   "cancelled", code="timeout") from None
                if isinstance(item, _End):
                    if item.error is not None:
                        raise item.error
                    return
                yield item
                if next_ping is None and ping_interval is not None:
                    next_ping = time.monotonic() + ping_interval
        finally:
            scope.cancel()
            await asyncio.wait({worker})

    return items()


def sse(data: Any) -> bytes:
    """One server-sent event carrying ``data`` as JSON."""
    return b"data: " + json.dumps(data, ensure_ascii=False).encode("utf-8") + b"\n\n"


def named_sse(event: tuple[str, Any]) -> bytes:
    """One server-sent event with its name (``event: <name>``), as Anthropic's clients dispatch on it."""
    name, data = event
    return f"event: {name}\n".encode() + sse(data)


DONE = b"data: [DONE]\n\n"


def ping_event() -> bytes:
    """A ping as sse-starlette writes it: a comment with the time (``: ping - 2025-01-01 12:00:00+00:00``)."""
    return f": ping - {datetime.now(timezone.utc)}\n\n".encode()


@dataclass(frozen=True)
class EventFormat:
    """How a route writes its stream: each shaped event (``encode``), an error after the stream started
    (``error(status, message, param, code)``: the status line is gone by then), a ping, and what ends it."""

    encode: Callable[[Any], bytes]
    error: Callable[[int, str, str | None, str | None], bytes]
    ping: Callable[[], bytes]
    done: bytes | None


#: OpenAI's streams: JSON data events, OpenAI's error object, ``[DONE]`` at the end
OPENAI = EventFormat(sse, lambda *error: sse(error_body(*error)), ping_event, DONE)
#: llama-server's own routes: the same events, ending with nothing
LLAMA_SERVER = EventFormat(sse, OPENAI.error, ping_event, None)


class EngineFacts(NamedTuple):
    """A call's prompt tokens; how many of them came from memory (a reused prefix); how many of those it
    evaluated a cache breakpoint now keeps in the prompt cache (Anthropic's ``cache_control``); the stop string
    that ended it."""

    n_prompt: int
    n_cached: int
    n_cache_written: int
    stop_string: str | None


@dataclass(frozen=True)
class Served:
    """What a :class:`ResponseView` knows of the call it shapes besides the chunks: its engine requests
    (``scope``), the served model's name and the model."""

    scope: RequestScope
    model: str
    llama: Any

    def engine_facts(self) -> EngineFacts:
        """What the call's engine requests tell that its chunks do not (:class:`EngineFacts`)."""
        requests = self.scope.requests
        if not requests:
            return EngineFacts(0, 0, 0, None)
        first, last = requests[0], requests[-1]
        return EngineFacts(len(first.prompt), max(0, len(first.prompt) - first.n_prompt_evaluated),
                           first.n_prompt_pinned, last.stop_string)



class ResponseView(Protocol):
    """A chat answer in another API's shapes (Anthropic's message, OpenAI's response): the shaper of a
    stream's chunks, a whole answer, and how the stream is written."""

    form: EventFormat

    def stream(self, served: Served) -> Callable[[Any], list[Any]]: ...

    def whole(self, answer: dict[str, Any], served: Served) -> Any: ...


async def sse_events(first: Any, rest: AsyncGenerator[Any, None], shape: Callable[[Any], list[Any]],
                     scope: RequestScope, form: EventFormat = OPENAI) -> AsyncIterator[bytes]:
    """The SSE body: each item shaped into zero or more events, written in the route's ``form``, pings
    between them; an error after the stream started is sent as the form's error event.  However it ends (a
    disconnect cancels the task that sends it), the scope's requests are cancelled first, synchronously."""
    try:
        for event in shape(first):
            yield form.encode(event)
        async for item in rest:
            if item is PING:
                yield form.ping()
                continue
            for event in shape(item):
                yield form.encode(event)
    except APIError as exc:
        yield form.error(exc.status, exc.message, exc.param, exc.code)
    except ValueError as exc:
        yield form.error(400, value_message(exc), None, None)
    except Exception as exc:  # noqa: BLE001 - the client gets a clean end, the log the details
        yield form.error(500, f"internal error ({type(exc).__name__})", None, None)
    finally:
        scope.cancel()
        await rest.aclose()
    if form.done is not None:
        yield form.done
