"""The ASGI app: routes, the origin and key checks, and every error as ``{"error": "one line"}``.

    GET  /               the page (static/index.html; /static/* its CSS and JS)
    POST /translate      LibreTranslate's shape          GET /languages   LibreTranslate's shape
    POST /v1/translate   attncli's own, with attention   GET /v1/model    the runs, how served
    POST /detect         LibreTranslate's shape          GET /health      liveness and the queue
    GET  /spec           the API in OpenAPI 3.0

A handler parses and checks the request (`requests.py`), picks the run that serves its
language pair (`pairs.py`; "auto" detects the language, `language_id.py`), queues it
(`batcher.py`) and waits, without blocking the event loop, for its batch to be decoded
(`served_run.py`). A request the
server will not serve gets a 4xx (or a 503 with Retry-After when the queue is full or the wait
too long) and leaves one line in the log, the access log's: never a traceback, and the server
goes on serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from attncli.core.errors import AttncliError
from attncli.core.text import language_name
from attncli.serve.batcher import Batcher, QueueFull
from attncli.serve.documents import (
    DecodedRequest,
    native_answers,
    native_pages,
    translated_pages,
    translated_texts,
)
from attncli.serve.markup import HtmlDocument, parse_html
from attncli.serve.openapi import openapi_spec
from attncli.serve.pairs import Pairs
from attncli.serve.requests import (
    Limits,
    RequestError,
    TranslateRequest,
    check_native_fields,
    is_auto,
    libretranslate_request,
    native_request,
    parse_body,
    requested_pair,
    texts_of,
)
from attncli.serve.served_run import ServedRun, Settings, Translation, Work

STATIC = Path(__file__).parent / "static"
# The page runs its own script and style only, and talks to this server only.
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
log = logging.getLogger("uvicorn.error")
# "source": "auto": a first language this sure (percent) decides alone (see Service.route_auto)
SURE = 50.0
ALL_LANGUAGES = 1000  # more than the identifier knows: every language, ranked


@dataclass
class ServeOptions:
    """What the serve command decides about requests (its flags)."""

    limits: Limits = field(default_factory=Limits)
    api_key: str | None = None
    cors_origins: list[str] = field(default_factory=list)
    timeout: float = 30.0  # seconds a request may wait for its translation
    hosts: list[str] | None = None  # the Host names answered (None: any; see OriginGuard)


def _error(err: RequestError) -> JSONResponse:
    headers = {"Retry-After": str(err.retry_after)} if err.retry_after is not None else None
    return JSONResponse({"error": err.message}, err.status, headers=headers)


Handler = Callable[[Any, Request], Awaitable[Response]]


def _answers_in_json(handler: Handler) -> Handler:
    """Errors become JSON: a RequestError its status, anything else one log line and a 500."""

    @functools.wraps(handler)
    async def handle(self: Any, request: Request) -> Response:
        try:
            return await handler(self, request)
        except RequestError as err:
            if err.status == 499:  # uvicorn logs no response to a closed connection
                log.info("%s %s: 499 %s", request.method, request.url.path, err.message)
            return _error(err)
        except Exception as err:  # a bug: one line, no traceback, and the server goes on
            log.error("%s %s: %s: %s", request.method, request.url.path, type(err).__name__, err)
            return JSONResponse({"error": f"internal error ({type(err).__name__})"}, 500)

    return handle


async def _disconnected(request: Request) -> None:
    """Returns when the client closes its connection (the body having been read, the next
    ASGI message is the disconnect, or nothing until the response is sent)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _body(request: Request, limit: int) -> bytes:
    """The body, refused with 413 past `limit` bytes (before reading it when it says so)."""
    length = request.headers.get("content-length")
    if length is not None and (not length.isdigit() or int(length) > limit):
        raise RequestError(413, f"the body is over {limit} bytes")
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise RequestError(413, f"the body is over {limit} bytes")
            chunks.append(chunk)
    except ClientDisconnect:  # gone mid-body: not a server error
        raise RequestError(499, "the client went away while sending its request") from None
    return b"".join(chunks)


