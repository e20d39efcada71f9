"""BERT caption encoder: a Hugging Face ``BertModel`` from a local folder, then a linear projection
of every token's last hidden state, as woodfrog/vse_infty (master, ``lib/encoders.py``
``EncoderText``) computes it: ``bert(ids, attention_mask=(ids != 0))[0]`` -> ``nn.Linear(hidden,
out_dim)``; the model on top pools the tokens (VSE-infinity: GPO over ``[CLS]`` ... ``[SEP]``).

The folder is a text encoder of the harness config (``text_encoders.<name>.path``, or the folder
the DAG pre-trains: ``methods.features.pretrain_bert``). Its ``config.json`` gives the architecture
(``BertConfig.from_dict``: JSON, no code); its weights are read from ``model.safetensors`` (no code
by design) or else ``pytorch_model.bin`` with ``torch.load(weights_only=True)``; a key the model
lacks, or a missing one but the pooler's (which no output reads), is one line naming the file.
``from_pretrained`` is not used: it may fetch, and it maps keys silently. A model rebuilt from its
trained file is built with ``weights: none`` (the trained weights overwrite them).

Attention is transformers' ``eager`` implementation (the sources' transformers had no other),
so the numerics do not follow the host's SDPA kernels.
"""
from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from methods.data.wordpiece import check_bert_folder, weights_file
from methods.errors import HarnessError, first_line

# checkpoint key renames of the original Google conversions (transformers' from_pretrained does the same)
_LEGACY_NAMES = ((".gamma", ".weight"), (".beta", ".bias"))


def _bert_state(path: Path) -> dict[str, torch.Tensor]:
    """The BertModel entries of a weights file: keys of a pre-training head (``cls.``) dropped,
    the ``bert.`` prefix of a model with a head removed."""
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file
            raw = load_file(str(path), device="cpu")
        else:
            raw = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as exc:
        raise HarnessError(f"{path}: not a readable weights file ({type(exc).__name__}: {first_line(exc)})") from None
    if not isinstance(raw, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in raw.items()):
        raise HarnessError(f"{path}: not a state dict of tensors")
    state = {}
    for key, value in raw.items():
        if key.startswith("cls.") or key.endswith("position_ids"):   # MLM/NSP heads; a buffer older files saved
            continue
        key = key[len("bert."):] if key.startswith("bert.") else key
        for old, new in _LEGACY_NAMES:
            if key.endswith(old) and "LayerNorm" in key:
                key = key[: -len(old)] + new
        state[key] = value
    return state


def bert_model(folder: str | Path, where: str, load_weights: bool = True) -> nn.Module:
    """``BertModel`` of the folder's config (eager attention), with its weights unless ``load_weights`` is False."""
    from transformers import BertConfig, BertModel

    config = BertConfig.from_dict(check_bert_folder(folder, where, weights=load_weights), attn_implementation="eager")
    model = BertModel(config)   # with its pooler, as the sources' BertModel.from_pretrained: the same state dict
    if load_weights:
        path = weights_file(folder)
        state = _bert_state(path)
        own = model.state_dict()
        unexpected = sorted(set(state) - set(own))
        missing = sorted(k for k in set(own) - set(state) if not k.startswith("pooler."))
        if unexpected or missing:
            raise HarnessError(f"{where}: {path} does not fit the BERT of {Path(folder) / 'config.json'} "
                               f"(unexpected {unexpected[:3]}, missing {missing[:3]})")
        wrong = [k for k in state if state[k].shape != own[k].shape]
        if wrong:
            raise HarnessError(f"{where}: {path}: {wrong[0]} is {tuple(state[wrong[0]].shape)}, the config's model "
                               f"has {tuple(own[wrong[0]].shape)}")
        model.load_state_dict({**own, **{k: v.to(own[k].dtype) for k, v in state.items()}})
    return model


class BertTextEncoder(nn.Module):
    """token ids (B, L), 0-padded -> (B, L, out_dim) projected token states (``word_states``)."""

    def __init__(self, bert: nn.Module, out_dim: int, lr_factor: float = 0.1):
        super().__init__()
        self.bert = bert
        self.linear = nn.Linear(bert.config.hidden_size, out_dim)   # nn.Linear's own init, as the source
        self.lr_factor = lr_factor
        self.out_dim = out_dim

    @classmethod
    def from_config(cls, cfg: dict, text_encoders: dict) -> "BertTextEncoder":
        """From a ``text`` block of kind bert and the config's ``text_encoders`` (``path`` of each;
        ``weights: none``: build without reading the weights)."""
        name = cfg["encoder"]
        if name not in text_encoders:
            raise HarnessError(f"model.text.encoder: '{name}' is not configured under text_encoders "
                               f"(configured: {', '.join(sorted(text_encoders)) or 'none'})")
        enc = text_encoders[name]
        if not enc.get("path"):
            raise HarnessError(f"text_encoders.{name}.path: not set (a BERT folder: config.json, vocab.txt, weights)")
        bert = bert_model(enc["path"], f"text_encoders.{name}.path", load_weights=enc.get("weights") != "none")
        return cls(bert, cfg["out_dim"], cfg["lr_factor"])

    @property
    def vocab_size(self) -> int:
        return self.bert.config.vocab_size

    def word_states(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """(B, L, out_dim): every token's projected last hidden state (padded positions too: the
        pooling on top reads ``lengths``)."""
        hidden = self.bert(tokens, attention_mask=(tokens != 0).to(self.linear.weight.dtype))[0]
        return self.linear(hidden)

    def parameter_groups(self) -> list[tuple[list[nn.Parameter], float]]:
        """The BERT at ``lr_factor`` of the rate (lib/vse.py: ``opt.learning_rate * 0.1``), the projection at it."""
        return [([p for p in self.linear.parameters() if p.requires_grad], 1.0),
                ([p for p in self.bert.parameters() if p.requires_grad], self.lr_factor)]
