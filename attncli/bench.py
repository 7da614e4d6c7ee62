"""`attncli bench`: attention kernels, training throughput (with MFU) and decoding speed.

Three suites, one timer (`attncli.timing.measure`: warm-up, repeated runs, median, CUDA
events on GPU, peak memory in an extra untimed run) and one report: each suite returns plain
data, the tables are drawn from that data and ``--json`` writes the same data, so the screen
and the file never disagree.

* attention: reference (spelled out), fused (``scaled_dot_product_attention``, with the kernel
  it dispatched to) and additive attention, forward and forward+backward, over sequence lengths;
* train: tokens/s and MFU of a full ``train_step`` for the config's model, next to a peer built
  from ``torch.nn.Transformer`` with the same sizes, batches, precision and optimizer;
* infer: greedy and beam-5 decoding at batch 1 and 64 with a fixed output length.
"""

from __future__ import annotations

import math
import platform
import random
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text
from torch import Tensor, nn

from attncli import __version__
from attncli.batching import Batch, collate, pad, token_batches
from attncli.config import Config, ModelConfig, load_config
from attncli.device import (
    allow_tf32,
    autocast,
    resolve_decode_precision,
    resolve_device,
    resolve_pad_multiple,
    resolve_precision,
    set_threads,
)
from attncli.distributed import SummedLoss
from attncli.errors import AttncliError
from attncli.model.attention import (
    AdditiveScore,
    additive_attention,
    reference_attention,
)
from attncli.model.layers import SinusoidalPositions
from attncli.model.loss import projected_cross_entropy
from attncli.model.transformer import Seq2SeqTransformer
from attncli.timing import MEMORY_METHOD, Timing, measure, ops_called
from attncli.tokenizer import EOS_ID, PAD_ID
from attncli.train import make_optimizer, train_step

SUITES = ("attention", "train", "infer")
CONFIGS = Path(__file__).resolve().parents[1] / "configs"
SENTENCE_LENGTHS = (20, 30)  # synthetic sentences: subwords, like a typical Multi30k pair
MIB = 2**20

# --------------------------------------------------------------------------------------------
# The device: its name and its peak matrix throughput
# --------------------------------------------------------------------------------------------

# Dense bf16 tensor-core peaks from NVIDIA's data sheets (the sparsity figures halved), matched
# against torch.cuda.get_device_name(); the first entry whose words all occur wins.
BF16_DENSE_PEAKS: tuple[tuple[tuple[str, ...], float], ...] = (
    (("h100", "pcie"), 756e12),
    (("h100", "nvl"), 835e12),
    (("h100",), 989e12),  # SXM5, reported as "NVIDIA H100 80GB HBM3"
    (("h200",), 989e12),  # H200 and GH200
    (("a100",), 312e12),
)


