"""A generated stand-in for wikitext-2 (no download) for pytorch/examples'
word_language_model: random words from a 5,000-word vocabulary, ~150k training tokens
(232 batches of 20 x 35 an epoch). Run in the example's folder: python THIS_FILE."""

import random
from pathlib import Path

rng = random.Random(7)
syllables = ["ka", "lo", "mi", "ne", "su", "ta", "ri", "po", "an", "el", "or", "us"]
vocab = ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(5000)]
folder = Path("data/wikitext-2")
folder.mkdir(parents=True, exist_ok=True)
for name, lines in (("train", 12000), ("valid", 1200), ("test", 1200)):
    with open(folder / f"{name}.txt", "w") as f:
        for _ in range(lines):
            words = " ".join(rng.choice(vocab) for _ in range(rng.randint(5, 20)))
            f.write(f" {words} \n")
