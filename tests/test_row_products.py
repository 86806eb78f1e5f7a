"""One-row products as two-row ones: after pairing, a row multiplied alone gets the bits it gets
inside any product, on the shape where this CPU's bf16 kernel rounds a lone row otherwise."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from treeopt.decoding.row_products import lone_row_differs, pair_lone_rows  # noqa: E402


def _rows_alone_equal_rows_together(lin: nn.Linear, x: torch.Tensor) -> bool:
    with torch.no_grad():
        together = lin(x)
        return all(torch.equal(lin(x[i:i + 1])[0], together[i]) for i in range(len(x)))


def test_a_paired_linear_gives_a_lone_row_the_bits_of_a_product():
    torch.manual_seed(0)
    lin = nn.Linear(1536, 576, bias=False).to(torch.bfloat16)  # SmolLM2's down projection
    x = torch.randn(64, 1536).to(torch.bfloat16)
    before = lone_row_differs(lin.weight)
    assert pair_lone_rows(lin) == int(before)
    assert _rows_alone_equal_rows_together(lin, x)
    with torch.no_grad():
        assert lin(x[:1].unsqueeze(0)).shape == (1, 1, 576)  # [batch, tokens, out] kept
    assert pair_lone_rows(lin) == 0  # idempotent
    assert set(lin.state_dict()) == {"weight"}  # parameters untouched


def test_float32_and_rows_that_agree_are_left_alone():
    torch.manual_seed(0)
    fp32 = nn.Linear(1536, 576, bias=False)
    assert pair_lone_rows(fp32) == 0 and "forward" not in vars(fp32)
    model = nn.Sequential(nn.Linear(8, 8).to(torch.bfloat16), nn.Linear(8, 8).to(torch.bfloat16))
    paired = pair_lone_rows(model)
    assert paired in (0, 2)  # one verdict per shape: both or neither
    x = torch.randn(5, 8).to(torch.bfloat16)
    assert _rows_alone_equal_rows_together(model[0], x)