def device_name(device: torch.device) -> str:
    """The GPU's marketing name, or the CPU model from /proc/cpuinfo where there is one."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def spec_bf16_peak(name: str) -> float | None:
    """Data-sheet dense bf16 FLOP/s for a known GPU name, else None."""
    lowered = name.lower()
    for words, peak in BF16_DENSE_PEAKS:
        if all(w in lowered for w in words):
            return peak
    return None


def _matmul_runner(a: Tensor, b: Tensor, out: Tensor) -> Callable[[], object]:
    return lambda: torch.matmul(a, b, out=out)


def measured_matmul_peak(device: torch.device, dtype: torch.dtype, warmup: int, repeats: int,
                         sizes: Sequence[int] | None = None) -> float:
    """Best square-matmul FLOP/s over a few sizes (median per size): the fallback peak."""
    sizes = sizes or ((4096, 8192) if device.type == "cuda" else (1024, 2048))
    best = 0.0
    for n in sizes:
        a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
        out = torch.empty(n, n, device=device, dtype=dtype)  # no allocation inside the timing
        timing = measure(_matmul_runner(a, b, out), max(warmup, 1), repeats, device)
        best = max(best, 2 * n**3 / timing.median_s)
    return best


def device_peak(device: torch.device, precision: str, warmup: int, repeats: int
                ) -> tuple[float, str]:
    """(peak FLOP/s, where it comes from) for MFU: the data sheet if known, else measured."""
    if device.type == "cuda" and precision == "bf16":
        spec = spec_bf16_peak(device_name(device))
        if spec is not None:
            return spec, "data sheet, dense bf16"
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    peak = measured_matmul_peak(device, dtype, warmup, repeats)
    return peak, f"measured {str(dtype).removeprefix('torch.')} matmul on this device"


# --------------------------------------------------------------------------------------------
# Attention suite
# --------------------------------------------------------------------------------------------

FWD_BWD_FLOP_FACTOR = 3  # backward = 2 x forward (dQ, dK from dS; dV, dP from dO)

# aten operators behind scaled_dot_product_attention -> the kernel's name in the table.
SDPA_KERNELS = {
    "aten::_scaled_dot_product_flash_attention_for_cpu": "flash (CPU)",
    "aten::_scaled_dot_product_flash_attention": "flash",
    "aten::_scaled_dot_product_efficient_attention": "memory-efficient",
    "aten::_scaled_dot_product_cudnn_attention": "cuDNN",
    "aten::_scaled_dot_product_attention_math": "math",
    "aten::_scaled_dot_product_fused_attention_overrideable": "overrideable",
}


@dataclass(frozen=True)
class AttentionSizes:
    """Fixed batch x heads x head_dim, varying sequence length (self-attention, T = S).

    ``additive_cap_bytes`` bounds the (batch, heads, T, T, head_dim) tensor that additive
    attention materialises; longer lengths are skipped and the reason is shown.
    """

    batch: int
    heads: int
    head_dim: int
    lengths: tuple[int, ...]
    additive_cap_bytes: int

    @classmethod
    def for_device(cls, device: torch.device) -> AttentionSizes:
        if device.type == "cuda":
            return cls(4, 8, 64, tuple(2**i for i in range(6, 13)), 2 * 1024 * MIB)
        # CPU: batch 1 keeps every T x T tensor at 1024 within 16 MiB (bf16), small enough for
        # the C allocator to reuse between runs instead of page-faulting fresh memory each time.
        return cls(1, 8, 64, tuple(2**i for i in range(6, 11)), 32 * MIB)


def attention_flops(batch: int, heads: int, q_len: int, k_len: int, head_dim: int) -> float:
    """Forward FLOPs of QKᵀ and AV: 2 matmuls x 2 FLOPs per multiply-add = 4·B·H·T·S·D.

    Additive attention is counted the same way (wᵀ·tanh(·) over the T·S·D hidden tensor and
    AV), its elementwise add and tanh not counted; softmax is never counted.
    """
    return 4.0 * batch * heads * q_len * k_len * head_dim


def sdpa_kernel_used(q: Tensor, k: Tensor, v: Tensor) -> str:
    """Which kernel the default ``scaled_dot_product_attention`` dispatch picks for these
    inputs, read from the aten operator the profiler saw."""
    with torch.no_grad():
        names = ops_called(lambda: F.scaled_dot_product_attention(q, k, v))
    found = [kernel for op, kernel in SDPA_KERNELS.items() if op in names]
    return found[0] if found else "unknown"


def sdpa_kernels_that_run(q: Tensor, k: Tensor, v: Tensor) -> list[str]:
    """The backends that accept these inputs when each is the only one allowed."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = {"flash": SDPBackend.FLASH_ATTENTION, "memory-efficient":
                SDPBackend.EFFICIENT_ATTENTION, "cuDNN": SDPBackend.CUDNN_ATTENTION,
                "math": SDPBackend.MATH}
    runs = []
    for name, backend in backends.items():
        try:
            with warnings.catch_warnings(), sdpa_kernel([backend]), torch.no_grad():
                warnings.simplefilter("ignore")  # "kernel not used because ..." explanations
                F.scaled_dot_product_attention(q, k, v)
            runs.append(name)
        except (RuntimeError, NotImplementedError):
            pass
    return runs


