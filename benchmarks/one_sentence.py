"""Where the time of one sentence goes: what `attncli translate --run RUN "Hello, how are you?"`
does, in phases, in a fresh process.

    python benchmarks/one_sentence.py RUN [--engine torch|ctranslate2] [--beam 5] [--threads N]

Prints one JSON line: seconds from the interpreter's start (as the kernel recorded the
process's start) to this script's first line ("interpreter"), for the imports the command
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


def _process_start() -> float:
    """When the kernel started this process (epoch seconds), from /proc."""
    ticks = os.sysconf("SC_CLK_TCK")
    since_boot = int(Path(f"/proc/{os.getpid()}/stat").read_text().rsplit(")", 1)[1].split()[19])
    boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                if line.startswith("btime"))
    return boot + since_boot / ticks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--engine", default="torch")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    phases = {"interpreter": STARTED - _process_start()}
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
