"""vLLM's per-batch draft length (``num_speculative_tokens_per_batch_size``) of a chain drafter,
by two rules from the same measurements (:class:`~treeopt.pricing.chains.ChainTable`):

- **treeopt's**: at every batch size select priced, the K of the fastest chain (K vLLM takes
  for the method, :func:`treeopt.engines.vllm.chains.takes_k`); for a drafter whose trees are
  chains (prompt lookup) that is select's pick itself; for one whose picks are trees (EAGLE,
  MTP, a draft model, suffix decoding), the best *chain*, since vLLM drafts chains only. Where
  the step profile says how noisy its prices are, the shortest chain within one standard error
  of that one instead (:func:`noise_share`): a longer K whose predicted gain is inside the noise
  was as often slower live (2.2M demo, prompt lookup, batch 8: K 8 priced 2.7% above K 5 ran
  3.7% below it);
- **vLLM's own profiler rule** (:func:`treeopt.engines.vllm.per_batch.profiler_choice`): K ∈
  {1, 3, 5} measured at its profiler's batch sizes {1, 4, 16, 64, 256}, the per-position
  acceptance of the chain of 5, the argmax of accepted length ÷ latency with vLLM's
  interpolation in batch size and K. Where select did not price all five batch sizes (a CPU
  demo's sweep), the rule measures at the batch sizes select priced, and says so.

The inter-token latency vLLM's profiler reads (``median_itl_ms`` of ``vllm bench serve``, one
value per streamed chunk, and a speculative step streams one chunk) is the step latency of the
chain, select's ``t_verify + t_draft + t_overhead``. Both tables are priced at every batch size
select priced, and where they differ, the cost of each one's K there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from treeopt.engines.vllm.chains import per_batch_entry, takes_k
from treeopt.engines.vllm.per_batch import (
    PROFILER_BATCH_SIZES,
    PROFILER_KS,
    profiler_choice,
    rows_of,
)
from treeopt.errors import TreeoptError
from treeopt.pricing.chains import ChainPrices, ChainTable, chain_method, picks_chains


def treeopt_ks(prices: Sequence[ChainPrices], drafter: Mapping[str, Any], *,
               picks: Mapping[int, int] | None = None,
               step_se: Mapping[str, float] | None = None) -> dict[int, int]:
    """Batch → treeopt's K: ``picks`` (select's chains, for a drafter whose trees are chains),
    else the fastest chain vLLM takes for the drafter's method; then, where the step profile
    says how noisy its prices are (``step_se``: batch → relative standard error of one record,
    :func:`~treeopt.pricing.costs.step_noise`), the shortest chain within the noise of that
    one (:func:`noise_share`)."""
    method = chain_method(drafter)
    out = {}
    for p in prices:
        takes = [k for k in range(p.k_max + 1) if takes_k(method, k, drafter)]
        if picks is not None and picks_chains(drafter):
            k = picks[p.batch]
        else:
            k = p.best_k(takes)
        share = noise_share((step_se or {}).get(str(p.batch)))
        out[p.batch] = p.shortest_near(k, share, takes) if share else k
    return out


def noise_share(se: float | None) -> float:
    """How much slower, as a share, a shorter chain may be priced and still count as fast as the
    fastest: one standard error of the difference of two prices, each off by ``se`` (√2 · se).
    A longer chain whose gain is inside that noise is as likely slower live, and costs more
    where the batch grows (the one-standard-error rule of model selection; Breiman et al.,
    *Classification and Regression Trees*, 1984, §3.4.3).

    >>> round(noise_share(0.015), 4), noise_share(None)
    (0.0212, 0.0)
    """
    return 2 ** 0.5 * se if se else 0.0


def rule_profile(prices: Sequence[ChainPrices]) -> tuple[dict[int, dict[int, float]], str]:
    """The inter-token latencies vLLM's profiler would measure (batch → K → ms, K 0 and
    those of {1, 3, 5} priced), and at which batch sizes, in words."""
    priced = {p.batch: p for p in prices}
    sizes = [b for b in PROFILER_BATCH_SIZES if b in priced]
    said = "vLLM's profiler batch sizes 1, 4, 16, 64, 256"
    if len(sizes) < len(PROFILER_BATCH_SIZES):
        sizes = sorted(priced)
        said = ("the batch sizes select priced, " + ", ".join(map(str, sizes)) + " (not all of "
                "vLLM's profiler batch sizes 1, 4, 16, 64, 256 are priced)")
    k_max = min(p.k_max for p in prices)
    ks = [0, *(k for k in PROFILER_KS if k <= k_max)]
    itl = {b: {k: priced[b].step_ms[k] for k in ks} for b in sizes}
    missing = [(b, k) for b, row in itl.items() for k, ms in row.items() if ms is None]
    if missing or len(ks) < 2 or 1 not in itl:
        raise TreeoptError(f"vLLM's profiler rule needs the step latency of K 0 and 1 at batch 1"
                           f" and of its K at every batch size; not priced: {missing[:3]}")
    return {b: {k: float(ms) for k, ms in row.items() if ms is not None}
            for b, row in itl.items()}, said


def rule_ks(chains: ChainTable, prices: Sequence[ChainPrices]) -> tuple[dict[int, int], str]:
    """vLLM's profiler rule's K at every batch size 1 … the largest it measured, and where it
    measured."""
    itl, said = rule_profile(prices)
    k_top = max(k for k in itl[1])
    return profiler_choice(chains.acceptance_rate_per_pos[:k_top], itl), said


def _ranges(ks: Mapping[int, int]) -> list[tuple[int, int, int]]:
    """Select's batch ranges: each priced batch size's K from the one before (+1) up to it,
    equal neighbours merged."""
    out: list[list[int]] = []
    lo = 1
    for b in sorted(ks):
        if out and out[-1][2] == ks[b]:
            out[-1][1] = b
        else:
            out.append([lo, b, ks[b]])
        lo = b + 1
    return [(a, b, k) for a, b, k in out]


def _carried(dense: Mapping[int, int], batch: int) -> int:
    """The K a dense table gives ``batch`` (beyond its end: its last, as vLLM carries it)."""
    return dense[min(batch, max(dense))]


def vllm_per_batch(chains: ChainTable, drafter: Mapping[str, Any], *, context: int,
                   picks: Mapping[int, int] | None = None,
                   step_se: Mapping[str, float] | None = None) -> dict[str, Any]:
    """Both tables at ``context``, each as vLLM's config of the drafter's method, and per
    batch size select priced: each table's K, predicted tokens/s and speed-up over K = 0; and
    at each batch size where treeopt's table switches K, both K priced there and just below.
    ``step_se``: the step profile's noise per batch (:func:`treeopt_ks`)."""
    method = chain_method(drafter)
    if not method:
        raise TreeoptError(f"vLLM drafts no chains of a {drafter.get('kind')!r} drafter")
    prices = sorted((p for p in chains.prices if p.context == context), key=lambda p: p.batch)
    if not prices:
        raise TreeoptError(f"context {context} was not priced for chains")
    mine = treeopt_ks(prices, drafter, picks=picks, step_se=step_se)
    dense, said = rule_ks(chains, prices)
    rule = {p.batch: _carried(dense, p.batch) for p in prices}
    rows = []
    for p in prices:
        ar = p.tokens_per_s(0) or 0.0
        cells = {}
        for name, k in (("treeopt", mine[p.batch]), ("vllm_rule", rule[p.batch])):
            tps = p.tokens_per_s(k)
            cells[name] = {"k": k, "tokens_per_s": tps,
                           "speedup": tps / ar if tps is not None and ar else None}
        rows.append({"batch": p.batch, **cells})
    switches = []
    for below, at in zip(prices[:-1], prices[1:], strict=True):
        k0, k1 = mine[below.batch], mine[at.batch]
        if k0 != k1:
            switches.append({"batch_below": below.batch, "batch": at.batch, "k_below": k0,
                             "k": k1, "tokens_per_s_below": {str(k): below.tokens_per_s(k)
                                                             for k in (k0, k1)},
                             "tokens_per_s_at": {str(k): at.tokens_per_s(k) for k in (k0, k1)}})
    return {"method": method, "context": context,
            "treeopt": {"ranges": [list(r) for r in _ranges(mine)],
                        **per_batch_entry(method, _ranges(mine), drafter=drafter, off_above=True),
                        "rule": "the fastest chain vLLM takes at each batch size select priced"
                                + ("" if picks_chains(drafter) else
                                   " (the drafter's picks are trees; vLLM drafts chains, so the "
                                   "per-batch K is the best chain's)")
                                + ("; the shortest chain priced within one standard error of it "
                                   "(the step profile's noise at that batch)" if step_se else ""),
                        **({"step_se": {str(p.batch): step_se[str(p.batch)] for p in prices
                                        if str(p.batch) in step_se}} if step_se else {})},
            "vllm_rule": {"rows": rows_of(dense), "measured_at": said,
                          "ks": [k for k in PROFILER_KS if k <= min(p.k_max for p in prices)],
                          "acceptance_rate_per_pos": list(chains.acceptance_rate_per_pos),
                          **per_batch_entry(method, rows_of(dense), drafter=drafter,
                                          off_above=False)},
            "acceptance": chains.acceptance, "batches": rows, "switches": switches}


