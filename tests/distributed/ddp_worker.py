"""Run under `accelerate launch --multi_gpu --num_processes 2` with ``<out> <tiny model folder>``:
the four scenarios one after another in the same two processes, so that the tests pay for one
launch (two fresh interpreters, a process group) instead of five. Each script also runs alone:
ddp_cartpole.py (CartPole steps), ddp_lm.py (the tiny language model with micro-batches),
ddp_text_env.py (a text-env job), ddp_recipe.py (the CartPole recipe, then resumed), each writing
its own files into <out>."""

import runpy
import sys
from pathlib import Path

here = Path(__file__).resolve().parent
out, model = sys.argv[1], sys.argv[2]
for script, args in (("ddp_cartpole.py", [out]), ("ddp_lm.py", [out]), ("ddp_text_env.py", [model, out]),
                     ("ddp_recipe.py", [out])):
    sys.argv = [str(here / script), *args]
    runpy.run_path(str(here / script), run_name="__main__")
