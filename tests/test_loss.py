"""The fused, chunked projection + cross-entropy equals the stock one, values and gradients."""

import pytest
import torch
import torch.nn.functional as F

from attncli.model import loss as loss_module
from attncli.model.loss import projected_cross_entropy

PAD = 0


def _inputs(rows: int, dim: int = 16, vocab: int = 37, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(rows, dim, generator=g, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(vocab, dim, generator=g, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(vocab, generator=g, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(1, vocab, (rows,), generator=g)
    targets[::5] = PAD  # padding positions must add neither loss nor gradient
    return hidden, weight, bias, targets


def _reference(hidden, weight, bias, targets, smoothing):
    return F.cross_entropy(F.linear(hidden, weight, bias), targets, ignore_index=PAD,
                           label_smoothing=smoothing, reduction="sum")


@pytest.mark.parametrize("drop_padding", [True, False])  # CPU's way and CUDA's
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("rows", [7, 23])  # one chunk and several chunks, the last one partial
def test_matches_stock_cross_entropy_and_its_gradients(monkeypatch, smoothing, rows,
                                                       drop_padding):
    monkeypatch.setattr(loss_module, "CHUNK_ROWS", 5)
    monkeypatch.setattr(loss_module, "drops_padding_rows", lambda device: drop_padding)
    monkeypatch.setattr(loss_module, "SCORED_ROWS_MULTIPLE", 4)  # some padding rows stay in
    hidden, weight, bias, targets = _inputs(rows)
    fused = projected_cross_entropy(hidden, weight, bias, targets, ignore_index=PAD,
                                    label_smoothing=smoothing, compute_dtype=torch.float64)
    fused_grads = torch.autograd.grad(fused * 3.0, (hidden, weight, bias))
    stock = _reference(hidden, weight, bias, targets, smoothing)
    stock_grads = torch.autograd.grad(stock * 3.0, (hidden, weight, bias))

    assert fused.item() == pytest.approx(stock.item(), rel=1e-6)
    for mine, theirs in zip(fused_grads, stock_grads, strict=True):
        torch.testing.assert_close(mine.double(), theirs, rtol=1e-6, atol=1e-6)
    assert fused_grads[0][targets == PAD].abs().max() == 0


def test_batched_shapes_and_no_grad_mode():
    hidden, weight, bias, targets = _inputs(12)
    with torch.no_grad():
        value = projected_cross_entropy(hidden.view(3, 4, -1), weight, bias, targets.view(3, 4),
                                        ignore_index=PAD, label_smoothing=0.1,
                                        compute_dtype=torch.float64)
        assert value.item() == pytest.approx(_reference(hidden, weight, bias, targets, 0.1).item())


def test_bf16_products_stay_close_to_fp32():
    hidden, weight, bias, targets = (t.float().detach() if t.is_floating_point() else t
                                     for t in _inputs(64, dim=32, vocab=101))
    low = projected_cross_entropy(hidden, weight, bias, targets, ignore_index=PAD,
                                  label_smoothing=0.1, compute_dtype=torch.bfloat16)
    full = _reference(hidden, weight, bias, targets, 0.1)
    assert low.item() == pytest.approx(full.item(), rel=2e-2)


def test_model_summed_loss_equals_loss_on_its_logits():
    from attncli.core.config import ModelConfig
    from attncli.model.transformer import Seq2SeqTransformer

    torch.manual_seed(0)
    model = Seq2SeqTransformer(ModelConfig(d_model=32, heads=4, enc_layers=1, dec_layers=1,
                                           ff_dim=64, dropout=0.0), 50, 50).double()
    src = torch.randint(4, 50, (3, 6))
    tgt = torch.randint(4, 50, (3, 8))
    tgt[0, 5:] = PAD
    summed = model.summed_loss(src, tgt[:, :-1], tgt[:, 1:], label_smoothing=0.1,
                               compute_dtype=torch.float64)
    logits = model(src, tgt[:, :-1])
    stock = F.cross_entropy(logits.reshape(-1, 50), tgt[:, 1:].reshape(-1), ignore_index=PAD,
                            label_smoothing=0.1, reduction="sum")
    assert summed.item() == pytest.approx(stock.item(), rel=1e-6)  # softmax runs in fp32


def _bytes_allocated(fn) -> int:
    """CPU bytes `fn` allocates in all (what the profiler saw, frees not subtracted)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                profile_memory=True) as prof:
        fn()
    return sum(max(e.cpu_memory_usage, 0) for e in prof.events())


def test_validation_loss_forms_no_gradients_and_equals_the_training_loss():
    """Under inference mode (validation) the loss allocates nothing of the weight's size:
    the gradients it would form are weight-, hidden- and bias-sized."""
    hidden, weight, bias, targets = _inputs(8, dim=64, vocab=4000)
    args = (hidden.float(), weight.float(), bias.float(), targets)
    options = {"ignore_index": PAD, "label_smoothing": 0.1}
    training = projected_cross_entropy(*args, **options)
    with torch.inference_mode():
        validation = projected_cross_entropy(*args, **options)
        spent = _bytes_allocated(lambda: projected_cross_entropy(*args, **options))
    assert validation.item() == training.item()
    weight_bytes = weight.numel() * 4
    assert spent < weight_bytes, f"{spent:,} bytes allocated; a weight gradient is {weight_bytes:,}"
