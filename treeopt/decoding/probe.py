"""The support probe: does treeopt's tree step, driven through the model's public forward with
treeopt's masks, positions and cache, give the model's own logits — past every sliding window
and chunk? A model it cannot vouch for is refused before any work: :func:`verifier` builds a
model's :class:`~treeopt.decoding.tree_forward.Verifier` with the probe run, and
:func:`check_decodable` refuses what it cannot decode."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import torch

from treeopt.decoding.blas import blas_choice
from treeopt.decoding.cache import SlotCache, cache_shape
from treeopt.decoding.layers import attention_layout
from treeopt.decoding.models import architecture, check_context, context_length
from treeopt.decoding.packed_linear import pack_for_cpu
from treeopt.decoding.plan import TreePlan, tree_plan
from treeopt.decoding.row_products import pair_lone_rows
from treeopt.decoding.tree_forward import (
    SupportProbe,
    Verifier,
    forward_with_cache,
    mask_dtype,
    prefix_inputs,
    verify_step,
)
from treeopt.decoding.weight_layout import lay_out_for_cpu
from treeopt.errors import TreeoptError
from treeopt.model.tree import Tree

if TYPE_CHECKING:
    from transformers import PreTrainedModel

PROBE_TREE = Tree.from_choices([[0], [1], [0, 0]])  # root → a → c, and a's sibling b
RELATIVE_TOLERANCE = 1e-4  # of float32 hidden states; one key of a window of 1024 moves them more


@dataclass(frozen=True)
class ProbeCase:
    """Two rows whose prefixes hold ``lengths`` tokens (the second one fewer), then the probe
    tree; ``first``: the tokens of the prefix's first forward, the rest cached by a second
    (a step of a chain), or None for one prefill."""

    lengths: tuple[int, int]
    first: int | None = None


def probe_cases(verify: Verifier) -> list[ProbeCase]:
    """Prefixes past every window and chunk (each layer's boundary inside the prefix), then,
    for each window or chunk of ``W`` tokens, prefixes of ``W`` and ``W - 1``, cached in two
    forwards: the boundary falls between the first row's prefix and its tree (its root opens a
    chunk; a window loses its first key there) and inside the second row's tree. A model of
    full attention only: the first prefixes again, cached in two forwards."""
    spans = sorted({k.span for k in verify.layout.layers if k.span} | _config_spans(verify.model))
    n = max([verify.layout.reach, *spans]) + 3
    edges = [ProbeCase((w, w - 1), w // 2) for w in spans if w >= 3]
    return [ProbeCase((n, n - 1))] + (edges or [ProbeCase((n, n - 1), n // 2)])


def probe_tree_support(verify: Verifier) -> SupportProbe:
    """Verify a 3-node tree after two rows' prefixes of random tokens (:func:`probe_cases`), in
    float32 whatever the model's dtype (its weights cast there and back, losslessly), and
    compare each tree token's last hidden state with the model's own forward's — no cache, no
    mask from treeopt — over the row's prefix and that token's path."""
    model = verify.model
    worst, scale, prefix = 0.0, 1.0, 0
    with _float32(model), torch.no_grad():
        exact = replace(verify, dtype=torch.float32, features=(), split=False, compiled=None,
                        shape=replace(verify.shape, dtype=torch.float32))
        for case in probe_cases(verify):
            got, want = _probe_case(exact, case)
            worst = max(worst, float((got - want).abs().max()))
            scale, prefix = max(scale, float(want.abs().max())), max(prefix, *case.lengths)
    return SupportProbe(prefix, worst, RELATIVE_TOLERANCE * scale)


def _probe_case(verify: Verifier, case: ProbeCase) -> tuple[torch.Tensor, torch.Tensor]:
    """Last hidden states ``[rows × tree tokens, d]`` of the probe tree after ``case``'s
    prefixes: through treeopt's cache and masks, and through the model's own forward."""
    model, device = verify.model, verify.shape.device
    n, q = max(case.lengths), PROBE_TREE.num_tokens
    check_context(model, n + PROBE_TREE.depth + 1, what="the tree-support probe")
    vocab = model.get_input_embeddings().weight.shape[0]
    gen = torch.Generator().manual_seed(n)
    ids = torch.randint(1, min(vocab, 1000), (2, n + q), generator=gen).to(device)
    lengths = torch.tensor(case.lengths, device=device)
    cache = verify.cache(batch=2, capacity=n + q + 1)
    first = case.first or n
    _prefill(verify, ids[:, :first], torch.full_like(lengths, first), cache)
    if first < n:  # the rest of the prefix: a chain step after the first forward's cache
        rest = Tree.chain(n - first - 1)
        verify_step(verify, ids[:, first:n], tree_plan(rest, str(device)), cache=cache,
                    lengths=torch.full_like(lengths, first), frontier=first)
    plan = tree_plan(PROBE_TREE, str(device))
    tokens = torch.stack([ids[i, length: length + q] for i, length in enumerate(case.lengths)])
    _, hidden = verify_step(verify, tokens, plan, cache=cache, lengths=lengths, frontier=n)
    seqs = [torch.cat([ids[i, :length], tokens[i, _ancestry(plan, node)]])
            for i, length in enumerate(case.lengths) for node in range(q)]
    return hidden.reshape(len(seqs), -1), _last_hidden(model, seqs)


def _prefill(verify: Verifier, ids: torch.Tensor, lengths: torch.Tensor, cache: SlotCache,
             ) -> None:
    """The prefix into ``cache`` with treeopt's masks, the LM head run at one position only."""
    positions, mask = prefix_inputs(lengths, ids.shape[1], dtype=verify.dtype,
                                    layout=verify.layout)
    cache.place(0, ids.shape[1])
    forward_with_cache(verify.model, ids, cache=cache, position_ids=positions,
                       attention_mask=mask, logits_to_keep=1)


