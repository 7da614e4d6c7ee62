"""`attncli bench`: the shared timer, the three suites at tiny sizes, the JSON report, the CLI.

No assertion here depends on how fast this machine is: the timer is checked with a clock the
test controls, the suites by the shape and consistency of what they report.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time

import pytest
import torch
from rich.console import Console

from attncli.bench import (
    AttentionSizes,
    BenchSizes,
    TorchTransformerPeer,
    attention_flops,
    measured_matmul_peak,
    run_bench,
    seq2seq_forward_flops,
    spec_bf16_peak,
    synthetic_batches,
    write_json,
)
from attncli.bench.render import RENDERERS
from attncli.bench.timing import Timing, measure
from attncli.core.config import Config, ModelConfig, TokenizerConfig, TrainConfig
from attncli.core.cpu_kind import detect_cpu_kind
from attncli.core.text import EOS_ID
from attncli.data.batching import collate
from attncli.model.transformer import Seq2SeqTransformer

CPU = torch.device("cpu")
TINY_ATTENTION = AttentionSizes(batch=1, heads=2, head_dim=16, lengths=(32, 512),
                                additive_cap_bytes=2**20)


@pytest.fixture
def tiny_config(tiny_model_config: ModelConfig) -> Config:
    return Config(model=tiny_model_config, tokenizer=TokenizerConfig(vocab_size=64),
                  train=TrainConfig(batch_tokens=128, precision="fp32"))


# --- the timer ------------------------------------------------------------------------------


class FakeClock:
    """A clock that only moves when the function under test says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_measure_times_only_the_repeats_and_returns_their_median():
    clock = FakeClock()
    durations = iter([100.0, 100.0, 5.0, 1.0, 4.0, 2.0, 3.0])  # 2 warm-up runs, then 5

    def fn() -> None:
        clock.now += next(durations)

    timing = measure(fn, warmup=2, repeats=5, device=CPU, clock=clock)
    assert timing.times_s == [5.0, 1.0, 4.0, 2.0, 3.0]  # in run order, warm-up left out
    assert timing.median_s == timing.p50_s == 3.0
    assert timing.p95_s == pytest.approx(4.8)  # between the two slowest, numpy's way
    assert timing.peak_mem_bytes is None


def test_measure_with_the_real_clock_times_each_repeat():
    sleeps = iter([0.0, 0.05, 0.0, 0.02])  # one warm-up, three timed

    timing = measure(lambda: time.sleep(next(sleeps)), warmup=1, repeats=3, device=CPU)
    slow, fast, middle = timing.times_s
    # A loaded machine can only make sleeps longer, so lower bounds are the safe check.
    assert slow >= 0.05 and middle >= 0.02 and fast >= 0.0
    assert timing.median_s == sorted(timing.times_s)[1]


def test_measure_memory_run_is_extra_and_sees_a_temporary():
    calls = []

    def fn() -> None:
        calls.append(1)
        torch.ones(1_000_000).sum()  # 4 MB held briefly

    timing = measure(fn, warmup=1, repeats=2, device=CPU, memory=True)
    assert len(calls) == 1 + 2 + 1
    assert timing.peak_mem_bytes >= 4_000_000


def test_timing_json_is_milliseconds():
    figures = Timing([0.001, 0.003, 0.002], peak_mem_bytes=10, warmup=1).to_json()
    assert figures["median_ms"] == pytest.approx(2.0)
    assert figures["times_ms"] == pytest.approx([1.0, 3.0, 2.0])
    assert figures["peak_mem_bytes"] == 10 and figures["warmup"] == 1


# --- attention suite ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def attention_report() -> dict:
    cfg = Config(train=TrainConfig(precision="fp32"))
    return run_bench(CPU, ["attention"], cfg, warmup=0, repeats=1,
                     sizes=BenchSizes(attention_sizes=TINY_ATTENTION))


def _cell(report: dict, path: str, seq_len: int) -> dict:
    rows = report["suites"]["attention"]["rows"]
    return next(r for r in rows if r["path"] == path and r["seq_len"] == seq_len)


