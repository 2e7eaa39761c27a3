"""Word frequencies, n-grams and vocabulary measures."""

from collections import Counter

from .tokenize import words

STOPWORDS = frozenset({
    "a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "in", "is",
    "it", "of", "on", "or", "that", "the", "to", "was", "were", "with",
})


def word_counts(text, skip_stopwords=False):
    """Counter of lower-cased words."""
    found = words(text)
    if skip_stopwords:
        found = [w for w in found if w not in STOPWORDS]
    return Counter(found)


def top_words(text, n=3, skip_stopwords=False):
    """The n most frequent words as (word, count), ties broken alphabetically."""
    if n < 0:
        raise ValueError("n must be non-negative")
    counts = word_counts(text, skip_stopwords)
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return ranked[:n]


def ngrams(items, n):
    """Consecutive n-tuples of items."""
    if n < 1:
        raise ValueError("n must be at least 1")
    return [tuple(items[i:i + n]) for i in range(len(items) - n + 1)]


def ngram_counts(text, n):
    """Counter of word n-grams."""
    return Counter(ngrams(words(text), n))


def top_ngrams(text, n, k=3):
    """The k most frequent word n-grams, ties broken by the n-gram itself."""
    counts = ngram_counts(text, n)
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:k]


def char_ngrams(word, n, pad=False):
    """Character n-grams of a word, optionally padded with '_' on both sides."""
    if n < 1:
        raise ValueError("n must be at least 1")
    if pad:
        word = "_" * (n - 1) + word + "_" * (n - 1)
    return ["".join(g) for g in ngrams(list(word), n)]


def type_token_ratio(text):
    """Distinct words divided by total words (0.0 for empty text)."""
    found = words(text)
    if not found:
        return 0.0
    return round(len(set(found)) / len(found), 4)


def hapax_legomena(text):
    """Words that occur exactly once, sorted."""
    return sorted(w for w, c in word_counts(text).items() if c == 1)


def average_word_length(text):
    """Mean number of letters per word, rounded to 2 places."""
    found = words(text)
    if not found:
        return 0.0
    return round(sum(len(w) for w in found) / len(found), 2)


def longest_words(text, k=1):
    """The k longest distinct words, ties broken alphabetically."""
    distinct = set(words(text))
    return sorted(distinct, key=lambda w: (-len(w), w))[:k]


def length_histogram(text):
    """Map word length to number of words of that length, keys sorted."""
    counts = Counter(len(w) for w in words(text))
    return {length: counts[length] for length in sorted(counts)}
