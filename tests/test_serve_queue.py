"""The serving queue, in this process and without a model: batching by settings and size, a
bounded queue (503 with Retry-After), time limits (503), a stop that finishes queued work, and
an event loop that answers /health while a batch decodes.

The app is called as ASGI directly (no sockets), with a decoder that blocks until told, so each
state is reached on purpose rather than by racing a real model.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest

pytest.importorskip("starlette")

from attncli.decoding.documents import plan_documents  # noqa: E402
from attncli.decoding.search import Hypothesis  # noqa: E402
from attncli.decoding.texts import PieceLimits  # noqa: E402
from attncli.serve.app import ServeOptions, build_app  # noqa: E402
from attncli.serve.batcher import Batcher, QueueFull  # noqa: E402
from attncli.serve.pairs import Pairs  # noqa: E402
from attncli.serve.requests import Limits  # noqa: E402
from attncli.serve.served_run import Translation  # noqa: E402


class Gate:
    """A decoder for the batcher that records its batches and waits for `open`."""

    def __init__(self, blocked: bool = False, fail: bool = False):
        self.opened = threading.Event()
        self.started = threading.Event()
        self.batches: list[tuple[object, list]] = []
        self.fail = fail
        if not blocked:
            self.opened.set()

    def __call__(self, key, items, deliver):
        self.batches.append((key, items))
        self.started.set()
        assert self.opened.wait(10)
        if self.fail:
            raise RuntimeError("the decoder broke")
        return [f"done {item}" for item in items]


def test_jobs_that_arrive_together_share_a_batch_of_their_settings():
    gate = Gate(blocked=True)
    batcher = Batcher(gate, max_queue=100, batch_sentences=4, batch_tokens=1000, wait_s=0.05)
    batcher.start()
    first = batcher.submit("beam 5", "a", 1, 10)  # decoded alone: nothing else waits yet
    assert gate.started.wait(5)
    futures = [batcher.submit(key, item, 1, 10) for key, item in
               [("beam 5", "b"), ("beam 1", "c"), ("beam 5", "d"), ("beam 5", "e"),
                ("beam 5", "f"), ("beam 5", "g")]]
    gate.opened.set()
    assert first.result(5) == "done a"
    assert [f.result(5) for f in futures] == ["done b", "done c", "done d", "done e", "done f",
                                              "done g"]
    batcher.stop(5)
    # the oldest first; at most 4 sentences a batch; other settings wait their turn
    assert [(key, items) for key, items in gate.batches] == [
        ("beam 5", ["a"]), ("beam 5", ["b", "d", "e", "f"]), ("beam 1", ["c"]),
        ("beam 5", ["g"])]


def test_a_batch_is_bounded_in_padded_tokens_but_a_large_job_still_goes():
    gate = Gate()
    batcher = Batcher(gate, max_queue=100, batch_sentences=64, batch_tokens=100, wait_s=0.2)
    jobs = [batcher.submit("k", "long", 2, 60), batcher.submit("k", "short", 1, 10)]
    batcher.start()
    assert [job.result(5) for job in jobs] == ["done long", "done short"]
    batcher.stop(5)
    assert [items for _, items in gate.batches] == [["long"], ["short"]]  # 3 x 60 > 100


def test_a_job_delivered_early_is_answered_while_its_batch_goes_on():
    gate = Gate(blocked=True)

    def run_batch(key, items, deliver):
        deliver(0, "early " + items[0])  # the first job's sentences are done
        return gate(key, items, deliver)  # the rest of the batch still decoding

    batcher = Batcher(run_batch, max_queue=100, batch_sentences=4, batch_tokens=1000,
                      wait_s=0.2)
    short, long = batcher.submit("k", "a", 1, 5), batcher.submit("k", "b", 1, 5)
    batcher.start()
    assert gate.started.wait(5)
    assert short.result(5) == "early a"  # answered before the batch ended
    assert not long.done()
    gate.opened.set()
    assert long.result(5) == "done b"  # the batch's own result for the one not delivered
    batcher.stop(5)
    assert batcher.stats()["decoded"] == 2


def test_the_queue_is_bounded_and_a_stop_finishes_what_was_queued():
    gate = Gate(blocked=True)
    batcher = Batcher(gate, max_queue=3, batch_sentences=1, batch_tokens=1000, wait_s=0)
    batcher.start()
    running = batcher.submit("k", "a", 1, 5)
    assert gate.started.wait(5)
    queued = [batcher.submit("k", item, 1, 5) for item in "bcd"]
    with pytest.raises(QueueFull):
        batcher.submit("k", "e", 1, 5)
    stopper = threading.Thread(target=batcher.stop)
    stopper.start()
    with pytest.raises(QueueFull, match="stopping"):
        batcher.submit("k", "f", 1, 5)
    gate.opened.set()
    stopper.join(5)
    assert [f.result(0) for f in [running, *queued]] == ["done a", "done b", "done c", "done d"]


class FakeTranslator:
    """What the app asks of a translator, with no model behind it."""

    languages, beam, attention = ("en", "de"), 2, True

    class _Tokenizer:  # a subword per word, then EOS
        def encode_src(self, texts):
            return [[5] * len(text.split()) + [3] for text in texts]

    def plan(self, texts):
        return plan_documents(texts, language="en", tokenizer=self._Tokenizer(),
                              limits=PieceLimits(whole=60, piece=24))

    def encode(self, texts):
        return [[5, 3] for _ in texts], [False] * len(texts)

    def text(self, hypothesis):
        return f"translated {hypothesis.tokens}"

    description: dict = {}


async def _call(app, method: str, path: str, body: dict | None = None,
                gone_after: float = 60, stalled: bool = False,
                headers: list[tuple[bytes, bytes]] = ()):
    """One request through the ASGI app: (status, headers, JSON body); the client disconnects
    `gone_after` seconds after sending it (`stalled`: after the body's first part)."""
    data = json.dumps(body).encode() if body is not None else b""
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": method, "scheme": "http", "path": path, "raw_path": path.encode(),
             "query_string": b"", "root_path": "", "client": ("127.0.0.1", 1),
             "server": ("test", 80), "headers": [(b"host", b"test"),
                                                 (b"content-type", b"application/json"),
                                                 *headers]}
    messages = [{"type": "http.request", "body": data, "more_body": stalled}]

    async def receive():
        if messages:
            return messages.pop()
        await asyncio.sleep(gone_after)
        return {"type": "http.disconnect"}

    sent = []

    async def send(message):
        sent.append(message)

    await app(scope, receive, send)
    headers = {k.decode(): v.decode() for k, v in sent[0]["headers"]}
    return sent[0]["status"], headers, json.loads(b"".join(m.get("body", b"") for m in sent[1:]))


