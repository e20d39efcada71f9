"""Pre-train a tiny BERT on a synthetic dataset's training captions (masked-language modelling).

Stands in for ``bert-base-uncased``, which cannot be downloaded, as the synthetic ResNet-18 stands
in for ImageNet weights (``methods.features.pretrain``): the BERT code path (its folder, its
WordPiece captions, its training at its own learning rate) then runs end to end on the built-in
data. Only the training captions are read. The folder written is laid out as transformers saves a
BERT (``config.json``, ``vocab.txt``, ``tokenizer_config.json``, ``model.safetensors``), so it is
read exactly as a user's ``bert-base-uncased`` folder is (``methods.models.bert_text``).

The WordPiece vocabulary: ``[PAD] [UNK] [CLS] [SEP] [MASK]``, every character of the training words
alone and as a continuation piece (``##c``), and the training words seen at least
``vocab_threshold`` times; a rarer word then splits into pieces, as many words do for a real BERT.
Masking as BERT's: each piece of a caption is chosen with probability ``mask_prob``; a chosen one
becomes ``[MASK]`` (80 %), a random piece (10 %) or stays (10 %), and the loss is the cross-entropy
of the chosen pieces. Seeded; the draws are torch's.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from collections import Counter
from pathlib import Path

import torch

from methods.cli import run_command
from methods.data.datasets import load_dataset_payload
from methods.data.wordpiece import SPECIALS, tokenize_captions
from methods.errors import HarnessError
from methods.runtime import compute_setup, resolve_device, seed_everything

IGNORE = -100   # the cross-entropy's ignored target (transformers' convention)


def wordpiece_vocabulary(captions: list[str], threshold: int) -> list[str]:
    """The pieces of the module docstring, from ``captions`` split as BERT's basic tokenizer does."""
    from transformers.models.bert.tokenization_bert import BasicTokenizer

    basic = BasicTokenizer(do_lower_case=True)
    counts = Counter(word for caption in captions for word in basic.tokenize(caption))
    chars = sorted({c for word in counts for c in word})
    words = sorted(w for w, n in counts.items() if n >= threshold and len(w) > 1)
    return list(dict.fromkeys([*SPECIALS, *chars, *(f"##{c}" for c in chars), *words]))


def write_tokenizer(folder: Path, pieces: list[str]) -> None:
    """``vocab.txt`` and ``tokenizer_config.json`` of an uncased BERT, as transformers writes them."""
    folder.mkdir(parents=True)
    (folder / "vocab.txt").write_text("".join(f"{p}\n" for p in pieces), encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True, "tokenizer_class": "BertTokenizer"}))


def mask_pieces(ids: torch.Tensor, special: torch.Tensor, mask_prob: float, mask_id: int, vocab_size: int,
                generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets) of one batch (B, L) of piece ids: BERT's masking (module docstring);
    ``special`` marks [CLS], [SEP] and padding, never chosen."""
    chosen = (torch.rand(ids.shape, generator=generator) < mask_prob) & ~special
    action = torch.rand(ids.shape, generator=generator)
    random_ids = torch.randint(vocab_size, ids.shape, generator=generator)
    inputs = torch.where(chosen & (action < 0.8), torch.full_like(ids, mask_id), ids)
    inputs = torch.where(chosen & (action >= 0.8) & (action < 0.9), random_ids, inputs)
    return inputs, torch.where(chosen, ids, torch.full_like(ids, IGNORE))


def pretrain_bert(captions: list[str], cfg: dict, out: Path, device: torch.device) -> None:
    from safetensors.torch import save_file
    from transformers import BertConfig, BertForMaskedLM

    seed_everything(cfg["seed"])
    pieces = wordpiece_vocabulary(captions, cfg["vocab_threshold"])
    staging = out.with_name(f".{out.name}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    write_tokenizer(staging, pieces)
    _, tokenized = tokenize_captions(staging, captions)
    cls_id, sep_id, mask_id = (pieces.index(t) for t in ("[CLS]", "[SEP]", "[MASK]"))
    sequences = [[cls_id, *(i for word in tokenized[c] for i in word), sep_id] for c in captions]
    longest = max(len(s) for s in sequences)
    config = BertConfig(vocab_size=len(pieces), hidden_size=cfg["hidden_size"], num_hidden_layers=cfg["layers"],
                        num_attention_heads=cfg["heads"], intermediate_size=cfg["intermediate_size"],
                        max_position_embeddings=max(64, 2 * longest), pad_token_id=0)
    config.to_json_file(str(staging / "config.json"))
    config._attn_implementation = "eager"
    model = BertForMaskedLM(config).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=0.01)
    generator = torch.Generator().manual_seed(cfg["seed"])
    model.train()
    for epoch in range(cfg["epochs"]):
        t0, total, correct, chosen = time.perf_counter(), 0.0, 0, 0
        order = torch.randperm(len(sequences), generator=generator).tolist()
        for start in range(0, len(order), cfg["batch_size"]):
            batch = [sequences[i] for i in order[start:start + cfg["batch_size"]]]
            width = max(len(s) for s in batch)
            ids = torch.tensor([s + [0] * (width - len(s)) for s in batch])
            special = (ids == 0) | (ids == cls_id) | (ids == sep_id)
            inputs, targets = mask_pieces(ids, special, cfg["mask_prob"], mask_id, len(pieces), generator)
            logits = model(input_ids=inputs.to(device), attention_mask=(ids != 0).long().to(device)).logits
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                     targets.reshape(-1).to(device), ignore_index=IGNORE)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            picked = targets != IGNORE
            total += loss.item() * int(picked.sum())
            correct += int((logits.argmax(-1).cpu()[picked] == targets[picked]).sum())
            chosen += int(picked.sum())
        print(f"pretrain_bert epoch {epoch + 1}: masked-piece loss {total / max(chosen, 1):.4f}, accuracy "
              f"{correct / max(chosen, 1):.3f} ({time.perf_counter() - t0:.1f} s)", flush=True)
    if not torch.isfinite(torch.tensor(total)):
        raise HarnessError(f"pretrain_bert: the loss diverged (lr {cfg['lr']}); lower text_encoders.<name>.pretrain.lr")
    # BertModel's entries only, under BertForMaskedLM's names (bert.*): the MLM head ties its decoder
    # to the word embeddings, which safetensors refuses to store twice, and no model reads it
    save_file({f"bert.{k}": v.detach().cpu().contiguous() for k, v in model.bert.state_dict().items()},
              str(staging / "model.safetensors"))
    shutil.rmtree(out, ignore_errors=True)
    os.replace(staging, out)


def _pretrain(args) -> None:
    payload = load_dataset_payload(args.dataset_config)
    enc = payload.text_encoders.get(args.encoder)
    if enc is None or "pretrain" not in enc:
        raise HarnessError(f"text_encoders.{args.encoder}: not a text encoder the DAG pre-trains (no 'pretrain')")
    train = payload.split("train")
    pretrain_bert(train.captions, enc["pretrain"], Path(args.out), resolve_device(args.device))
    print(f"pretrain_bert: {args.out} from {len(train.captions)} training captions of {payload.name}")


def _arguments(parser) -> None:
    parser.add_argument("--encoder", required=True)
    parser.add_argument("--out", required=True)


def main(argv: list[str] | None = None) -> None:
    run_command(__doc__, _arguments, _pretrain, argv, compute=compute_setup)


if __name__ == "__main__":
    main()
