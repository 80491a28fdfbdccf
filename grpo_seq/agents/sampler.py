"""G rollouts of the user's agent program per dataset item, through the policy endpoint.

Each step takes ``num_groups`` items and runs the rollout function G times on each, all at once
(at most ``max_concurrency`` together), each with an ``openai.AsyncOpenAI`` client of its own
whose ``base_url`` is its rollout's (:mod:`grpo_seq.agents.endpoint`); each must end within
``timeout`` seconds. The endpoint records every call, the trajectories become sequences
(:mod:`grpo_seq.agents.trajectory`) and the sequences the batch: a group is an item's G
rollouts, so their rewards are comparable, as a text environment's G episodes from one seed.

The endpoint serves from a background thread for the sampler's life (:meth:`close` ends it);
:meth:`sample` returns only when every rollout has ended and no call is generating, so the
trainer never changes the weights under a call.
"""

from __future__ import annotations

import asyncio
import copy
import secrets
import time
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch import nn

from ..errors import UsageError
from ..io.rows import row_place
from ..math.batch import RolloutBatch
from .app import make_app
from .endpoint import Limits, PolicyEndpoint
from .rollout_fn import RolloutResult, check_result
from .server import BackgroundServer
from .trajectory import Trajectory, as_episode, episodes_batch, split_sequences

__all__ = ["AgentGroupSampler", "Played"]

Played = tuple[int, Trajectory, RolloutResult]  # (item index, what it asked, what it returned)
MAX_REDRAWS = 3  # with drop_failed_groups: draws of items in place of dropped groups, per step


