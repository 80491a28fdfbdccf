"""G episodes per start state in a text environment, played by a language model turn by turn.

Each step, every group's G environments are reset with the group's seed (same seed, same start
state) and the model plays them together: at every turn one ``generate`` call writes the reply of
every episode still playing, then each environment answers. The batch that comes out is a
language-model batch whose completion is the whole conversation after the first prompt:

- tokens: reply 1, the environment's answer 1 (with the template's glue), reply 2, ...;
- mask: 1 on the replies' tokens (each up to and including its end-of-turn token), 0 on the
  environment's and the template's tokens: never trained, never scored for KL, never counted in
  lengths;
- step_rewards: each turn's reward on the last token of its reply, and ``step_index`` the turn of
  each reply token, so that ``advantage=stepwise`` compares the members of a group turn by turn
  (:func:`grpo_seq.math.advantages.steps_of_tokens`); ``rewards``: the episode's total.

Limits: ``max_turns`` replies per episode, ``max_reply_tokens`` per reply (a reply cut there still
goes to the environment, its turn closed by the template), ``max_total_tokens`` for the whole
conversation, prompt included, and ``max_conversation_tokens`` (optional) for what follows the
prompt (replies and answers together, as TRL's ``max_completion_length`` counts). An episode
stopped by a limit, or truncated by its environment, is ``truncated``.

An environment whose ``info`` holds ``messages`` (chat messages, e.g. tools' results) answers
with them in place of a user message holding the observation (:meth:`ChatFormat.messages_ids`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from ...math.batch import RolloutBatch, TextSamples
from ...errors import UsageError
from ...io.models import prepare_tokenizer
from .chat import ChatFormat
from .contract import checked_reset, checked_step, make_text_env, text_env_name

__all__ = ["TextEnvGroupSampler", "Episode", "episode_tensors"]


@dataclass
class Episode:
    """One episode's conversation after its prompt, as it grows."""

    prompt: str | list[dict[str, Any]]
    prompt_ids: list[int]
    limit: int = 0  # most tokens of the whole conversation, prompt included
    ids: list[int] = field(default_factory=list)
    trained: list[bool] = field(default_factory=list)
    turn_of: list[int] = field(default_factory=list)  # each token's turn (0-based), -1 outside replies
    token_rewards: list[float] = field(default_factory=list)
    logp: list[float] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    total: float = 0.0
    turns: int = 0
    done: bool = False
    truncated: bool = False
    success: bool | None = None
    cut_replies: int = 0
    anchors: list[str] = field(default_factory=list)  # each turn's observation, as a key (GiGPO's anchor)

    @property
    def length(self) -> int:
        """Tokens of the whole conversation, prompt included."""
        return len(self.prompt_ids) + len(self.ids)

    def add(self, ids: list[int], turn: int, logp: list[float] | None = None) -> None:
        """Append ``ids``: a reply's (``turn`` >= 0, trained) or the environment's (``turn`` -1)."""
        self.ids += ids
        self.trained += [turn >= 0] * len(ids)
        self.turn_of += [turn] * len(ids)
        self.token_rewards += [0.0] * len(ids)
        self.logp += logp if logp is not None else [0.0] * len(ids)

    def end(self, truncated: bool) -> None:
        self.done, self.truncated = True, truncated


def episode_tensors(episodes: list[Episode], pad: int) -> dict[str, torch.Tensor | None]:
    """A batch's tensors from its episodes: left-padded prompts (``context``, ``prompt_mask``),
    right-padded conversations (``tokens``; ``mask`` on the model's tokens; each token's turn,
    reward and sampled log-prob), and ``step_anchor`` (equal observations, equal ids across the
    batch) where every turn of every episode has its anchor, else None."""
    B, T = len(episodes), max(1, max(len(e.ids) for e in episodes))
    P = max(len(e.prompt_ids) for e in episodes)
    anchored = all(len(e.anchors) > max(e.turn_of, default=-1) for e in episodes)
    out: dict[str, torch.Tensor | None] = {
        "tokens": torch.full((B, T), pad, dtype=torch.long), "mask": torch.zeros((B, T), dtype=torch.bool),
        "step_index": torch.full((B, T), -1, dtype=torch.long), "step_rewards": torch.zeros((B, T)),
        "logp": torch.zeros((B, T)), "context": torch.full((B, P), pad, dtype=torch.long),
        "prompt_mask": torch.zeros((B, P), dtype=torch.long),
        "step_anchor": torch.full((B, T), -1, dtype=torch.long) if anchored else None}
    keys: dict[str, int] = {}
    for b, e in enumerate(episodes):
        n, p = len(e.ids), len(e.prompt_ids)
        out["tokens"][b, :n] = torch.tensor(e.ids, dtype=torch.long)
        out["mask"][b, :n] = torch.tensor(e.trained, dtype=torch.bool)
        out["step_index"][b, :n] = torch.tensor(e.turn_of, dtype=torch.long)
        out["step_rewards"][b, :n] = torch.tensor(e.token_rewards)
        out["logp"][b, :n] = torch.tensor(e.logp)
        out["context"][b, P - p:] = torch.tensor(e.prompt_ids, dtype=torch.long)
        out["prompt_mask"][b, P - p:] = 1
        if anchored:
            ids = [keys.setdefault(key, len(keys)) for key in e.anchors]
            out["step_anchor"][b, :n] = torch.tensor([ids[k] if k >= 0 else -1 for k in e.turn_of], dtype=torch.long)
    return out


