"""How hard a text is to read: the Flesch reading-ease score and the counts it is made of.

Reading ease = 206.835 - 1.015 * (words / sentences) - 84.6 * (syllables / words)
(R. Flesch, "A new readability yardstick", Journal of Applied Psychology 32(3), 1948). Syllables are
estimated from vowel groups, which is what most implementations do for English without a dictionary.
"""

import re

VERSION = "1.0.0"

_WORD = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)?")
_SENTENCE_END = re.compile(r"[.!?]+(?:\s|$)")
_VOWEL_GROUP = re.compile(r"[aeiouy]+")


def syllables(word):
    """Vowel groups, less a silent final e ("note"), at least one."""
    w = word.lower()
    count = len(_VOWEL_GROUP.findall(w))
    if w.endswith("e") and not w.endswith("le") and count > 1:
        count -= 1
    return max(count, 1)


def grade(score):
    """Flesch's own bands for the score."""
    for floor, label in ((90, "very easy"), (80, "easy"), (70, "fairly easy"), (60, "plain English"),
                         (50, "fairly difficult"), (30, "difficult")):
        if score >= floor:
            return label
    return "very difficult"


def reading_ease(text):
    words = _WORD.findall(text)
    if not words:
        return {"words": 0, "sentences": 0, "syllables": 0, "score": None, "grade": None}
    sentences = max(len(_SENTENCE_END.findall(text)), 1)
    total = sum(syllables(w) for w in words)
    score = 206.835 - 1.015 * (len(words) / sentences) - 84.6 * (total / len(words))
    score = round(score, 1)
    return {"words": len(words), "sentences": sentences, "syllables": total, "score": score, "grade": grade(score)}
