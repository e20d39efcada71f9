"""The BERT text path: a configured folder checked in one line per fault, captions tokenised as the
sources' BertTokenizer calls do (hand-worked pieces), caption augmentation over a word's pieces,
the folder's weights loaded as BertModel's (prefixes and legacy names), the tiny BERT the DAG
pre-trains (seeded, read back as any folder), and rows left out when a folder is not configured."""
import json
import re

import pytest
import torch
import yaml
from safetensors.torch import save_file

from methods.config import load_harness_config
from methods.data.caption_augment import CaptionAugmentation, extra_tokens
from methods.data.text import load_vocabulary
from methods.data.wordpiece import WordPieceVocabulary, check_bert_folder, tokenize_captions
from methods.errors import HarnessError
from methods.features.pretrain_bert import IGNORE, mask_pieces, pretrain_bert
from methods.models.bert_text import BertTextEncoder, bert_model
from methods.plan import Plan
from methods.training.data import CaptionPairs
from tests.conftest import REPO

PIECES = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "dog", "run", "##s", "##ning", "on", "grass", "."]


def bert_folder(root, pieces=PIECES, hidden=16, seed=0, prefix="bert.", config_changes=None):
    """A tiny random BERT folder as transformers saves one (written by the test: no download)."""
    from transformers import BertConfig, BertModel
    root.mkdir(parents=True, exist_ok=True)
    config = BertConfig(vocab_size=len(pieces), hidden_size=hidden, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=32)
    torch.manual_seed(seed)
    model = BertModel(config)
    config_dict = {**config.to_dict(), **(config_changes or {})}
    (root / "config.json").write_text(json.dumps(config_dict))
    (root / "vocab.txt").write_text("".join(f"{p}\n" for p in pieces))
    (root / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    save_file({f"{prefix}{k}": v.contiguous() for k, v in model.state_dict().items()}, str(root / "model.safetensors"))
    return root, model


def test_captions_are_tokenised_word_by_word_into_pieces(tmp_path):
    folder, _ = bert_folder(tmp_path / "bert")
    pieces, captions = tokenize_captions(folder, ["A dog runs on grass.", "Running dogs"])
    assert pieces == PIECES
    # by hand: lower case, "." split off; runs = run + ##s; running = run + ##ning; dogs = dog + ##s
    assert captions["A dog runs on grass."] == [[5], [6], [7, 8], [10], [11], [12]]
    assert captions["Running dogs"] == [[7, 9], [6, 8]]
    vocab = WordPieceVocabulary(pieces, "enc", captions)
    assert vocab.encode("Running dogs") == [2, 7, 9, 6, 8, 3]
    assert vocab.tokens("Running dogs") == ["run", "##ning", "dog", "##s"]
    vocab.save(tmp_path / "captions.json")
    again = load_vocabulary(tmp_path / "captions.json")
    assert isinstance(again, WordPieceVocabulary) and again.encode_words("Running dogs") == [[7, 9], [6, 8]]


@pytest.mark.parametrize("fault, message", [
    ("no_config", "has no config.json"),
    ("not_bert", "is not a BERT's config (model_type 'roberta'"),
    ("vocab_size", "holds 13 pieces but"),
    ("pad_not_first", "id 0 is '[UNK]', not [PAD]"),
    ("no_weights", "has no weights file"),
])
def test_a_wrong_folder_is_one_line_naming_the_key(tmp_path, fault, message):
    folder, _ = bert_folder(tmp_path / "bert")
    config = json.loads((folder / "config.json").read_text())
    if fault == "no_config":
        (folder / "config.json").unlink()
    elif fault == "not_bert":
        (folder / "config.json").write_text(json.dumps({**config, "model_type": "roberta"}))
    elif fault == "vocab_size":
        (folder / "config.json").write_text(json.dumps({**config, "vocab_size": 30522}))
    elif fault == "pad_not_first":
        (folder / "vocab.txt").write_text("".join(f"{p}\n" for p in [PIECES[1], PIECES[0], *PIECES[2:]]))
    else:
        (folder / "model.safetensors").unlink()
    with pytest.raises(HarnessError) as err:
        check_bert_folder(folder, "text_encoders.bert_base_uncased.path")
    assert str(err.value).startswith("text_encoders.bert_base_uncased.path: ") and message in str(err.value)
    assert "\n" not in str(err.value)


def test_a_chosen_word_is_masked_replaced_or_deleted_whole():
    augment = CaptionAugmentation(0.2, 0.5, 0.1, vocab_size=13, mask_token=4)
    assert augment.n_ids == 13 and augment.mask_id == 4   # [MASK] is a piece: no id past the vocabulary
    words = [[5], [7, 9], [6, 8], [11]]
    # by hand: u/0.2 = 0.25 -> masked; 0.5 -> kept; 0.575 -> replaced; 0.9 -> deleted
    draws = [0.05, 0.5, 0.115, 0.18]
    replacements = [0, 1, 2, 3, 10, 12]   # one per piece
    assert augment.apply_words(words, draws, replacements) == [4, 7, 9, 3, 10]   # word 3: pieces 4-5
    draws = [0.9, 0.01, 0.5, 0.5]
    assert augment.apply_words(words, draws, replacements) == [5, 4, 4, 6, 8, 11]
    with pytest.raises(ValueError):
        augment.apply_words(words, draws, replacements[:4])   # one id per piece, not per word
    assert extra_tokens({"caption_augment": {"prob": 0.2, "mask": 0.5, "replace": 0.1}}, {"kind": "bert"}) == 0
    assert extra_tokens({"caption_augment": {"prob": 0.2, "mask": 0.5, "replace": 0.1}}, {"word_dim": 4}) == 1


def test_training_captions_of_a_bert_are_augmented_over_their_pieces(tmp_path):
    folder, _ = bert_folder(tmp_path / "bert")
    caps = ["A dog runs on grass."] * 5 + ["Running dogs"] * 5
    pieces, tokenized = tokenize_captions(folder, caps)
    vocab = WordPieceVocabulary(pieces, "enc", tokenized)
    pairs = CaptionPairs(caps, vocab, 5, augment=CaptionAugmentation(1.0, 1.0, 0.0, len(vocab), vocab.mask_id))
    assert pairs.caption(5)[0] == [2, 4, 4, 4, 4, 3]   # every word masked: a [MASK] per piece, specials kept
    pairs = CaptionPairs(caps, vocab, 5, augment=CaptionAugmentation(1.0, 0.0, 0.0, len(vocab), vocab.mask_id))
    assert pairs.caption(0)[0] == [2, 3]


def test_the_folders_weights_load_as_bertmodels_whatever_the_prefix_and_names(tmp_path):
    _, reference = bert_folder(tmp_path / "a", seed=1)
    loaded = bert_model(tmp_path / "a", "text_encoders.enc.path")
    assert all(torch.equal(v, reference.state_dict()[k]) for k, v in loaded.state_dict().items())
    # an original Google conversion: no prefix, LayerNorm gamma/beta, no pooler
    root = tmp_path / "b"
    bert_folder(root, seed=1)
    state = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
             for k, v in reference.state_dict().items() if not k.startswith("pooler.")}
    save_file({k: v.contiguous() for k, v in state.items()}, str(root / "model.safetensors"))
    loaded = bert_model(root, "text_encoders.enc.path")
    assert torch.equal(loaded.embeddings.LayerNorm.weight, reference.embeddings.LayerNorm.weight)
    # a weights file of another width: one line naming the key and the tensor
    bert_folder(tmp_path / "c", hidden=16)
    _, wide = bert_folder(tmp_path / "d", hidden=32)
    save_file({f"bert.{k}": v.contiguous() for k, v in wide.state_dict().items()}, str(tmp_path / "c" / "model.safetensors"))
    with pytest.raises(HarnessError, match=r"^text_encoders\.enc\.path: \S+model\.safetensors: \S+ is \((13, )?32,?\), "
                                           r"the config's model has \((13, )?16,?\)$"):
        bert_model(tmp_path / "c", "text_encoders.enc.path")


