"""The bundled models' recipes from a seed, phase after phase:
`python -m thinkgate.benchmarks.training.recipe demo|reasoner --work DIR`.

Each phase is one `train.py` run whose `--init-from` is the phase before it (phase 1 starts
from random weights at `--seed 0`), written to WORK/<phase>. A phase whose folder holds a model
is skipped and a killed phase resumes from its last checkpoint (`--resume`: the same batches,
the same result), so the command can be run again after an interruption. One torch thread:
on this machine the runs are bit-identical (the training README says how that was checked).
The last phase's folder is the model; `--list` prints the `train.py` command lines instead.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

# what the chat phases share: a tenth of phase 1's learning rate, batches of 16 chats capped
# at 4,096 tokens, a copy drill every fifth step and no drill-only opening
TUNE = tuple(("--lr 3e-4 --warmup 100 --batch-size 16 --max-tokens 4096 --repeat-steps 0 "
        "--repeat-every 5").split())


@dataclass(frozen=True)
class Phase:
    name: str
    start: str | None  # the phase whose output it continues; None: random weights
    args: tuple[str, ...]


def _phase(name: str, start: str | None, args: str, tune: bool = True) -> Phase:
    """A phase's own flags, then TUNE's (`tune`) for the flags it does not set itself."""
    own = tuple(args.split())
    shared = [TUNE[i:i + 2] for i in range(0, len(TUNE), 2) if tune and TUNE[i] not in own]
    return Phase(name, start, own + tuple(x for pair in shared for x in pair))


DEMO = (
    # copy drills first (150 steps), then chats of the v2 mix with a drill every fifth step
    _phase("p1", None, "--model demo --layers 4 --steps 1800 --batch-size 16 "
           "--max-tokens 4096 --repeat-steps 150 --repeat-every 5", tune=False),
    # greetings, short JSON answers and grammar-shaped calls at a tenth of the learning rate
    _phase("p2", "p1", "--model demo --seed 2 --steps 1500 --weights 33,22,14,14,12,5,0"),
    # the v3 mix: tight answers after </think>, long tool lists, free-text tools
    _phase("p3", "p2", "--model demo --seed 6 --steps 1000 --weights 36,26,10,10,10,4,4 "
           "--mix v3"),
    # the answer after </think> weighs 3x in the loss
    _phase("p4", "p3", "--model demo --seed 7 --steps 1000 --weights 36,26,10,10,10,4,4 "
           "--mix v3 --answer-weight 3"),
    # the v4 mix: long tool lists for 60% of the tool requests
    _phase("p5", "p4", "--model demo --seed 8 --steps 1000 --weights 36,26,10,10,10,4,4 "
           "--mix v4 --answer-weight 3"),
    # JSON answers drawn more often
    _phase("p6", "p5", "--model demo --seed 11 --steps 1000 --weights 32,32,8,10,10,4,4 "
           "--mix v4 --answer-weight 3"),
    # half the learning rate, tool requests drawn more often: the bundled model (v5)
    _phase("p7", "p6", "--model demo --seed 12 --steps 1000 --weights 40,30,8,8,8,3,3 "
           "--mix v4 --answer-weight 3 --lr 1.5e-4"),
)

REASONER = DEMO[:2] + (
    # the reasoner's chats (sentences per step, reasoning effort, budget cuts) from phase 2
    _phase("reasoner", "p2", "--model reasoner --seed 3 --steps 800"),
)

RECIPES = {"demo": DEMO, "reasoner": REASONER}


def command(phase: Phase, work: Path) -> list[str]:
    """`train.py`'s arguments for one phase, its input and output under `work`."""
    argv = list(phase.args) + ["--out", str(work / phase.name), "--threads", "1",
                               "--checkpoint-every", "50", "--resume"]
    if phase.start:
        argv += ["--init-from", str(work / phase.start)]
    return argv


def digest(folder: Path) -> str:
    return hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()


def run(recipe: str, work: Path, until: str | None = None) -> Path:
    """Train the recipe's phases that have no output yet (up to `until`); the last folder."""
    phases = RECIPES[recipe]
    names = [p.name for p in phases]
    if until is not None and until not in names:
        raise ValueError(f"--until {until!r} is not a phase of {recipe!r}: {names}")
    for phase in phases:
        out = work / phase.name
        if (out / "model.safetensors").is_file():
            logger.info("%s: done before (%s)", phase.name, digest(out)[:16])
        else:
            logger.info("%s: train.py %s", phase.name, " ".join(command(phase, work)))
            # a process per phase, as the recipe was first run: nothing carries over in memory
            env = dict(os.environ, OMP_NUM_THREADS="1")
            subprocess.run([sys.executable, "-m", "thinkgate.benchmarks.training.train",
                            *command(phase, work)], check=True, env=env)
            logger.info("%s: sha256 %s", phase.name, digest(out))
        if phase.name == until:
            return out
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("recipe", choices=sorted(RECIPES))
    ap.add_argument("--work", type=Path, required=True, help="a folder per phase goes here")
    ap.add_argument("--until", default=None, help="stop after this phase (p1 ... p6)")
    ap.add_argument("--list", action="store_true", help="print the phases' commands only")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.list:
        for phase in RECIPES[args.recipe]:
            print("python -m thinkgate.benchmarks.training.train "
                  + " ".join(command(phase, args.work)))
        return
    print(run(args.recipe, args.work, args.until))


if __name__ == "__main__":
    main()
