"""Scale-out past one machine on Ray Serve: each replica runs this server's app on its own engine.

``pip install 'llama-cpp-server[ray]'``.  A replica is the whole FastAPI app of :func:`create_app` (routes,
guards, SSE, metrics) served through Serve's HTTP proxy, which picks the less loaded of two replicas for
each request.  The app is built on the replica (``__serve_build_asgi_app__``, Ray 2.60), since its model
pool holds a loaded ``Llama`` that cannot be pickled, and the model is loaded in the replica's constructor:
Serve routes to a replica only once its constructor and first health check pass, so a replica never takes
traffic while loading, and one whose model fails to load fails to start (and is retried by Serve).

Sizing, per replica: ``max_ongoing_requests = n_seq_max + min(max_queue, n_seq_max)``, the model's
sequences plus as many waiting in its engine so that a freed sequence is refilled at once; requests past
that wait in Serve's queue (``max_queued_requests = max_queue`` per proxy, then 429 with Retry-After),
where whichever replica frees a place first takes them, instead of being pinned to one busy replica's
queue.  With ``autoscaling``, Serve adds replicas when the ongoing requests per replica pass
``target_ongoing_requests`` (default ``n_seq_max``: a replica is full when all its sequences decode).

Entry points: :func:`deployment` (Python), ``serve run llama_cpp_server.ray_serve:app_builder model=m.gguf
num_replicas=2`` (or a Serve config file naming ``app_builder``), and ``python -m llama_cpp_server.ray_serve
--model m.gguf --num_replicas 2``.  docs/server.md has the recipe.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, AsyncIterator, Mapping, Sequence

from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

try:
    from ray import serve
    from ray.exceptions import RayError
    from ray.serve import Application
    from ray.serve.config import RequestRouterConfig
except ImportError as exc:  # the extra is optional; say how to get it
    raise ImportError("llama_cpp_server.ray_serve needs Ray Serve: pip install 'llama-cpp-server[ray]'") from exc

from .app import create_app
from .responses import REPLICA_HEADER
from .ray_ingress import ForwardedRequest, ResponseStart, RoundRobinRequestRouter, RoutingIngress, run_forwarded
from .prefix_routing import LOAD_BOUND
from .ray_prefix_router import PrefixRequestRouter
from .response_store import home_tag
from .settings import Settings, load_settings

APP_NAME = "llama_cpp_server"  # the Serve application the entry point runs

# the Ray-side options the builders take from flags / `serve run` arguments; everything else is Settings
_RAY_KEYS = ("num_replicas", "min_replicas", "max_replicas", "num_cpus", "num_gpus", "routing", "load_bound")
# the request router of each routing (None: Serve's default, the power of two choices)
ROUTERS: dict[str, type | None] = {"prefix": PrefixRequestRouter, "pow2": None, "round-robin": RoundRobinRequestRouter}
ROUTING_STATS_PERIOD_S = 2.0  # how often Serve asks each replica for its prefixes (its default is 10 s)
INGRESS_MAX_ONGOING = 1000  # the ingress only forwards: the replicas' own limits apply behind it


class _ServeEdge:
    """Between Serve and the app.  Names the replica on every response (``X-Replica``, Serve's replica tag):
    which replica answered, for logs, load checks, and to tell apart the /metrics of replicas read through
    the proxy.  And turns a failed ``receive`` into the ``http.disconnect`` the app expects from an ASGI
    server: once the proxy drops a request whose client went away, Serve's receive raises Ray's
    TaskCancelledError, which would otherwise reach the app's error handler and be logged as a server
    error.  Plain ASGI, so streamed bodies pass through untouched."""

    def __init__(self, app: ASGIApp, replica: str) -> None:
        self.app = app
        self.header = (REPLICA_HEADER.lower().encode("latin-1"), replica.encode("latin-1"))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def receive_or_disconnect() -> Message:
            try:
                return await receive()
            except RayError:
                return {"type": "http.disconnect"}

        async def send_named(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), self.header]}
            await send(message)

        await self.app(scope, receive_or_disconnect, send_named)


async def _get(app: ASGIApp, path: str) -> tuple[int, bytes]:
    """GET ``path`` from ``app`` in-process: the status and body (health checks reuse the app's own route)."""
    status, body = 0, bytearray()
    async for part in run_forwarded(app, ForwardedRequest("GET", path, b"", (), b"")):
        if isinstance(part, ResponseStart):
            status = part.status
        else:
            body.extend(part)
    return status, bytes(body)


@serve.deployment(name="llama_cpp_server")
@serve.ingress()
class LlamaServer:
    """One replica: this server's app for ``settings``, its first model loaded before Serve routes to it."""

    async def __init__(self, settings: Settings) -> None:  # type: ignore[misc]  # Serve awaits a replica's async __init__
        app = create_app(settings)
        pool = app.state.pool
        # the app's lifespan (which Serve runs after this) would load in the background, but Serve's first
        # health check comes right after startup and a replica failing it is a failed start: load here
        await pool.warm_up()
        if pool.failure is not None:
            pool.close()
            raise RuntimeError(f"loading {pool.names[0]!r} failed: {pool.failure}")
        replica = serve.get_replica_context().replica_tag  # (its replica id's unique_id, as a router sees it)
        # the responses this replica stores carry its tag, so a router sends their continuations here
        app.state.responses.home = home_tag(replica)
        app.add_middleware(_ServeEdge, replica=replica)
        self.server_app = app

    async def forward(self, request: ForwardedRequest, llama_cpp_route: Any = None,
                      ) -> AsyncIterator[ResponseStart | bytes]:
        """A request the routing ingress sends (:mod:`.ray_ingress`), answered by the app as an HTTP request
        is: its :class:`ResponseStart`, then its body as it is made.  ``llama_cpp_route`` is for the request
        router (:mod:`.ray_prefix_router`), which read it before the request got here."""
        async for part in run_forwarded(self.server_app, request):
            yield part

    def __serve_build_asgi_app__(self) -> FastAPI:
        """The app Serve runs (its lifespan, which closes the model pool at shutdown, included)."""
        return self.server_app

    def record_routing_stats(self) -> dict[str, Any]:
        """Ray Serve's routing statistics of this replica (its controller polls this; a request router reads
        them as ``RunningReplica.routing_stats``): what each loaded model's engine can reuse, as ``GET
        /prefixes`` answers it (chained block hashes, docs/server.md), so that a router can send a prompt
        where its prefix already is.  A sleeping model is not woken for it, and one unloaded meanwhile is
        left out."""
        prefixes = []
        for served in self.server_app.state.pool.loaded:
            try:
                summary = served.llama.prefix_summary()
            except RuntimeError:  # closed since the list was taken (unloaded, put to sleep)
                continue
            prefixes.append({"name": served.name, **summary.to_json()})
        return {"prefixes": prefixes}

    async def check_health(self) -> None:
        """Serve's health check: the app's own ``/health`` route, which fails while the model is not ready or
        after it failed; Serve replaces a replica whose checks keep failing."""
        status, body = await _get(self.server_app, "/health")
        if status != 200:
            raise RuntimeError(f"/health answered {status}: {body.decode('utf-8', 'replace')}")


def deployment(settings: Settings, *, num_replicas: int | None = None, autoscaling: Mapping[str, Any] | None = None,
               ray_actor_options: Mapping[str, Any] | None = None, routing: str | None = None,
               load_bound: int = LOAD_BOUND, routing_stats_period_s: float = ROUTING_STATS_PERIOD_S,
               **options: Any) -> Application:
    """The bound Serve application for ``settings``: ``num_replicas`` replicas (default 1), or Serve's
    ``autoscaling`` config (``target_ongoing_requests`` defaults to the model's ``n_seq_max``; give
    ``min_replicas`` and ``max_replicas``).  ``ray_actor_options`` are each replica's resources (e.g.
    ``{"num_cpus": 4, "num_gpus": 1}``: Ray places replicas by them and gives each its GPUs; without
    ``num_gpus`` Ray does not count a replica's GPU use, so replicas on one node would share its GPUs);
    other ``options`` go to ``Deployment.options`` and win over the sizing described in the module's
    docstring (``max_ongoing_requests``, ``max_queued_requests``, ``health_check_period_s``...).

    ``routing`` puts the routing ingress (:mod:`.ray_ingress`) in front of the replicas: ``"prefix"`` (the
    replica holding the prompt's prefix, :mod:`.prefix_routing`; ``load_bound`` requests in flight beyond the
    least loaded replica at most, the replicas' prefixes read every ``routing_stats_period_s``), ``"pow2"``
    (Serve's power of two choices) or ``"round-robin"``.  None (the default): no ingress, Serve's proxy routes
    to the replicas by queue length."""
    if num_replicas is not None and autoscaling is not None:
        raise ValueError("num_replicas and autoscaling exclude each other (autoscaling has min_replicas, "
                         "max_replicas and initial_replicas)")
    n_seq_max = settings.model_list()[0].n_seq_max  # the first model: the one a replica loads at start
    sizing: dict[str, Any] = {
        "max_ongoing_requests": n_seq_max + min(settings.max_queue, n_seq_max),
        "max_queued_requests": max(1, settings.max_queue),  # Serve's least is 1
        "backpressure_config": {"status_code": 429, "retry_after_s": 1},
    }
    if autoscaling is not None:
        sizing["autoscaling_config"] = {"target_ongoing_requests": n_seq_max, **autoscaling}
    else:
        sizing["num_replicas"] = 1 if num_replicas is None else num_replicas
    if ray_actor_options is not None:
        sizing["ray_actor_options"] = dict(ray_actor_options)
    if routing is None:
        return LlamaServer.options(**{**sizing, **options}).bind(settings)  # type: ignore[attr-defined]  # a Deployment, not the class
    if routing not in ROUTERS:
        raise ValueError(f"routing must be one of {', '.join(ROUTERS)}, got {routing!r}")
    router: dict[str, Any] = {"request_routing_stats_period_s": routing_stats_period_s}
    if ROUTERS[routing] is not None:
        router["request_router_class"] = ROUTERS[routing]
    if routing == "prefix":
        router["request_router_kwargs"] = {"load_bound": load_bound, "sent_seconds": 2 * routing_stats_period_s}
    sizing["request_router_config"] = RequestRouterConfig(**router)
    server = LlamaServer.options(**{**sizing, **options}).bind(settings)  # type: ignore[attr-defined]
    # the ingress reserves no CPU: it waits on the network, and a CPU it held would be one no replica can have
    return RoutingIngress.options(max_ongoing_requests=INGRESS_MAX_ONGOING,  # type: ignore[attr-defined]
                                  ray_actor_options={"num_cpus": 0}).bind(server, settings)


def _build(ray_args: Mapping[str, Any], settings: Settings) -> Application:
    """The application for the Ray-side arguments of the command line or ``serve run``, and the settings."""
    autoscaling = None
    if ray_args.get("max_replicas") is not None:
        if ray_args.get("num_replicas") is not None:
            raise ValueError("give num_replicas (fixed) or min_replicas/max_replicas (autoscaling), not both")
        autoscaling = {"min_replicas": int(ray_args.get("min_replicas") or 1),
                       "max_replicas": int(ray_args["max_replicas"])}
    elif ray_args.get("min_replicas") is not None:
        raise ValueError("min_replicas goes with max_replicas (autoscaling)")
    resources = {k: float(ray_args[k]) for k in ("num_cpus", "num_gpus") if ray_args.get(k) is not None}
    num_replicas = ray_args.get("num_replicas")
    routing = {"load_bound": int(ray_args["load_bound"])} if ray_args.get("load_bound") is not None else {}
    return deployment(settings, num_replicas=None if num_replicas is None else int(num_replicas),
                      autoscaling=autoscaling, ray_actor_options=resources or None, routing=ray_args.get("routing"),
                      **routing)


def app_builder(args: dict[str, Any]) -> Application:
    """``serve run llama_cpp_server.ray_serve:app_builder model=m.gguf n_seq_max=8 num_replicas=2``, or a
    Serve config file's ``args``: the Ray-side keys (num_replicas, min_replicas, max_replicas, num_cpus,
    num_gpus per replica), the rest read as the server's flags (``config_file=server.yaml`` included; a
    config file's lists and mappings are passed on as JSON).  Serve's proxy address is Serve's own setting
    (``serve start --http-host --http-port``, a config file's ``http_options``), not ``host``/``port``."""
    ray_args = {k: args[k] for k in _RAY_KEYS if k in args}
    argv = [item for key, value in args.items() if key not in _RAY_KEYS
            for item in (f"--{key}", value if isinstance(value, str) else json.dumps(value))]
    return _build(ray_args, load_settings(argv))


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m llama_cpp_server.ray_serve --model m.gguf --num_replicas 2``: the server's flags, plus
    the replicas' (``--num_replicas``, or ``--min_replicas``/``--max_replicas`` to autoscale; ``--num_cpus``,
    ``--num_gpus`` per replica) and ``--address`` (a Ray cluster; default: ``RAY_ADDRESS`` or a local one).
    Serve's HTTP proxy listens on ``--host``/``--port``; runs until interrupted."""
    import ray

    parser = argparse.ArgumentParser(prog="python -m llama_cpp_server.ray_serve", add_help=False,
                                     description="Ray's flags (below); the server's flags follow.")
    parser.add_argument("--address", help="the Ray cluster (default: RAY_ADDRESS, or start a local one)")
    parser.add_argument("--num_replicas", type=int, help="a fixed number of replicas (default 1)")
    parser.add_argument("--min_replicas", type=int, help="autoscaling: the fewest replicas (default 1)")
    parser.add_argument("--max_replicas", type=int, help="autoscaling: the most replicas")
    parser.add_argument("--num_cpus", type=float, help="CPUs Ray reserves per replica")
    parser.add_argument("--num_gpus", type=float, help="GPUs Ray reserves per replica and makes visible to it")
    parser.add_argument("--routing", choices=list(ROUTERS),
                        help="put the routing ingress in front of the replicas: prefix (the replica holding the "
                             "prompt's prefix), pow2 or round-robin (default: none, Serve's proxy by queue length)")
    parser.add_argument("--load_bound", type=int, help=f"prefix routing: requests in flight a replica holding "
                                                       f"the prefix may have beyond the least loaded one "
                                                       f"(default {LOAD_BOUND})")
    args = list(sys.argv[1:] if argv is None else argv)
    if {"-h", "--help"} & set(args):
        print(parser.format_help())  # load_settings prints the server's flags and exits
    ray_args, rest = parser.parse_known_args(args)
    settings = load_settings(rest)
    try:
        app = _build(vars(ray_args), settings)
    except ValueError as exc:
        parser.error(str(exc))
    ray.init(address=ray_args.address)
    serve.start(http_options={"host": settings.host, "port": settings.port})
    try:
        serve.run(app, name=APP_NAME, blocking=True)
    except KeyboardInterrupt:
        serve.delete(APP_NAME)  # this application only: a shared cluster's other applications stay
    return 0


if __name__ == "__main__":
    # the importable module's main: Ray pickles classes defined in __main__ by value, those of a module by name
    from llama_cpp_server.ray_serve import main as module_main

    sys.exit(module_main())