def test_reference_memory_exceeds_fused_at_the_longest_length(attention_report):
    longest = TINY_ATTENTION.lengths[-1]
    for mode in ("forward", "forward_backward"):
        reference = _cell(attention_report, "reference", longest)[mode]["peak_mem_bytes"]
        fused = _cell(attention_report, "fused", longest)[mode]["peak_mem_bytes"]
        assert reference > fused > 0
    # the (B, H, T, T) score matrix alone is 2 MiB in fp32 here: the reference path holds it
    assert _cell(attention_report, "reference", longest)["forward"]["peak_mem_bytes"] >= 2**21


def test_attention_rows_cover_every_path_and_length(attention_report):
    suite = attention_report["suites"]["attention"]
    assert {(r["path"], r["seq_len"]) for r in suite["rows"]} == {
        (p, t) for p in ("reference", "fused", "additive") for t in TINY_ATTENTION.lengths}
    fused = _cell(attention_report, "fused", 32)
    assert fused["kernel"] in ("flash (CPU)", "math")
    assert "math" in suite["sdpa_kernels_that_run_alone"]
    figures = fused["forward_backward"]
    flops = 3 * attention_flops(1, 2, 32, 32, 16)
    assert figures["tflops"] == pytest.approx(flops / (figures["median_ms"] / 1e3) / 1e12)


def test_attention_flops_agree_with_torchs_flop_counter_for_both_scorings():
    """Additive attention's own projections of queries and keys were left out: its TFLOP/s
    read half the true rate at T = 64."""
    from torch.utils.flop_counter import FlopCounterMode

    from attncli.model.attention import AdditiveScore, additive_attention

    b, h, t, d = 2, 2, 8, 16
    q, k, v = (torch.randn(b, h, t, d) for _ in range(3))
    with FlopCounterMode(display=False) as counter:
        additive_attention(q, k, v, AdditiveScore(d))
    assert counter.get_total_flops() == attention_flops(b, h, t, t, d, additive=True)
    with FlopCounterMode(display=False) as counter:
        torch.matmul(torch.softmax(q @ k.transpose(-2, -1), dim=-1), v)
    assert counter.get_total_flops() == attention_flops(b, h, t, t, d)


def test_the_benchmark_mask_spreads_real_keys_from_t_down_to_three_quarters():
    from attncli.bench.attention_suite import key_padding_mask

    real = key_padding_mask(4, 64, torch.device("cpu")).sum(dim=-1).flatten().tolist()
    assert real == [64, 59, 54, 48]
    assert key_padding_mask(1, 64, torch.device("cpu")).all()


def test_additive_over_the_cap_is_skipped_with_a_reason(attention_report):
    measured = _cell(attention_report, "additive", 32)
    skipped = _cell(attention_report, "additive", 512)
    assert measured["forward"]["median_ms"] > 0
    for mode in ("forward", "forward_backward"):
        assert "cap" in skipped[mode]["skipped"]


def test_json_report_has_device_torch_dtype_and_figures(attention_report, tmp_path):
    path = tmp_path / "bench.json"
    write_json(attention_report, path)
    report = json.loads(path.read_text())
    assert report["device"] == "cpu" and report["device_name"]
    assert report["torch"] == torch.__version__
    assert report["dtype"] == "float32" and report["precision"] == "fp32"
    assert report["cpu_kind"] == detect_cpu_kind().record()  # what precision: auto reads
    row = report["suites"]["attention"]["rows"][0]
    assert row["forward"]["median_ms"] > 0 and len(row["forward"]["times_ms"]) == 1