class AgentGroupSampler:
    """``num_groups`` items x ``num_generations`` rollouts of ``rollout`` per step.

    Args:
        tokenizer: the policy's tokenizer.
        items: the dataset's rows (dicts; :class:`grpo_seq.io.rows.Rows` name their lines in errors).
        rollout: ``async def rollout(client, item) -> float | dict`` (:mod:`grpo_seq.agents.rollout_fn`).
        rollout_name: how messages name it (its import path).
        model_name: the model name calls must ask for.
        limits: what a call may ask (:class:`~grpo_seq.agents.endpoint.Limits`).
        port: the endpoint's port on 127.0.0.1 (0: any free one).
        timeout: seconds a rollout may run.
        max_concurrency: most rollouts running together (0: all of a step's).
        seed, process_index: the items' order; each process draws its own.
        shuffle: a fresh order of the items every pass (False: in file order).
        drop_failed_groups: a rollout that fails drops its group, and another item is drawn in its
            place (at most ``MAX_REDRAWS`` times a step); False: the run stops with its error.
    """

    def __init__(self, tokenizer: Any, items: Sequence[dict[str, Any]], rollout: Callable[..., Any], rollout_name: str,
                 num_groups: int, num_generations: int, model_name: str, limits: Limits, port: int = 0,
                 timeout: float = 120.0, max_concurrency: int = 0, seed: int = 0, process_index: int = 0,
                 shuffle: bool = True, drop_failed_groups: bool = False):
        if num_generations < 2:
            raise ValueError(f"AgentGroupSampler: num_generations (G) must be >= 2, got {num_generations}")
        if not items:
            raise UsageError("the agent's dataset has no items")
        self.tokenizer, self.items, self.rollout, self.rollout_name = tokenizer, items, rollout, rollout_name
        self.num_groups, self.num_generations = num_groups, num_generations
        self.timeout, self.max_concurrency, self.shuffle = timeout, max_concurrency, shuffle
        self.drop_failed_groups = drop_failed_groups
        self.rng = np.random.default_rng([seed, process_index])
        self.order: list[int] = []
        self.endpoint = PolicyEndpoint(tokenizer, model_name, secrets.token_urlsafe(24), limits)
        self.server = BackgroundServer(make_app(self.endpoint), port)
        self.temperature = limits.temperature
        self.status: Callable[[str], None] | None = None  # what sampling is doing now, for a progress display
        self._played = 0  # rollouts so far: each gets an id of its own
        self._playing: Sequence[dict[str, Any]] = items  # the rows play() draws from now

    def state_dict(self) -> dict[str, Any]:
        """Where the items' order stands (JSON-able), for checkpoints."""
        return {"rng": self.rng.bit_generator.state, "order": list(self.order)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]
        self.order = list(state["order"])

    def close(self) -> None:
        self.server.stop()

    def base_url(self, rollout_id: str) -> str:
        return f"{self.server.url}/rollouts/{rollout_id}/v1"

    def _next_items(self, n: int) -> list[int]:
        picked: list[int] = []
        while len(picked) < n:
            if not self.order:  # a new pass over the items
                count = len(self.items)
                self.order = [int(i) for i in (self.rng.permutation(count) if self.shuffle else range(count))]
            picked.append(self.order.pop(0))
        return picked

    # -- one step ------------------------------------------------------------------------------

    def sample(self, policy: nn.Module) -> RolloutBatch:
        """One step's groups: every picked item's G rollouts, run to their end, as a batch. With
        ``drop_failed_groups``, a group with a failed rollout gives way to another item's, drawn
        again up to ``MAX_REDRAWS`` times a step."""
        t0 = time.perf_counter()
        batcher, G = self.endpoint.batcher, self.num_generations
        before = (batcher.batches, batcher.jobs)
        groups: list[list[Played]] = []
        dropped, first_error = 0, None
        for _ in range(1 + (MAX_REDRAWS if self.drop_failed_groups else 0)):
            need = self.num_groups - len(groups)
            if not need:
                break
            outcomes = self.play(policy, [i for i in self._next_items(need) for _ in range(G)],
                                 keep_errors=self.drop_failed_groups)
            for members in (outcomes[g * G:(g + 1) * G] for g in range(need)):
                failed = [o for o in members if isinstance(o, UsageError)]
                if failed:
                    dropped, first_error = dropped + 1, first_error or failed[0]
                else:
                    groups.append(members)  # type: ignore[arg-type]
        if len(groups) < self.num_groups:
            raise UsageError(f"{first_error} (--drop_failed_groups dropped {dropped} groups this step, and "
                             f"{MAX_REDRAWS} draws more left too few)")
        played = [p for members in groups for p in members]
        sequences = [rollout_episodes(t, r) for _, t, r in played]
        episodes = [seqs[0] for seqs in sequences]
        metrics = self._metrics(played, episodes, time.perf_counter() - t0)
        metrics["agent/calls_per_decode_batch"] = (batcher.jobs - before[1]) / max(1, batcher.batches - before[0])
        metrics["agent/dropped_groups"] = float(dropped)
        metrics["agent/sequences_per_rollout"] = sum(map(len, sequences)) / len(sequences)
        batch = episodes_batch(episodes, G, self.tokenizer, self.temperature, metrics)
        extra = [(row, e) for row, seqs in enumerate(sequences) for e in seqs[1:]]
        if extra:  # a rollout whose history was rewritten (or that asked n > 1): its other sequences
            batch.extra = episodes_batch([e for _, e in extra], G, self.tokenizer, self.temperature, partial=True)
            batch.extra_of = torch.tensor([row for row, _ in extra])
        return batch

    def play(self, policy: nn.Module, indices: Sequence[int], greedy: bool = False,
             items: Sequence[dict[str, Any]] | None = None, keep_errors: bool = False) -> list[Any]:
        """One rollout per index of ``indices`` into ``items`` (default: the training items), each
        given a copy of its row; ``greedy``: the calls decode greedily (held-out evaluation).
        Returns each rollout's :data:`Played`; a failed one's :class:`UsageError` in its place with
        ``keep_errors``, else the first is raised once all have ended."""
        endpoint = self.endpoint
        self._playing = self.items if items is None else items
        device = next(policy.parameters()).device
        enabled = torch.is_autocast_enabled(device.type)
        endpoint.policy, endpoint.greedy = policy, greedy
        endpoint.autocast = (device.type, torch.get_autocast_dtype(device.type)) if enabled else None
        if self.status is not None and not greedy:  # a held-out evaluation is no step's sampling
            self.status(f"{len(indices)} rollouts of {self.rollout_name}")
        try:
            outcomes = asyncio.run(self._run_all(indices))
        finally:
            with endpoint.lock:  # a call of a timed-out rollout may still be generating: let it finish
                endpoint.greedy = False
        for outcome in outcomes:
            if isinstance(outcome, BaseException) and not (keep_errors and isinstance(outcome, UsageError)):
                raise outcome
        return outcomes

    async def _run_all(self, indices: Sequence[int]) -> list[Played | BaseException]:
        # unset, at most a training step's rollouts at once: a held-out set of many items would otherwise
        # share decode batches so large that a CPU runs each call past --rollout_timeout
        limit = asyncio.Semaphore(self.max_concurrency or min(len(indices), self.num_groups * self.num_generations))
        first = self._played
        self._played += len(indices)
        return await asyncio.gather(*(self._one(f"r{first + k}", index, limit) for k, index in enumerate(indices)),
                                    return_exceptions=True)

    def _culprit(self, index: int) -> str:
        return f"rollout {self.rollout_name} on item {row_place(self._playing, index)}"

    async def _one(self, rollout_id: str, index: int, limit: asyncio.Semaphore) -> Played:
        """One rollout, its trajectory recorded; any failure as one line naming it and its item."""
        import openai

        culprit = self._culprit(index)
        async with limit:
            trajectory = self.endpoint.open(rollout_id)
            client = openai.AsyncOpenAI(base_url=self.base_url(rollout_id), api_key=self.endpoint.key, max_retries=0,
                                        timeout=self.timeout)
            try:
                result = await asyncio.wait_for(self.rollout(client, copy.deepcopy(self._playing[index])), self.timeout)
            except asyncio.TimeoutError:
                raise UsageError(f"{culprit}: did not end within --rollout_timeout {self.timeout:g} s") from None
            except Exception as e:  # noqa: BLE001 - the user's code: whatever it raised is the culprit's
                raise UsageError(f"{culprit}: raised {type(e).__name__}: {e}") from None
            finally:
                await asyncio.to_thread(self.endpoint.close, rollout_id)
                await client.close()
        if not trajectory.calls:
            raise UsageError(f"{culprit}: never called the endpoint; make the agent's calls with the client it is "
                             "given (its base_url records them)")
        return index, trajectory, check_result(result, len(trajectory.calls), culprit)

    def _metrics(self, played: list[Played], episodes: list[Any], seconds: float) -> dict[str, float]:
        calls = sum(len(t.calls) for _, t, _ in played)
        reply_tokens = sum(sum(e.trained) for e in episodes)
        metrics = {
            "reward/rollout": float(np.mean([r.reward for _, _, r in played])),
            "policy/truncated_fraction": float(np.mean([e.truncated for e in episodes])),
            "agent/calls": calls / len(played),
            "agent/reply_tokens_per_call": reply_tokens / max(1, calls),
            "agent/cut_reply_fraction": sum(not c.ended for _, t, _ in played for c in t.calls) / max(1, calls),
            "agent/context_tokens": float(np.mean([len(e.ids) - sum(e.trained) for e in episodes])),
            "perf/rollout_seconds": seconds,
        }
        names = sorted({name for _, _, r in played for name in r.metrics})
        for name in names:  # over the rollouts that reported it
            metrics[f"agent/{name}"] = float(np.mean([r.metrics[name] for _, _, r in played if name in r.metrics]))
        return metrics


def rollout_episodes(trajectory: Trajectory, result: RolloutResult) -> list[Any]:
    """A rollout's sequences (:func:`split_sequences`) as episodes, each with the rollout's reward
    and its own calls' share of ``call_rewards``; the first is the rollout's row of the batch."""
    index = {id(call): k for k, call in enumerate(trajectory.calls)}
    per_call = result.call_rewards
    return [as_episode(seq, result.reward, None if per_call is None else [per_call[index[id(c)]] for c in seq])
            for seq in split_sequences(trajectory.calls)]
