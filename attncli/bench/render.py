"""Tables drawn from the suites' plain data (the same data --json writes)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from attncli.bench.attention_suite import MIB
from attncli.bench.train_suite import SENTENCE_LENGTHS


def _fmt(x: float | None, digits: int = 3) -> str:
    """3 significant digits, thousands separated, no exponent; '—' for a missing figure."""
    if x is None:
        return "—"
    if abs(x) >= 10 ** (digits - 1):
        return f"{x:,.0f}"
    return f"{x:.{digits}g}" if abs(x) >= 1e-3 else f"{x:.1e}"


def _mib(n: int | None) -> str:
    return "—" if n is None else _fmt(n / MIB)


def _table(title: str, headers: Sequence[str], rows: Sequence[Sequence[str]],
           notes: Sequence[str]) -> list[RenderableType]:
    table = Table(title=title, title_justify="left")
    for i, header in enumerate(headers):
        table.add_column(header, justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*row)
    return [table, *(Text(f"  {note}", style="dim") for note in notes), Text("")]


def _timing_note(warmup: int, repeats: int) -> str:
    return f"times: median of {repeats} timed runs after {warmup} warm-up runs"


def render_attention(result: dict[str, Any], warmup: int, repeats: int) -> list[RenderableType]:
    cells, reasons = [], {}
    masked = result["mask"] is not None
    for row in result["rows"]:
        cell = [f"{row['path']}, masked" if masked else row["path"], str(row["seq_len"]),
                row["kernel"] or ""]
        for mode in ("forward", "forward_backward"):
            figures = row[mode]
            if "skipped" in figures:
                where = reasons.setdefault(figures["skipped"], [])
                if f"{row['path']} T={row['seq_len']}" not in where:
                    where.append(f"{row['path']} T={row['seq_len']}")
                cell += ["—", "—", "—"]
            else:
                cell += [_fmt(figures["median_ms"]), _fmt(figures["tflops"]),
                         _mib(figures["peak_mem_bytes"])]
        cells.append(cell)
    notes = [
        f"B={result['batch']} x H={result['heads']} x D={result['head_dim']}, "
        f"{result['dtype']}, self-attention; {_timing_note(warmup, repeats)}",
        f"mask: {result['mask'] or 'none'}",
        f"TFLOP/s: {result['flops_convention']}",
        f"peak MiB: {result['memory_method']}",
        "fused: kernel = the scaled_dot_product_attention backend the default dispatch chose; "
        f"backends that run alone on these inputs: "
        f"{', '.join(result['sdpa_kernels_that_run_alone']) or 'none measured'}",
        *(f"— {', '.join(where)}: skipped, {reason}" for reason, where in reasons.items()),
    ]
    headers = ["path", "T", "kernel", "fwd\nms", "fwd\nTFLOP/s", "fwd peak\nMiB",
               "fwd+bwd\nms", "fwd+bwd\nTFLOP/s", "fwd+bwd\npeak MiB"]
    return _table("attention", headers, cells, notes)


def render_train(result: dict[str, Any], warmup: int, repeats: int) -> list[RenderableType]:
    cells = [[row["model"], f"{row['parameters'] / 1e6:.2f}M", _fmt(row["step"]["median_ms"]),
              _fmt(row["tgt_tokens_per_s"]), _fmt(row["model_tflops"]),
              f"{100 * row['mfu']:.1f}%", _mib(row["step"]["peak_mem_bytes"]),
              _mib(row["process_peak_rss_bytes"])]
             for row in result["rows"]]
    b = result["batches"]
    notes = [
        (f"peer: skipped, {result['peer_skipped']}" if result.get("peer_skipped")
         else f"ours / peer tokens/s: {result['ours_over_peer']:.2f}x"),
        f"chosen for this device: {result['precision']}, batch lengths rounded to multiples "
        f"of {result.get('pad_multiple', '?')}, {result['optimizer']}, eager (no torch.compile); "
        f"the peer ran with the same",
        f"{_timing_note(result['warmup_steps'], repeats)} (warm-up: every batch once at least)",
        f"batches: {len(b)} synthetic token batches of batch_tokens={result['batch_tokens']}, "
        f"{b[0]['sentences']} sentences of {SENTENCE_LENGTHS[0]}-{SENTENCE_LENGTHS[1]} "
        f"subwords, ~{b[0]['tgt_tokens']:,} target tokens each (tok/s counts target tokens)",
        f"MFU = model FLOP/s / peak {result['peak_tflops']:.3g} TFLOP/s "
        f"({result['peak_source']}); model FLOPs: {result['flops_convention']}",
        f"peak MiB: {result['memory_method']}",
        f"process peak MiB: {result['process_memory_method']}",
    ]
    headers = ["model", "params", "step\nms", "tgt\ntok/s", "model\nTFLOP/s", "MFU",
               "peak\nMiB", "process\npeak MiB"]
    return _table("train step", headers, cells, notes)


def render_infer(result: dict[str, Any], warmup: int, repeats: int) -> list[RenderableType]:
    cells = [[row["search"], str(row["batch"]), _fmt(row["call"]["p50_ms"]),
              _fmt(row["call"]["p95_ms"]), _fmt(row["sentences_per_s"]),
              _fmt(row["tgt_tokens_per_s"])] for row in result["rows"]]
    notes = [
        f"{result['precision']} (as eval and translate decode), key/value cache; every sentence "
        f"decodes exactly {result['max_len_b']} tokens + EOS (EOS logit suppressed until the "
        f"length limit, max_len_a=0, max_len_b={result['max_len_b']}); sources of "
        f"{SENTENCE_LENGTHS[0]}-{SENTENCE_LENGTHS[1]} subwords",
        f"p50/p95 ms: latency of one call (the batch 1 rows: single-sentence latency) over "
        f"{repeats} timed runs after {warmup} warm-up runs; rates use the median",
        *([f"ctranslate2: skipped, {result['ctranslate2_skipped']}"]
          if result.get("ctranslate2_skipped") else []),
    ]
    headers = ["search", "batch", "p50 ms", "p95 ms", "sent/s", "tgt tok/s"]
    return _table("decoding", headers, cells, notes)


RENDERERS = {"attention": render_attention, "train": render_train, "infer": render_infer}


def render_threads(threads: dict[str, Any]) -> Text:
    """The thread settings the run used, on one line: torch's pools, then the environment
    settings that were set, then those that were not."""
    env = {name: value for name, value in threads.items() if not name.startswith("torch_")}
    words = [f"threads: torch {threads['torch_threads']}, inter-op "
             f"{threads['torch_interop_threads']}",
             *(f"{name}={value}" for name, value in env.items() if value is not None)]
    if unset := [name for name, value in env.items() if value is None]:
        words.append(f"unset: {', '.join(unset)}")
    return Text(" · ".join(words), style="dim")


def _taken(load: dict[str, Any] | None, usable: int) -> str:
    """CPUs' worth taken from this process's usable CPUs, and their share of them."""
    if load is None:
        return "unknown"
    return f"{load['others_share'] * usable:.2f} ({load['others_share']:.0%})"


def render_load(suite: str, load: dict[str, Any], usable: int) -> list[RenderableType]:
    """A warning when other processes took a busy share of the CPUs before or during `suite`
    (see core.machine_load for the rule), else one dim line of what they took: either way the
    reader sees that the machine was checked, and what its figures are worth."""
    if load["busy"] is None:
        return [Text(f"machine load during the {suite} suite: unknown (no /proc/stat here); "
                     "its timings assume nothing else ran", style="dim")]
    taken = (f"{_taken(load['before'], usable)} of the {usable} usable CPUs before it and "
             f"{_taken(load['during'], usable)} during it")
    if not load["busy"]:
        return [Text(f"machine load: other processes took {taken}: alone", style="dim")]
    return [Text(f"warning: the {suite} suite ran beside other work: other processes took "
                 f"{taken}, so its timings are slower than this machine alone gives; rerun it "
                 "alone (docs/benchmarks.md, \"When the machine is not alone\")",
                 style="bold yellow")]