def test_the_fused_path_is_timed_with_the_key_mask_training_passes(tiny_model_config):
    """The mask picks the kernel (flash takes none): the bench hands scaled_dot_product_attention
    the same kind of mask as the model's encoder does in training, boolean (batch, 1, 1, T)."""
    from unittest import mock

    import torch.nn.functional as F

    sdpa = F.scaled_dot_product_attention
    model = Seq2SeqTransformer(tiny_model_config, 50, 50, pad_id=0).train()
    src = torch.tensor([[5, 6, 7, 8], [5, 6, 0, 0]])
    with mock.patch.object(F, "scaled_dot_product_attention", wraps=sdpa) as spy:
        model.encode(src)
    trained = spy.call_args.kwargs["attn_mask"]
    sizes = AttentionSizes(batch=4, heads=2, head_dim=16, lengths=(32,), additive_cap_bytes=0)
    with mock.patch.object(F, "scaled_dot_product_attention", wraps=sdpa) as spy:
        suite = run_bench(CPU, ["attention"], Config(train=TrainConfig(precision="fp32")),
                          warmup=0, repeats=1,
                          sizes=BenchSizes(attention_sizes=sizes))["suites"]["attention"]
    masks = [call.kwargs["attn_mask"] for call in spy.call_args_list]
    assert masks and all(m is not None and m.dtype == trained.dtype == torch.bool for m in masks)
    assert {m.shape for m in masks} == {(4, 1, 1, 32)} and trained.shape == (2, 1, 1, 4)
    lengths = masks[0].sum(-1).flatten().tolist()
    assert lengths[0] == 32 and min(lengths) >= 24 and len(set(lengths)) > 1  # some padding
    assert suite["mask"].startswith("key padding")


# --- train suite ----------------------------------------------------------------------------


def test_peer_has_our_sizes(tiny_config):
    ours = Seq2SeqTransformer(tiny_config.model, 64, 64)
    peer = TorchTransformerPeer(tiny_config.model, 64, 64)
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(peer) == count(ours)  # pre-norm: the same layers, norms and tied embeddings
    batch = synthetic_batches(64, 128, 1, seed=0)[0]
    assert peer(batch.src, batch.tgt_in).shape == ours(batch.src, batch.tgt_in).shape


def test_synthetic_batches_fit_the_token_budget():
    batches = synthetic_batches(vocab=100, batch_tokens=300, count=3, seed=1)
    lengths = {int(n) for b in synthetic_batches(100, 300, 6, seed=1)
               for n in (b.tgt_out != 0).sum(dim=1)}
    assert max(lengths) >= 27  # the long sentences are timed too, not the shortest only
    assert len(batches) == 3
    for batch in batches:
        assert batch.tgt_out.numel() <= 300
        assert batch.src.max() < 100 and batch.num_tgt_tokens > 0


@pytest.mark.parametrize("scoring", ["dot", "additive"])
def test_flop_count_agrees_with_torchs_flop_counter(scoring):
    """The bench's FLOP model against torch's own count of the real small.yaml model's forward
    (every matmul it runs), on a batch without padding: within 2%. The attention is written out
    (`attention: reference`) because torch's counter counts nothing for the CPU fused kernel
    (`scaled_dot_product_attention` there counts 0 FLOPs), and the model's FLOPs do not depend
    on which path computes them."""
    from torch.utils.flop_counter import FlopCounterMode

    from attncli.core.config_files import load_config

    cfg = load_config("configs/small.yaml").model.model_copy(
        update={"attention": "reference", "scoring": scoring})
    vocab = 8000
    model = Seq2SeqTransformer(cfg, vocab, vocab).eval()
    generator = torch.Generator().manual_seed(0)
    src = torch.randint(4, vocab, (6, 23), generator=generator)
    src[:, -1] = EOS_ID
    tgt = torch.randint(4, vocab, (6, 19), generator=generator)
    batch = collate(src.tolist(), tgt.tolist())
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        model(batch.src, batch.tgt_in)
    assert seq2seq_forward_flops(cfg, vocab, batch) == pytest.approx(
        counter.get_total_flops(), rel=0.02)


