"""LibreTranslate serving attncli's Argos packages, offline, asked through `libretranslatepy`.

    unshare -n sh -c 'ip link set lo up && /root/venvs/lt/bin/python \\
        benchmarks/libretranslate_check.py runs/small/en_de.argosmodel runs/en-zh/en_zh.argosmodel'

Runs in LibreTranslate's own virtual environment (libretranslate 1.9.6, which installs the
`argostranslate` module from its fork argos-translate-lt, and libretranslatepy; onnx for the
MiniSBD placeholder of `argos_offline.py`), not attncli's. Under `unshare -n` the machine has
no network but loopback: what LibreTranslate would fetch fails, and the log shows it.

It installs the packages with the fork's own `package.install_from_path` into a packages folder
of its own (`argos_offline.py`: a local empty package index, placeholder MiniSBD models),
starts `libretranslate --host 127.0.0.1 --port N --load-only CODES` there, times how long
until /languages answers, asks `languages()`, `translate("Hello, how are you?", "en", T)` for
each package's target T and `detect(...)`, stops the server, and prints a JSON report: the
versions, the start-up seconds, the answers, and the log's lines that tell of a connection
attempt, counted (with the whole log beside them).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile
from importlib import metadata
from pathlib import Path

import argos_offline

GREETING = "Hello, how are you?"
# What a failed attempt to reach the network looks like in LibreTranslate's log.
CONNECTION_WORDS = ("Cannot update models", "urlopen error", "Connection", "connection",
                    "Network is unreachable", "Name or service not known",
                    "Temporary failure in name resolution", "Max retries", "Failed to download")
STARTUP_LIMIT_S = 120


def _metadata(package: str) -> dict:
    with zipfile.ZipFile(package) as archive:
        name = next(n for n in archive.namelist() if n.endswith("/metadata.json"))
        return json.loads(archive.read(name))


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_until_up(url: str, server: subprocess.Popen) -> float:
    """Seconds until GET /languages answers (the server's start-up, packages loaded)."""
    started = time.perf_counter()
    while time.perf_counter() - started < STARTUP_LIMIT_S:
        if server.poll() is not None:
            raise SystemExit(f"libretranslate exited with {server.returncode} while starting")
        try:
            with urllib.request.urlopen(url + "languages", timeout=2):
                return time.perf_counter() - started
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"libretranslate did not answer within {STARTUP_LIMIT_S} s")


def _stop(server: subprocess.Popen) -> None:
    """End the server and what it started (strace's tracee with it): SIGTERM to the session
    it leads, SIGKILL if it is not gone within 30 seconds."""
    for signal_number in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal_number)
        try:
            server.wait(timeout=30)
            return
        except subprocess.TimeoutExpired:
            continue


def _ask(url: str, pairs: list[tuple[str, str]]) -> dict:
    from libretranslatepy import LibreTranslateAPI

    client = LibreTranslateAPI(url)
    return {"languages": client.languages(),
            "translate": {f"{src}-{tgt}": client.translate(GREETING, src, tgt)
                          for src, tgt in pairs},
            "detect": client.detect(GREETING)}


def _outside_loopback(trace: Path) -> list[str]:
    """strace's connect() calls to an internet address that is not loopback (a local socket,
    as the server's own, is no network)."""
    if not trace.is_file():
        return []
    calls = [line for line in trace.read_text(errors="replace").splitlines()
             if "connect(" in line and ("AF_INET" in line)]
    return [line for line in calls if not re.search(r'inet_(addr|pton)\((AF_INET6, )?"(127\.|::1")',
                                                   line)]


def check(packages: list[str], root: Path, strace: bool = False,
          online_index: bool = False) -> dict:
    """Install, serve, ask, stop; the report. `online_index`: leave Argos's package index at
    its default, online address (what a user's set-up has)."""
    found = [_metadata(p) for p in packages]
    environment = argos_offline.prepare(root, sorted({m["from_code"] for m in found}))
    if online_index:
        del environment["ARGOS_PACKAGE_INDEX"]
    argos_offline.use_environment(environment)
    from argostranslate import package  # the fork's, after the environment is set

    for path in packages:
        package.install_from_path(Path(path))
    codes = sorted({m["from_code"] for m in found} | {m["to_code"] for m in found})
    port, log_path = _free_port(), root / "libretranslate.log"
    command = [str(Path(sys.executable).parent / "libretranslate"), "--host", "127.0.0.1",
               "--port", str(port), "--load-only", ",".join(codes)]
    traced = ["strace", "-f", "-qq", "-e", "trace=connect", "-o", str(root / "connect.log")]
    with open(log_path, "w") as log:
        server = subprocess.Popen([*(traced if strace else []), *command], stdout=log,
                                  stderr=subprocess.STDOUT, start_new_session=True)
        try:
            url = f"http://127.0.0.1:{port}/"
            startup = _wait_until_up(url, server)
            answers = _ask(url, [(m["from_code"], m["to_code"]) for m in found])
        finally:
            _stop(server)
    lines = log_path.read_text(errors="replace").splitlines()
    attempts = [line for line in lines if any(word in line for word in CONNECTION_WORDS)]
    return {"versions": {name: metadata.version(name) for name in (
                "libretranslate", "argos-translate-lt", "libretranslatepy", "ctranslate2",
                "minisbd")},
            "command": " ".join(["libretranslate", *command[1:3], "--port", "N",
                                 *command[5:]]),
            "startup_s": round(startup, 2), **answers,
            "connection_lines": attempts, "connection_line_count": len(attempts),
            "connect_calls_outside_loopback": _outside_loopback(root / "connect.log")
            if strace else None, "log": lines}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("packages", nargs="+", help="attncli .argosmodel files")
    parser.add_argument("--strace", action="store_true",
                        help="also count the server's connect() calls beyond loopback (strace)")
    parser.add_argument("--online-index", action="store_true",
                        help="leave ARGOS_PACKAGE_INDEX unset (Argos's online index)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lt-home-") as root:
        report = check(args.packages, Path(root), args.strace, args.online_index)
    print(json.dumps(report, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
