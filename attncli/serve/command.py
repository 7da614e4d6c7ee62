"""`attncli serve`: load each run once and serve them over HTTP until SIGINT, SIGTERM or SIGHUP.

The process binds its socket itself before uvicorn starts, so a port in use is a one-line error
(exit 2), ``--port 0`` picks a free port, and the line that names the address is printed only
once connections are taken. On SIGINT, SIGTERM or SIGHUP uvicorn stops accepting connections, the
requests in flight (queued ones included) are answered, the decoding loop ends, and the
process exits 0. A second SIGINT stops at once. A stop signal that comes while the runs load
exits 0 at once (serve/stopping.py).
"""

from __future__ import annotations

import ipaddress
import math
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from attncli.core.errors import AttncliError
from attncli.serve.stopping import STOP_SIGNALS, block_stop_signals

INSTALL_HINT = "attncli serve needs Starlette and uvicorn: pip install 'attncli[serve]'"


def _check_installed() -> None:
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise AttncliError(INSTALL_HINT) from None


def _listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port (port 0: one the system picks)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as err:
        raise AttncliError(f"--host {host} --port {port}: cannot listen there "
                           f"({err.strerror or err})") from None
    return sock


def _url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/"


def _serve(app, sock: socket.socket, batcher, timeout: float,
           announce: Callable[[], None]) -> None:
    """uvicorn in a thread, decoding in this (the main) thread, until SIGINT, SIGTERM or SIGHUP.

    Why decoding keeps the main thread: the model was loaded here, so torch's OpenMP threads
    belong to this thread. Calls from a second thread make a second team of them, more threads
    than cores on a small machine, and OpenMP then stops spinning between parallel regions:
    decoding got three times slower (benchmarks/MEASUREMENTS.md). The signals come here too
    (the HTTP thread blocks them: serve/stopping.py says why that matters), and tell uvicorn to
    stop; uvicorn then finishes the requests in flight, each within its --timeout, and its
    shutdown stops the batcher, whose loop returns once the queue is empty. A second Ctrl-C
    (SIGINT) ends the process at once (exit 130), whatever is decoding; a failure of the
    decoding loop stops uvicorn too, so no request is taken that nobody would answer.
    `announce` says the server is up once these handlers are in place, so a stop signal that
    follows it stops the server gracefully, never by the start-up's exit.
    """
    import uvicorn

    # Requests wait at most `timeout` for their translation; the stop waits a second longer.
    server = uvicorn.Server(uvicorn.Config(app, log_level="info", lifespan="on",
                                           timeout_graceful_shutdown=timeout + 1,
                                           server_header=False))
    failed: list[BaseException] = []

    def http() -> None:
        block_stop_signals()
        try:
            server.run(sockets=[sock])
        except BaseException as err:  # uvicorn exits on a failed start-up: say so below
            failed.append(err)
        finally:
            batcher.stop()

    def on_signal(sig: int, frame) -> None:
        if server.should_exit and sig == signal.SIGINT:  # a second Ctrl-C: at once
            os._exit(130)
        server.handle_exit(sig, frame)

    previous = {sig: signal.signal(sig, on_signal) for sig in STOP_SIGNALS}
    thread = threading.Thread(target=http, name="attncli-http")
    try:
        thread.start()
        announce()
        try:
            batcher.run()
        except BaseException:  # decoding is over: stop taking requests nobody would answer
            server.should_exit = True
            raise
        thread.join()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if failed or not server.started:
        raise RuntimeError(f"the HTTP server stopped: {failed[0] if failed else 'never started'}")


def _loopback_names(host: str) -> list[str] | None:
    """The Host names a server bound to loopback answers to (None for another address: its
    users reach it by names this process cannot know)."""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        loopback = False
    return ["localhost", "127.0.0.1", "[::1]"] if loopback else None


def _check(max_texts: int, max_queue: int, timeout: float, batch_wait_ms: float) -> None:
    if max_queue < max_texts:
        raise AttncliError(f"--max-queue {max_queue} is less than --max-texts {max_texts}: a "
                           "full request could never be queued")
    if not math.isfinite(timeout) or not math.isfinite(batch_wait_ms):
        raise AttncliError("--timeout and --batch-wait must be finite numbers")
    if batch_wait_ms / 1000 >= timeout:
        raise AttncliError(f"--batch-wait {batch_wait_ms:g} ms is not shorter than --timeout "
                           f"{timeout:g} s: a request could time out waiting for others")


