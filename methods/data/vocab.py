"""Build the vocabulary from the training split's captions only (never dev/test), or take the
one configured as ``datasets.<name>.vocab`` (checked against the captions when the DAG is built).
The file written records the dataset's tokenizer and holds every split's captions tokenised, so
that no other job needs to tokenise (``methods.data.text``).

``python -m methods.data.vocab --dataset-config results/<dataset>/dataset.json --out vocab.json``
"""
from __future__ import annotations

from methods.cli import run_command
from methods.data.datasets import load_dataset_payload
from methods.data.text import Vocabulary


def build_vocabulary(args) -> None:
    payload = load_dataset_payload(args.dataset_config)
    ds = payload.dataset
    tokenizer = payload.tokenizer()
    splits = payload.splits(list(ds["splits"]))
    train = splits["train"]
    every_caption = [c for split in splits.values() for c in split.captions]
    if payload.paths.get("vocab"):
        vocab = Vocabulary.load(payload.paths["vocab"], tokenizer).words_only()   # its words, our tokenizer
        vocab.check_covers(train.captions, payload.paths["vocab"])
        vocab.with_tokenized(every_caption).save(args.out)
        print(f"vocabulary: {len(vocab)} words from {payload.paths['vocab']} (configured), "
              f"tokenizer {tokenizer.kind}")
        return
    vocab = Vocabulary.build(train.captions, ds["vocab_threshold"], tokenizer)
    vocab.with_tokenized(every_caption).save(args.out)
    print(f"vocabulary: {len(vocab)} words from {len(train.captions)} training captions, tokenizer {tokenizer.kind}")


def main(argv: list[str] | None = None) -> None:
    run_command(__doc__, lambda p: p.add_argument("--out", required=True), build_vocabulary, argv)


if __name__ == "__main__":
    main()
