"""The policy being trained, behind an OpenAI-compatible chat endpoint, recording every call.

An agent program written against the ``openai`` package trains unchanged: the job hands each
rollout a client whose ``base_url`` is ``http://127.0.0.1:PORT/rollouts/<id>/v1``, and every chat
completion (or text completion) asked there is sampled from the current policy and recorded into that rollout's
:class:`~grpo_seq.agents.trajectory.Trajectory` (prompt and completion ids exactly as sampled,
the completion's sampled log-probs, the messages). ``/v1`` itself answers without recording.

Why it is safe to train on what it recorded:

- calls are generated under :attr:`PolicyEndpoint.lock` (those that arrive together in one
  decode batch: :mod:`grpo_seq.agents.batching`), and the sampler holds the trainer back (it
  returns only once every rollout has ended and that lock is free), so the weights never change
  during a call;
- a rollout samples at the job's temperature and top-p (a call asking for others is refused):
  the trainer scores every token at the distribution it was drawn from;
- a rollout that has ended (or timed out) is closed: a late call is refused, never recorded.

Refused requests get OpenAI's error body and a 4xx status: a wrong key (401), a model other than
the job's (404), a closed or unknown rollout (404), more tokens than the job allows or a prompt
longer than its context (400), and stop strings, which it does not do (400). ``stream: true`` is
answered as server-sent events of the whole reply (:func:`~grpo_seq.agents.openai_format.chat_chunks`).
"""

from __future__ import annotations

import hmac
import threading
import uuid
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import UsageError
from .batching import DecodeBatcher, Job, generate_rows
from .openai_format import APIError, ChatRequest, TextRequest, completion_body, reply_message, text_completion_body
from .prompts import TEXT_PROMPT, PromptBuilder
from .trajectory import Call, Trajectory

__all__ = ["Limits", "PolicyEndpoint"]

MAX_CHOICES = 16  # most choices (n) of one call


@dataclass
class Limits:
    """What a call may ask: ``max_tokens`` new tokens, ``max_total_tokens`` with its prompt; a
    rollout samples at ``temperature``, ``top_p`` and ``top_k`` (the job's)."""

    max_tokens: int
    max_total_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0