def _attention_paths(head_dim: int, device: torch.device, dtype: torch.dtype
                     ) -> dict[str, tuple[Callable[[Tensor, Tensor, Tensor], Tensor],
                                          list[Tensor]]]:
    """path name -> (fn(q, k, v) -> output, the parameters it also takes gradients of)."""
    score = AdditiveScore(head_dim).to(device=device, dtype=dtype)
    # "fused" is torch's kernel itself: the model's fused_attention writes the computation out
    # on CPU in bf16 (see there), and this table is where that choice can be checked.
    return {
        "reference": (lambda q, k, v: reference_attention(q, k, v)[0], []),
        "fused": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v), []),
        "additive": (lambda q, k, v: additive_attention(q, k, v, score)[0],
                     list(score.parameters())),
    }


def _forward_runner(path: Callable, q: Tensor, k: Tensor, v: Tensor) -> Callable[[], object]:
    def run() -> None:
        with torch.no_grad():
            path(q, k, v)
    return run


def _forward_backward_runner(path: Callable, q: Tensor, k: Tensor, v: Tensor,
                             params: list[Tensor]) -> Callable[[], object]:
    inputs = [q, k, v, *params]
    grad_out = torch.randn_like(q)

    def run() -> None:
        torch.autograd.grad(path(q, k, v), inputs, grad_out)  # no .grad accumulation
    return run


def _timed_mode(run: Callable[[], object], flops: float, device: torch.device, warmup: int,
                repeats: int) -> dict[str, Any]:
    """Timing + peak memory + TFLOP/s of one cell, or the reason it could not run."""
    try:
        timing = measure(run, warmup, repeats, device, memory=True)
    except torch.OutOfMemoryError:
        torch.cuda.empty_cache()
        return {"skipped": "out of memory"}
    return {**timing.to_json(), "tflops": flops / timing.median_s / 1e12}


def run_attention_suite(device: torch.device, dtype: torch.dtype, sizes: AttentionSizes,
                        warmup: int, repeats: int) -> dict[str, Any]:
    """Every path x length x {forward, forward+backward}; see `AttentionSizes`."""
    b, h, d = sizes.batch, sizes.heads, sizes.head_dim
    paths = _attention_paths(d, device, dtype)
    itemsize = torch.empty((), dtype=dtype).element_size()
    rows: list[dict[str, Any]] = []
    kernels_that_run: list[str] = []
    for name, (path, params) in paths.items():
        for t in sizes.lengths:
            row: dict[str, Any] = {"path": name, "seq_len": t, "kernel": None}
            hidden_bytes = b * h * t * t * d * itemsize
            if name == "additive" and hidden_bytes > sizes.additive_cap_bytes:
                reason = (f"its (B, H, T, T, D) tanh input would take {hidden_bytes / MIB:,.0f} "
                          f"MiB, over the {sizes.additive_cap_bytes / MIB:,.0f} MiB cap")
                row["forward"] = row["forward_backward"] = {"skipped": reason}
                rows.append(row)
                continue
            q, k, v = (torch.randn(b, h, t, d, device=device, dtype=dtype, requires_grad=True)
                       for _ in range(3))
            if name == "fused":
                row["kernel"] = sdpa_kernel_used(q, k, v)
                if not kernels_that_run:
                    kernels_that_run = sdpa_kernels_that_run(q, k, v)
            flops = attention_flops(b, h, t, t, d)
            row["forward"] = _timed_mode(_forward_runner(path, q, k, v), flops, device, warmup,
                                         repeats)
            row["forward_backward"] = _timed_mode(
                _forward_backward_runner(path, q, k, v, params), FWD_BWD_FLOP_FACTOR * flops,
                device, warmup, repeats)
            rows.append(row)
    return {
        "batch": b, "heads": h, "head_dim": d, "lengths": list(sizes.lengths),
        "dtype": str(dtype).removeprefix("torch."), "mask": None,
        "additive_cap_bytes": sizes.additive_cap_bytes,
        "sdpa_kernels_that_run_alone": kernels_that_run,
        "flops_convention": "forward 4·B·H·T²·D (QKᵀ and AV; additive: wᵀtanh and AV); "
                            f"forward+backward {FWD_BWD_FLOP_FACTOR}x forward (backward = 2x "
                            "forward; the flash backward's recomputation of QKᵀ not counted)",
        "memory_method": MEMORY_METHOD[device.type],
        "rows": rows,
    }


