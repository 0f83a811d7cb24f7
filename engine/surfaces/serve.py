"""``vramwise serve``: a local web page and a JSON API over the library (Starlette, served by uvicorn).

The API mirrors the command line's ``--json`` output, computed by the same functions:

========================  ======  ===========================================================
path                      method  answer (the CLI command whose ``--json`` it equals)
========================  ======  ===========================================================
``/api/estimate``         POST    ``estimate --json`` (``gpus``: the per-GPU counts; with a strategy, the one number of
                                  GPUs it runs on, as ``world_size``)
``/api/explain``          POST    ``explain --json``
``/api/fit``              POST    ``fit --json`` (``gpu`` required)
``/api/compare``          POST    ``compare --json``
``/api/recipe``           POST    an uploaded training recipe read: model, settings, profile, origins, warnings
``/api/local?...``        POST    ``fit MODEL.gguf --profile llama.cpp --json`` (or ``--preset ollama``) of a GGUF file
                                  the page read: its header's bytes as the body, the file's name, size, the GPU and the
                                  settings in the query (:mod:`vramwise.surfaces.serve_local`)
``/api/families``         GET     ``families --json``
``/api/formats``          GET     the recipe formats: format, framework, version, description, part (a part of a recipe)
``/api/gpus``             GET     ``{"catalog": [...], "local": gpus --json}``
``/api/catalog?q=``       GET     ``catalog QUERY --json``
``/api/settings``         GET     the settings table (names, defaults, choices, methods), the default profile, the
                                  serving profiles, the local-inference profiles and presets: the page's form
``/api/address?...``      GET     the page's address read as the CLI reads the same values (GPU and model aliases, sizes,
                                  setting spellings): each field's canonical value or its error, and the unknown fields
========================  ======  ===========================================================

A POST body is one JSON object: ``model`` (a name in the model catalog) or ``config`` (a config.json
object) or ``config_text`` (a config.json file's text), ``profile``, any setting of
:data:`vramwise.SETTINGS` by name, and the command's own fields (``gpus``, ``gpu``, ``headroom``,
``seq_lens``, ``methods``, ``profiles``). Instead of a model, a body may upload a training recipe:
``recipe`` (a list of ``{name, text}``, the main file first, then a DeepSpeed or accelerate config...)
and ``framework`` when its content does not tell; its model must be in the catalog (or come as
``config``/``config_text``), the body's settings override its own, and the answer holds ``recipe``
(what was read, with origins and warnings). Under a serving profile (``"profile": "vllm"``, the GPU as
``gpu`` and vLLM's settings by name) ``/api/fit`` answers the serving fit
(:class:`vramwise.answers.serving.ServingFit`). Bad input of any kind is answered 4xx with
``{"error": "<the library's one-line message>"}``; an unexpected failure 500 with one line and no
traceback.

What the server does not do, by design: read a file or fetch a model named by a request (model
names are looked up in the catalog only), run remote code, answer other origins' scripts (no CORS
headers; requests whose ``Host`` is not this machine are refused while it listens on loopback),
accept a body over :data:`MAX_BODY_BYTES` (a GGUF header to ``/api/local``: over
:data:`~vramwise.surfaces.serve_local.MAX_HEADER_BYTES`), or wait more than :data:`BODY_TIMEOUT` seconds for a request
or :data:`COMPUTE_TIMEOUT` seconds for an answer. Connections are guarded by
:mod:`vramwise.surfaces.serve_guard`: silent, stalled and idle sockets are closed at their deadline or to
make room for a new connection, so they cannot starve it; at most :data:`WORKERS` answers are computed at
once and :data:`QUEUE` wait, and a request beyond that is answered ``503`` with ``Retry-After`` at once.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import sys
from typing import Any, Callable

from vramwise.errors import ConfigError, InternalError, MissingDependencyError, SettingsError, VramwiseError
from vramwise.profiles.settings import COMPARED_METHODS, DEFAULT_PROFILE
from vramwise.rules.datafiles import package_files
from vramwise.surfaces import request as _request
from vramwise.surfaces import serve_address as _address
from vramwise.surfaces.serve_local import MAX_HEADER_BYTES, MoreBytes, api_local

__all__ = ["create_app", "make_server", "serve", "default_limits", "MAX_BODY_BYTES", "BODY_TIMEOUT", "COMPUTE_TIMEOUT",
           "WORKERS", "QUEUE", "MAX_CONNECTIONS", "KEEP_ALIVE"]

#: the largest request body (a config.json upload inside it): 1 MiB
MAX_BODY_BYTES = 2**20
#: seconds to receive a whole request, headers and body, from the connection's opening (or the previous answer)
BODY_TIMEOUT = 10.0
#: seconds to compute an answer (estimates take microseconds; a full fit milliseconds)
COMPUTE_TIMEOUT = 20.0
#: answers computed at once (more wait their turn)
WORKERS = 4
#: requests waiting for a worker at most; more are answered 503 with Retry-After at once
QUEUE = 64
#: open connections at most (the one receiving the longest makes room for a new one)
MAX_CONNECTIONS = 128
#: seconds an idle kept-alive connection stays open
KEEP_ALIVE = 5.0
#: the Retry-After, in seconds, of a request refused because the queue is full
RETRY_AFTER = 1


def default_limits():
    """The server's :class:`~vramwise.surfaces.serve_guard.Limits` from this module's constants."""
    from vramwise.surfaces.serve_guard import Limits

    return Limits(request_deadline=BODY_TIMEOUT, keep_alive=KEEP_ALIVE, answer_deadline=COMPUTE_TIMEOUT + 10.0,
                  max_connections=MAX_CONNECTIONS, workers=WORKERS, queue=QUEUE, compute_timeout=COMPUTE_TIMEOUT)
_MAX_LIST = _request.MAX_LIST
_LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
_STATIC = {"app.js": "text/javascript; charset=utf-8", "serving.js": "text/javascript; charset=utf-8",
           "local.js": "text/javascript; charset=utf-8",
           "app.css": "text/css; charset=utf-8"}


class _Bad(Exception):
    """A request the API refuses (status and one-line message)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def _need_starlette():
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ModuleNotFoundError:
        raise MissingDependencyError("vramwise serve needs Starlette and uvicorn: pip install 'vramwise[serve]'",
                                     extra="serve") from None