def test_train_suite_reports_tokens_mfu_and_the_peer_ratio(tiny_config):
    report = run_bench(CPU, ["train"], tiny_config, warmup=1, repeats=2,
                       sizes=BenchSizes(peak=(1e12, "given by the test")))
    suite = report["suites"]["train"]
    ours, peer = suite["rows"]
    for row in (ours, peer):
        assert row["tgt_tokens_per_s"] > 0 and row["mfu"] > 0
        assert len(row["step"]["times_ms"]) == 2 and row["step"]["peak_mem_bytes"] > 0
        # the process holds all the allocator held, and torch's libraries besides
        assert row["process_peak_rss_bytes"] > row["step"]["peak_mem_bytes"]
    assert suite["ours_over_peer"] == pytest.approx(
        ours["tgt_tokens_per_s"] / peer["tgt_tokens_per_s"])
    assert suite["precision"] == "fp32" and suite["peak_source"] == "given by the test"
    assert suite["warmup_steps"] == len(suite["batches"])  # each batch shape warmed up
    assert ours["mfu"] == pytest.approx(ours["model_tflops"] / 1.0)
    assert suite["pad_multiple"] == 1  # fp32 on CPU: exact lengths (tiny_config's auto)
    console = Console(record=True, width=200)
    for renderable in RENDERERS["train"](suite, 1, 2):
        console.print(renderable)
    shown = console.export_text()
    assert "chosen for this device: fp32, batch lengths rounded to multiples of 1" in shown
    assert "the peer ran with the same" in shown and "(given by the test)" in shown


def test_an_additive_model_is_not_compared_with_the_dot_product_peer(tiny_config):
    additive = tiny_config.model_copy(update={"model": tiny_config.model.model_copy(
        update={"scoring": "additive"})})
    report = run_bench(CPU, ["train", "infer"], additive, warmup=1, repeats=1,
                       sizes=BenchSizes(peak=(1e12, "given by the test"), infer_batch_sizes=(1,)))
    train, infer = report["suites"]["train"], report["suites"]["infer"]
    assert [row["model"] for row in train["rows"]] == ["attncli Seq2SeqTransformer"]
    assert train["ours_over_peer"] is None and "dot-product" in train["peer_skipped"]
    assert not any(row["search"].startswith("ctranslate2") for row in infer["rows"])
    assert "cannot be exported" in infer["ctranslate2_skipped"]


def test_measured_matmul_peak_is_positive():
    assert measured_matmul_peak(CPU, torch.float32, warmup=0, repeats=1, sizes=(64,)) > 0


def test_known_gpu_peaks():
    assert spec_bf16_peak("NVIDIA H100 80GB HBM3") == 989e12
    assert spec_bf16_peak("NVIDIA H100 PCIe") == 756e12
    assert spec_bf16_peak("NVIDIA H200") == 989e12
    assert spec_bf16_peak("NVIDIA A100-SXM4-80GB") == 312e12
    assert spec_bf16_peak("Intel(R) Xeon(R) Processor") is None


# --- infer suite ----------------------------------------------------------------------------


def test_infer_suite_decodes_a_known_number_of_tokens(tiny_config):
    pytest.importorskip("attncli.decoding.search")
    report = run_bench(CPU, ["infer"], tiny_config, warmup=0, repeats=2,
                       sizes=BenchSizes(infer_batch_sizes=(1, 3)))
    rows = report["suites"]["infer"]["rows"]
    ours = [("greedy", 1), ("greedy", 3), ("beam 5", 1), ("beam 5", 3)]
    exported = ([(f"ctranslate2 {search}", batch) for search, batch in ours]
                if importlib.util.find_spec("ctranslate2") else [])
    assert [(r["search"], r["batch"]) for r in rows] == ours + exported
    for row in rows:  # CTranslate2 runs the same number of decoder steps
        assert row["tgt_tokens"] == row["batch"] * 21  # 20 tokens + EOS per sentence
        assert row["call"]["p95_ms"] >= row["call"]["p50_ms"] > 0
        assert row["sentences_per_s"] > 0


# --- the command line -----------------------------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "attncli", "bench", *args],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_cuda_is_one_line_and_exit_2(tmp_path):
    out = _cli("--device", "cuda", "--json", str(tmp_path / "x.json"))
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1 and "CUDA" in out.stderr
    assert "Traceback" not in out.stderr and out.stdout == ""
    assert not (tmp_path / "x.json").exists()