@dataclass(frozen=True)
class ServeCommandOptions:
    """`attncli serve`'s options as cli.py parsed them (their meaning: its --help)."""

    runs: list[Path] = field(default_factory=list)  # none: the latest run under ./runs
    checkpoint: str = "auto"
    engine: str = "torch"
    exported: Path | None = None
    device: str = "auto"
    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = None
    cors_origins: list[str] = field(default_factory=list)
    max_texts: int = 64
    max_chars: int = 2000
    max_beam: int = 16
    max_queue: int = 256
    timeout: float = 30.0
    batch_size: int | None = None
    batch_tokens: int = 8192
    batch_wait_ms: float = 10.0
    threads: int | None = None


def _load_runs(options: ServeCommandOptions):
    """Each run loaded once, to serve (`serve.served_run.ServedRun`), and their pairs; two runs
    with the same pair are refused before any socket opens."""
    from attncli.runs.layout import find_latest_run
    from attncli.runs.translator import Translator
    from attncli.serve.pairs import Pairs, check_pairs
    from attncli.serve.served_run import ServedRun

    run_dirs = options.runs or [find_latest_run(Path("runs")).root]
    if len(run_dirs) > 1 and options.exported is not None:
        raise AttncliError(f"--exported {options.exported} names one run's export; with "
                           f"several runs, leave it out (each run's own ctranslate2/ is used)")
    check_pairs([(str(run_dir), _languages(run_dir)) for run_dir in run_dirs])
    return Pairs([ServedRun(Translator(run_dir, options.checkpoint, options.device,
                                       options.engine, exported=options.exported))
                  for run_dir in run_dirs])


def _languages(run_dir: Path) -> tuple[str, str]:
    """A run's (source, target), from its config alone (no model loaded)."""
    from attncli.core.config_files import load_config
    from attncli.runs.layout import open_run

    data = load_config(open_run(run_dir).config).data
    return data.src, data.tgt


def _say_serving(pairs, url: str) -> None:
    """The line(s) that say what is served, printed once connections are taken."""
    def what(run) -> str:
        model = run.description
        return (f"{run.trained.paths.root} ({model['checkpoint']}, "
                f"{model['languages']['source']}->{model['languages']['target']}, "
                f"{model['engine']} on {model['device']})")

    if pairs.single:
        print(f"serving {what(pairs.runs[0])} at {url}  (Ctrl-C stops)", file=sys.stderr,
              flush=True)
        return
    for run in pairs.runs:
        print(f"  {what(run)}", file=sys.stderr)
    print(f"serving {len(pairs.runs)} runs at {url}  (Ctrl-C stops)", file=sys.stderr,
          flush=True)


def serve_command(options: ServeCommandOptions) -> None:
    """`attncli serve`: see the module doc and `attncli serve --help`."""
    _check_installed()
    _check(options.max_texts, options.max_queue, options.timeout, options.batch_wait_ms)
    # Imported here, after the checks above: Starlette (an optional dependency) is known to be
    # installed, and a bad option is said before torch loads (torch-free start-up).
    from attncli.core.device import set_threads
    from attncli.serve.app import ServeOptions, build_app
    from attncli.serve.batcher import Batcher
    from attncli.serve.requests import Limits

    set_threads(options.threads)  # in this thread, which decodes (see `_serve`)
    pairs = _load_runs(options)
    batch_size = options.batch_size or min(run.config.decode.batch_size for run in pairs.runs)
    batcher = Batcher(pairs.run_batch, options.max_queue, batch_size, options.batch_tokens,
                      wait_s=options.batch_wait_ms / 1000)
    limits = Limits(options.max_texts, options.max_chars, options.max_beam)
    served = ServeOptions(limits, options.api_key or None, list(options.cors_origins),
                          options.timeout, hosts=_loopback_names(options.host))
    sock = _listen(options.host, options.port)
    _serve(build_app(pairs, batcher, served), sock, batcher, options.timeout,
           announce=lambda: _say_serving(pairs, _url(sock)))
