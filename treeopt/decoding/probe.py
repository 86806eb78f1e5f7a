"""The support probe: does treeopt's tree step, driven through the model's public forward with
treeopt's masks, positions and cache, give the model's own logits — past every sliding window
and chunk? A model it cannot vouch for is refused before any work: :func:`verifier` builds a
model's :class:`~treeopt.decoding.tree_forward.Verifier` with the probe run, and
:func:`check_decodable` refuses what it cannot decode."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import torch

from treeopt.decoding.blas import blas_choice
from treeopt.decoding.cache import cache_shape
from treeopt.decoding.layers import attention_layout
from treeopt.decoding.models import architecture, check_context, context_length
from treeopt.decoding.plan import TreePlan, tree_plan
from treeopt.decoding.row_products import pair_lone_rows
from treeopt.decoding.tree_forward import SupportProbe, Verifier, mask_dtype, verify_step
from treeopt.decoding.weight_layout import lay_out_for_cpu
from treeopt.errors import TreeoptError
from treeopt.model.tree import Tree

if TYPE_CHECKING:
    from transformers import PreTrainedModel

PROBE_TREE = Tree.from_choices([[0], [1], [0, 0]])  # root → a → c, and a's sibling b


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


def verifier(model: PreTrainedModel, *, tree: bool = True, compile: bool = False,
             features: tuple[int, ...] = ()) -> Verifier:
    """The :class:`Verifier` of ``model``: its layers' attention kinds (models with recurrent
    layers are refused, :func:`~treeopt.decoding.layers.attention_layout`) and its cache's
    shape; with ``tree``, first check that the model's forward, driven with treeopt's masks,
    gives its own logits across every window (:func:`check_tree_support`); with ``compile``,
    steps run through ``torch.compile`` (on CUDA in "reduce-overhead" mode: CUDA graphs, one
    per batch and q); ``features``: the hidden states a drafter reads besides the last (then the
    wrapper's own forward runs, which collects them). On the CPU, ``model``'s float32 linear
    weights are stored column-major first, in place (:mod:`~treeopt.decoding.weight_layout`),
    and its 16-bit linears whose lone-row product rounds otherwise multiply a lone row beside a
    copy (:mod:`~treeopt.decoding.row_products`)."""
    layout = attention_layout(model)  # before anything runs: refusals cost nothing
    lay_out_for_cpu(model)  # before anything runs it: every step, timed or not, runs one layout
    pair_lone_rows(model)  # likewise: a token gets the same bits alone, in a tree or a batch
    plain = Verifier(model, False, mask_dtype(model), layout, cache_shape(model),
                     features=features)  # no BLAS choice inside what torch.compile traces
    if tree:
        plain = replace(plain, probe=check_tree_support(plain))
    plain = replace(plain, split=not features and _split_is_exact(model))
    blas = blas_choice(model)
    if not compile:
        return replace(plain, blas=blas)
    device = model.get_input_embeddings().weight.device
    mode = "reduce-overhead" if device.type == "cuda" else "default"
    return replace(plain, blas=blas,
                   compiled=torch.compile(plain.eager, mode=mode, dynamic=False))


def _split_is_exact(model: PreTrainedModel) -> bool:
    """Whether decoder-then-LM-head gives the model's own logits on a short probe."""
    decoder, head = model.get_decoder(), model.get_output_embeddings()
    if decoder is None or head is None or decoder is model:
        return False
    device = model.get_input_embeddings().weight.device
    ids = torch.tensor([[1, 2, 3]], device=device)
    with torch.no_grad():
        try:
            got = head(decoder(input_ids=ids).last_hidden_state)
        except (TypeError, ValueError, RuntimeError, AttributeError):
            return False
        want = model(input_ids=ids).logits
    return got.shape == want.shape and bool(torch.equal(got, want))


def check_decodable(model: PreTrainedModel) -> None:
    """Refuse, before any long job, a model treeopt cannot decode as it decodes itself: layers
    of another kind than attention, or a tree step whose logits differ from the model's own
    forward past every window (:func:`check_tree_support`)."""
    with torch.inference_mode():
        verifier(model, tree=True)