def _one_line(text: Any, limit: int = 2000) -> str:
    return (" ".join(str(text).split()) or "(no message)")[:limit]


def is_loopback(host: str) -> bool:
    h = host.strip("[]").lower()
    if h == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


# -- reading requests ------------------------------------------------------------------------

#: Parts of an uploaded recipe a request may hold.
MAX_RECIPE_PARTS = _request.MAX_RECIPE_PARTS


def _with_recipe(data: dict, recipe, launch=None, est=None) -> dict:
    """The answer with the recipe read under "recipe" and the launch line under "launch" (where there are);
    given the recipe's estimate, the recipe's ``shown`` values name the modules it adapts (as the CLI's table)."""
    if recipe is not None:
        data = {**data, "recipe": recipe.to_dict(est.lora_targets if est is not None else None)}
    return data if launch is None else {**data, "launch": launch.to_dict()}


def _int_field(body: dict, name: str, default, low: int, high: int):
    v = body.get(name, default)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
        raise SettingsError(f"{name} must be a whole number from {low:,} to {high:,}, got {str(v)[:60]}")
    return v


def _int_list(body: dict, name: str, default, low: int, high: int):
    v = body.get(name, default)
    if v is None:
        return None
    if isinstance(v, int) and not isinstance(v, bool):
        v = [v]
    if not isinstance(v, list) or not v or len(v) > _MAX_LIST:
        raise SettingsError(f"{name} must be a list of 1 to {_MAX_LIST} whole numbers")
    for x in v:
        if isinstance(x, bool) or not isinstance(x, int) or not low <= x <= high:
            raise SettingsError(f"{name} must hold whole numbers from {low:,} to {high:,}, got {str(x)[:60]}")
    return v


def _str_list(body: dict, name: str, default):
    v = body.get(name, default)
    if isinstance(v, str):
        v = [x.strip() for x in v.split(",") if x.strip()]
    if not isinstance(v, list) or not v or len(v) > 16 or not all(isinstance(x, str) and x for x in v):
        raise SettingsError(f"{name} must be a list of 1 to 16 names")
    return list(dict.fromkeys(v))


def _gpu_field(body: dict, required: bool):
    g = body.get("gpu")
    if g is None:
        if required:
            raise SettingsError("gpu is required: a catalog name (RTX 4090, H100), a size (24GiB) or local")
        return None
    if isinstance(g, bool) or not isinstance(g, (str, int)) or (isinstance(g, str) and len(g) > 100):
        raise SettingsError("gpu must be a GPU name, a size such as 24GiB, a number of bytes or local")
    return g


