"""textstats: tokenizing, frequencies, n-grams and readability scores."""

from .tokenize import words, tokens, numbers, sentences, count_syllables, is_polysyllabic
from .frequency import (
    STOPWORDS, word_counts, top_words, ngrams, ngram_counts, top_ngrams, char_ngrams,
    type_token_ratio, hapax_legomena, average_word_length, longest_words, length_histogram,
)
from .readability import (
    TextSummary, flesch_reading_ease, flesch_kincaid_grade, automated_readability_index,
    reading_level, polysyllable_ratio, longest_sentence,
)

__all__ = [
    "words", "tokens", "numbers", "sentences", "count_syllables", "is_polysyllabic",
    "STOPWORDS", "word_counts", "top_words", "ngrams", "ngram_counts", "top_ngrams",
    "char_ngrams", "type_token_ratio", "hapax_legomena", "average_word_length",
    "longest_words", "length_histogram",
    "TextSummary", "flesch_reading_ease", "flesch_kincaid_grade",
    "automated_readability_index", "reading_level", "polysyllable_ratio", "longest_sentence",
]