def test_json_folder_must_exist_before_anything_runs(tmp_path):
    out = _cli("--device", "cpu", "--json", str(tmp_path / "missing" / "x.json"))
    assert out.returncode == 2 and "does not exist" in out.stderr and out.stdout == ""
    out = _cli("--device", "cpu", "--json", str(tmp_path))  # a folder: the figures had nowhere
    assert out.returncode == 2 and "is a folder; give a file name" in out.stderr
    assert out.stdout == ""


def test_unusable_json_names_and_too_few_positions_stop_before_anything_runs(tmp_path):
    out = _cli("--device", "cpu", "--json", "/proc/attncli-bench.json")
    assert out.returncode == 2 and "cannot write in /proc" in out.stderr and out.stdout == ""
    out = _cli("--device", "cpu", "--json", str(tmp_path / ("x" * 300 + ".json")))
    assert out.returncode == 2 and "file name too long" in out.stderr and out.stdout == ""
    short = tmp_path / "short.yaml"
    short.write_text("model:\n  max_positions: 24\ndata:\n  max_len: 16\n")
    out = _cli("--device", "cpu", "--suite", "infer", "--config", str(short))
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip() == (
        "error: model.max_positions=24: the train and infer suites time sentences of up to 30 "
        "subwords, which need 32 positions (--suite attention runs without)")


def test_a_long_legal_name_is_written_and_leaves_no_temp_file(tmp_path):
    from attncli.core.files import atomic_write_json, output_file_problem

    path = tmp_path / ("x" * 245 + ".json")
    assert output_file_problem(path) is None
    atomic_write_json(path, {"a": 1})
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_attention_suite_times_with_events_and_reports_the_kernel():
    report = run_bench(torch.device("cuda"), ["attention"], Config(), warmup=1, repeats=2,
                       sizes=BenchSizes(attention_sizes=AttentionSizes(
                           batch=1, heads=2, head_dim=64, lengths=(128, 1024),
                           additive_cap_bytes=2**24)))
    suite = report["suites"]["attention"]
    assert suite["dtype"] == "bfloat16"
    fused = next(r for r in suite["rows"] if r["path"] == "fused" and r["seq_len"] == 1024)
    reference = next(r for r in suite["rows"]
                     if r["path"] == "reference" and r["seq_len"] == 1024)
    assert fused["kernel"] in ("flash", "memory-efficient", "cuDNN", "math")
    assert reference["forward"]["peak_mem_bytes"] > fused["forward"]["peak_mem_bytes"]


def test_what_was_measured_is_kept_before_its_tables_are_printed():
    """`attncli bench --json F | head -1`, or stdout on a full disk: printing failed, the
    command ended, and F, with every measurement, was never written."""
    from rich.console import Console

    class Broken(Console):
        def print(self, *args, **kwargs):
            raise BrokenPipeError

    kept: list[dict] = []
    report = run_bench(CPU, ["attention"], Config(train=TrainConfig(precision="fp32")),
                       warmup=0, repeats=1, console=Broken(),
                       sizes=BenchSizes(attention_sizes=TINY_ATTENTION),
                       keep=lambda report: kept.append(json.loads(json.dumps(report))))
    assert kept and kept[-1]["suites"]["attention"]["rows"] == report["suites"]["attention"][
        "rows"]


def test_a_temporary_folder_that_cannot_take_the_export_skips_ctranslate2(tiny_config,
                                                                        monkeypatch):
    """The CTranslate2 rows export the model to a temporary folder first: a full TMPDIR failed
    the command as a bug, after the torch rows were timed."""
    pytest.importorskip("ctranslate2")
    import tempfile

    from attncli.bench.infer_suite import run_infer_suite

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tempfile, "TemporaryDirectory", full)
    result = run_infer_suite(tiny_config, CPU, "fp32", warmup=0, repeats=1, batch_sizes=(1,),
                             beams=(1,))
    assert [row["search"] for row in result["rows"]] and not any(
        row["search"].startswith("ctranslate2") for row in result["rows"])
    assert result["ctranslate2_skipped"] == ("its export to a temporary folder failed (No space "
                                             "left on device); check TMPDIR")
