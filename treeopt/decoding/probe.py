"""The support probe: does treeopt's tree step, driven through the model's public forward with
treeopt's masks, positions and cache, give the model's own logits — past every sliding window
and chunk? A model it cannot vouch for is refused before any work."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from treeopt.decoding.models import architecture, check_context, context_length
from treeopt.decoding.plan import TreePlan, tree_plan
from treeopt.decoding.tree_forward import Verifier, verify_step
from treeopt.errors import TreeoptError
from treeopt.model.tree import Tree

if TYPE_CHECKING:
    from transformers import PreTrainedModel

PROBE_TREE = Tree.from_choices([[0], [1], [0, 0]])  # root → a → c, and a's sibling b


@dataclass(frozen=True)
class SupportProbe:
    """How far treeopt's tree step strays from the model's own forward: the largest logit
    difference over every probed token, against the tolerance of the dtype."""

    prefix: int  # tokens cached before the tree (past every window and chunk)
    max_abs_diff: float
    tolerance: float

    @property
    def exact(self) -> bool:
        return self.max_abs_diff <= self.tolerance


def probe_tree_support(verify: Verifier) -> SupportProbe:
    """Prefill two rows of random tokens (lengths differing by one, longer than every window
    and chunk: each layer's boundary falls inside the prefix), verify a 3-node tree after
    them, and compare each tree token's logits with the model's own forward — no cache, no
    mask from treeopt — over the row's prefix and that token's path."""
    model, device = verify.model, verify.shape.device
    n = max(verify.layout.reach, _config_spans(model)) + 3
    check_context(model, n + PROBE_TREE.depth + 1, what="the tree-support probe")
    vocab = model.get_input_embeddings().weight.shape[0]
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(1, min(vocab, 1000), (2, n + PROBE_TREE.num_tokens), generator=gen)
    ids = ids.to(device)
    lengths = torch.tensor([n, n - 1], device=device)
    plan = tree_plan(PROBE_TREE, str(device))
    cache = verify.cache(batch=2, capacity=n + PROBE_TREE.num_tokens + 1)
    with torch.no_grad():
        verify.prefill(ids[:, :n], lengths, cache=cache)
        tokens = torch.stack([ids[i, lengths[i]: lengths[i] + PROBE_TREE.num_tokens]
                              for i in range(2)])  # [2, q]: root, a, b, c
        logits, _ = verify_step(verify, tokens, plan, cache=cache, lengths=lengths, frontier=n)
        seqs = [torch.cat([ids[i, :length], tokens[i, _ancestry(plan, node)]])
                for i, length in enumerate(lengths.tolist()) for node in range(tokens.shape[1])]
        padded = torch.nn.utils.rnn.pad_sequence(seqs, batch_first=True)  # right-padded
        last = torch.tensor([len(x) - 1 for x in seqs], device=device)
        rows = torch.arange(len(seqs), device=device)
        want = model(input_ids=padded).logits[rows, last].float()
    got = logits.reshape(len(seqs), -1).float()  # rows × nodes, in the order of ``seqs``
    worst = float((got - want).abs().max())
    scale = max(1.0, float(want.abs().max()))
    tol = (1e-3 if logits.dtype in (torch.float32, torch.float64) else 5e-2) * scale
    return SupportProbe(n, worst, tol)


def _config_spans(model: PreTrainedModel) -> int:
    """The longest window or chunk the config names under any field (``sliding_window``,
    ``attention_chunk_size``, …), within the model's context: the probe passes it whatever
    treeopt believes the layers do, so a window treeopt missed shows as a difference."""
    config = model.config.get_text_config(decoder=True)
    limit = context_length(model) or 0
    spans = [v for k, v in vars(config).items()
             if ("window" in k or "chunk" in k) and isinstance(v, int)
             and not isinstance(v, bool) and 0 < v and (not limit or v < limit)]
    return max(spans, default=0)


def _ancestry(plan: TreePlan, token: int) -> list[int]:
    """Token indices root … ``token`` along the tree."""
    chain, parents = [token], plan.parent.tolist()
    while parents[chain[-1]] >= 0:
        chain.append(parents[chain[-1]])
    return chain[::-1]


def check_tree_support(verify: Verifier) -> SupportProbe:
    """Raise a TreeoptError naming the architecture unless treeopt's tree step gives the
    model's own logits (:func:`probe_tree_support`); returns the probe."""
    probe = probe_tree_support(verify)
    if not probe.exact:
        model = verify.model
        raise TreeoptError(
            f"{architecture(model)}: treeopt's tree step differs from the model's own forward "
            f"(logits by up to {probe.max_abs_diff:.3g} after {probe.prefix} tokens, tolerance "
            f"{probe.tolerance:.3g}; attention implementation "
            f"{getattr(model.config, '_attn_implementation', '?')}), so its masks cannot be "
            f"trusted with this model; load it with attn_implementation='sdpa' or 'eager'")
    return probe