class OriginGuard:
    """Refuses requests from pages of other origins (403) unless --cors-origin names them.

    A browser says where a request comes from in ``Origin``; the page's own requests come from
    this server's origin. Refusing the others, instead of only withholding CORS headers, keeps
    other sites from spending this server's time, not just from reading its answers.
    """

    def __init__(self, app, allowed: list[str], hosts: list[str] | None = None):
        self.app, self.allowed = app, set(allowed)
        self.hosts = None if hosts is None else {h.lower() for h in hosts}

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            if problem := self._host_problem(headers.get(b"host")):
                await JSONResponse({"error": problem}, 403)(scope, receive, send)
                return
            origin = headers.get(b"origin", b"").decode("latin-1").lower()
            own = f"{scope.get('scheme', 'http')}://{headers.get(b'host', b'').decode('latin-1')}"
            if origin and origin != own.lower() and origin not in self.allowed:
                await JSONResponse({"error": f"cross-origin request from {origin} refused (the "
                                             f"server allows it with --cors-origin {origin})"},
                                   403)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _host_problem(self, host: bytes | None) -> str | None:
        """A server on loopback answers only to loopback names: a page whose own name was
        made to point at 127.0.0.1 (DNS rebinding) sends its own name as Host and its own
        origin, which the origin check alone would take for this server's."""
        if self.hosts is None or host is None:
            return None
        name = host.decode("latin-1").lower()
        name = name.rsplit(":", 1)[0] if not name.endswith("]") else name
        if name in self.hosts:
            return None
        return (f"Host {name} refused: this server on loopback answers to "
                f"{', '.join(sorted(self.hosts))} only")


class _JSONRefusingCORS(CORSMiddleware):
    """Starlette's CORS, its refused preflights answered as every refusal is here:
    {"error": "one line"} (they were plain text)."""

    def preflight_response(self, request_headers) -> Response:
        response = super().preflight_response(request_headers)
        if response.status_code < 400:
            return response
        headers = {k: v for k, v in response.headers.items()
                   if k.lower() not in ("content-length", "content-type")}
        return JSONResponse({"error": f"preflight refused: {response.body.decode()}"},
                            response.status_code, headers=headers)