def _app(gate: Gate, timeout: float = 30, max_queue: int = 2):
    def run_batch(settings, works, deliver):
        gate(settings, works, deliver)
        return [[Translation([Hypothesis([7], -0.5, -0.5)]) for _ in w.src_ids] for w in works]

    batcher = Batcher(run_batch, max_queue, batch_sentences=1, batch_tokens=1000, wait_s=0)
    batcher.start()
    options = ServeOptions(Limits(max_texts=2), timeout=timeout)
    return build_app(Pairs([FakeTranslator()]), batcher, options), batcher


LT = {"q": "hi", "source": "en", "target": "de"}


def test_past_the_queue_503_with_retry_after_while_health_answers():
    gate = Gate(blocked=True)
    app, batcher = _app(gate, max_queue=2)

    async def scenario():
        first = asyncio.create_task(_call(app, "POST", "/translate", LT))  # decoding
        await asyncio.to_thread(gate.started.wait, 5)
        second = asyncio.create_task(_call(app, "POST", "/translate", {**LT, "q": ["a", "b"]}))
        await asyncio.sleep(0.05)  # queued: the queue is full
        full = await _call(app, "POST", "/translate", LT)
        health = await _call(app, "GET", "/health")  # the event loop is free meanwhile
        gate.opened.set()
        return full, health, await first, await second

    full, health, first, second = asyncio.run(scenario())
    batcher.stop(5)
    assert full[0] == 503 and full[1]["retry-after"] == "1" and "queue" in full[2]["error"]
    assert health[0] == 200 and health[2]["decoding"] == 1 and health[2]["queued"] == 2
    assert first[0] == 200 and first[2] == {"translatedText": "translated [7]"}
    assert second[2] == {"translatedText": ["translated [7]", "translated [7]"]}


def test_a_request_whose_sentences_alone_exceed_the_queue_is_a_400_not_a_503():
    """No retry could get three sentences into a queue of two: the client is told so, and a
    text of two sentences goes through as one job, its sentences joined."""
    app, batcher = _app(Gate(blocked=False), max_queue=2)

    async def scenario():
        too_many = await _call(app, "POST", "/translate", {**LT, "q": "One. Two. Three."})
        two = await _call(app, "POST", "/translate", {**LT, "q": "One.\n\nTwo."})
        return too_many, two

    too_many, two = asyncio.run(scenario())
    batcher.stop(5)
    assert too_many[0] == 400 and "3 sentences once split" in too_many[2]["error"]
    assert "retry-after" not in too_many[1]
    assert two[0] == 200 and two[2] == {"translatedText": "translated [7]\n\ntranslated [7]"}


