"""The loss-term kinds a config may name, declared without their computation: each kind's config
parameters and its family. The plan reads these when it merges config layers (``rebase_term``),
which the DAG build does without importing torch; the terms themselves are registered in
``methods.losses.terms.LOSS_TERMS`` under these names.
"""
from __future__ import annotations

from dataclasses import dataclass

from methods.registry import Registry


@dataclass(frozen=True)
class TermKind:
    name: str
    params: tuple[str, ...] = ()           # config keys the term needs (a ranking loss: its keyword arguments)
    options: tuple[str, ...] = ()          # further config keys the term reads
    optional_params: tuple[str, ...] = ()  # keyword arguments of a ranking loss, passed when configured
    family: str = ""                       # kinds whose shared parameters mean the same (default: its own)

    @property
    def parameters(self) -> frozenset[str]:
        """The config keys a term of this kind takes besides ``kind`` and ``weight``."""
        return frozenset(self.params + self.options + self.optional_params)

    @property
    def family_name(self) -> str:
        """Kinds of one family give their shared parameter names the same meaning (a triplet
        margin is a margin for both triplet kinds; NT-Xent's tau is not SmoothAP's)."""
        return self.family or self.name


TERM_KINDS: Registry[TermKind] = Registry("loss term")
for _kind in (
    # ranking losses on the score matrix (methods.losses.ranking)
    TermKind("triplet_sum", ("margin",), optional_params=("reduction",), family="triplet"),
    TermKind("triplet_hardest", ("margin",), options=("warmup_sum_epochs",), optional_params=("reduction",),
             family="triplet"),
    TermKind("nt_xent", ("tau",)),
    TermKind("smooth_ap", ("tau",)),
    # set-embedding regularisers (methods.losses.set_regularisers)
    TermKind("mmd", options=("gamma",)),
    TermKind("uniformity", options=("t",)),
    TermKind("diversity"),
    # probabilistic embeddings (methods.losses.probabilistic: PCME)
    TermKind("soft_contrastive"),
    TermKind("vib"),
    # VSRN's caption generator (methods.losses.generation)
    TermKind("caption_generation"),
    # label-wise terms (methods.losses.label_wise)
    TermKind("label_logistic"),
    TermKind("masked_prediction"),
    TermKind("consistency", options=("squared",)),
    # DSCMR's three terms (methods.losses.dscmr)
    TermKind("dscmr_label_regression"),
    TermKind("dscmr_label_likelihood"),
    TermKind("dscmr_invariance"),
):
    TERM_KINDS.register(_kind.name, _kind)


def term_configs(loss_cfg: dict) -> list[dict]:
    """The terms of a ``loss`` config block (a single term is the block itself)."""
    return list(loss_cfg["terms"]) if "terms" in loss_cfg else [loss_cfg]


def rebase_term(inherited: dict, layer: dict) -> dict:
    """A single-term loss block after a config layer: merged key by key, except that a layer
    naming another ``kind`` keeps an inherited parameter only when the new kind takes it with the
    same meaning (same family): ``{kind: nt_xent, tau: 0.1}`` over ``{kind: triplet_hardest,
    margin: 0.2}`` leaves no margin behind to enter the config hash, ``loss.kind: triplet_sum``
    keeps the margin, and SmoothAP never inherits NT-Xent's tau."""
    kind = layer.get("kind")
    if "terms" in layer or ("terms" in inherited and kind is not None):  # one form replaces the other
        return dict(layer)
    merged = {**inherited, **layer}
    old = inherited.get("kind")
    if kind is None or kind == old or kind not in TERM_KINDS or old not in TERM_KINDS:
        return merged  # (an unknown kind is reported by the schema, with the file and key)
    new_kind, old_kind = TERM_KINDS.get(kind), TERM_KINDS.get(old)
    takes = new_kind.parameters if new_kind.family_name == old_kind.family_name else frozenset()
    return {k: v for k, v in merged.items() if k in layer or k in takes or k == "weight"}
