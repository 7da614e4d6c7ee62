"""The CPU dropout: its drop rate, scaling, gradient, eval behaviour and seeding."""

import pytest
import torch

from attncli.model.dropout import Dropout, keep_mask


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_keep_rate_matches_p(p):
    torch.manual_seed(0)
    mask = keep_mask(torch.Size([1000, 1000]), p)
    assert mask.dtype == torch.bool
    assert abs(mask.float().mean().item() - (1 - p)) < 2e-3


def test_masks_are_not_striped():
    # both 16-bit halves of each random word must be used as independent uniforms
    torch.manual_seed(0)
    mask = keep_mask(torch.Size([200_000]), 0.5).float()
    assert abs(mask[0::2].mean().item() - 0.5) < 5e-3
    assert abs(mask[1::2].mean().item() - 0.5) < 5e-3
    both = (mask[0::2] * mask[1::2]).mean().item()
    assert abs(both - 0.25) < 5e-3


def test_training_scales_kept_elements_and_gradient_follows_mask():
    torch.manual_seed(1)
    x = torch.ones(64, 33, requires_grad=True)  # odd element count
    y = Dropout(0.2).train()(x)
    kept = y != 0
    assert torch.allclose(y[kept], torch.full_like(y[kept], 1 / 0.8))
    y.sum().backward()
    assert torch.equal(x.grad != 0, kept)
    assert torch.allclose(x.grad[kept], torch.full_like(x.grad[kept], 1 / 0.8))


def test_eval_and_zero_p_are_identity():
    x = torch.randn(4, 5)
    assert Dropout(0.3).eval()(x) is x
    assert Dropout(0.0).train()(x) is x


def test_same_seed_same_mask_and_bf16_kept():
    x = torch.randn(8, 16, dtype=torch.bfloat16)
    torch.manual_seed(7)
    a = Dropout(0.1).train()(x)
    torch.manual_seed(7)
    b = Dropout(0.1).train()(x)
    assert a.dtype == torch.bfloat16 and torch.equal(a, b)


def test_bad_probability_rejected():
    with pytest.raises(ValueError):
        Dropout(1.0)
