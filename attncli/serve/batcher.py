"""The queue between requests and the model: what arrives together is decoded together.

Requests are queued as jobs; one thread takes them out in batches and runs the model, so the
event loop keeps answering (``/health`` included) while a batch decodes, and one model serves
every client. Decoding a batch of sentences costs little more than decoding one of them (the
matrix products get wider, not more numerous), which is why the server gathers them: Eole's
server and CTranslate2's asynchronous batches do the same.

A batch holds jobs with equal decoding settings (their `key`), the oldest job first, up to
`batch_sentences` sentences and `batch_tokens` padded source tokens (a single job larger than
that still goes alone: requests are never split). Before a batch the thread waits, up to
`wait_s` after the oldest job arrived or the last batch ended (whichever is later), until as
many sentences as the last batch had are queued: clients whose answers just went out come back
together, and without that wait a batch that once split in two (half queued while the other
half decoded) would stay split. A lone client waits for nobody. A job is answered as soon as
its own sentences are decoded (`run_batch` delivers it), not when the batch's longest one is:
short sentences get short waits, and their clients' next requests are already queued when the
batch ends.

The queue is bounded in sentences: past `max_queue`, `submit` raises `QueueFull` (the server's
503) instead of letting waits grow without end. A job cancelled while queued (its request timed
out) leaves the queue at once.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

# How often an idle `run` wakes up with nothing to do: the main thread must take the interpreter
# lock now and then, or a stop signal another thread took stays unhandled (serve/stopping.py).
IDLE_WAKE_S = 0.2

# run_batch(key, [items of each job], deliver) -> [result of each job], in the same order;
# deliver(k, result) may hand job k's result over earlier, while the batch goes on.
RunBatch = Callable[[Hashable, list[Any], Callable[[int, Any], None]], list[Any]]


class QueueFull(Exception):
    """The queue holds `max_queue` sentences already (or the server is stopping)."""


@dataclass
class _Job:
    key: Hashable  # decoding settings: only jobs with equal keys share a batch
    items: Any  # what run_batch gets for this job
    sentences: int
    longest: int  # the job's longest source, in tokens
    arrived: float = field(default_factory=time.monotonic)
    future: Future = field(default_factory=Future)


class Batcher:
    """A bounded queue of jobs and the thread that runs them in batches (see module doc)."""

    def __init__(self, run_batch: RunBatch, max_queue: int, batch_sentences: int,
                 batch_tokens: int, wait_s: float):
        self.run_batch, self.max_queue, self.wait_s = run_batch, max_queue, wait_s
        self.batch_sentences, self.batch_tokens = batch_sentences, batch_tokens
        self._jobs: deque[_Job] = deque()
        self._cond = threading.Condition()
        self._queued = self._decoding = 0  # sentences
        self._stopping = False
        self._last_end = 0.0  # when the last batch was decoded (time.monotonic)
        self._last_size = 1  # its sentences
        self._thread: threading.Thread | None = None
        self.batches = self.decoded = self.largest = 0

    def run(self) -> None:
        """Decode batches in the calling thread until `stop`; return once the queue is empty.

        `attncli serve` calls this in the process's main thread (see command.py for why).
        """
        while (batch := self._next_batch()) is not None:
            self._run(batch)

    def start(self) -> None:
        """`run` in a thread of its own (for an app embedded elsewhere, and tests)."""
        self._thread = threading.Thread(target=self.run, name="attncli-decode", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Take no more jobs; `run` finishes the queued ones and returns. Waits for that only
        when the loop runs in `start`'s thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def submit(self, key: Hashable, items: Any, sentences: int, longest: int) -> Future:
        """Queue a job; its future gets run_batch's result for it (or its exception)."""
        job = _Job(key, items, sentences, longest)
        with self._cond:
            if self._stopping:
                raise QueueFull("the server is stopping")
            if self._queued + sentences > self.max_queue:
                raise QueueFull(f"the queue holds {self._queued} of {self.max_queue} sentences")
            self._jobs.append(job)
            self._queued += sentences
            self._cond.notify()
        job.future.add_done_callback(lambda future: self._forget(job))
        return job.future

    def stats(self) -> dict[str, int]:
        """Sentences queued and decoding now; batches and sentences decoded so far."""
        with self._cond:
            return {"queued": self._queued, "decoding": self._decoding, "batches": self.batches,
                    "decoded": self.decoded, "largest_batch": self.largest}

    def _forget(self, job: _Job) -> None:
        """A job cancelled while queued leaves the queue (its place is free again)."""
        if not job.future.cancelled():
            return
        with self._cond:
            if job in self._jobs:
                self._jobs.remove(job)
                self._queued -= job.sentences
                self._cond.notify()  # a wait for it (or with its deadline) ends now

    def _next_batch(self) -> list[_Job] | None:
        """The next batch, after waiting for jobs (None once stopping with nothing queued)."""
        with self._cond:
            while not self._jobs:
                if self._stopping:
                    return None
                self._cond.wait(IDLE_WAKE_S)
            deadline = max(self._jobs[0].arrived, self._last_end) + self.wait_s
            while self._jobs and not self._stopping and self._short(self._jobs[0].key):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            if not self._jobs:  # the waited-for jobs were all cancelled
                return []
            batch = self._take(self._jobs[0].key)
            size = sum(job.sentences for job in batch)
            self._queued -= size
            self._decoding = size
            return batch

    def _fits(self, sentences: int, longest: int) -> bool:
        return sentences <= self.batch_sentences and sentences * longest <= self.batch_tokens

    def _short(self, key: Hashable) -> bool:
        """Whether the jobs queued with `key` fill neither a batch nor the last batch's size."""
        sentences = longest = 0
        for job in self._jobs:
            if job.key == key:
                sentences, longest = sentences + job.sentences, max(longest, job.longest)
                if not self._fits(sentences, longest) or sentences >= self._last_size:
                    return False
        return True

    def _take(self, key: Hashable) -> list[_Job]:
        """Remove and return the oldest job and the later ones with its key that fit beside."""
        batch: list[_Job] = []
        sentences = longest = 0
        for job in list(self._jobs):
            if job.key != key:
                continue
            grown = (sentences + job.sentences, max(longest, job.longest))
            if batch and not self._fits(*grown):
                break
            batch.append(job)
            self._jobs.remove(job)
            sentences, longest = grown
        return batch

    def _run(self, batch: list[_Job]) -> None:
        live = [job for job in batch if job.future.set_running_or_notify_cancel()]

        def deliver(k: int, result: Any) -> None:  # the client is answered at once
            live[k].future.set_result(result)

        try:
            if live:
                results = self.run_batch(live[0].key, [job.items for job in live], deliver)
                for job, result in zip(live, results, strict=True):
                    if not job.future.done():
                        job.future.set_result(result)
        except Exception as err:  # the requests get the error, the thread goes on
            for job in live:
                if not job.future.done():
                    job.future.set_exception(err)
        finally:
            with self._cond:
                size = sum(job.sentences for job in live)
                self.batches += 1 if live else 0
                self.decoded += size
                self.largest = max(self.largest, size)
                self._decoding = 0
                self._last_end = time.monotonic()
                self._last_size = max(size, 1)
