"""Chains priced beside a selection's trees: at every (batch, context), the E[L] and the step
latency of the chain of K = 0 … K_max drafted tokens, and the per-position acceptance rates of
the chain of :data:`RULE_K`. They are what a per-batch draft length (vLLM's
``num_speculative_tokens_per_batch_size``) is picked from, by treeopt's rule and by vLLM's own
profiler rule (:mod:`treeopt.pricing.per_batch_k`), from the same measurements.

E[L] of a chain is the per-step walk of the calibration trace (what live decoding measures),
or without a trace 1 + the growth's values of the chain's nodes (position-weighted); the step
latency is select's: ``t_verify(b, s, K + 1) + t_draft + t_overhead``
(:func:`treeopt.pricing.costs.throughput`). The acceptance rates are vLLM's per-position
acceptance (:func:`treeopt.engines.vllm.per_batch.acceptance_rate_per_pos`) of the steps the
chain of :data:`RULE_K` takes on the trace, as vLLM's profiler measures them running K = 5.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from treeopt.documents.fields import integer, listed, mapping, numbers, text
from treeopt.engines.vllm.per_batch import PROFILER_KS, acceptance_rate_per_pos
from treeopt.errors import TreeoptError
from treeopt.model.growth import Growth
from treeopt.model.simulation import nested_step_means, simulate
from treeopt.model.trace import RankTrace
from treeopt.model.tree import Tree
from treeopt.pricing.costs import (
    NO_DRAFT,
    NO_OVERHEAD,
    DraftCost,
    OverheadCost,
    StepLatency,
    expanded_nodes,
    throughput,
)
from treeopt.registry.kinds import KINDS

RULE_K = max(PROFILER_KS)  # the longest chain vLLM's profiler runs, whose acceptance it measures
MAX_CHAIN = 16  # the longest chain priced


@dataclass(frozen=True)
class ChainPrices:
    """The chains K = 0 … K_max at one (batch, context): E[L] and step latency of each (None
    where the latency source does not price K + 1 tokens).

    >>> c = ChainPrices(2, 64, (1.0, 1.5), (10.0, 12.0))
    >>> c.tokens_per_s(1), c.best_k()
    (250.0, 1)
    """

    batch: int
    context: int
    accept_length: tuple[float, ...]
    step_ms: tuple[float | None, ...]

    @property
    def k_max(self) -> int:
        return len(self.accept_length) - 1

    def tokens_per_s(self, k: int) -> float | None:
        """Predicted tokens/s of the chain of ``k``: b · E[L] / step."""
        ms = self.step_ms[k]
        return None if ms is None else self.batch * self.accept_length[k] / ms * 1e3

    def best_k(self, takes: Sequence[int] | None = None) -> int:
        """The fastest K (of ``takes``, default every K priced; the smaller on a tie)."""
        ks = [k for k in (takes if takes is not None else range(self.k_max + 1))
              if 0 <= k <= self.k_max and self.step_ms[k] is not None]
        return max(ks, key=lambda k: (self.tokens_per_s(k) or 0.0, -k))

    def shortest_near(self, k: int, share: float, takes: Sequence[int] | None = None) -> int:
        """The shortest chain (of ``takes``, default every K priced) whose tokens/s is within
        ``share`` of chain ``k``'s: ``k`` itself where none shorter is.

        >>> ChainPrices(1, 64, (1.0, 1.5, 1.98), (10.0, 10.0, 10.0)).shortest_near(2, 0.25)
        1
        """
        ks = takes if takes is not None else range(self.k_max + 1)
        floor = (self.tokens_per_s(k) or 0.0) * (1 - share)
        near = [j for j in ks if 0 <= j <= k and (self.tokens_per_s(j) or 0.0) >= floor]
        return min(near, default=k)

    def to_json(self) -> dict[str, Any]:
        return {"batch": self.batch, "context": self.context,
                "accept_length": list(self.accept_length), "step_ms": list(self.step_ms)}

    @classmethod
    def from_json(cls, doc: Any, *, where: str) -> ChainPrices:
        doc = mapping(doc, where)
        ell = numbers(doc, "accept_length", where, positive=True)
        step = numbers(doc, "step_ms", where, positive=True, nullable=True)
        if len(ell) != len(step) or not ell:
            raise TreeoptError(f"{where}: 'accept_length' and 'step_ms' must hold one value per "
                               f"K = 0 … K_max, got {len(ell)} and {len(step)}")
        return cls(integer(doc, "batch", where, minimum=1),
                   integer(doc, "context", where, minimum=0), tuple(ell), tuple(step))


@dataclass(frozen=True)
class ChainTable:
    """Every (batch, context)'s chains, the per-position acceptance rates of the chain of
    :data:`RULE_K` (or of the longest priced), and which E[L] they come from."""

    prices: tuple[ChainPrices, ...]
    acceptance_rate_per_pos: tuple[float, ...]
    acceptance: str

    def at(self, batch: int, context: int) -> ChainPrices:
        return next(p for p in self.prices if (p.batch, p.context) == (batch, context))

    def to_json(self) -> dict[str, Any]:
        return {"acceptance": self.acceptance,
                "acceptance_rate_per_pos": list(self.acceptance_rate_per_pos),
                "points": [p.to_json() for p in self.prices]}

    @classmethod
    def from_json(cls, doc: Any, *, where: str) -> ChainTable:
        doc = mapping(doc, where)
        return cls(tuple(ChainPrices.from_json(p, where=f"{where}: points[{i}]")
                         for i, p in enumerate(listed(doc, "points", where))),
                   tuple(numbers(doc, "acceptance_rate_per_pos", where)),
                   text(doc, "acceptance", where))


def drafter_record(growth: Growth) -> dict[str, Any]:
    """What ``growth`` records of its drafter (:attr:`~treeopt.model.growth.Growth.drafter`),
    with the heads' ``num_layers`` where its trace recorded them (an MTP drafter's
    ``num_nextn_predict_layers``, which vLLM's MTP config is checked against)."""
    meta = growth.meta.get("trace_meta")
    heads = meta.get("heads_config") if isinstance(meta, dict) else None
    layers = heads.get("num_layers") if isinstance(heads, dict) else None
    drafter = dict(growth.drafter)
    if drafter and isinstance(layers, int) and not isinstance(layers, bool):
        drafter["num_layers"] = layers
    return drafter