# -- the answers (run in worker threads) -----------------------------------------------------

def api_estimate(body: dict) -> dict:
    from vramwise.surfaces.views import estimate_view

    gpus = _int_list(body, "gpus", [1, 2, 4, 8], 1, 1 << 20)
    req = _request.read_body(body, ("gpus",))
    if body.get("gpus") is not None:
        # as `estimate --gpus N --strategy S`: the number of GPUs the strategy runs on, never one GPU's answer
        req = req.with_strategy_gpus(gpus, body.get("world_size"), _request.API_NAMES)
    est = req.estimate()
    if body.get("gpus") is not None:
        _request.refuse_serving_gpus(est, _request.API_NAMES)
    return _with_recipe(estimate_view(est, gpus), req.recipe, req.launch, est)


def api_explain(body: dict) -> dict:
    from vramwise.surfaces.views import explain_view

    req = _request.read_body(body)
    est = req.estimate()
    return _with_recipe(explain_view(est), req.recipe, req.launch, est)


def api_fit(body: dict) -> dict:
    from vramwise.answers.fit import fit

    req = _request.read_body(body, ("gpu", "gpus", "headroom", "seq_lens"))
    headroom = body.get("headroom")  # absent or null: the device band's p90 shortfall (answers/fit.py)
    if headroom is not None and (isinstance(headroom, bool) or not isinstance(headroom, (int, float))):
        raise SettingsError("headroom must be a share from 0 to 0.9")
    gpus, req = req.with_launch_gpus(_int_field(body, "gpus", None, 1, 1024), body.get("world_size") is not None)
    model, settings = req.model, req.settings_dict()
    if req.recipe is not None:  # the recipe itself, so that advice is written in its keys
        from dataclasses import replace

        model, settings = replace(req.recipe, model=model, settings=settings, profile=req.profile), {}
    f = fit(model, gpu=_gpu_field(body, True), gpus=gpus,
            headroom=None if headroom is None else float(headroom), seq_lens=_int_list(body, "seq_lens", None, 1, 1 << 25), profile=req.profile,
            **settings)
    return _with_recipe(f.to_dict(), req.recipe, req.launch)


def api_compare(body: dict) -> dict:
    from vramwise.answers.fit import compare

    req = _request.read_body(body, ("gpu", "gpus", "methods", "profiles"))
    settings = req.settings_dict(("method",))  # a recipe's: compare sets each column's
    if body.get("method") is not None:  # as on the command line: never dropped unsaid
        raise SettingsError("compare's methods are methods (a column each): send methods, not method")
    methods = _str_list(body, "methods", list(COMPARED_METHODS))
    profiles = _str_list(body, "profiles", [req.profile])
    if body.get("profiles") is not None and body.get("profile") is not None and body["profile"] not in profiles:
        raise SettingsError(f"compare's profiles are profiles (a column each): profile {str(body['profile'])[:60]!r} is "
                            "not among them; add it there, or leave profile out")
    gpu = _gpu_field(body, False)
    gpus = _int_field(body, "gpus", None, 1, 1024)
    if gpus is not None and gpu is None:
        raise SettingsError("gpus needs gpu (the kind of GPU to count)")
    c = compare(req.model, methods=methods, profiles=profiles, gpu=gpu, gpus=gpus, **settings)
    return _with_recipe(c.to_dict(), req.recipe, req.launch)


def api_recipe(body: dict) -> dict:
    """An uploaded recipe read: its model, settings, profile, origins and warnings (the page fills its form)."""
    unknown = sorted(k for k in body if k not in ("recipe", "framework"))
    if unknown or body.get("recipe") is None:
        raise _Bad(400, "send recipe (a list of {name, text}) and, if its content does not tell, framework")
    recipe = _request.read_body_recipe(body)
    data = recipe.to_dict()
    from vramwise.inputs.catalog import find_model

    found = find_model(recipe.model) if isinstance(recipe.model, str) else None
    data["catalog_model"] = found.id if found is not None else None
    return data


def api_families(_query: dict) -> dict:
    from vramwise.surfaces.views import families_view

    return families_view()


