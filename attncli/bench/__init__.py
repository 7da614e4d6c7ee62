"""`attncli bench`: attention kernels, training throughput (with MFU) and decoding speed.

Three suites, one timer (`timing.measure`: warm-up, repeated runs, median, CUDA
events on GPU, peak memory in an extra untimed run) and one report: each suite returns plain
data, the tables are drawn from that data and ``--json`` writes the same data, so the screen
and the file never disagree.

* attention: reference (spelled out), fused (``scaled_dot_product_attention``, with the kernel
  it dispatched to) and additive attention, forward and forward+backward, over sequence lengths;
* train: tokens/s and MFU of a full ``train_step`` for the config's model, next to a peer built
  from ``torch.nn.Transformer`` with the same sizes, batches, precision and optimizer;
* infer: greedy and beam-5 decoding at batch 1 and 64 with a fixed output length, and the
  same model through its CTranslate2 export (on CPU, when ctranslate2 is installed).

Imports every layer up to `training` (its train step), never `serve`. One module per job:
``timing`` (the timer), ``peaks`` (the device's peak throughput), ``flops`` (the FLOP model),
``peer`` (the torch.nn.Transformer peer), ``attention_suite``, ``train_suite``,
``infer_suite``, ``render`` (the tables) and ``command`` (the CLI entry and the JSON report).
Each suite is measured beside what other processes take of the CPUs (``core.machine_load``):
a busy machine marks the report and prints a warning.
"""

from attncli.bench.attention_suite import AttentionSizes, run_attention_suite
from attncli.bench.command import (
    SUITES,
    BenchSizes,
    bench_command,
    default_config_path,
    run_bench,
    write_json,
)
from attncli.bench.flops import attention_flops, seq2seq_forward_flops
from attncli.bench.peaks import device_peak, measured_matmul_peak, spec_bf16_peak
from attncli.bench.peer import TorchTransformerPeer
from attncli.bench.train_suite import run_train_suite, synthetic_batches

__all__ = ["SUITES", "AttentionSizes", "BenchSizes", "TorchTransformerPeer", "attention_flops",
           "bench_command", "default_config_path", "device_peak", "measured_matmul_peak",
           "run_attention_suite", "run_bench", "run_train_suite", "seq2seq_forward_flops",
           "spec_bf16_peak", "synthetic_batches", "write_json"]
