"""Tokenise every split's captions of a dataset for one BERT text encoder (rule
``wordpiece_captions``): ``<results>/<dataset>/text/<encoder>.json``, read by training and
evaluation (``methods.data.wordpiece``).

``python -m methods.data.wordpiece_captions --dataset-config results/<dataset>/dataset.json
--encoder <name> --folder <its folder> --out results/<dataset>/text/<name>.json``
"""
from __future__ import annotations

from methods.cli import run_command
from methods.data.datasets import load_dataset_payload
from methods.data.wordpiece import WordPieceVocabulary, check_bert_folder, tokenize_captions
from methods.errors import HarnessError


def _tokenize(args) -> None:
    payload = load_dataset_payload(args.dataset_config)
    splits = payload.splits(list(payload.dataset["splits"]))
    every_caption = [c for split in splits.values() for c in split.captions]
    config = check_bert_folder(args.folder, f"text_encoders.{args.encoder}.path")
    pieces, captions = tokenize_captions(args.folder, every_caption)
    longest = max(captions, key=lambda c: sum(len(w) for w in captions[c]))
    n_longest = sum(len(w) for w in captions[longest]) + 2   # [CLS] and [SEP]
    if n_longest > config["max_position_embeddings"]:
        raise HarnessError(f"text_encoders.{args.encoder}.path: a caption of {payload.name} is {n_longest} pieces, "
                           f"past the BERT's {config['max_position_embeddings']} positions: {longest[:80]!r}")
    vocab = WordPieceVocabulary(pieces, args.encoder, captions)
    vocab.check_covers(splits["train"].captions, f"text_encoders.{args.encoder} ({args.folder})")
    vocab.save(args.out)
    n_pieces = sum(len(w) for words in captions.values() for w in words)
    print(f"{len(captions)} captions of {payload.name} tokenised for {args.encoder}: {n_pieces} pieces, "
          f"{len(pieces)} in its vocabulary")


def _arguments(parser) -> None:
    parser.add_argument("--encoder", required=True, help="the text encoder's name (config text_encoders)")
    parser.add_argument("--folder", required=True, help="its folder (vocab.txt, tokenizer_config.json)")
    parser.add_argument("--out", required=True)


def main(argv: list[str] | None = None) -> None:
    run_command(__doc__, _arguments, _tokenize, argv)


if __name__ == "__main__":
    main()