class PolicyEndpoint:
    """The state behind the routes (:func:`grpo_seq.agents.app.make_app`): the policy to sample
    from, the open rollouts and their trajectories, the batcher that generates the calls.

    Args:
        tokenizer: the policy's tokenizer (its chat template renders the messages and tools).
        model_name: the one model name a request may ask for (the job's ``--model``).
        key: the per-job API key every request must bear (``Authorization: Bearer KEY``).
        limits: what a call may ask (:class:`Limits`).
    """

    def __init__(self, tokenizer: Any, model_name: str, key: str, limits: Limits):
        self.tokenizer, self.model_name, self.key, self.limits = tokenizer, model_name, key, limits
        self.lock = threading.Lock()  # held while generating: the weights are read, never written
        self._state = threading.Lock()  # the trajectories and their calls
        self.policy: torch.nn.Module | None = None
        self.greedy = False  # held-out evaluation: rollouts decode greedily
        self.autocast: tuple[str, torch.dtype] | None = None  # the trainer's autocast, for the serving thread
        self.trajectories: dict[str, Trajectory] = {}
        self.prompts = PromptBuilder(tokenizer)
        self.eos_ids = [tokenizer.eos_token_id]
        self.batcher = DecodeBatcher(self.lock, self._generate, open_rollouts=lambda: len(self.trajectories))

    # -- rollouts ------------------------------------------------------------------------------

    def open(self, rollout_id: str) -> Trajectory:
        with self._state:
            self.trajectories[rollout_id] = Trajectory(rollout_id)
            return self.trajectories[rollout_id]

    def close(self, rollout_id: str) -> Trajectory:
        """End a rollout: later calls are refused. Waits for a call of it still generating."""
        with self.lock, self._state:
            trajectory = self.trajectories.pop(rollout_id)
            trajectory.open = False
            return trajectory

    def authorize(self, header: str | None) -> None:
        scheme, _, token = (header or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), self.key.encode()):
            raise APIError(401, "Incorrect API key provided: use the key the job gave this rollout's client",
                           code="invalid_api_key", kind="authentication_error")

    def models(self) -> dict[str, Any]:
        return {"object": "list", "data": [{"id": self.model_name, "object": "model", "created": 0,
                                            "owned_by": "grpo-seq"}]}

    # -- one call --------------------------------------------------------------------------------

    def complete(self, request: ChatRequest, rollout_id: str | None) -> dict[str, Any]:
        """Answer a chat ``request`` (recorded into rollout ``rollout_id``'s trajectory, when given),
        generated with the calls that arrive beside it (:mod:`grpo_seq.agents.batching`)."""
        max_new, sampling, trajectory, earlier = self._admit(request, rollout_id)
        try:
            prompt = self.prompts.ids(request.messages, request.tools, earlier)
        except (UsageError, ValueError, TypeError, KeyError) as e:  # the template refused these messages
            raise APIError(400, f"the model's chat template cannot render these messages: {e}",
                           param="messages") from None
        messages = [dict(m) for m in request.messages]
        choices = self._run(Job(prompt, request.n, max_new, sampling, trajectory, messages, bool(request.tools)))
        return completion_body(f"chatcmpl-{uuid.uuid4().hex}", self.model_name, choices, len(prompt),
                               bool(request.logprobs))

    def complete_text(self, request: TextRequest, rollout_id: str | None) -> dict[str, Any]:
        """Answer a text-completion ``request`` as :meth:`complete` does a chat one; its prompt is
        recorded as one message of role ``prompt``."""
        if request.echo:
            raise APIError(400, "echo is not supported by this endpoint", param="echo")
        max_new, sampling, trajectory, earlier = self._admit(request, rollout_id)
        prompt = self.prompts.text_ids(request.prompt, earlier)
        vocab = len(self.tokenizer)
        if not prompt or any(not 0 <= t < vocab for t in prompt):
            raise APIError(400, f"the prompt must hold at least one token, each an id below {vocab}", param="prompt")
        text = request.prompt if isinstance(request.prompt, str) else self.tokenizer.decode(prompt)
        choices = self._run(Job(prompt, request.n, max_new, sampling, trajectory, [{"role": TEXT_PROMPT,
                                                                                     "content": text}]))
        return text_completion_body(f"cmpl-{uuid.uuid4().hex}", self.model_name, choices, len(prompt),
                                    request.logprobs is not None)

    def _admit(self, request: Any, rollout_id: str | None) -> tuple[int, dict[str, Any], Trajectory | None, list[Call]]:
        """A request's checks before its prompt: the model, the lengths, the sampling, the rollout.
        Returns its ``max_tokens``, sampling, trajectory (None: not recorded) and earlier calls."""
        if request.model != self.model_name:
            raise APIError(404, f"The model '{request.model}' does not exist here: this endpoint serves "
                                f"'{self.model_name}'", param="model", code="model_not_found")
        max_new = self._max_new(request)
        sampling = self._sampling(request, recorded=rollout_id is not None)
        with self._state:
            trajectory = self._open_trajectory(rollout_id)
            earlier = list(trajectory.calls) if trajectory is not None else []
        return max_new, sampling, trajectory, earlier

    def _run(self, job: Job) -> list[dict[str, Any]]:
        """``job`` generated (its prompt's length checked first); its choices."""
        if len(job.prompt) + job.max_new > self.limits.max_total_tokens:
            raise APIError(400, f"This call's prompt of {len(job.prompt)} tokens and max_tokens {job.max_new} exceed "
                                f"the job's {self.limits.max_total_tokens} tokens of a call (--max_total_tokens)",
                           param="messages", code="context_length_exceeded")
        return self.batcher.run(job)

    def _open_trajectory(self, rollout_id: str | None) -> Trajectory | None:
        if rollout_id is None:
            return None
        trajectory = self.trajectories.get(rollout_id)
        if trajectory is None or not trajectory.open:
            raise _not_open(rollout_id)
        return trajectory

    def _generate(self, jobs: list[Job]) -> None:
        """Under the generation lock: the queued calls, each batch of alike sampling in one generate
        call, each result recorded into its rollout (a rollout closed meanwhile: refused)."""
        live = []
        for job in jobs:
            if job.trajectory is not None and not job.trajectory.open:
                job.error = _not_open(job.trajectory.rollout_id)
            elif self.policy is None:
                job.error = APIError(503, "the endpoint has no policy to sample from yet", code="not_ready",
                                     kind="server_error")
            else:
                live.append(job)
        for key in dict.fromkeys(job.key for job in live):
            batch = [job for job in live if job.key == key]
            try:
                sampled = generate_rows(self.policy, batch, self.tokenizer.pad_token_id, self.eos_ids, self.autocast)
            except Exception as e:  # noqa: BLE001 - each waiting request raises it (a 500)
                for job in batch:
                    job.error = e
                continue
            for job, choices in zip(batch, sampled):
                job.result = self._record(job, choices)

    def _record(self, job: Job, sampled: list[tuple[list[int], list[float], bool]]) -> list[dict[str, Any]]:
        """Each choice as the reply builds it (:func:`completion_body`), recorded into its rollout."""
        choices = []
        for ids, logprobs, ended in sampled:
            message = reply_message(self.tokenizer.decode(ids, skip_special_tokens=True), job.tools)
            if job.trajectory is not None:
                with self._state:
                    job.trajectory.calls.append(Call(job.prompt, ids, logprobs, job.messages, message, ended))
            choices.append({"message": message, "ended": ended, "logprobs": logprobs,
                            "tokens": self.tokenizer.convert_ids_to_tokens(ids)})
        return choices

    def _max_new(self, request: ChatRequest) -> int:
        if request.stop:
            raise APIError(400, "stop strings are not supported by this endpoint: the reply ends at the model's "
                                "end of turn or max_tokens", param="stop")
        if not 1 <= request.n <= MAX_CHOICES:
            raise APIError(400, f"n must be from 1 to {MAX_CHOICES}, got {request.n}", param="n")
        asked = getattr(request, "max_completion_tokens", None) or request.max_tokens
        max_new = self.limits.max_tokens if asked is None else asked
        param = "max_completion_tokens" if getattr(request, "max_completion_tokens", None) else "max_tokens"
        if not 1 <= max_new <= self.limits.max_tokens:
            raise APIError(400, f"{param} must be from 1 to {self.limits.max_tokens} (the job's "
                                f"--max_completion_length), got {max_new}", param=param)
        return max_new

    def _sampling(self, request: ChatRequest, recorded: bool) -> dict[str, Any]:
        """Greedy in a held-out evaluation; a rollout at the job's settings (others refused: the
        trainer scores tokens under the distribution the job samples); ``/v1`` as asked."""
        greedy = {"do_sample": False, "temperature": None, "top_p": None, "top_k": None}
        lim = self.limits
        if recorded and self.greedy:
            return greedy
        if recorded:
            for name, asked, job in (("temperature", request.temperature, lim.temperature),
                                     ("top_p", request.top_p, lim.top_p)):
                if asked is not None and abs(asked - job) > 1e-6:
                    raise APIError(400, f"{name} {asked:g}: a rollout samples at the job's {name} {job:g} (set "
                                        f"--{name}, or leave it out of the call)", param=name)
            return {"do_sample": True, "temperature": lim.temperature, "top_p": lim.top_p, "top_k": lim.top_k}
        temperature = lim.temperature if request.temperature is None else request.temperature
        if temperature <= 0:
            return greedy
        return {"do_sample": True, "temperature": temperature, "top_p": request.top_p or 1.0, "top_k": 0}


def _not_open(rollout_id: str) -> APIError:
    return APIError(404, f"no rollout '{rollout_id}' is open (it ended, timed out, or never began): use the "
                         "base_url the job gave this rollout", code="rollout_not_open")