# --------------------------------------------------------------------------------------------
# Train suite
# --------------------------------------------------------------------------------------------


class TorchTransformerPeer(nn.Module):
    """``torch.nn.Transformer`` with our sizes and our embedding/output layers: the yardstick.

    Same d_model, heads, layers, feed-forward width, dropout (residual and feed-forward; the
    attention-weight dropout set to ours), norm placement (``norm_first`` for pre-norm), √d-
    scaled tied embeddings plus the same sinusoidal positions, and the same output projection
    with a bias: for pre-norm models the parameter count equals ours (post-norm: torch adds a
    final norm per stack). Masks as ours: key padding on source keys, causal decoder
    self-attention. Same ``forward(src, tgt_in)`` so `train_step` drives both.
    """

    def __init__(self, cfg: ModelConfig, src_vocab: int, tgt_vocab: int, pad_id: int = 0):
        super().__init__()
        self.pad_id, self.d_model = pad_id, cfg.d_model
        self.src_embed = nn.Embedding(src_vocab, cfg.d_model, padding_idx=pad_id)
        self.tgt_embed = (self.src_embed if cfg.tie_embeddings
                          else nn.Embedding(tgt_vocab, cfg.d_model, padding_idx=pad_id))
        self.positions = SinusoidalPositions(cfg.d_model, cfg.max_positions)
        self.embed_dropout = nn.Dropout(cfg.dropout)
        with warnings.catch_warnings():  # "enable_nested_tensor ... norm_first was True"
            warnings.simplefilter("ignore", UserWarning)
            self.transformer = nn.Transformer(
                d_model=cfg.d_model, nhead=cfg.heads, num_encoder_layers=cfg.enc_layers,
                num_decoder_layers=cfg.dec_layers, dim_feedforward=cfg.ff_dim,
                dropout=cfg.dropout, activation="relu", batch_first=True,
                norm_first=cfg.norm == "pre",
            )
        for module in self.transformer.modules():
            if isinstance(module, nn.MultiheadAttention):
                module.dropout = cfg.attention_dropout
        self.output_bias = nn.Parameter(torch.zeros(tgt_vocab))
        self.output = (None if cfg.tie_embeddings
                       else nn.Linear(cfg.d_model, tgt_vocab, bias=False))
        for embedding in {self.src_embed, self.tgt_embed}:
            nn.init.normal_(embedding.weight, mean=0.0, std=cfg.d_model**-0.5)
            with torch.no_grad():
                embedding.weight[pad_id].zero_()

    def _embed(self, embedding: nn.Embedding, tokens: Tensor) -> Tensor:
        x = embedding(tokens) * math.sqrt(self.d_model)
        return self.embed_dropout(x + self.positions(tokens.size(1)).to(x.dtype))

    @property
    def output_weight(self) -> Tensor:
        return self.tgt_embed.weight if self.output is None else self.output.weight

    def _hidden(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        src_pad = src == self.pad_id  # True = ignore (torch's convention, the reverse of ours)
        tgt_len = tgt_in.size(1)
        future = torch.ones(tgt_len, tgt_len, dtype=torch.bool, device=src.device).triu(1)
        return self.transformer(
            self._embed(self.src_embed, src), self._embed(self.tgt_embed, tgt_in),
            tgt_mask=future, src_key_padding_mask=src_pad, memory_key_padding_mask=src_pad,
            tgt_is_causal=True,
        )

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """src (batch, src_len), tgt_in (batch, tgt_len) -> logits (batch, tgt_len, vocab)."""
        return F.linear(self._hidden(src, tgt_in), self.output_weight, self.output_bias)

    def summed_loss(self, src: Tensor, tgt_in: Tensor, tgt_out: Tensor, label_smoothing: float,
                    compute_dtype: torch.dtype = torch.float32) -> Tensor:
        """The same fused projection + loss as ours, so the comparison is of the layers."""
        hidden = self._hidden(src, tgt_in)
        return projected_cross_entropy(hidden, self.output_weight, self.output_bias, tgt_out,
                                       self.pad_id, label_smoothing, compute_dtype)


def synthetic_batches(vocab: int, batch_tokens: int, count: int, seed: int,
                      lengths: tuple[int, int] = SENTENCE_LENGTHS, multiple: int = 1
                      ) -> list[Batch]:
    """``count`` token batches of random sentences, cut by the trainer's own `token_batches`.

    Target lengths are uniform in ``lengths``, sources within ±3 of their target, ids drawn
    from the real (non-special) vocabulary: realistic shapes and padding, no data needed.
    The fullest ``count`` batches are kept (the last batch of a cut is often short).
    """
    rng = random.Random(seed)
    n = count * (batch_tokens // (lengths[0] + 1) + 1) * 2
    tgt = [[rng.randrange(EOS_ID + 1, vocab) for _ in range(rng.randint(*lengths))]
           for _ in range(n)]
    src = [[rng.randrange(EOS_ID + 1, vocab)
            for _ in range(max(1, len(t) + rng.randint(-3, 3)))] + [EOS_ID] for t in tgt]
    cut = token_batches([len(s) for s in src], [len(t) for t in tgt], batch_tokens, seed, 0,
                        multiple)
    cut.sort(key=len, reverse=True)
    return [collate([src[i] for i in ids], [tgt[i] for i in ids], multiple)
            for ids in cut[:count]]


def seq2seq_forward_flops(cfg: ModelConfig, vocab: int, batch: Batch) -> float:
    """Forward model FLOPs of one batch: matrix multiplies only, 2 FLOPs per multiply-add.

    Per real (non-pad) token, with d = d_model, f = ff_dim, V = vocab:
      source token, per encoder layer: Q/K/V/out projections 4d², feed-forward 2df;
      target token, per decoder layer: self Q/K/V/out 4d², cross Q/out 2d², feed-forward 2df;
      source token, per decoder layer: cross K/V 2d² (computed once per sentence);
      target token: output projection dV (tied or not: it is a real matmul).
    Attention, per sentence (QKᵀ and AV, 2·d multiply-adds per query-key pair): S² per encoder
    layer, T² (the full square, causal half not subtracted) and T·S per decoder layer.
    Padding is not counted: compute spent on it lowers MFU, as it should. Embedding lookups,
    norms, softmax and biases are left out. A training step is 3 x this (backward = 2 x).
    """
    d, f = cfg.d_model, cfg.ff_dim
    src_lens = (batch.src != PAD_ID).sum(dim=1).tolist()
    tgt_lens = (batch.tgt_out != PAD_ID).sum(dim=1).tolist()
    macs = 0
    for s, t in zip(src_lens, tgt_lens, strict=True):
        macs += cfg.enc_layers * (s * (4 * d * d + 2 * d * f) + 2 * s * s * d)
        macs += cfg.dec_layers * (t * (6 * d * d + 2 * d * f) + s * 2 * d * d
                                  + 2 * t * t * d + 2 * t * s * d)
        macs += t * d * vocab
    return 2.0 * macs


def _train_runner(model: nn.Module, cfg: Config, batches: list[Batch], device: torch.device,
                  precision: str, seen: list[Batch]) -> Callable[[], object]:
    """One optimizer update per call, cycling through ``batches``; ``seen`` logs which."""
    optimizer = make_optimizer(model, cfg.train)
    loss_fn = SummedLoss(model)

    def step() -> None:
        batch = batches[len(seen) % len(batches)]
        seen.append(batch)
        train_step(loss_fn, optimizer, [batch], cfg.train, cfg.train.lr, device, precision)
    return step


def run_train_suite(cfg: Config, device: torch.device, precision: str, warmup: int,
                    repeats: int, peak: tuple[float, str], num_batches: int = 4
                    ) -> dict[str, Any]:
    """Tokens/s and MFU of `train_step` for our model and the `TorchTransformerPeer`.

    Both see the same batches in the same order, the same precision and optimizer. Rates are
    per timed step (its own target tokens and FLOPs over its own time), then the median.
    Warm-up covers every batch at least once: the first step of each new shape pays for
    kernel selection (oneDNN builds a kernel per shape on CPU), which is not training speed.
    """
    vocab = cfg.tokenizer.vocab_size
    multiple = resolve_pad_multiple(cfg.train.pad_multiple, device, precision)
    batches = synthetic_batches(vocab, cfg.train.batch_tokens, num_batches, cfg.train.seed,
                                multiple=multiple)
    warmup_steps = max(warmup, len(batches))
    flops = {id(b): FWD_BWD_FLOP_FACTOR * seq2seq_forward_flops(cfg.model, vocab, b)
             for b in batches}
    peak_flops, peak_source = peak
    rows = []
    for name, build in (("attncli Seq2SeqTransformer", Seq2SeqTransformer),
                        ("torch.nn.Transformer peer", TorchTransformerPeer)):
        torch.manual_seed(cfg.train.seed)
        model = build(cfg.model, vocab, vocab, PAD_ID).to(device)
        seen: list[Batch] = []
        timing = measure(_train_runner(model, cfg, batches, device, precision, seen),
                         warmup_steps, repeats, device, memory=True)
        timed = seen[warmup_steps: warmup_steps + repeats]
        tokens_per_s = [b.num_tgt_tokens / t for b, t in zip(timed, timing.times_s, strict=True)]
        flops_per_s = [flops[id(b)] / t for b, t in zip(timed, timing.times_s, strict=True)]
        rows.append({
            "model": name,
            "parameters": sum(p.numel() for p in model.parameters()),
            "step": timing.to_json(),
            "tgt_tokens_per_s": _median(tokens_per_s),
            "model_tflops": _median(flops_per_s) / 1e12,
            "mfu": _median(flops_per_s) / peak_flops,
        })
        del model
    return {
        "config_model": cfg.model.model_dump(mode="json"),
        "vocab": vocab,
        "batch_tokens": cfg.train.batch_tokens,
        "batches": [{"sentences": b.src.size(0), "tgt_tokens": b.num_tgt_tokens,
                     "src_tokens": b.num_src_tokens, "padded_tgt_len": b.tgt_out.size(1)}
                    for b in batches],
        "precision": precision,
        "warmup_steps": warmup_steps,
        "optimizer": "AdamW (attncli.train.make_optimizer)",
        "compile": False,
        "peak_tflops": peak_flops / 1e12,
        "peak_source": peak_source,
        "flops_convention": "3 x forward model FLOPs (see attncli.bench.seq2seq_forward_flops): "
                            "matmuls of projections, feed-forward, output layer and attention "
                            "over real tokens",
        "memory_method": MEMORY_METHOD[device.type],
        "rows": rows,
        "ours_over_peer": rows[0]["tgt_tokens_per_s"] / rows[1]["tgt_tokens_per_s"],
    }


def _median(xs: Sequence[float]) -> float:
    return Timing(list(xs)).median_s


# --------------------------------------------------------------------------------------------
# Infer suite
# --------------------------------------------------------------------------------------------


def _decode_runner(model: Seq2SeqTransformer, src: Tensor, beam: int, output_len: int,
                   device: torch.device, precision: str, found: list[list[Any]]
                   ) -> Callable[[], object]:
    """One search call (greedy for beam 1); ``found`` keeps the last call's best hypotheses."""
    from attncli.search import beam_search, greedy_search

    def run() -> None:
        with autocast(device, precision):
            if beam == 1:
                best = greedy_search(model, src, 0, output_len)
            else:
                best = [hyps[0] for hyps in beam_search(model, src, beam, 0, output_len)]
        found[:] = best
    return run


def run_infer_suite(cfg: Config, device: torch.device, precision: str, warmup: int,
                    repeats: int, batch_sizes: Sequence[int] = (1, 64),
                    beams: Sequence[int] = (1, 5), output_len: int = 20) -> dict[str, Any]:
    """Greedy (beam 1) and beam search throughput and per-call latency percentiles.

    Random weights would end sentences at random places, so the EOS logit is pushed down to
    -1e4 through the output bias: every hypothesis then runs ``output_len`` tokens and the
    forced EOS (max_len_a=0, max_len_b=output_len), a known number of decoder steps. Tokens
    are counted from what the search returned (best hypothesis, its EOS included, as the
    train suite counts target tokens). Both searches decode the same sources.
    """
    vocab = cfg.tokenizer.vocab_size
    torch.manual_seed(cfg.train.seed)
    model = Seq2SeqTransformer(cfg.model, vocab, vocab, PAD_ID).to(device).eval()
    with torch.no_grad():
        model.output_bias[EOS_ID] = -1e4
    rng = random.Random(cfg.train.seed)
    sources = {n: pad([[rng.randrange(EOS_ID + 1, vocab)
                        for _ in range(rng.randint(*SENTENCE_LENGTHS))] + [EOS_ID]
                       for _ in range(n)]).to(device)  # (n, src_len)
               for n in batch_sizes}
    rows = []
    for beam in beams:
        for batch_size, src in sources.items():
            found: list[Any] = []
            timing = measure(_decode_runner(model, src, beam, output_len, device, precision,
                                            found), warmup, repeats, device)
            tokens = sum(len(h.tokens) + 1 for h in found)
            rows.append({
                "search": "greedy" if beam == 1 else f"beam {beam}",
                "beam": beam,
                "batch": batch_size,
                "call": timing.to_json(),
                "sentences_per_s": batch_size / timing.median_s,
                "tgt_tokens": tokens,
                "tgt_tokens_per_s": tokens / timing.median_s,
            })
    return {
        "config_model": cfg.model.model_dump(mode="json"),
        "vocab": vocab,
        "precision": precision,
        "source_lengths": list(SENTENCE_LENGTHS),
        "max_len_a": 0,
        "max_len_b": output_len,
        "eos_suppressed": True,
        "use_cache": True,
        "rows": rows,
    }


# --------------------------------------------------------------------------------------------
# Tables
# --------------------------------------------------------------------------------------------


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
    for row in result["rows"]:
        cell = [row["path"], str(row["seq_len"]), row["kernel"] or ""]
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
        f"{result['dtype']}, self-attention without mask; {_timing_note(warmup, repeats)}",
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
              f"{100 * row['mfu']:.1f}%", _mib(row["step"]["peak_mem_bytes"])]
             for row in result["rows"]]
    b = result["batches"]
    notes = [
        f"ours / peer tokens/s: {result['ours_over_peer']:.2f}x",
        f"{result['precision']} precision, {result['optimizer']}, eager (no torch.compile); "
        f"{_timing_note(result['warmup_steps'], repeats)} (warm-up: every batch once at least)",
        f"batches: {len(b)} synthetic token batches of batch_tokens={result['batch_tokens']}, "
        f"{b[0]['sentences']} sentences of {SENTENCE_LENGTHS[0]}-{SENTENCE_LENGTHS[1]} "
        f"subwords, ~{b[0]['tgt_tokens']:,} target tokens each (tok/s counts target tokens)",
        f"MFU = model FLOP/s / peak {result['peak_tflops']:.3g} TFLOP/s "
        f"({result['peak_source']}); model FLOPs: {result['flops_convention']}",
        f"peak MiB: {result['memory_method']}",
    ]
    headers = ["model", "params", "step\nms", "tgt\ntok/s", "model\nTFLOP/s", "MFU",
               "peak\nMiB"]
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
    ]
    headers = ["search", "batch", "p50 ms", "p95 ms", "sent/s", "tgt tok/s"]
    return _table("decoding", headers, cells, notes)


