"""Where decoding time goes as sentences grow: the per-step copies next to the whole.

Decodes the first ``--sentences`` lines (one batch at the run's decode.batch_size) of each
given JSONL file, greedy and with beam 5, under ``torch.profiler``, and prints, per file and
search, the wall time per sentence and the time of the ops that copy tensors, grouped by op
and by the rank of their first input: with today's decoder ``cat`` on 4-d inputs is the K/V
cache growing, ``cat`` on 2-d the prefixes growing, ``index_select`` on 4-d the beam reorder of
the caches (3-d: encoder output, 2-d: prefixes). ``host reads`` counts device-to-host scalar
reads (``aten::_local_scalar_dense``: ``.item()``, ``bool()``, ``.any()`` in an ``if``).

    python benchmarks/profile_decode.py RUN /tmp/syn10.jsonl /tmp/syn40.jsonl
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from attncli.core.errors import run_reporting
from attncli.core.malloc import keep_freed_memory
from attncli.decoding.texts import encode_sources
from attncli.runs.trained import decode_ids, load_for_decoding

COPIES = {"aten::cat", "aten::index_select", "aten::index", "aten::index_put_", "aten::copy_",
          "aten::index_copy_", "aten::_local_scalar_dense"}


def profiled(trained, src_ids: list[list[int]], beam: int,
             table: int = 0) -> tuple[float, dict, list]:
    """Seconds of one decode under the profiler, copy-op milliseconds by (op, rank), outputs."""
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        start = time.perf_counter()
        found = decode_ids(trained, src_ids, beam, 1)
        seconds = time.perf_counter() - start
    totals: dict[tuple[str, int], list[float]] = defaultdict(lambda: [0.0, 0])
    for event in prof.events():
        if event.name in COPIES:
            first = (event.input_shapes or [[]])[0]
            if first and isinstance(first[0], list):  # cat: a list of tensors
                first = first[0]
            key = (event.name.removeprefix("aten::"), len(first))
            totals[key][0] += event.cpu_time_total / 1e3
            totals[key][1] += 1
    if table:
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=table))
    return seconds, totals, [h[0].tokens for h in found]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("files", type=Path, nargs="+")
    parser.add_argument("--sentences", type=int, default=64)
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 5])
    parser.add_argument("--table", type=int, default=0, help="also print the N costliest ops")
    args = parser.parse_args()
    keep_freed_memory()  # as the CLI does before any command
    torch.manual_seed(0)
    trained = load_for_decoding(args.run, "cpu", "best")
    for path in args.files:
        lines = path.read_text(encoding="utf-8").splitlines()[: args.sentences]
        texts = [json.loads(line)["en"] for line in lines]
        src_ids = encode_sources(trained.tokenizer, texts, trained.model.cfg.max_positions)
        decode_ids(trained, src_ids[:8], 1, 1)  # warm-up
        for beam in args.beams:
            seconds, totals, outputs = profiled(trained, src_ids, beam, args.table)
            n = len(texts)
            out_len = sum(map(len, outputs)) / n
            print(f"{path.name} beam {beam}: {1e3 * seconds / n:.2f} ms/sentence under the "
                  f"profiler, {n} sentences, {out_len:.1f} output tokens on average")
            for (name, rank), (ms, calls) in sorted(totals.items(), key=lambda kv: -kv[1][0]):
                print(f"    {name:>20} {rank}-d: {ms / n:7.3f} ms/sentence "
                      f"({100 * ms / 1e3 / seconds:5.1f}%), {calls} calls")


if __name__ == "__main__":
    run_reporting(main)
