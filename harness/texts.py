"""The load's texts: short mixed ones from a small vocabulary, the same for a given seed."""

from __future__ import annotations

import random

WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "while",
    "a",
    "small",
    "team",
    "serves",
    "text",
    "models",
    "fast",
]


def short_texts(count: int, seed: int = 0) -> list[str]:
    """Short mixed texts, 5 to 30 words."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 30))) for _ in range(count)]


def mixed_texts(count: int, seed: int = 0) -> list[str]:
    """Texts of a wider spread of lengths, 3 to 60 words."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 60))) for _ in range(count)]
