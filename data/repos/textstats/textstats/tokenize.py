"""Tokenizing words, splitting sentences and counting syllables."""

import re

WORD_RE = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)*")
NUMBER_RE = re.compile(r"\d+(?:\.\d+)?")
TOKEN_RE = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)*|\d+(?:\.\d+)?")

SENTENCE_END = ".!?"
ABBREVIATIONS = frozenset({"mr", "mrs", "ms", "dr", "prof", "st", "vs", "etc", "e.g", "i.e"})
VOWELS = "aeiouy"


def words(text, lower=True):
    """Return the alphabetic words of text (apostrophes kept inside words)."""
    found = WORD_RE.findall(text)
    return [w.lower() for w in found] if lower else found


def tokens(text, lower=True):
    """Return words and numbers in order of appearance."""
    found = TOKEN_RE.findall(text)
    return [t.lower() for t in found] if lower else found


def numbers(text):
    """Return the numbers in text as floats."""
    return [float(n) for n in NUMBER_RE.findall(text)]


def _is_abbreviation(text, end):
    start = end
    while start > 0 and (text[start - 1].isalpha() or text[start - 1] == "."):
        start -= 1
    return text[start:end].lower() in ABBREVIATIONS


def sentences(text):
    """Split text into sentences on . ! ? followed by whitespace or the end."""
    result = []
    start = 0
    i = 0
    n = len(text)
    while i < n:
        if text[i] in SENTENCE_END:
            j = i
            while j + 1 < n and text[j + 1] in SENTENCE_END:
                j += 1
            at_boundary = j + 1 == n or text[j + 1].isspace()
            if at_boundary and not (text[i] == "." and _is_abbreviation(text, i)):
                piece = text[start:j + 1].strip()
                if piece:
                    result.append(piece)
                start = j + 1
            i = j
        i += 1
    tail = text[start:].strip()
    if tail:
        result.append(tail)
    return result


def count_syllables(word):
    """Estimate syllables by counting vowel groups, with a silent-e rule."""
    word = "".join(ch for ch in word.lower() if ch.isalpha())
    if not word:
        return 0
    count = 0
    previous_vowel = False
    for ch in word:
        is_vowel = ch in VOWELS
        if is_vowel and not previous_vowel:
            count += 1
        previous_vowel = is_vowel
    if word.endswith("e") and not word.endswith("le") and count > 1:
        count -= 1
    return max(count, 1)


def is_polysyllabic(word, threshold=3):
    """True if the word has at least threshold syllables."""
    return count_syllables(word) >= threshold