class TextEnvGroupSampler:
    """``num_groups`` groups of ``num_generations`` episodes of a text environment per step.

    Args:
        tokenizer: the policy's tokenizer (left padding and a pad token are set here).
        env_id: the environment (:func:`grpo_seq.envs.text.make_text_env`), or ``env_fn``: a
            callable making one (for an env that is not registered).
        num_groups, num_generations: start states per step on this process, and G episodes from each.
        max_turns: most replies per episode.
        max_reply_tokens: most new tokens per reply.
        max_total_tokens: most tokens of a whole conversation, prompt included.
        max_conversation_tokens: most tokens after the prompt (replies and the environment's
            answers together); None: max_total_tokens alone.
        temperature, top_p, top_k: sampling settings (top_k 0 disables it).
        seed: seeds the start states; each process draws its own (``process_index``).
        system_prompt: a system message before each prompt ('' for none).
        instruction: appended to the prompt and to every observation on a new line ('' for none).
        env_kwargs: keyword arguments of every environment.
        sampler_logprobs: keep each sampled token's log-prob under the distribution that drew it
            (``batch.sampler_logp``); the policy's ``generate`` must take ``output_logprobs``.
    """

    def __init__(self, tokenizer: Any, env_id: str | None, num_groups: int, num_generations: int, max_turns: int = 8,
                 max_reply_tokens: int = 64, max_total_tokens: int = 1024, temperature: float = 1.0, top_p: float = 1.0,
                 top_k: int = 0, seed: int = 0, process_index: int = 0, system_prompt: str = "",
                 env_kwargs: dict[str, Any] | None = None, env_fn: Callable[[], gym.Env] | None = None,
                 sampler_logprobs: bool = False, max_conversation_tokens: int | None = None, instruction: str = ""):
        if num_generations < 2:
            raise ValueError(f"TextEnvGroupSampler: num_generations (G) must be >= 2, got {num_generations}")
        for name, value in (("num_groups", num_groups), ("max_turns", max_turns), ("max_reply_tokens", max_reply_tokens)):
            if value < 1:
                raise ValueError(f"TextEnvGroupSampler: {name} must be >= 1, got {value}")
        if env_fn is None and not env_id:
            raise ValueError("TextEnvGroupSampler: give env_id or env_fn")
        self.num_groups, self.num_generations = num_groups, num_generations
        self.max_turns, self.max_reply_tokens, self.max_total_tokens = max_turns, max_reply_tokens, max_total_tokens
        self.max_conversation_tokens = max_conversation_tokens
        self.envs = [env_fn() if env_fn else make_text_env(env_id, **(env_kwargs or {}))
                     for _ in range(num_groups * num_generations)]
        self.env_name = text_env_name(self.envs[0], env_id)
        self.tokenizer = tokenizer
        prepare_tokenizer(tokenizer)
        self.format = ChatFormat(tokenizer, system_prompt, instruction=instruction)
        self.sampling = {"do_sample": True, "temperature": temperature, "top_p": top_p, "top_k": top_k}
        self.sampler_logprobs = sampler_logprobs
        self.rng = np.random.default_rng([seed, process_index])
        self.status: Callable[[str], None] | None = None  # what sampling is doing now, for a progress display

    @property
    def eos_ids(self) -> list[int]:
        return [self.tokenizer.eos_token_id]

    def state_dict(self) -> dict[str, Any]:
        """Where the start states' random stream stands (JSON-able), for checkpoints."""
        return {"rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]

    def close(self) -> None:
        for env in self.envs:
            env.close()

    # -- one step ------------------------------------------------------------------------------

    @torch.no_grad()
    def sample(self, policy: nn.Module) -> RolloutBatch:
        """One step's groups: every group's G environments reset with the group's seed, played to their end."""
        seeds = self.rng.integers(2**31 - 1, size=self.num_groups)
        episodes, clock = self.play(policy, [int(seed) for seed in seeds for _ in range(self.num_generations)])
        return self._batch(episodes, clock)

    @torch.no_grad()
    def play(self, policy: nn.Module, seeds: list[int], greedy: bool = False) -> tuple[list[Episode], dict[str, float]]:
        """One episode per seed (at most one per environment), played to its end or a limit, one
        generate call per turn; ``greedy`` picks each reply's likeliest tokens. Returns the episodes
        and the seconds spent generating and in the environments."""
        if len(seeds) > len(self.envs):
            raise ValueError(f"TextEnvGroupSampler.play: {len(seeds)} seeds for {len(self.envs)} environments")
        clock = {"generation": 0.0, "env": 0.0}
        t0 = time.perf_counter()
        episodes = self._reset(seeds)
        clock["env"] += time.perf_counter() - t0
        sampling = {"do_sample": False, "temperature": None, "top_p": None, "top_k": None} if greedy else self.sampling
        for turn in range(self.max_turns):
            playing = [(i, e) for i, e in enumerate(episodes) if not e.done]
            if not playing:
                break
            if self.status is not None:
                self.status(f"turn {turn + 1}: {len(playing)} episodes playing")
            self._play_turn(policy, playing, turn, clock, sampling)
        for e in episodes:
            if not e.done:
                e.end(truncated=True)  # max_turns
        return episodes, clock

    def _reset(self, seeds: list[int]) -> list[Episode]:
        episodes = []
        for env, seed in zip(self.envs, seeds):
            prompt, _ = checked_reset(env, self.env_name, seed)
            ids = self.format.prompt_ids(prompt)
            limit = self.max_total_tokens
            if self.max_conversation_tokens is not None:
                limit = min(limit, len(ids) + self.max_conversation_tokens)
            episodes.append(Episode(prompt, ids, limit, anchors=[repr(prompt)]))
            if episodes[-1].length >= self.max_total_tokens:
                raise UsageError(f"{self.env_name}: a prompt of {episodes[-1].length} tokens leaves no room for a reply "
                                 f"under max_total_tokens={self.max_total_tokens}; raise --max_total_tokens: "
                                 f"{prompt[:120]!r}")
        return episodes

    def _play_turn(self, policy: nn.Module, playing: list[tuple[int, Episode]], turn: int, clock: dict,
                   sampling: dict[str, Any]) -> None:
        """Every playing episode's reply in one generate call, then each environment's answer."""
        rooms = [min(self.max_reply_tokens, e.limit - e.length) for _, e in playing]
        for (_, e), room in zip(playing, rooms):
            if room < 1:
                e.end(truncated=True)  # no room left for a reply
        playing = [(i, e) for (i, e), room in zip(playing, rooms) if room >= 1]
        rooms = [room for room in rooms if room >= 1]
        if not playing:
            return
        t0 = time.perf_counter()
        replies, logps = self._generate(policy, [e for _, e in playing], max(rooms), sampling)
        clock["generation"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        for (i, e), reply, logp, room in zip(playing, replies, logps, rooms):
            self._answer(i, e, reply[:room], logp[:room], turn)
        clock["env"] += time.perf_counter() - t0

    def _generate(self, policy: nn.Module, episodes: list[Episode], max_new: int,
                  sampling: dict[str, Any]) -> tuple[list[list[int]], list[list[float]]]:
        """Each episode's next reply (ids up to and including the first end-of-turn token) and its
        tokens' sampling log-probs (zeros unless ``sampler_logprobs``)."""
        contexts = [e.prompt_ids + e.ids for e in episodes]
        width = max(len(c) for c in contexts)
        pad = self.tokenizer.pad_token_id
        device = next(policy.parameters()).device
        ids = torch.tensor([[pad] * (width - len(c)) + c for c in contexts], device=device)
        attention = torch.tensor([[0] * (width - len(c)) + [1] * len(c) for c in contexts], device=device)
        extra = {"output_logprobs": True} if self.sampler_logprobs else {}
        out = policy.generate(ids, attention, max_new_tokens=max_new, num_return_sequences=1, pad_token_id=pad,
                              eos_token_id=self.eos_ids, **sampling, **extra)
        out, lp = out if self.sampler_logprobs else (out, None)
        new = out[:, width:].tolist()
        lps = lp.float().tolist() if lp is not None else [[0.0] * len(row) for row in new]
        replies, logps = [], []
        for row, row_lp in zip(new, lps):
            n = next((k + 1 for k, t in enumerate(row) if t in self.eos_ids), len(row))
            replies.append(row[:n])
            logps.append(row_lp[:n])
        return replies, logps

    def _answer(self, i: int, e: Episode, reply: list[int], logp: list[float], turn: int) -> None:
        """Append episode ``e``'s reply, step its environment, append the answer or end the episode."""
        ended = bool(reply) and reply[-1] in self.eos_ids
        e.cut_replies += not ended
        e.add(reply, turn, logp)
        text = self.tokenizer.decode(reply, skip_special_tokens=True)
        obs, reward, terminated, truncated, info = checked_step(self.envs[i], self.env_name, turn + 1, text)
        e.token_rewards[-1] += reward
        e.total += reward
        e.turns += 1
        e.messages.append({"role": "assistant", "content": text, "reward": reward, "trained": True})
        if "success" in info:
            e.success = bool(info["success"])
        if terminated or truncated:
            e.end(truncated=truncated and not terminated)
            return
        said = info.get("messages") or [{"role": "user", "content": obs}]
        answer = self.format.messages_ids(said, ended) if "messages" in info else self.format.observation_ids(obs, ended)
        if e.length + len(answer) >= e.limit:
            e.end(truncated=True)  # the answer and a reply of one token would not fit
            return
        e.add(answer, -1)
        e.messages += [{**m, "trained": False} for m in said]
        e.anchors.append(repr(said))

    # -- the batch -------------------------------------------------------------------------------

    def _batch(self, episodes: list[Episode], clock: dict) -> RolloutBatch:
        B, G = len(episodes), self.num_generations
        t = episode_tensors(episodes, self.tokenizer.pad_token_id)
        context, tokens, mask, logp = t["context"], t["tokens"], t["mask"], t["logp"]
        step_rewards, step_index, step_anchor, prompt_mask = (t[k] for k in ("step_rewards", "step_index", "step_anchor",
                                                                               "prompt_mask"))
        return RolloutBatch(
            context=context, tokens=tokens, mask=mask, group=torch.arange(B // G).repeat_interleave(G), num_generations=G,
            rewards=torch.tensor([e.total for e in episodes]), step_rewards=step_rewards, step_index=step_index,
            step_anchor=step_anchor,
            prompt_mask=prompt_mask, temperature=self.sampling["temperature"], text=self._texts(episodes),
            truncated=torch.tensor([e.truncated for e in episodes]),
            sampler_logp=torch.where(mask, logp, torch.zeros_like(logp)) if self.sampler_logprobs else None,
            metrics=self._metrics(episodes, clock),
        )

    def _texts(self, episodes: list[Episode]) -> TextSamples:
        """The conversations for the completions log: ``completions`` holds each one's messages after
        the prompt (``trained`` marks the replies), ``completion_ids`` the trained tokens."""
        return TextSamples(
            prompts=[e.prompt for e in episodes], prompt_texts=[self.format.prompt_text(e.prompt) for e in episodes],
            completions=[e.messages for e in episodes],
            completion_texts=[self.tokenizer.decode(e.ids, skip_special_tokens=True) for e in episodes],
            completion_ids=[[t for t, keep in zip(e.ids, e.trained) if keep] for e in episodes],
        )

    def _metrics(self, episodes: list[Episode], clock: dict) -> dict[str, float]:
        turns = sum(e.turns for e in episodes)
        reply_tokens = sum(sum(e.trained) for e in episodes)
        metrics = {
            "reward/env_return": float(np.mean([e.total for e in episodes])),
            "policy/truncated_fraction": float(np.mean([e.truncated for e in episodes])),
            "text_env/turns": turns / len(episodes),
            "text_env/reply_tokens_per_turn": reply_tokens / max(1, turns),
            "text_env/cut_reply_fraction": sum(e.cut_replies for e in episodes) / max(1, turns),
            "text_env/env_tokens": float(np.mean([len(e.ids) - sum(e.trained) for e in episodes])),
            "perf/generation_seconds": clock["generation"], "perf/env_seconds": clock["env"],
            # generation's own speed (perf/tokens_per_second divides by the whole step)
            "perf/reply_tokens_per_second": reply_tokens / clock["generation"] if clock["generation"] > 0 else 0.0,
        }
        # over the episodes whose env reported success (NaN: none did); every process logs the same keys
        reported = [e.success for e in episodes if e.success is not None]
        metrics["text_env/success_rate"] = float(np.mean(reported)) if reported else float("nan")
        # each turn's mean reward over the episodes that played it (NaN: none did); the same keys every step
        for turn in range(min(self.max_turns, 8)):
            paid = [sum(r for r, k in zip(e.token_rewards, e.turn_of) if k == turn) for e in episodes if e.turns > turn]
            metrics[f"text_env/reward_turn_{turn + 1}"] = float(np.mean(paid)) if paid else float("nan")
        return metrics
