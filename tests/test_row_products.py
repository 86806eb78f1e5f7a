"""Products that give a row the same bits however many rows they hold: a lone row as a pair, a
product beyond the rows this CPU's 16-bit kernel keeps to one rounding in chunks."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from treeopt.decoding import row_products  # noqa: E402
from treeopt.decoding.row_products import RowRule, pair_lone_rows, row_rule  # noqa: E402


def _rows_alone_equal_rows_together(lin: nn.Linear, x: torch.Tensor) -> bool:
    with torch.no_grad():
        together = lin(x)
        return all(torch.equal(lin(x[i:i + 1])[0], together[i]) for i in range(len(x)))


def test_a_paired_linear_gives_a_lone_row_the_bits_of_a_product():
    torch.manual_seed(0)
    lin = nn.Linear(1536, 576, bias=False).to(torch.bfloat16)  # SmolLM2's down projection
    x = torch.randn(64, 1536).to(torch.bfloat16)
    before = row_rule(lin.weight)
    assert pair_lone_rows(lin) == int(before.needed)
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


def _switching_linear(threshold: int):
    """``F.linear`` as a CPU whose kernel rounds otherwise from ``threshold`` rows on: every
    row of a larger product off by one unit in the last place."""
    plain = torch.nn.functional.linear

    def linear(x, w, b=None):
        out = plain(x, w, b)
        rows = x.numel() // x.shape[-1]
        return torch.nextafter(out, torch.full_like(out, float("inf"))) if rows >= threshold else out
    return linear


def test_a_kernel_that_switches_at_a_row_count_is_found_and_kept_below(monkeypatch):
    monkeypatch.setattr(row_products.F, "linear", _switching_linear(9))
    torch.manual_seed(0)
    lin = nn.Linear(16, 8, bias=False).to(torch.bfloat16)
    assert row_rule(lin.weight) == RowRule(pair=False, max_rows=8)
    x = torch.randn(2, 10, 16).to(torch.bfloat16)  # [batch, tokens, in]: 20 rows, over 8
    with torch.no_grad():
        before = lin(x)
        assert pair_lone_rows(lin) == 1
        after = lin(x)
        pairs = torch.cat([lin(r) for r in x.reshape(20, 16).split(2)])
    assert not torch.equal(before.reshape(20, 8), pairs)  # the switched kernel's bits
    assert after.shape == (2, 10, 8) and torch.equal(after.reshape(20, 8), pairs)


def test_every_shape_of_a_dtype_keeps_to_the_smallest_count_found(monkeypatch):
    monkeypatch.setattr(row_products, "row_rule", lambda w, **_: RowRule(
        pair=False, max_rows=32 if w.shape[0] == 8 else None))
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 4)).to(torch.bfloat16)
    assert pair_lone_rows(model) == 2
    assert [getattr(m, row_products._RULE) for m in model] == [RowRule(False, 32)] * 2


def test_a_linear_is_probed_once_whether_or_not_it_needs_a_rule(monkeypatch):
    """Every decoding readies the model's products again: a weight probed before, kept as it
    was or not, is not probed again (on SmolLM2 the probes of its shapes cost 2.2 s a start)."""
    calls = []
    monkeypatch.setattr(row_products, "row_rule", lambda w, **_: calls.append(w.shape) or RowRule(
        pair=w.shape[0] == 8, max_rows=None))
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 4)).to(torch.bfloat16)
    assert pair_lone_rows(model) == 1 and len(calls) == 2  # one needs pairing, one nothing
    assert pair_lone_rows(model) == 0 and len(calls) == 2
    assert "forward" not in vars(model[1])  # the one that needs nothing keeps its forward