def _last_hidden(model: PreTrainedModel, seqs: list[torch.Tensor]) -> torch.Tensor:
    """The model's own last hidden state (after the final norm) at the end of each sequence
    ``[len(seqs), d]``, no cache and no mask from treeopt, and no logits."""
    padded = torch.nn.utils.rnn.pad_sequence(seqs, batch_first=True)  # right-padded
    last = torch.tensor([len(x) - 1 for x in seqs], device=padded.device)
    rows = torch.arange(len(seqs), device=padded.device)
    decoder = model.get_decoder()
    if decoder is not None and decoder is not model:
        hidden = decoder(input_ids=padded).last_hidden_state  # [rows, T, d]
    else:
        hidden = model(input_ids=padded, output_hidden_states=True,
                       logits_to_keep=1).hidden_states[-1]
    return hidden[rows, last]


@contextmanager
def _float32(model: PreTrainedModel) -> Iterator[None]:
    """``model``'s floating-point weights and buffers in float32 inside, as they were after
    (16-bit values are exact in float32, so the round trip changes no bit), with float32
    products at full precision."""
    tensors = [t for t in (*model.parameters(), *model.buffers())
               if t.is_floating_point() and t.dtype != torch.float32]
    dtypes = [t.dtype for t in tensors]
    precision = torch.get_float32_matmul_precision()
    try:
        with torch.inference_mode(False):  # the weights stay ordinary tensors after
            for t in tensors:
                t.data = t.data.float()
        torch.set_float32_matmul_precision("highest")
        yield
    finally:
        torch.set_float32_matmul_precision(precision)
        with torch.inference_mode(False):
            for t, dtype in zip(tensors, dtypes, strict=True):
                t.data = t.data.to(dtype)


def _config_spans(model: PreTrainedModel) -> set[int]:
    """The windows and chunks the config names under any field (``sliding_window``,
    ``attention_chunk_size``, …), within the model's context: the probe passes them whatever
    treeopt believes the layers do, so a window treeopt missed shows as a difference."""
    config = model.config.get_text_config(decoder=True)
    limit = context_length(model) or 0
    return {v for k, v in vars(config).items()
            if ("window" in k or "chunk" in k) and isinstance(v, int)
            and not isinstance(v, bool) and 0 < v and (not limit or v < limit)}


def _ancestry(plan: TreePlan, token: int) -> list[int]:
    """Token indices root … ``token`` along the tree."""
    chain, parents = [token], plan.parent.tolist()
    while parents[chain[-1]] >= 0:
        chain.append(parents[chain[-1]])
    return chain[::-1]


_CHECKED = "_treeopt_tree_support"  # set on a model: (what its probe saw, the probe)


def _checked_once(verify: Verifier) -> SupportProbe:
    """:func:`check_tree_support`, once per model while its attention implementation and
    layout stay as they were: the probe casts every weight to float32 and back (about 1.4 s on
    SmolLM2-135M, the packed weights made again after), and every decoding starts a
    verifier."""
    model = verify.model
    seen = (getattr(model.config, "_attn_implementation", None), repr(verify.layout))
    kept = vars(model).get(_CHECKED)
    if kept is not None and kept[0] == seen:
        return kept[1]
    probe = check_tree_support(verify)
    vars(model)[_CHECKED] = (seen, probe)
    return probe


def check_tree_support(verify: Verifier) -> SupportProbe:
    """Raise a TreeoptError naming the architecture unless treeopt's tree step gives the
    model's own logits (:func:`probe_tree_support`); returns the probe."""
    probe = probe_tree_support(verify)
    if not probe.exact:
        model = verify.model
        raise TreeoptError(
            f"{architecture(model)}: treeopt's tree step differs from the model's own forward "
            f"(float32 last hidden states by up to {probe.max_abs_diff:.3g} after up to "
            f"{probe.prefix} tokens, tolerance {probe.tolerance:.3g}; attention implementation "
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
    its float32 products of a few rows run on packed weights
    (:mod:`~treeopt.decoding.packed_linear`), and its 16-bit linears whose lone-row product
    rounds otherwise multiply a lone row beside a copy (:mod:`~treeopt.decoding.row_products`)."""
    layout = attention_layout(model)  # before anything runs: refusals cost nothing
    prepare_cpu_products(model)  # before anything runs it: every step, timed or not, alike
    plain = Verifier(model, False, mask_dtype(model), layout, cache_shape(model),
                     features=features)  # no BLAS choice inside what torch.compile traces
    if tree:
        plain = replace(plain, probe=_checked_once(plain))
    plain = replace(plain, split=not features and _split_is_exact(model))
    blas = blas_choice(model)
    if not compile:
        return replace(plain, blas=blas)
    device = model.get_input_embeddings().weight.device
    mode = "reduce-overhead" if device.type == "cuda" else "default"
    return replace(plain, blas=blas,
                   compiled=torch.compile(plain.eager, mode=mode, dynamic=False))


def prepare_cpu_products(*modules: torch.nn.Module | None) -> None:
    """Ready the CPU linears of ``modules`` for a step's products, in place (idempotent): float32
    weights column-major (:mod:`~treeopt.decoding.weight_layout`) and packed for products of a
    few rows (:mod:`~treeopt.decoding.packed_linear`), 16-bit ones whose lone-row product
    rounds otherwise paired (:mod:`~treeopt.decoding.row_products`: a token gets the same bits
    alone, in a tree or a batch)."""
    lay_out_for_cpu(*modules)
    pack_for_cpu(*modules)
    pair_lone_rows(*modules)


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
