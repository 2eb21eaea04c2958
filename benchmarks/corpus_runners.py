"""Runners for real public training scripts in ../shared/corpus, at settings small enough that
a tune takes minutes on 2 cores, with generated data only (no download).

Each runner copies the script into a work folder, generates the data it reads, and gives
the command line that runs it (``Runner.prepare``). The copy is the script itself, except
for what cannot run offline or would take hours here, each change said in ``changes``:

- makemore (karpathy/makemore, a character-level GPT on names): ``names.txt`` generated
  (random pronounceable names); ``torch.utils.tensorboard`` needs the tensorboard package,
  which is not installed here: its import is replaced by a SummaryWriter that does nothing.
  Its own flags make it small (``--n-layer 2 --n-embd 48``); ``--num-workers`` keeps its
  default of 4 (the case of issue 22: 0 is faster on 2 cores).
- gpt (karpathy/ng-video-lecture, the lecture's GPT): ``input.txt`` generated (random
  words); the hyperparameters at its top (batch 64, context 256, 6 layers of 384, 200
  evaluation batches) replaced by small ones.

Used by the benchmarks (a tune of each, its kept configuration against the best found by
hand); by hand:

    python benchmarks/corpus_runners.py makemore /tmp/mm      # prints the command to run
    cd /tmp/mm && torchpace tune <that command's script and args>
"""

from __future__ import annotations

import random
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
SEED = 22  # the generated data is the same at every run


@dataclass(frozen=True)
class Prepared:
    folder: Path  # the working folder: run the command here
    script: str  # relative to the folder
    args: list[str]

    @property
    def command(self) -> list[str]:
        return [sys.executable, self.script, *self.args]


@dataclass(frozen=True)
class Runner:
    name: str
    source: Path
    changes: str
    prepare_folder: Callable[[Path, Path, int], Prepared]

    def available(self) -> bool:
        return self.source.is_file()

    def prepare(self, folder: Path, steps: int = 100_000) -> Prepared:
        """``steps``: the job's length in its own steps (a tune stops it long before the
        default; a benchmark that times the plain job end to end gives a real length)."""
        folder.mkdir(parents=True, exist_ok=True)
        return self.prepare_folder(self.source, folder, steps)


def _names(count: int, rng: random.Random) -> list[str]:
    consonants, vowels = "bcdfghjklmnprstvwz", "aeiouy"
    out = []
    for _ in range(count):
        syllables = rng.randint(1, 4)
        name = "".join(rng.choice(consonants) + rng.choice(vowels) for _ in range(syllables))
        out.append(name[: rng.randint(3, 2 * syllables + 1)] if len(name) > 3 else name)
    return out


NO_TENSORBOARD = """class SummaryWriter:  # torchpace benchmark: tensorboard is not installed here
    def __init__(self, *args, **kwargs): pass
    def add_scalar(self, *args, **kwargs): pass
    def flush(self): pass
"""


def _makemore(source: Path, folder: Path, steps: int) -> Prepared:
    text = source.read_text()
    line = "from torch.utils.tensorboard import SummaryWriter\n"
    assert line in text, "makemore.py changed: its tensorboard import is not where it was"
    (folder / "makemore.py").write_text(text.replace(line, NO_TENSORBOARD))
    rng = random.Random(SEED)
    (folder / "names.txt").write_text("\n".join(_names(32000, rng)) + "\n")
    args = ["--input-file", "names.txt", "--work-dir", "out", "--max-steps", str(steps),
            "--n-layer", "2", "--n-embd", "48", "--n-embd2", "48",
            "--batch-size", "32"]  # fmt: skip
    return Prepared(folder, "makemore.py", args)


GPT_SETTINGS = {
    "batch_size": "16",
    "block_size": "64",
    "max_iters": "100000",
    "eval_interval": "100000",
    "eval_iters": "10",
    "n_embd": "64",
    "n_head": "4",
    "n_layer": "2",
}


def _gpt(source: Path, folder: Path, steps: int) -> Prepared:
    text = source.read_text()
    for name, value in {**GPT_SETTINGS, "max_iters": str(steps)}.items():
        text, n = re.subn(rf"^{name} = [^#\n]*", f"{name} = {value} ", text, count=1, flags=re.M)
        assert n == 1, f"gpt.py changed: no `{name} = ...` line at its top"
    (folder / "gpt.py").write_text(text)
    rng = random.Random(SEED)
    words = _names(2000, rng)
    lines = (" ".join(rng.choice(words) for _ in range(rng.randint(4, 12))) for _ in range(30000))
    (folder / "input.txt").write_text("\n".join(lines) + "\n")
    return Prepared(folder, "gpt.py", [])


RUNNERS = {
    "makemore": Runner(
        "makemore",
        CORPUS / "makemore" / "makemore.py",
        "names.txt generated; tensorboard's SummaryWriter replaced by one that does nothing",
        _makemore,
    ),
    "gpt": Runner(
        "gpt",
        CORPUS / "ng_video_lecture" / "gpt.py",
        "input.txt generated; small hyperparameters: "
        + ", ".join(f"{k}={v}" for k, v in GPT_SETTINGS.items()),
        _gpt,
    ),
}


def main() -> int:
    if len(sys.argv) != 3 or sys.argv[1] not in RUNNERS:
        print(f"usage: python {sys.argv[0]} {{{','.join(RUNNERS)}}} FOLDER", file=sys.stderr)
        return 2
    runner = RUNNERS[sys.argv[1]]
    if not runner.available():
        print(f"{runner.source} is not here (../shared/corpus)", file=sys.stderr)
        return 1
    folder = Path(sys.argv[2])
    if folder.exists() and any(folder.iterdir()):
        shutil.rmtree(folder / "out", ignore_errors=True)
    prepared = runner.prepare(folder)
    print(f"cd {prepared.folder} && python {prepared.script} {' '.join(prepared.args)}")
    print(f"({runner.changes})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
