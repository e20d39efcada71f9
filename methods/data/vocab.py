"""Build the vocabulary from the training split's captions only (never dev/test), or take the
one configured as ``datasets.<name>.vocab`` (checked against the captions when the DAG is built).

``python -m methods.data.vocab --dataset-config results/<dataset>/dataset.json --out vocab.json``
"""
from __future__ import annotations

from methods.cli import entry_parser, run_cli
from methods.data.text import Vocabulary


def main(argv: list[str] | None = None) -> None:
    from methods.workflow import load_dataset_payload, payload_splits

    parser = entry_parser(__doc__)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)

    def _run() -> None:
        payload = load_dataset_payload(args.dataset_config)
        ds = payload["dataset"]
        train = payload_splits(payload, ["train"])["train"]
        if payload["paths"].get("vocab"):
            vocab = Vocabulary.load(payload["paths"]["vocab"])
            vocab.check_covers(train.captions, payload["paths"]["vocab"])
            vocab.save(args.out)
            print(f"vocabulary: {len(vocab)} words from {payload['paths']['vocab']} (configured)")
            return
        vocab = Vocabulary.build(train.captions, ds["vocab_threshold"])
        vocab.save(args.out)
        print(f"vocabulary: {len(vocab)} words from {len(train.captions)} training captions")

    run_cli(_run)


if __name__ == "__main__":
    main()