def table_text(section: Mapping[str, Any]) -> str:
    """Both tables side by side, one line per batch size, then each switch's cost.

    >>> doc = {"method": "ngram", "context": 64, "vllm_rule": {"measured_at": "batch 1, 2"},
    ...        "batches": [{"batch": 1, "treeopt": {"k": 3, "tokens_per_s": 20.0, "speedup": 2.0},
    ...                     "vllm_rule": {"k": 5, "tokens_per_s": 18.0, "speedup": 1.8}}],
    ...        "switches": []}
    >>> print(table_text(doc))
    vLLM per-batch K (ngram, context 64): treeopt's table vs vLLM's profiler rule (measured at batch 1, 2)
    batch  treeopt K  tok/s  speed-up   vLLM rule K  tok/s  speed-up        vs rule
        1          3   20.0     2.00×             5   18.0     1.80×        +11.1%
    """
    lines = [f"vLLM per-batch K ({section['method']}, context {section['context']}): treeopt's "
             f"table vs vLLM's profiler rule (measured at {section['vllm_rule']['measured_at']})",
             "batch  treeopt K  tok/s  speed-up   vLLM rule K  tok/s  speed-up        vs rule"]
    for row in section["batches"]:
        mine, rule = row["treeopt"], row["vllm_rule"]
        gain = (f"{mine['tokens_per_s'] / rule['tokens_per_s'] - 1:+.1%}"
                if mine["tokens_per_s"] and rule["tokens_per_s"] else "-")
        lines.append(f"{row['batch']:5d} {mine['k']:10d} {_num(mine['tokens_per_s']):>6} "
                     f"{_x(mine['speedup']):>9} {rule['k']:13d} {_num(rule['tokens_per_s']):>6} "
                     f"{_x(rule['speedup']):>9} {gain:>13}")
    step_se = section.get("treeopt", {}).get("step_se")
    if step_se:
        noise = ", ".join(f"batch {b} {se:.1%}" for b, se in step_se.items())
        lines.append(f"treeopt's K: the shortest chain within one standard error (√2 × the step "
                     f"profile's {noise}) of the fastest")
    for s in section["switches"]:
        below, at = s["tokens_per_s_below"], s["tokens_per_s_at"]
        lines.append(f"switch K {s['k_below']}→{s['k']} at batch {s['batch']}: batch "
                     f"{s['batch_below']} K {s['k_below']} {_num(below[str(s['k_below'])])} / "
                     f"K {s['k']} {_num(below[str(s['k'])])} tok/s; batch {s['batch']} K "
                     f"{s['k_below']} {_num(at[str(s['k_below'])])} / K {s['k']} "
                     f"{_num(at[str(s['k'])])} tok/s")
    return "\n".join(lines)


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def _x(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}×"
