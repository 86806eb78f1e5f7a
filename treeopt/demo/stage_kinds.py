"""Which drafters each stage of a demo build makes, and which of them a stage's record lacks: a
finished demo built again with more drafter kinds (``DemoConfig.kinds``) gains them stage by
stage and keeps everything it has."""

from __future__ import annotations

from typing import Any

from treeopt.demo.config import DemoConfig
from treeopt.demo.layout import DYNAMIC_KIND, KINDS
from treeopt.registry.kinds import drafter_kind

# the heads stages' drafters and the drafters stage's, as the registry says
# (``DrafterKind.demo_stage``)
HEAD_KINDS = tuple(k for k in KINDS if drafter_kind(k).demo_stage == "heads")
NEW_KINDS = tuple(k for k in KINDS if drafter_kind(k).demo_stage == "drafters")
# the stages that do each head kind's work apart (a record per kind inside the stage's record)
KIND_STAGES = ("heads", "traces", "growth", "quality", "latency", "sweep", "sampled", "prose")


def lacking(name: str, record: dict[str, Any], kinds: tuple[str, ...] = KINDS,
            ) -> tuple[str, ...]:
    """The drafters of ``kinds`` (those a build makes) that stage ``name``'s ``record`` has no
    result for: each kind stage's own kinds, the prose stage's every kind; the head data and the
    dynamic stage, when they were skipped, the trained drafters and EAGLE
    (:data:`~treeopt.demo.layout.DYNAMIC_KIND`) that need them.

    >>> lacking("drafters", {"eagle": {}}), lacking("sweep", {"medusa": {}, "hydra": {}})
    (('draft-model', 'prompt-lookup', 'ngram-trie', 'suffix'), ())
    >>> lacking("growth", {"max_nodes": 8, "expected_accept_length": {"hydra": {}}})
    ('medusa',)
    >>> lacking("head_data", {"skipped": "…"}, ("prompt-lookup", "eagle"))
    ('eagle',)
    """
    if name == "head_data" or name == "dynamic":
        need = trained_kinds(kinds) if name == "head_data" else tuple(
            k for k in kinds if k == DYNAMIC_KIND)
        return need if "skipped" in record else ()
    if "skipped" in record:  # a stage that cannot run here (no profiler): not again
        return ()
    own = {"drafters": NEW_KINDS, "prose": KINDS}.get(
        name, HEAD_KINDS if name in KIND_STAGES else ())
    made = _kinds_in(record)
    return tuple(k for k in kinds if k in own and k not in made)


def _kinds_in(record: Any) -> set[str]:
    """The drafter kinds that key a result anywhere in ``record``."""
    if isinstance(record, dict):
        return {k for k in record if k in KINDS}.union(*map(_kinds_in, record.values()))
    return set()


def trained_kinds(kinds: tuple[str, ...] | DemoConfig) -> tuple[str, ...]:
    """The drafters of ``kinds`` (or a config's) that train on the head data.

    >>> trained_kinds(("medusa", "prompt-lookup", "eagle", "ngram-trie"))
    ('medusa', 'eagle')
    """
    wanted = kinds.kinds if isinstance(kinds, DemoConfig) else kinds
    return tuple(k for k in wanted if not drafter_kind(k).lookup)


__all__ = ["HEAD_KINDS", "KIND_STAGES", "NEW_KINDS", "lacking", "trained_kinds"]
