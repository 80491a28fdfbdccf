"""Env steps to solve an env for several settings of the env recipe, many seeds, in one process.

    python benchmarks/env_sweep.py --seeds 0 1 2 3 4 5 6 7 --configs '{}' '{"num_generations": 4}' --out /tmp/a.json
    python benchmarks/env_sweep.py --configs '{"env_id": "Acrobot-v1"}' --eval_every 5000 --cap 200000 \
        --question "Acrobot: ..." --id acrobot_defaults

Each config is a JSON object of `grpo-seq train-env` options (`grpo_seq.jobs.env_spec.EnvJob`) over its defaults (CartPole-v1
unless it names an `env_id`). Every run trains as the recipe does and evaluates 10 episodes
(`PolicyEvaluator`, the same seeds and the same greedy or sampled actions as the recipe) after the
first update past every `--eval_every` env steps; "solved" is the first evaluation at or above the env's threshold. A
run stops `--after` evaluations past solving (their returns show whether it stays solved) or at
`--cap` env steps. Env steps to solve are exact
and machine-independent for a seed; the seconds are only indicative (one process, no warm-up
excluded, evaluations included). Prints one line per run and a summary per config; `--out`
writes them as JSON.

The experiments page's record is one file, ``benchmarks/results/env_sweep/result.json``: a list of
questions in page order, each ``{id, question, meta, results}``. ``--question Q --id ID`` writes
the sweep as question ID there (in its place when it exists, else at the end); ``--from_records``
gathers earlier sweeps (a scratch ``--out`` file, or ``RECORD#ID`` for a question of a record)
into one question without running anything.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path

import record  # benchmarks/record.py: default --out and the meta block

RECORD = record.default_out("env_sweep")  # the experiments page's questions, one file


def run(seed: int, overrides: dict, eval_every: int, cap: int, after: int, accelerator: "Accelerator") -> dict:
    # imported here, not at the top: --from_records trains nothing and starts in a fraction of the time
    from accelerate.utils import set_seed

    from grpo_seq import GRPOLoop
    from grpo_seq.scoring.evaluation import PolicyEvaluator, eval_stream_seed
    from grpo_seq.jobs.env import env_form, eval_greedy, make_policy, make_sampler, solved_threshold, take_image_defaults
    from grpo_seq.jobs.env_spec import EnvJob
    from grpo_seq.jobs.obs_norm import ObsNorm

    args = EnvJob(seed=seed, **overrides)
    set_seed(seed)
    policy = make_policy(args)
    take_image_defaults(args, policy)  # as the recipe's run: an image env's rate and group
    args.solved_return = solved_threshold(args)
    sampler = make_sampler(args, 0, policy.init_kwargs["obs_scale"])
    trainer = GRPOLoop(args, policy, sampler, accelerator)
    obs_norm = ObsNorm(policy, accelerator) if args.obs_norm else None  # as the recipe's run
    evaluate = PolicyEvaluator(args.env_id, args.eval_episodes, seed=eval_stream_seed(seed),
                               greedy=eval_greedy(args.env_id, args.eval_greedy), **env_form(args))  # as the recipe
    next_eval, solved, later, ret, start = eval_every, None, [], None, time.perf_counter()
    while trainer.tokens_sampled < min(cap, args.total_env_steps):
        trainer.step(progress=trainer.tokens_sampled / args.total_env_steps)
        if obs_norm is not None:
            obs_norm.observe(trainer.last_batch)
        if trainer.tokens_sampled < next_eval:
            continue
        next_eval = (trainer.tokens_sampled // eval_every + 1) * eval_every
        ret = float(evaluate(trainer.policy).mean())
        if solved is not None:
            later.append(ret)
            if len(later) >= after:
                break
        elif args.solved_return is not None and ret >= args.solved_return:
            solved = {"env_steps": trainer.tokens_sampled, "seconds": time.perf_counter() - start}
    return {"seed": seed, "solved_env_steps": solved and solved["env_steps"],
            "solved_seconds": solved and solved["seconds"], "later_evals": later, "threshold": args.solved_return,
            "final_eval": ret}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", nargs="+", default=["{}"], help="JSON objects of recipe options")
    ap.add_argument("--seeds", type=int, nargs="+", default=list(range(8)))
    ap.add_argument("--eval_every", type=int, default=1000)
    ap.add_argument("--cap", type=int, default=60_000, help="stop an unsolved run after this many env steps")
    ap.add_argument("--after", type=int, default=3, help="evaluations kept after solving")
    ap.add_argument("--out", type=Path, default=None,
                    help="JSON: one summary per config, each with every run and the meta block (default: none; with "
                         f"--question: the experiments record, {RECORD})")
    ap.add_argument("--descriptions", nargs="+", default=None,
                    help="one phrase per config naming it in words (the experiments page's first column)")
    ap.add_argument("--from_records", nargs="+", default=None,
                    help="run nothing: gather the configs of earlier sweeps' JSON files (PATH, or PATH#ID for one "
                         "question of a record), in order, into one --question (each keeps its own meta: command, "
                         "date, commit)")
    ap.add_argument("--question", default=None,
                    help="write the sweep as this question of the experiments record ({id, question, meta, results})")
    ap.add_argument("--id", default=None, help="with --question: its short name in the record (snake_case)")
    a = ap.parse_args()
    if (a.question is None) != (a.id is None):
        ap.error("--question and --id go together")
    if a.from_records and a.question is None:
        ap.error("--from_records writes a question: give --question and --id")
    if a.question is not None and a.out is None:
        a.out = RECORD
    if a.descriptions is not None and not a.from_records and len(a.descriptions) != len(a.configs):
        ap.error(f"--descriptions: {len(a.descriptions)} given for {len(a.configs)} --configs (one each)")
    if a.from_records:
        return assemble(a)
    import torch
    from accelerate import Accelerator

    torch.set_num_threads(1)
    accelerator = Accelerator(cpu=True)
    results, meta = [], record.meta()
    for k, text in enumerate(a.configs):
        overrides = json.loads(text)
        rows = []
        for seed in a.seeds:
            rows.append(run(seed, overrides, a.eval_every, a.cap, a.after, accelerator))
            print(json.dumps({"config": overrides, **rows[-1]}), flush=True)
        steps = [r["solved_env_steps"] or float("inf") for r in rows]
        later = [min(r["later_evals"], default=-math.inf) >= r["threshold"] for r in rows if r["solved_env_steps"]]
        summary = {"config": overrides, "meta": meta, "solved": sum(s < float("inf") for s in steps), "runs": len(rows),
                   "median_env_steps": statistics.median(steps), "max_env_steps": max(steps),
                   "runs_staying_solved": sum(later), "rows": rows}
        if a.descriptions:
            summary["description"] = a.descriptions[k]
        results.append(summary)
        print(f"SUMMARY {json.dumps(overrides)}: solved {summary['solved']}/{len(rows)}, median "
              f"{summary['median_env_steps']:.0f} env steps, max {summary['max_env_steps']:.0f}, "
              f"{summary['runs_staying_solved']} stayed solved for {a.after} evaluations", flush=True)
        if a.question:  # after every config, so a long sweep cut short keeps what it measured
            write_question(a.out, {"id": a.id, "question": a.question, "meta": meta, "results": results})
        elif a.out:
            record.prepare(a.out).write_text(json.dumps(results, indent=2, default=lambda v: None))


def assemble(a: argparse.Namespace) -> None:
    """One experiments-page record from the configs of earlier sweeps (``--from_records``): rows in
    the order given, ``--descriptions`` naming them; the record's meta lists this command and each
    row's own, and every row keeps the meta of the run that measured it."""
    entries = []
    for spec in a.from_records:
        entries += read_entries(spec)
    if a.descriptions is not None and len(a.descriptions) != len(entries):
        raise SystemExit(f"--descriptions: {len(a.descriptions)} given for {len(entries)} configs in --from_records")
    for k, entry in enumerate(entries):
        if a.descriptions:
            entry["description"] = a.descriptions[k]
    meta = record.meta()
    meta["command"] = [meta["command"], *dict.fromkeys(e["meta"]["command"] for e in entries)]
    meta["note"] = ("gathered from earlier sweeps by the first command; the rows were measured by the commands below it, "
                    "in order (one command may hold several rows), and each row's own meta holds its date and commit")
    write_question(a.out, {"id": a.id, "question": a.question, "meta": meta, "results": entries})
    print(f"wrote {a.out} ({a.id}): {len(entries)} configs")


def read_entries(spec: str) -> list[dict]:
    """The configs of ``PATH`` (a scratch ``--out`` list) or of question ``ID`` in ``PATH#ID``."""
    path, _, qid = spec.partition("#")
    doc = json.loads(Path(path).read_text())
    if not qid:
        return doc if isinstance(doc, list) else doc["results"]
    found = [q for q in doc["questions"] if q["id"] == qid]
    if not found:
        raise SystemExit(f"error: --from_records: {path} has no question {qid!r}")
    return found[0]["results"]


def write_question(out: Path, question: dict) -> None:
    """Put ``question`` into the record at ``out``: in place of the one with its id, else at the end."""
    doc = json.loads(out.read_text()) if out.exists() else {"questions": []}
    ids = [q["id"] for q in doc["questions"]]
    if question["id"] in ids:
        doc["questions"][ids.index(question["id"])] = question
    else:
        doc["questions"].append(question)
    record.prepare(out).write_text(json.dumps(doc, indent=2, default=lambda v: None) + "\n")


if __name__ == "__main__":
    main()