def api_gpus(_query: dict) -> dict:
    from vramwise.gpus.discovery import discover_gpus
    from vramwise.inputs.gpu_catalog import list_gpus, unified_budget

    # cuda_total_bytes: what CUDA reports where the catalog knows it, the size a serving profile's figures use;
    # a unified-memory entry (memory_bytes: the system's): gpu_may_use_bytes, what its GPU may use, and that line
    catalog = []
    for g in list_gpus():
        budget = unified_budget(g)
        catalog.append({"id": g.id, "name": g.name, "vendor": g.vendor, "memory_bytes": g.memory_bytes,
                        "source": g.source, "aliases": list(g.aliases), "cuda_total_bytes": g.cuda_total_bytes,
                        **({"unified": True, "gpu_may_use_bytes": budget.gpu_bytes, "unified_memory": budget.line()}
                           if budget else {})})
    return {"catalog": catalog, "local": discover_gpus().to_dict()}


def api_catalog(query: dict) -> dict:
    from vramwise.inputs.catalog import list_models

    q = query.get("q", "")
    if len(q) > 200:
        raise SettingsError("q: at most 200 characters")
    return {"query": q, "models": [m.to_dict() for m in list_models(q)]}


def api_formats(_query: dict) -> dict:
    from vramwise.recipes import bundled_formats

    return {"formats": [{"format": f.name, "framework": f.framework, "version": f.version, "description": f.description,
                         "part": f.part} for f in sorted(bundled_formats(), key=lambda f: f.name)]}


def api_settings(_query: dict) -> dict:
    from vramwise.estimation.registry import Registry
    from vramwise.profiles.settings import SETTINGS

    from vramwise.answers.offload import is_local
    from vramwise.surfaces.serve_local import presets

    reg = Registry.default()
    return {"settings": [{"name": s.name, "default": s.default, "type": s.cli_type, "choices": list(s.choices),
                          "applies_to": list(s.applies_to), "help": s.help} for s in SETTINGS],
            "default_profile": DEFAULT_PROFILE,
            # the profiles of a serving engine (their fit answers context and concurrency: the page's serving mode)
            "serving_profiles": [p for p in reg.profile_names() if reg.profile(p).serving is not None],
            # the profiles of a GGUF file on one GPU and the host, and the runtimes' presets (the local mode)
            "local_profiles": [p for p in reg.profile_names() if is_local(reg.profile(p))],
            "local_presets": presets()}


_POST = {"estimate": api_estimate, "explain": api_explain, "fit": api_fit, "compare": api_compare, "recipe": api_recipe}
_GET = {"families": api_families, "gpus": api_gpus, "catalog": api_catalog, "settings": api_settings,
        "formats": api_formats, "address": _address.read_address}


# -- the application ---------------------------------------------------------------------------

def _web(name: str) -> bytes:
    return package_files("vramwise.surfaces").joinpath("web", name).read_bytes()


