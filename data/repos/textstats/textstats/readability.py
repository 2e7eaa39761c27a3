"""Readability formulas built on the tokenizer."""

from .tokenize import words, sentences, count_syllables, is_polysyllabic

LEVELS = (
    (90, "very easy"),
    (80, "easy"),
    (70, "fairly easy"),
    (60, "standard"),
    (50, "fairly difficult"),
    (30, "difficult"),
)


class TextSummary:
    """Basic counts used by the readability formulas."""

    def __init__(self, text):
        found = words(text)
        self.word_count = len(found)
        self.sentence_count = len(sentences(text))
        self.syllable_count = sum(count_syllables(w) for w in found)
        self.letter_count = sum(len(w.replace("'", "")) for w in found)
        self.polysyllable_count = sum(1 for w in found if is_polysyllabic(w))

    def words_per_sentence(self):
        """Average sentence length in words."""
        if self.sentence_count == 0:
            return 0.0
        return self.word_count / self.sentence_count

    def syllables_per_word(self):
        """Average syllables per word."""
        if self.word_count == 0:
            return 0.0
        return self.syllable_count / self.word_count

    def letters_per_word(self):
        """Average letters per word."""
        if self.word_count == 0:
            return 0.0
        return self.letter_count / self.word_count


def _require_words(summary):
    if summary.word_count == 0 or summary.sentence_count == 0:
        raise ValueError("text has no words")


def flesch_reading_ease(text):
    """Flesch reading ease score, rounded to 2 places (higher is easier)."""
    s = TextSummary(text)
    _require_words(s)
    score = 206.835 - 1.015 * s.words_per_sentence() - 84.6 * s.syllables_per_word()
    return round(score, 2)


def flesch_kincaid_grade(text):
    """Flesch-Kincaid grade level, rounded to 2 places."""
    s = TextSummary(text)
    _require_words(s)
    grade = 0.39 * s.words_per_sentence() + 11.8 * s.syllables_per_word() - 15.59
    return round(grade, 2)


def automated_readability_index(text):
    """Automated readability index, rounded to 2 places."""
    s = TextSummary(text)
    _require_words(s)
    score = 4.71 * s.letters_per_word() + 0.5 * s.words_per_sentence() - 21.43
    return round(score, 2)


def reading_level(score):
    """Describe a Flesch reading ease score in words."""
    for threshold, label in LEVELS:
        if score >= threshold:
            return label
    return "very confusing"


def polysyllable_ratio(text):
    """Share of words with three or more syllables, rounded to 4 places."""
    s = TextSummary(text)
    if s.word_count == 0:
        return 0.0
    return round(s.polysyllable_count / s.word_count, 4)


def longest_sentence(text):
    """The sentence with the most words (first one on ties); '' if none."""
    best = ""
    best_len = -1
    for sentence in sentences(text):
        length = len(words(sentence))
        if length > best_len:
            best = sentence
            best_len = length
    return best