def test_the_encoder_projects_every_token_and_trains_bert_at_its_factor(tmp_path):
    _, reference = bert_folder(tmp_path / "bert", seed=2)
    encoder = BertTextEncoder.from_config({"kind": "bert", "encoder": "enc", "out_dim": 8, "lr_factor": 0.1},
                                          {"enc": {"kind": "bert", "path": str(tmp_path / "bert")}})
    encoder.eval()
    reference.eval()
    tokens = torch.tensor([[2, 5, 6, 3, 0], [2, 7, 8, 9, 3]])
    with torch.no_grad():
        got = encoder.word_states(tokens, torch.tensor([4, 5]))
        hidden = reference(tokens, attention_mask=(tokens != 0).float()).last_hidden_state
    torch.testing.assert_close(got, hidden @ encoder.linear.weight.T + encoder.linear.bias)
    (projection, scale), (bert, factor) = encoder.parameter_groups()
    assert scale == 1.0 and factor == 0.1 and len(projection) == 2
    assert {id(p) for p in bert} == {id(p) for p in encoder.bert.parameters()}


def test_masked_language_modelling_never_masks_specials_and_targets_only_chosen_pieces():
    ids = torch.tensor([[2, 5, 6, 7, 3, 0, 0], [2, 8, 9, 10, 11, 12, 3]])
    special = (ids == 0) | (ids == 2) | (ids == 3)
    inputs, targets = mask_pieces(ids, special, 0.5, 4, 13, torch.Generator().manual_seed(0))
    chosen = targets != IGNORE
    assert not (chosen & special).any() and torch.equal(targets[chosen], ids[chosen])
    assert torch.equal(inputs[~chosen], ids[~chosen])
    # over many draws: 80 % [MASK], 10 % random, 10 % kept, of about mask_prob of the pieces
    big = torch.randint(5, 13, (400, 50))
    inputs, targets = mask_pieces(big, torch.zeros_like(big, dtype=torch.bool), 0.15, 4, 13,
                                  torch.Generator().manual_seed(1))
    chosen = targets != IGNORE
    assert abs(chosen.float().mean().item() - 0.15) < 0.01
    assert abs((inputs[chosen] == 4).float().mean().item() - 0.8) < 0.03


