"""The harness tokenises captions as the sources' ``nltk.tokenize.word_tokenize(caption.lower())``:
checked against nltk's own public call on a few hundred realistic captions (possessives,
contractions, numbers, hyphens, punctuation, quotes, non-ASCII, several sentences)."""
from __future__ import annotations

import itertools
import random

import nltk
import pytest

from methods.data.synthetic import generate
from methods.data.text import SPECIALS, Vocabulary
from methods.data.tokenizers import PUNKT_FILES, PUNKT_SUBDIR, Tokenizer, punkt_dir
from methods.errors import HarnessError
from tests.conftest import planted_punkt

BASE = [
    "A man's dog is running through the grass.",
    "Two young guys with shaggy hair look at their hands while hanging out in the yard .",
    "They'll be fine, don't worry about the kids' toys!",
    "A woman wearing a 3.5 inch heel walks down 5th Avenue.",
    "A well-dressed man sits on a bench; a dog sleeps nearby.",
    "The children's choir sings \"Silent Night\" at the church.",
    "A bike leans against a wall... near a café in Zürich.",
    "An older man (wearing a hat) plays chess with a boy.",
    "Someone's cat won't come down from the tree?",
    "A 10,000-piece puzzle, half-finished, on the table.",
    "A sign reads 'No Parking' next to a red car.",
    "A dog jumps. It catches the frisbee mid-air.",
    "Mr. Smith and Dr. Jones walk down St. Mark's street.",
    "A man in a t-shirt says: \"I can't believe it's not butter\".",
    "People gather @ the park for a 4th of July BBQ & fireworks",
    "A girl's face-painted cheek shows a 50% smile :)",
    "Señor García's naïve coöperation at the piñata party",
    "A skier flies off a jump , the crowd cheers .",
    "a baseball player swings at a pitch during the game",
    "Two dogs play in the snow! One is brown, the other's white.",
    "A plate of food: rice, beans & chicken -- yum",
    "U.S. soldiers stand in a line at 9:30 a.m.",
    "The boy's and girls' teams shake hands after the match",
    "A 'vintage' 1960s-era car is parked on the street",
    "It's a sunny day; they're at the beach (finally).",
    "A cat sits on a laptop keyboard... again?!",
    "Students ' backpacks lie on the floor of the classroom",
    "An elderly couple dances at their 50th anniversary party.",
    "A smiling toddler holds a $5 bill in front of a store",
    "Food trucks line up on 42nd St. during lunch hour.",
]
PREFIXES = ["", "Look: ", "Wow! ", "In the photo, ", "  ", "“Quoted” "]
SUFFIXES = ["", " .", ".", " !", " Nobody's around.", " It's 5.30 p.m. now", "\t", " ok?"]


def realistic_captions() -> list[str]:
    rng = random.Random(0)
    captions = [p + b + s for b, p, s in itertools.product(BASE, PREFIXES, SUFFIXES)]
    return rng.sample(captions, 400)


@pytest.fixture
def nltk_with_punkt(tmp_path, monkeypatch):
    """nltk's own word_tokenize, reading the planted model (nothing downloaded)."""
    root = planted_punkt(tmp_path / "nltk_data")
    monkeypatch.setattr(nltk.data, "path", [str(root)])
    nltk.tokenize._get_punkt_tokenizer.cache_clear()
    yield root
    nltk.tokenize._get_punkt_tokenizer.cache_clear()


def test_nltk_line_equals_word_tokenize_of_one_line():
    tokenizer = Tokenizer("nltk_line")
    for caption in realistic_captions():
        assert tokenizer(caption) == nltk.tokenize.word_tokenize(caption.lower(), preserve_line=True), caption


def test_nltk_equals_the_sources_call_with_sentence_splitting(nltk_with_punkt):
    tokenizer = Tokenizer("nltk", punkt_dir(nltk_with_punkt, "datasets.flickr.nltk_data"))
    differs = 0
    for caption in realistic_captions():
        expected = nltk.tokenize.word_tokenize(str(caption).lower())   # kuanghuei/SCAN data.py, as called there
        assert tokenizer(caption) == expected, caption
        differs += expected != Tokenizer("nltk_line")(caption)
    assert differs > 0   # the sample holds captions whose sentences Punkt splits