def test_a_request_that_waits_too_long_gets_503_and_leaves_the_queue():
    gate = Gate(blocked=True)
    app, batcher = _app(gate, timeout=0.2)

    async def scenario():
        first = asyncio.create_task(_call(app, "POST", "/translate", LT))
        await asyncio.to_thread(gate.started.wait, 5)
        started = time.monotonic()
        late = await _call(app, "POST", "/translate", LT)
        waited = time.monotonic() - started
        stats = batcher.stats()
        gate.opened.set()
        await first
        return late, waited, stats

    late, waited, stats = asyncio.run(scenario())
    batcher.stop(5)
    assert late[0] == 503 and "not translated within 0.2 s" in late[2]["error"]
    assert 0.15 < waited < 2 and stats["queued"] == 0


def test_a_client_that_goes_away_takes_its_job_out_of_the_queue():
    """It was decoded for nobody, and held queue places that live clients were refused for."""
    gate = Gate(blocked=True)
    app, batcher = _app(gate)

    async def scenario():
        first = asyncio.create_task(_call(app, "POST", "/translate", LT))
        await asyncio.to_thread(gate.started.wait, 5)
        gone = await _call(app, "POST", "/translate", {**LT, "q": "bye"}, gone_after=0.1)
        stats = batcher.stats()
        gate.opened.set()
        return gone, stats, await first

    gone, stats, first = asyncio.run(scenario())
    batcher.stop(5)
    assert gone[0] == 499 and stats["queued"] == 0
    assert first[0] == 200 and len(gate.batches) == 1  # "bye" was never decoded


def test_a_body_that_stops_arriving_is_a_408_within_the_timeout():
    app, batcher = _app(Gate(), timeout=0.2)
    started = time.monotonic()
    stalled = asyncio.run(_call(app, "POST", "/translate", LT, stalled=True))
    batcher.stop(5)
    assert stalled[0] == 408 and "did not arrive within 0.2 s" in stalled[2]["error"]
    assert time.monotonic() - started < 5


def test_a_client_gone_mid_body_is_a_499_not_a_server_error(caplog):
    app, batcher = _app(Gate(), timeout=5)
    with caplog.at_level("INFO", logger="uvicorn.error"):
        gone = asyncio.run(_call(app, "POST", "/translate", LT, stalled=True, gone_after=0.05))
    batcher.stop(5)
    assert gone[0] == 499 and "went away" in gone[2]["error"]  # was a 500 and an ERROR line
    assert [r.levelname for r in caplog.records] == ["INFO"]
    assert "499 the client went away while sending its request" in caplog.records[0].message


def test_a_failing_decoder_is_a_500_in_one_line_and_the_next_request_is_served():
    gate = Gate(fail=True)
    app, batcher = _app(gate)
    status, _, body = asyncio.run(_call(app, "POST", "/translate", LT))
    assert status == 500 and body == {"error": "internal error (RuntimeError)"}
    gate.fail = False
    assert asyncio.run(_call(app, "POST", "/translate", LT))[0] == 200
    batcher.stop(5)


def test_a_key_beyond_ascii_works_as_a_bearer_token_too():
    """The header arrives as latin-1 text: 'clé' sent as UTF-8 bytes was compared as 'clÃ©'."""
    batcher = Batcher(_app_run_batch, 10, batch_sentences=1, batch_tokens=1000, wait_s=0)
    batcher.start()
    app = build_app(Pairs([FakeTranslator()]), batcher, ServeOptions(Limits(), api_key="clé"))
    body = {"q": "hi", "source": "en", "target": "de"}
    bearer = [(b"authorization", "Bearer clé".encode())]
    status, _, answer = asyncio.run(_call(app, "POST", "/translate", body, headers=bearer))
    assert status == 200, answer
    status, _, _ = asyncio.run(_call(app, "POST", "/translate", body,
                                     headers=[(b"authorization", b"Bearer cle")]))
    assert status == 403
    batcher.stop(5)


def _app_run_batch(settings, works, deliver, join=None):
    return [[Translation([Hypothesis([7], -0.5, -0.5)]) for _ in w.src_ids] for w in works]