def test_the_tiny_bert_is_seeded_and_read_back_as_any_folder(tmp_path):
    caps = ["a red circle left of a blue square", "two green triangles above a yellow star", "a purple hexagon"] * 10
    cfg = dict(seed=0, vocab_threshold=10, hidden_size=16, layers=1, heads=2, intermediate_size=32, lr=1e-3,
               epochs=2, batch_size=8, mask_prob=0.15)
    pretrain_bert(caps, cfg, tmp_path / "one", torch.device("cpu"))
    pretrain_bert(caps, cfg, tmp_path / "two", torch.device("cpu"))
    assert (tmp_path / "one" / "model.safetensors").read_bytes() == (tmp_path / "two" / "model.safetensors").read_bytes()
    assert not list(tmp_path.glob(".*partial"))
    config = check_bert_folder(tmp_path / "one", "text_encoders.bert_synthetic.path")
    pieces, tokenized = tokenize_captions(tmp_path / "one", ["a purple hexagon", "a zebra"])
    assert config["vocab_size"] == len(pieces) and pieces[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    # frequent words are pieces of their own; a rarer one splits into characters; an unseen letter is [UNK]
    assert [pieces[i] for i in tokenized["a purple hexagon"][2]] == ["hexagon"]
    assert [[pieces[i] for i in w] for w in tokenized["a zebra"]] == [["a"], ["[UNK]"]]
    bert_model(tmp_path / "one", "text_encoders.bert_synthetic.path")   # its weights fit its config


def test_a_row_whose_bert_folder_is_not_configured_is_left_out_naming_the_key(tmp_path):
    paper = yaml.safe_load((REPO / "tests" / "data" / "bert_paper.yaml").read_text())
    paper["tables"]["berttest"]["datasets"] = ["flickr"]
    paper["tables"]["berttest"]["rows"] = [r for r in paper["tables"]["berttest"]["rows"] if r["id"] == "bert"]
    paper["tables"]["berttest"]["rows"].insert(0, {"id": "bigru", "label": "VSE-infinity, bi-GRU",
                                                   "method": "vse_infinity", "seeds": [0]})
    paper["methods"] = {k: str(REPO / v) for k, v in paper["methods"].items()}
    paper["claims"] = {"bert_beats_bigru": {"words": "BERT helps", "where": "test", "table": "berttest",
                                            "compare": "bert.rsum > bigru.rsum"}}
    (tmp_path / "paper.yaml").write_text(yaml.safe_dump(paper))
    plan = Plan(load_harness_config(REPO / "config" / "config.yaml", {"papers": [str(tmp_path / "paper.yaml")]}))
    spec = plan.table_spec("berttest", "flickr")
    assert [r.id for r in plan.table("berttest", "flickr").rows] == ["bigru"]
    assert spec.unconfigured == [{"id": "bert", "label": "VSE-infinity, BERT",
                                  "keys": ["text_encoders.bert_base_uncased.path"], "needs": "a BERT folder"}]
    assert plan.untested_claims[("bert_test", "flickr")] == [("bert_beats_bigru", ["text_encoders.bert_base_uncased.path"])]
    # configured, the row trains, reading the captions tokenised for its BERT
    folder, _ = bert_folder(tmp_path / "bert")
    plan = Plan(load_harness_config(REPO / "config" / "config.yaml", {
        "papers": [str(tmp_path / "paper.yaml")], "text_encoders": {"bert_base_uncased": {"path": str(folder)}}}))
    row = {r.id: r for r in plan.table("berttest", "flickr").rows}["bert"]
    assert plan.text_vocabulary("flickr", row.members[0]) == "results/flickr/text/bert_base_uncased.json"
    assert "BERT bert_base_uncased -> 1024 (lr x0.1)" in row.ran
    assert not any(re.search("tokenizer", d["name"]) for d in row.ledger[0]["deviations"])


def test_the_bert_method_file_runs_and_declares_the_source_behaviour():
    """config/methods/vse_infinity_bert.yaml against master's code (tests/oracles/vse_infinity.py,
    written from it): every value in its resolved flickr and coco configs, and declared as a switch."""
    from methods.fidelity import load_method_file, source_ledger
    from methods.plan.method_files import resolve_method_config
    from tests.oracles.vse_infinity import BERT_SOURCE_BEHAVIOUR
    from tests.test_fidelity import value_at

    expected = BERT_SOURCE_BEHAVIOUR["vse_infinity_bert"]
    path = REPO / "config" / "methods" / "vse_infinity_bert.yaml"
    raw = load_method_file(path)
    backbones = load_harness_config(REPO / "config" / "config.yaml")["backbones"]
    for dataset in ("flickr", "coco"):
        declared = {s.key: s.value for s in source_ledger(raw, [], dataset).switches}
        assert {k: declared.get(k, "undeclared") for k in expected} == expected
        cfg = resolve_method_config(path, dataset, {}, [], backbones, raw)
        assert {k: value_at(cfg, k) for k in expected} == expected
        assert cfg["training"]["length_buckets"] is None