def create_app(*, allowed_hosts: tuple | None = _LOOPBACK_NAMES, limits=None):
    """The ASGI application. ``allowed_hosts``: the ``Host`` header names accepted (None: any);
    ``limits``: the workers, queue and compute timeout (:func:`default_limits` when None)."""
    _need_starlette()
    import anyio
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    limits = limits or default_limits()
    limiter = anyio.CapacityLimiter(limits.workers)
    admitted = [0]  # requests computing or waiting for a worker (the event loop's thread alone counts them)
    assets = {name: _web(name) for name in ("index.html", *_STATIC)}

    def answer(status: int, data: Any, headers: dict | None = None) -> Response:
        try:
            body = json.dumps(data, allow_nan=False, separators=(",", ":")).encode()
        except (TypeError, ValueError) as e:  # a figure that is not JSON: a bug, reported in one line
            status, body = 500, json.dumps({"error": f"internal error: {type(e).__name__}: {_one_line(e)}"}).encode()
        return Response(body, status_code=status, media_type="application/json", headers=headers)

    def error(status: int, message: str, retry_after: int | None = None, extra: dict | None = None) -> Response:
        return answer(status, {"error": _one_line(message), **(extra or {})},
                      None if retry_after is None else {"Retry-After": str(retry_after)})

    async def compute(fn: Callable, arg: dict) -> Response:
        if admitted[0] >= limits.workers + limits.queue:
            return error(503, f"the server is busy ({limits.workers} answers computing, {limits.queue} waiting); "
                              f"try again in {RETRY_AFTER} s", retry_after=RETRY_AFTER)
        admitted[0] += 1
        try:
            with anyio.fail_after(limits.compute_timeout):
                data = await anyio.to_thread.run_sync(fn, arg, limiter=limiter, abandon_on_cancel=True)
        except TimeoutError:
            return error(503, f"the answer took more than {limits.compute_timeout:g} s; try fewer or smaller settings",
                         retry_after=RETRY_AFTER)
        except _Bad as e:
            return error(e.status, str(e))
        except MoreBytes as e:  # the page sends a longer slice of the file
            return error(400, str(e), extra={"more": True})
        except InternalError as e:
            return error(500, f"internal error: {type(e).__name__}: {e}")
        except VramwiseError as e:
            problems = getattr(e, "problems", None)
            return error(400, "; ".join(problems) if problems else str(e))
        except RecursionError:
            return error(400, "the request nests too deep")
        except Exception as e:  # noqa: BLE001 - a bug: one line, never a traceback
            return error(500, f"internal error: {type(e).__name__}: {_one_line(e, 500)}")
        finally:
            admitted[0] -= 1
        return answer(200, data)

    async def read_bytes(request: Request, limit: int, words: str) -> bytes:
        """The request's body, refused (413) past ``limit`` bytes (``words``: the limit in words)."""
        length = request.headers.get("content-length")
        if length is not None:
            if not length.isdigit():
                raise _Bad(400, "invalid Content-Length")
            if int(length) > limit:
                raise _Bad(413, f"the request body is {int(length):,} bytes; at most {limit:,} ({words}) are accepted")
        chunks, size = [], 0
        try:
            with anyio.fail_after(limits.request_deadline):
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > limit:
                        raise _Bad(413, f"the request body is over {limit:,} bytes ({words})")
                    chunks.append(chunk)
        except TimeoutError:
            raise _Bad(408, f"the request body did not arrive within {limits.request_deadline:g} s") from None
        return b"".join(chunks)

    async def read_body(request: Request) -> dict:
        ctype = request.headers.get("content-type", "application/json").split(";")[0].strip().lower()
        if ctype not in ("application/json", "text/plain", ""):
            raise _Bad(415, f"send the request as application/json, not {ctype[:60]}")
        raw = await read_bytes(request, MAX_BODY_BYTES, "1 MiB")
        from vramwise.inputs.config import parse_json_bytes

        if not raw.strip():
            raise _Bad(400, "the request body is empty; send a JSON object")
        try:
            return parse_json_bytes(raw, "request body", what="request", limit=MAX_BODY_BYTES)
        except ConfigError as e:
            raise _Bad(400, str(e)) from None

    async def post(request: Request) -> Response:
        fn = _POST.get(request.path_params["name"])
        if fn is None:
            return error(404, f"no such API: {request.url.path[:100]}")
        try:
            body = await read_body(request)
        except _Bad as e:
            return error(e.status, str(e))
        return await compute(fn, body)

    async def local(request: Request) -> Response:
        """POST /api/local: a GGUF header's bytes (the body) and the query's fields (serve_local)."""
        ctype = request.headers.get("content-type", "application/octet-stream").split(";")[0].strip().lower()
        if ctype != "application/octet-stream":
            return error(415, f"send the GGUF file's first bytes as application/octet-stream, not {ctype[:60]}")
        try:
            data = await read_bytes(request, MAX_HEADER_BYTES, "a GGUF header of 64 MiB")
        except _Bad as e:
            return error(e.status, str(e))
        query = dict(request.query_params)
        if len(query) > _address.MAX_FIELDS:
            return error(400, f"at most {_address.MAX_FIELDS} fields in the query")
        return await compute(api_local, {"query": query, "data": data})

    async def get(request: Request) -> Response:
        fn = _GET.get(request.path_params["name"])
        if fn is None:
            if request.path_params["name"] in _POST or request.path_params["name"] == "local":
                return error(405, f"{request.url.path} takes a POST with a JSON body")
            return error(404, f"no such API: {request.url.path[:100]}")
        return await compute(fn, dict(request.query_params))

    async def page(request: Request) -> Response:
        return Response(assets["index.html"], media_type="text/html; charset=utf-8",
                        headers={"Cache-Control": "no-cache"})

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in _STATIC:
            return error(404, "not found")
        return Response(assets[name], media_type=_STATIC[name], headers={"Cache-Control": "no-cache"})

    async def not_found(request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 404)
        return error(status, "method not allowed" if status == 405 else f"not found: {request.url.path[:100]}")

    async def server_error(request: Request, exc: Exception) -> Response:
        return error(500, f"internal error: {type(exc).__name__}")

    app = Starlette(
        routes=[
            Route("/", page, methods=["GET"]),
            Route("/static/{name}", static, methods=["GET"]),
            Route("/api/local", local, methods=["POST"]),
            Route("/api/{name}", post, methods=["POST"]),
            Route("/api/{name}", get, methods=["GET"]),
        ],
        exception_handlers={404: not_found, 405: not_found, 500: server_error, Exception: server_error},
    )
    return _Guard(app, allowed_hosts)