class _PageFiles(StaticFiles):
    """The page's files, with the page's headers (index.html is among them, and without
    them could be framed or run without its content policy)."""

    async def get_response(self, path: str, scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers.update(PAGE_HEADERS)
        return response


class Service:
    """The handlers, around the runs served, the batcher and the options they share."""

    def __init__(self, pairs: Pairs, batcher: Batcher, options: ServeOptions):
        self.pairs, self.batcher, self.options = pairs, batcher, options
        self.limits = options.limits

    def check_key(self, request: Request, fields: dict[str, Any]) -> None:
        """With --api-key, the key must come as api_key (LibreTranslate's) or a bearer token."""
        if self.options.api_key is None:
            return
        given = fields.get("api_key")
        auth = request.headers.get("authorization", "").encode("latin-1").decode(
            "utf-8", "replace")  # a key's UTF-8 bytes, which the header arrives as
        if auth[:7].lower() == "bearer ":
            given = auth[7:].strip()
        if not isinstance(given, str) or not hmac.compare_digest(
                given.encode("utf-8", "replace"), self.options.api_key.encode("utf-8")):
            raise RequestError(403, "missing or wrong API key (send api_key, or an "
                                    "Authorization: Bearer header)")

    async def fields_of(self, request: Request) -> dict[str, Any]:
        """The request's fields; a body that has not arrived within --timeout is a 408 (a
        stalled upload held its connection, and the server's stop, for ever)."""
        timeout = self.options.timeout
        try:
            body = await asyncio.wait_for(_body(request, self.limits.max_body), timeout)
        except TimeoutError:
            raise RequestError(408, f"the body did not arrive within {timeout:g} s") from None
        fields = parse_body(body, request.headers.get("content-type", ""))
        self.check_key(request, fields)
        return fields

    async def translate(self, k: int, req: TranslateRequest, request: Request
                        ) -> DecodedRequest:
        """Split the request's texts into sentences, queue their pieces for run `k` as one job
        and wait for its batch (see serve/documents.py).

        A client that goes away while its job is queued takes the job out of the queue (it
        was decoded for nobody, and held queue places live clients were refused for)."""
        run = self.pairs.runs[k]
        if req.attention and not run.attention:
            raise RequestError(400, "attention: this server runs CTranslate2, which returns no "
                                    "attention weights (serve with --engine torch for them)")
        plan = run.plan(req.texts)
        src_ids, _ = run.encode(plan.pieces)
        readable = [i for i, ids in enumerate(src_ids) if len(ids) > 1]  # more than EOS
        found: list[Translation | None] = [None] * len(src_ids)
        if readable:
            ids = [src_ids[i] for i in readable]
            future = self._submit(k, req, ids)
            for i, translation in zip(readable, await self.answer(future, request),
                                      strict=True):
                found[i] = translation
        return DecodedRequest(plan, src_ids, found)

    async def translate_pages(self, k: int, req: TranslateRequest, request: Request
                              ) -> list[str]:
        """HTML texts translated block by block, each page rebuilt (serve/markup.py)."""
        run = self.pairs.runs[k]
        pages = [parse_html(text) for text in req.texts]
        decoded = await self.translate(k, self._blocks(req, pages, run), request)
        return translated_pages(run, pages, decoded)

    @staticmethod
    def _blocks(req: TranslateRequest, pages: list[HtmlDocument], run: ServedRun
                ) -> TranslateRequest:
        """The request for the pages' blocks of text, with the cross-attention that places
        their inline tags where the engine gives it."""
        return replace(req, texts=[block.text for page in pages for block in page.blocks],
                       attention=req.attention or run.attention)

    def _submit(self, k: int, req: TranslateRequest, src_ids: list[list[int]]):
        """Queue the sentences of a request as one job: a 400 when they alone are more than
        the queue can ever hold (no retry could help), a 503 while it is too full for them."""
        if len(src_ids) > self.batcher.max_queue:
            raise RequestError(400, f"{len(src_ids)} sentences once split, more than the queue "
                                    f"holds ({self.batcher.max_queue}); send fewer or shorter "
                                    "texts")
        try:
            return self.batcher.submit((k, Settings(req.beam, req.n_best)),
                                       Work(src_ids, req.attention), len(src_ids),
                                       max(map(len, src_ids)))
        except QueueFull as err:
            raise RequestError(503, f"busy: {err}; try again shortly", retry_after=1) from None

    async def answer(self, future, request: Request) -> list[Translation]:
        """The queued job's translations, once decoded; a 499 if the client went away first,
        a 503 past --timeout (the job then leaves the queue)."""
        timeout = self.options.timeout
        waiter = asyncio.wrap_future(future)
        gone = asyncio.ensure_future(_disconnected(request))
        try:
            done, _ = await asyncio.wait({waiter, gone}, timeout=timeout,
                                         return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:  # the server's stop gave up on this request
            future.cancel()  # nobody would read it: no decoding for it after the stop
            waiter.cancel()
            raise
        finally:
            gone.cancel()
        if waiter in done:
            return waiter.result()
        future.cancel()  # a queued job leaves the queue at once (a running one is not stopped)
        waiter.cancel()  # so its late result is dropped, not left unread
        if gone in done:
            raise RequestError(499, "the client went away")
        raise RequestError(503, f"not translated within {timeout:g} s; try again later",
                           retry_after=max(1, round(timeout)))

    async def ranked_languages(self, text: str) -> list[tuple[str, float]]:
        """Every language the identifier knows, likeliest first, with confidences in percent;
        a 501 with the install hint where py3langid is missing (the server still translates)."""
        from attncli.serve.language_id import detect_languages

        try:
            return await asyncio.to_thread(detect_languages, text, ALL_LANGUAGES)
        except AttncliError as err:
            raise RequestError(501, str(err)) from None

    async def route_auto(self, fields: dict[str, Any], target: str | None
                         ) -> tuple[int, dict[str, Any]]:
        """`"source": "auto"`: the run for the detected language and `target`, and what was
        detected (LibreTranslate's detectedLanguage; the texts of a list read as one).

        The identifier ranks every language it knows. A sure first one (SURE percent or more)
        decides: a language no run here translates to `target` is a 400 that names it. Short
        texts often leave no language sure ("Hello": br 5.6 %, fi 4.7 %, ...): then the
        likeliest language that a run here translates to `target` is taken."""
        ranked = await self.ranked_languages("\n".join(texts_of(fields, "q", self.limits)))
        served = self.pairs.sources_to(target)
        if ranked and ranked[0][1] >= SURE:
            language, confidence = ranked[0]
        else:
            language, confidence = next(((code, share) for code, share in ranked
                                         if code in served), (None, 0.0))
        if language is None:
            raise RequestError(400, "source auto: no language could be told from the text; "
                                    "give source")
        if language not in served:
            raise RequestError(400, f"source auto: the text looks {language_name(language)} "
                                    f"({language}), which this server does not translate"
                                    f"{f' to {target!r}' if target else ''} (it translates "
                                    f"{self.pairs.described()})")
        return self.pairs.route(language, target), {"confidence": confidence,
                                                    "language": language}

    @_answers_in_json
    async def libretranslate(self, request: Request) -> Response:
        """POST /translate: LibreTranslate's request and answer."""
        fields = await self.fields_of(request)
        source, target = requested_pair(fields)
        detected = None
        if is_auto(source):
            k, detected = await self.route_auto(fields, target)
        else:
            k = self.pairs.route(source, target)
        run = self.pairs.runs[k]
        req = libretranslate_request(fields, run.languages, run.beam, self.limits)
        if req.html:  # LibreTranslate gives no alternatives for HTML either
            texts = await self.translate_pages(k, req, request)
            alternatives = [[] for _ in texts]
        else:
            texts, alternatives = translated_texts(run, await self.translate(k, req, request),
                                                   req.n_best)
        body: dict[str, Any] = {"translatedText": texts}
        if req.n_best > 1:
            body["alternatives"] = alternatives
        if detected is not None:
            body["detectedLanguage"] = [detected] * len(texts)
        return JSONResponse({k: v[0] for k, v in body.items()} if req.single else body)

    @_answers_in_json
    async def detect(self, request: Request) -> Response:
        """POST /detect: LibreTranslate's; the likeliest languages of `q`, with confidences."""
        text = "\n".join(texts_of(await self.fields_of(request), "q", self.limits))
        found = (await self.ranked_languages(text))[:3]
        return JSONResponse([{"confidence": confidence, "language": language}
                             for language, confidence in found])

    @_answers_in_json
    async def native(self, request: Request) -> Response:
        """POST /v1/translate: n-best with scores, pieces, attention."""
        fields = await self.fields_of(request)
        check_native_fields(fields)  # a misspelt "sourc" is named before routing misses it
        k = self.pairs.route(*requested_pair(fields))
        run = self.pairs.runs[k]
        req = native_request(fields, run.beam, self.limits, run.languages)
        if req.html:
            pages = [parse_html(text) for text in req.texts]
            decoded = await self.translate(k, self._blocks(req, pages, run), request)
            answers = native_pages(run, pages, req.texts, decoded, attention=req.attention)
        else:
            answers = native_answers(run, req.texts, await self.translate(k, req, request))
        return JSONResponse({"beam": req.beam, "n_best": req.n_best, "translations": answers})

    async def languages(self, request: Request) -> Response:
        return JSONResponse(self.pairs.languages())

    async def model(self, request: Request) -> Response:
        """GET /v1/model: the run (with several, each under "runs") and how it is served."""
        limits = self.limits
        served = {"api_key_required": bool(self.options.api_key),
                  "limits": {"max_texts": limits.max_texts, "max_chars": limits.max_chars,
                             "max_beam": limits.max_beam, "max_queue": self.batcher.max_queue,
                             "timeout_s": self.options.timeout}}
        if self.pairs.single:
            return JSONResponse({**self.pairs.runs[0].description, **served})
        return JSONResponse({"runs": [run.description for run in self.pairs.runs], **served})

    async def spec(self, request: Request) -> Response:
        """GET /spec: the API in OpenAPI 3.0 (`openapi.py`)."""
        sources, targets = ([*dict.fromkeys(run.languages[side] for run in self.pairs.runs)]
                            for side in (0, 1))
        return JSONResponse(openapi_spec(self.limits, sources=sources, targets=targets))

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok", **self.batcher.stats()})

    async def page(self, request: Request) -> Response:
        return Response((STATIC / "index.html").read_bytes(), media_type="text/html",
                        headers=PAGE_HEADERS)


async def _not_found(request: Request, exc: HTTPException) -> Response:
    return JSONResponse({"error": f"{request.method} {request.url.path}: {exc.detail}"},
                        exc.status_code, headers=exc.headers)


def build_app(pairs: Pairs, batcher: Batcher, options: ServeOptions) -> Starlette:
    """The app serving the runs of `pairs` through `batcher`, whose loop runs elsewhere
    (`Batcher.run` or `Batcher.start`) and whose `run_batch` is `pairs.run_batch` (its key:
    run index and settings); the app stops it when it shuts down."""
    service = Service(pairs, batcher, options)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        try:
            yield
        finally:  # uvicorn has waited for the requests in flight: the queue is empty
            await asyncio.to_thread(batcher.stop)

    routes = [Route("/", service.page), Route("/health", service.health),
              Route("/languages", service.languages), Route("/v1/model", service.model),
              Route("/translate", service.libretranslate, methods=["POST"]),
              Route("/v1/translate", service.native, methods=["POST"]),
              Route("/detect", service.detect, methods=["POST"]),
              Route("/spec", service.spec),
              Mount("/static", _PageFiles(directory=STATIC), name="static")]
    origins = [origin.rstrip("/").lower() for origin in options.cors_origins]
    middleware = [Middleware(OriginGuard, allowed=origins, hosts=options.hosts),
                  Middleware(_JSONRefusingCORS, allow_origins=origins,
                             allow_methods=["GET", "POST"],
                             allow_headers=["Content-Type", "Authorization"])]
    return Starlette(routes=routes, middleware=middleware, lifespan=lifespan,
                     exception_handlers={HTTPException: _not_found})
