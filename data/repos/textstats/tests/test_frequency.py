from collections import Counter

import pytest

from textstats import (
    word_counts, top_words, ngrams, ngram_counts, top_ngrams, char_ngrams,
    type_token_ratio, hapax_legomena, average_word_length, longest_words, length_histogram,
)

TEXT = "the cat and the hat and the bat sat on the mat"


def test_word_counts():
    counts = word_counts(TEXT)
    assert counts["the"] == 4
    assert counts["and"] == 2
    assert counts["cat"] == 1
    assert sum(counts.values()) == 12


def test_word_counts_skip_stopwords():
    counts = word_counts(TEXT, skip_stopwords=True)
    assert "the" not in counts
    assert "and" not in counts
    assert sorted(counts) == ["bat", "cat", "hat", "mat", "sat"]


def test_top_words_order_and_ties():
    assert top_words(TEXT, 3) == [("the", 4), ("and", 2), ("bat", 1)]


def test_top_words_skip_stopwords_ties_alphabetical():
    assert top_words("zeta beta beta alpha zeta", 2, skip_stopwords=True) == [("beta", 2), ("zeta", 2)]


def test_top_words_default_three():
    assert len(top_words(TEXT)) == 3


def test_top_words_edge_cases():
    assert top_words(TEXT, 0) == []
    assert top_words("", 3) == []
    assert len(top_words(TEXT, 100)) == 8
    with pytest.raises(ValueError):
        top_words(TEXT, -1)


def test_ngrams():
    assert ngrams([1, 2, 3, 4], 2) == [(1, 2), (2, 3), (3, 4)]
    assert ngrams([1, 2, 3], 3) == [(1, 2, 3)]
    assert ngrams([1, 2], 3) == []
    assert ngrams([1, 2], 1) == [(1,), (2,)]


def test_ngrams_invalid_n():
    with pytest.raises(ValueError):
        ngrams([1, 2], 0)


def test_ngram_counts():
    counts = ngram_counts("a b a b a", 2)
    assert counts == Counter({("a", "b"): 2, ("b", "a"): 2})


def test_top_ngrams():
    assert top_ngrams(TEXT, 2, k=2) == [(("and", "the"), 2), (("bat", "sat"), 1)]
    assert len(top_ngrams(TEXT, 2)) == 3


def test_char_ngrams():
    assert char_ngrams("abcd", 2) == ["ab", "bc", "cd"]
    assert char_ngrams("ab", 3) == []
    assert char_ngrams("abc", 1) == ["a", "b", "c"]


def test_char_ngrams_padded():
    assert char_ngrams("ab", 2, pad=True) == ["_a", "ab", "b_"]
    assert char_ngrams("a", 3, pad=True) == ["__a", "_a_", "a__"]
    with pytest.raises(ValueError):
        char_ngrams("ab", 0)


def test_type_token_ratio():
    assert type_token_ratio(TEXT) == 0.6667
    assert type_token_ratio("one two three") == 1.0
    assert type_token_ratio("") == 0.0


def test_hapax_legomena():
    assert hapax_legomena(TEXT) == ["bat", "cat", "hat", "mat", "on", "sat"]
    assert hapax_legomena("a a") == []


def test_average_word_length():
    assert average_word_length("a bb ccc") == 2.0
    assert average_word_length("hello world again") == 5.0
    assert average_word_length("ab abc") == 2.5
    assert average_word_length("a bb bbbb") == 2.33
    assert average_word_length("") == 0.0


def test_longest_words():
    assert longest_words("a bb cc ddd ee", 1) == ["ddd"]
    assert longest_words("a bbb cc") == ["bbb"]
    assert longest_words("a bb cc ddd ee", 3) == ["ddd", "bb", "cc"]
    assert longest_words("", 2) == []


def test_length_histogram():
    assert length_histogram("a bb cc ddd a") == {1: 2, 2: 2, 3: 1}
    assert list(length_histogram("ccc a bb")) == [1, 2, 3]