RENDERERS = {"attention": render_attention, "train": render_train, "infer": render_infer}


# --------------------------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------------------------


def run_bench(
    device: torch.device,
    suites: Sequence[str],
    cfg: Config,
    warmup: int,
    repeats: int,
    console: Console | None = None,
    attention_sizes: AttentionSizes | None = None,
    infer_batch_sizes: Sequence[int] = (1, 64),
    peak: tuple[float, str] | None = None,
) -> dict[str, Any]:
    """Run ``suites`` and return the report (what --json writes); print tables if ``console``.

    The sizes and ``peak`` (FLOP/s, its source) default to the device's; tests pass tiny ones.
    """
    precision = resolve_precision(cfg.train.precision, device)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    report: dict[str, Any] = {
        "attncli": __version__,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": device.type,
        "device_name": device_name(device),
        "threads": torch.get_num_threads(),
        "precision": precision,
        "dtype": str(dtype).removeprefix("torch."),
        "tf32": (torch.backends.cuda.matmul.allow_tf32 if device.type == "cuda" else None),
        "warmup": warmup,
        "repeats": repeats,
        "suites": {},
    }
    if console is not None:
        console.print(Text(
            f"attncli bench · {report['device_name']} ({device.type}, {report['threads']} "
            f"threads) · torch {torch.__version__} · {precision}", style="bold"))
    for suite in suites:
        start = time.perf_counter()
        status = console.status(f"{suite} suite…") if console is not None else nullcontext()
        with status:
            if suite == "attention":
                result = run_attention_suite(
                    device, dtype, attention_sizes or AttentionSizes.for_device(device), warmup,
                    repeats)
            elif suite == "train":
                result = run_train_suite(
                    cfg, device, precision, warmup, repeats,
                    peak or device_peak(device, precision, warmup, repeats))
            elif suite == "infer":
                result = run_infer_suite(
                    cfg, device, resolve_decode_precision(cfg.train.precision, device), warmup,
                    repeats, infer_batch_sizes)
            else:
                raise AttncliError(f"--suite {suite}: expected one of {', '.join(SUITES)}, all")
        result["wall_s"] = time.perf_counter() - start
        report["suites"][suite] = result
        if console is not None:
            for renderable in RENDERERS[suite](result, warmup, repeats):
                console.print(renderable)
    return report


