# generated stand-in for wikitext-2 (no download): random words from a 5,000-word vocabulary
import random
from pathlib import Path
rng = random.Random(7)
syll = ["ka", "lo", "mi", "ne", "su", "ta", "ri", "po", "an", "el", "or", "us"]
vocab = ["".join(rng.choice(syll) for _ in range(rng.randint(1, 4))) for _ in range(5000)]
d = Path("data/wikitext-2"); d.mkdir(parents=True, exist_ok=True)
for name, lines in (("train", 12000), ("valid", 1200), ("test", 1200)):
    with open(d / f"{name}.txt", "w") as f:
        for _ in range(lines):
            f.write(" " + " ".join(rng.choice(vocab) for _ in range(rng.randint(5, 20))) + " \n")
