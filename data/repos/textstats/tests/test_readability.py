import pytest

from textstats import (
    TextSummary, flesch_reading_ease, flesch_kincaid_grade, automated_readability_index,
    reading_level, polysyllable_ratio, longest_sentence,
)

EASY = "The cat sat. The dog ran."
HARD = "Reading is beautiful. Syllables matter."


def test_summary_counts():
    s = TextSummary(HARD)
    assert s.word_count == 5
    assert s.sentence_count == 2
    assert s.syllable_count == 11
    assert s.letter_count == 33
    assert s.polysyllable_count == 2


def test_summary_averages():
    s = TextSummary(HARD)
    assert s.words_per_sentence() == 2.5
    assert s.syllables_per_word() == 2.2
    assert s.letters_per_word() == 6.6


def test_summary_letters_ignore_apostrophes():
    assert TextSummary("Don't go.").letter_count == 6


def test_summary_empty():
    s = TextSummary("")
    assert s.word_count == 0
    assert s.words_per_sentence() == 0.0
    assert s.syllables_per_word() == 0.0
    assert s.letters_per_word() == 0.0


def test_flesch_reading_ease_easy():
    assert flesch_reading_ease(EASY) == 119.19


def test_flesch_reading_ease_hard():
    assert flesch_reading_ease(HARD) == 18.18


def test_flesch_kincaid_grade():
    assert flesch_kincaid_grade(EASY) == -2.62
    assert flesch_kincaid_grade(HARD) == 11.35


def test_automated_readability_index():
    assert automated_readability_index(EASY) == -5.8
    assert automated_readability_index(HARD) == 10.91


def test_single_sentence_score():
    assert flesch_reading_ease("Go now") == 120.21


@pytest.mark.parametrize("func", [flesch_reading_ease, flesch_kincaid_grade, automated_readability_index])
def test_scores_reject_empty_text(func):
    with pytest.raises(ValueError):
        func("")
    with pytest.raises(ValueError):
        func("42 17.")


def test_reading_level_easy_bands():
    assert reading_level(100) == "very easy"
    assert reading_level(90) == "very easy"
    assert reading_level(89.99) == "easy"
    assert reading_level(80) == "easy"
    assert reading_level(75) == "fairly easy"
    assert reading_level(70) == "fairly easy"


def test_reading_level_harder_bands():
    assert reading_level(69.99) == "standard"
    assert reading_level(60) == "standard"
    assert reading_level(59.5) == "fairly difficult"
    assert reading_level(50) == "fairly difficult"
    assert reading_level(30) == "difficult"


def test_reading_level_very_confusing():
    assert reading_level(29.9) == "very confusing"
    assert reading_level(-5) == "very confusing"


def test_polysyllable_ratio():
    assert polysyllable_ratio(HARD) == 0.4
    assert polysyllable_ratio("banana cat dog") == 0.3333
    assert polysyllable_ratio(EASY) == 0.0
    assert polysyllable_ratio("") == 0.0


def test_longest_sentence():
    text = "Short one. This one is the longest here. Also four words."
    assert longest_sentence(text) == "This one is the longest here."


def test_longest_sentence_tie_keeps_first():
    assert longest_sentence("Two words. Also two.") == "Two words."
    assert longest_sentence("") == ""
    assert longest_sentence("42. 17.") == "42."