def default_config_path(device: torch.device) -> Path:
    """configs/base.yaml (the paper's model) on CUDA, configs/small.yaml on CPU."""
    return CONFIGS / ("base.yaml" if device.type == "cuda" else "small.yaml")


def write_json(report: dict[str, Any], path: Path) -> None:
    from attncli.atomic import atomic_write_json

    atomic_write_json(path, report)


def bench_command(device: str, suite: str, config: Path | None, json_file: Path | None,
                  warmup: int, repeats: int) -> None:
    """`attncli bench`: resolve the device first (no CUDA -> one line, exit 2), then run."""
    dev = resolve_device(device)
    suites = SUITES if suite == "all" else (suite,)
    if json_file is not None and not json_file.parent.is_dir():
        raise AttncliError(f"--json {json_file}: folder {json_file.parent} does not exist")
    if config is None and not default_config_path(dev).is_file():
        cfg = Config()  # installed without the configs/ folder: the built-in defaults
    else:
        cfg = load_config(config or default_config_path(dev))
    set_threads(cfg.train.threads)
    allow_tf32(dev)  # as training does
    console = Console(width=None if sys.stdout.isatty() else 120)  # files/pipes: no folding
    report = run_bench(dev, suites, cfg, warmup, repeats, console)
    report["config"] = str(config or default_config_path(dev))
    if json_file is not None:
        write_json(report, json_file)
        console.print(f"wrote {json_file}")
