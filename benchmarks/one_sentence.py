"""Where the time of one sentence goes: what `attncli translate --run RUN "Hello, how are you?"`
does, in phases, in a fresh process.

    python benchmarks/one_sentence.py RUN [--engine torch|ctranslate2] [--beam 5] [--threads N]

Prints one JSON line: seconds from the process's start to this script's first line
("interpreter", to the kernel's 10 ms ticks), for the imports the command
makes ("imports": attncli.translate, whose import brings torch and the decoding code), for
loading the run ("load": tokenizer, config and weights, as `attncli translate` loads them),
for the first search of the sentence ("first_search") and for a second one ("warm_search":
the search alone, once the process has warmed up), and which modules were imported
(`torch._dynamo` among them or not). Teardown is not in it: time the whole command for that.
Set PYTHONPATH to a checkout to measure that checkout's code.
"""

from __future__ import annotations

import os
import time

STARTED = time.time()

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

SENTENCE = "Hello, how are you?"


def _age_at_start() -> float:
    """How long this process had existed when its first line ran: the system's uptime now
    less the process's start (both in /proc, in 10 ms ticks), less the time since that line."""
    ticks = os.sysconf("SC_CLK_TCK")
    fields = Path(f"/proc/{os.getpid()}/stat").read_text().rsplit(")", 1)[1].split()
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    return uptime - int(fields[19]) / ticks - (time.time() - STARTED)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--engine", default="torch")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    phases = {"interpreter": _age_at_start()}
    mark = time.perf_counter()
    import attncli.translate  # noqa: F401  (what `attncli translate` imports)
    from attncli.core.device import set_threads
    from attncli.runs.translator import Translator

    phases["imports"] = time.perf_counter() - mark
    mark = time.perf_counter()
    set_threads(args.threads)
    translator = Translator(args.run, "auto", "cpu", args.engine)
    phases["load"] = time.perf_counter() - mark
    for phase in ("first_search", "warm_search"):
        mark = time.perf_counter()
        output = translator.translate([SENTENCE], beam=args.beam)[0].text
        phases[phase] = time.perf_counter() - mark
    print(json.dumps({**{k: round(v, 4) for k, v in phases.items()}, "output": output,
                      "dynamo_imported": "torch._dynamo" in sys.modules,
                      "modules": len(sys.modules)}, ensure_ascii=False))


if __name__ == "__main__":
    main()