class _Guard:
    """ASGI wrapper: the Host check (DNS rebinding), security headers on every answer, and a last
    catch that turns anything unexpected into one line of JSON."""

    def __init__(self, app, allowed_hosts):
        self.app = app
        self.allowed = None if allowed_hosts is None else {h.lower() for h in allowed_hosts}

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if self.allowed is not None:
            host = dict(scope.get("headers") or ()).get(b"host", b"").decode("latin-1").strip().lower()
            name = host[1:host.index("]")] if host.startswith("[") and "]" in host else host.rsplit(":", 1)[0] if host.count(":") == 1 else host
            if name not in self.allowed:
                return await _send_json(send, 421, {"error": "this server answers requests for this machine only "
                                                             "(Host: localhost or a loopback address)"})
        started = False

        async def guarded_send(message):
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() not in (b"server",)]
                headers += [(b"content-security-policy", _CSP.encode()), (b"x-content-type-options", b"nosniff"),
                            (b"referrer-policy", b"no-referrer"), (b"x-frame-options", b"DENY")]
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, guarded_send)
        except Exception as e:  # noqa: BLE001 - never a traceback to the client
            if not started:
                await _send_json(send, 500, {"error": f"internal error: {type(e).__name__}"})


async def _send_json(send, status: int, data: dict) -> None:
    body = json.dumps(data).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"content-security-policy", _CSP.encode()), (b"x-content-type-options", b"nosniff")]})
    await send({"type": "http.response.body", "body": body})


# -- running it --------------------------------------------------------------------------------

def make_server(host: str = "127.0.0.1", port: int = 0, *, limits=None):
    """(uvicorn server, bound socket, URL): bound now, so port 0 gives a free port; call
    ``server.run(sockets=[sock])`` to serve (in a thread for tests). ``limits``: a
    :class:`~vramwise.surfaces.serve_guard.Limits` (:func:`default_limits` when None)."""
    _need_starlette()
    import uvicorn

    from vramwise.surfaces.serve_guard import guarded_protocol

    limits = limits or default_limits()
    loop = is_loopback(host)
    app = create_app(allowed_hosts=_LOOPBACK_NAMES + ((host,) if loop else ()) if loop else None, limits=limits)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on sockets whose proto says TCP; without it each answer
    # (headers, then body) waits for the client's delayed ACK, about 40 ms a request
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as e:
        sock.close()
        raise SettingsError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    sock.listen(256)
    sock.setblocking(False)
    config = uvicorn.Config(
        app, log_level="warning", access_log=False, server_header=False, date_header=False, proxy_headers=False,
        # the connection limit, deadlines and idle timeout are the guard's (serve_guard), not uvicorn's
        # limit_concurrency, which refuses every new request while idle sockets fill it
        http=guarded_protocol(limits), timeout_keep_alive=limits.keep_alive, timeout_graceful_shutdown=3,
        limit_concurrency=None, backlog=256,
        h11_max_incomplete_event_size=64 * 1024, lifespan="off",
    )
    server = uvicorn.Server(config)
    bound = sock.getsockname()
    shown = f"[{bound[0]}]" if family == socket.AF_INET6 else bound[0]
    return server, sock, f"http://{shown}:{bound[1]}/"


def serve(host: str = "127.0.0.1", port: int = 8000, *, open_browser: bool = False, err=None) -> int:
    """Serve until interrupted; returns the exit code."""
    err = err or sys.stderr
    server, sock, url = make_server(host, port)
    if not is_loopback(host):
        err.write(f"vramwise serve: warning: listening on {host}, reachable from other machines; the API has no "
                  "authentication (use the default 127.0.0.1 unless you mean it)\n")
    err.write(f"vramwise serve: {url} (Ctrl-C stops it)\n")
    err.flush()
    if open_browser:
        import webbrowser

        webbrowser.open(url.replace("0.0.0.0", "127.0.0.1"))
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
    return 0