def test_hand_worked_tokens(nltk_with_punkt):
    line = Tokenizer("nltk_line")
    assert line("A man's dog don't they'll 3.5 ft.") == ["a", "man", "'s", "dog", "do", "n't", "they", "'ll",
                                                          "3.5", "ft", "."]
    assert line("a well-dressed man, in Zürich!") == ["a", "well-dressed", "man", ",", "in", "zürich", "!"]
    assert line("a dog runs. it jumps .") == ["a", "dog", "runs.", "it", "jumps", "."]   # one line: "runs." stays
    full = Tokenizer("nltk", punkt_dir(nltk_with_punkt, "x"))
    assert full("a dog runs. it jumps .") == ["a", "dog", "runs", ".", "it", "jumps", "."]
    assert full("mr. smith waves.") == ["mr.", "smith", "waves", "."]   # an abbreviation of the model: no split


def test_synthetic_captions_are_single_sentences(tmp_path, nltk_with_punkt):
    """The synthetic dataset tokenises with nltk_line: its captions hold no sentence boundary, so
    the words are those of the sources' call."""
    generate(tmp_path, 2, 32, 4, {"train": 30, "val": 5, "test": 5}, min_objects=1, family_size=2,
             tokenizer=Tokenizer("nltk_line"))
    import json
    data = json.loads((tmp_path / "dataset_synthetic.json").read_text())
    captions = [s for im in data["images"] for s in im["sentences"]]
    assert len(captions) == 200
    for s in captions:
        assert s["tokens"] == nltk.tokenize.word_tokenize(s["raw"].lower()), s["raw"]


def test_vocabulary_records_its_tokenizer_and_the_tokenised_captions(tmp_path):
    line = Tokenizer("nltk_line")
    captions = ["A man's dog.", "a man's cat", "", "a dog"]
    vocab = Vocabulary.build(captions, 2, line)
    assert vocab.idx2word == [*SPECIALS, "'s", "a", "dog", "man"]   # counts: 's 2, a 3, dog 2, man 2, . 1, cat 1
    path = tmp_path / "vocab.json"
    vocab.with_tokenized(["an unseen caption"]).save(path)
    loaded = Vocabulary.load(path)
    assert loaded.tokenizer == line
    assert loaded.tokenized["an unseen caption"] == "an unseen caption"
    assert loaded.tokens("") == [] and loaded.encode("") == [1, 2]
    assert loaded.encode("A man's dog.") == [1, 5, 7, 4, 6, 3, 2]   # <start> a man 's dog <unk> (.) <end>
    with pytest.raises(HarnessError, match="built with tokenizer"):
        Vocabulary.load(path, Tokenizer("nltk", tmp_path))


def test_vocabulary_from_elsewhere_needs_the_datasets_tokenizer(tmp_path):
    path = tmp_path / "scan_vocab.json"
    path.write_text('{"word2idx": {"<pad>": 0, "<start>": 1, "<end>": 2, "<unk>": 3, "a": 4}, '
                    '"idx2word": {"0": "<pad>", "1": "<start>", "2": "<end>", "3": "<unk>", "4": "a"}, "idx": 5}')
    with pytest.raises(HarnessError, match="records no tokenizer"):
        Vocabulary.load(path)
    assert Vocabulary.load(path, Tokenizer("nltk_line")).encode("a b") == [1, 4, 3, 2]


def test_nltk_without_its_model_is_one_line_naming_the_key(tmp_path):
    ds = {"tokenizer": "nltk"}
    with pytest.raises(HarnessError, match=r"^datasets\.flickr\.nltk_data: not set") as exc:
        Tokenizer.from_dataset(ds, None, "datasets.flickr")
    assert "\n" not in str(exc.value)
    with pytest.raises(HarnessError, match=r"datasets\.flickr\.nltk_data: folder not found"):
        Tokenizer.from_dataset(ds, tmp_path / "absent", "datasets.flickr")
    root = planted_punkt(tmp_path / "nltk_data")
    (root / PUNKT_SUBDIR / PUNKT_FILES[1]).unlink()
    with pytest.raises(HarnessError, match=f"lacks {PUNKT_FILES[1]}"):
        Tokenizer.from_dataset(ds, root, "datasets.flickr")
    assert Tokenizer.from_dataset({"tokenizer": "nltk_line"}, None, "datasets.synthetic") == Tokenizer("nltk_line")