def chain_method(drafter: Mapping[str, Any]) -> str:
    """vLLM's method of the recorded drafter's chains ("" where vLLM drafts none of its kind:
    :attr:`~treeopt.registry.kinds.DrafterKind.chain_method`)."""
    kind = KINDS.get(str(drafter.get("kind") or ""))
    return kind.chain_method if kind is not None else ""


def picks_chains(drafter: Mapping[str, Any]) -> bool:
    """Whether the recorded drafter's trees are chains (its picks are its per-batch K)."""
    kind = KINDS.get(str(drafter.get("kind") or ""))
    return kind is not None and kind.chain


def _accept_lengths(growth: Growth, trace: RankTrace | None, k_max: int
                    ) -> tuple[np.ndarray, str]:
    """E[L] of the chains K = 0 … (at most) ``k_max``, and which E[L] it is."""
    chain = [(0,) * d for d in range(1, k_max + 1)]
    if trace is not None:
        return (nested_step_means(chain, trace, sizes=k_max + 1),
                "per-step walk of " + str(trace.meta.get("source_path", "the trace")))
    value = dict(zip(growth.order, np.diff(np.asarray(growth.expected_accept_length)),
                     strict=False))
    known = [value[p] for p in chain[: next((i for i, p in enumerate(chain) if p not in value),
                                            len(chain))]]
    return 1.0 + np.concatenate([[0.0], np.cumsum(known)]), "position-weighted E[L] of the growth"


def _rates(ell: np.ndarray, trace: RankTrace | None) -> tuple[float, ...]:
    """vLLM's per-position acceptance of the chain of RULE_K (or of the longest priced)."""
    k = min(RULE_K, len(ell) - 1)
    if trace is None:  # position-weighted: the chain's node values
        return tuple(float(x) for x in np.diff(ell[: k + 1]))
    hist = simulate(Tree.chain(k), trace, per_step=True).histogram
    accepted = np.repeat(np.arange(len(hist)) - 1, hist)  # drafted tokens each step accepted
    return tuple(acceptance_rate_per_pos(accepted.tolist(), k))


def price_chains(growth: Growth, verify: StepLatency, *, batch: Sequence[int],
                 context: Sequence[int], draft: DraftCost = NO_DRAFT,
                 overhead: OverheadCost = NO_OVERHEAD, trace: RankTrace | None = None
                 ) -> ChainTable | None:
    """The chains of ``growth``'s drafter priced at every (batch, context); None where the
    trace or growth holds no chain to price."""
    deepest = trace.heads if trace is not None else max((len(p) for p in growth.order),
                                                        default=0)
    k_max = min(MAX_CHAIN, deepest, verify.max_tokens - 1)
    if k_max < 1:
        return None
    ell, how = _accept_lengths(growth, trace, k_max)
    if len(ell) < 2:
        return None
    chain = [(0,) * d for d in range(1, len(ell))]
    expanded = [expanded_nodes(chain[:k]) for k in range(len(ell))]
    prices = []
    for b in batch:
        for s in context:
            t = throughput(np.ones(len(ell)), tokens=list(range(1, len(ell) + 1)),
                           expanded=expanded, verify=verify, draft=draft, overhead=overhead,
                           batch=b, context=s)
            step = (t.verify_s + t.draft_s + t.overhead_s) * 1e3
            prices.append(ChainPrices(b, s, tuple(float(x) for x in ell),
                                      tuple(None if np.isnan(x) else float(x) for x in step)))
    return ChainTable(tuple(prices), _rates(ell, trace), how)
