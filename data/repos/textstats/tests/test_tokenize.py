import pytest

from textstats import words, tokens, numbers, sentences, count_syllables, is_polysyllabic


def test_words_lowercase_by_default():
    assert words("The Cat, the HAT!") == ["the", "cat", "the", "hat"]


def test_words_keep_case():
    assert words("Hello World", lower=False) == ["Hello", "World"]


def test_words_keep_inner_apostrophes():
    assert words("Don't stop the dog's 'fun'") == ["don't", "stop", "the", "dog's", "fun"]


def test_words_skip_numbers_and_empty():
    assert words("route 66 and 3.5 miles") == ["route", "and", "miles"]
    assert words("") == []
    assert words("123 ... !!") == []


def test_tokens_include_numbers():
    assert tokens("Route 66 is 3.5 km") == ["route", "66", "is", "3.5", "km"]


def test_numbers():
    assert numbers("pay 12 now, 0.75 later and 3") == [12.0, 0.75, 3.0]
    assert numbers("none here") == []


def test_sentences_basic():
    assert sentences("One. Two! Three?") == ["One.", "Two!", "Three?"]


def test_sentences_without_final_punctuation():
    assert sentences("First one. second part") == ["First one.", "second part"]


def test_sentences_repeated_punctuation():
    assert sentences("Really?! Yes... ok.") == ["Really?!", "Yes...", "ok."]


def test_sentences_abbreviations_do_not_split():
    text = "Dr. Smith met Mrs. Jones. They talked, e.g. about cats."
    assert sentences(text) == ["Dr. Smith met Mrs. Jones.", "They talked, e.g. about cats."]


def test_sentences_decimal_point_does_not_split():
    assert sentences("It costs 3.50 dollars. Cheap.") == ["It costs 3.50 dollars.", "Cheap."]


def test_sentences_empty_and_whitespace():
    assert sentences("") == []
    assert sentences("   \n ") == []
    assert sentences("...") == ["..."]
    assert sentences("? What.") == ["?", "What."]


def test_sentences_newlines():
    assert sentences("Line one.\nLine two.") == ["Line one.", "Line two."]


def test_count_syllables_vowel_groups():
    assert count_syllables("cat") == 1
    assert count_syllables("apple") == 2
    assert count_syllables("open") == 2
    assert count_syllables("reading") == 2
    assert count_syllables("beautiful") == 3
    assert count_syllables("rhythm") == 1
    assert count_syllables("queue") == 1


def test_count_syllables_silent_e():
    assert count_syllables("make") == 1
    assert count_syllables("the") == 1
    assert count_syllables("table") == 2
    assert count_syllables("syllable") == 3
    assert count_syllables("decorate") == 3


def test_count_syllables_ignores_case_and_non_letters():
    assert count_syllables("Banana!") == 3
    assert count_syllables("") == 0
    assert count_syllables("42") == 0


def test_is_polysyllabic_threshold():
    assert is_polysyllabic("banana") is True
    assert is_polysyllabic("table") is False
    assert is_polysyllabic("table", threshold=2) is True
