"""Learning curves from runs' metrics.jsonl, several runs overlaid.

    grpo-seq plot runs/<run> [runs/<other> ...] [--out curves.png] [--x env_steps] [--smooth 5]

One panel per quantity that any of the runs logged: reward (the total, solid, and each reward
function, in other line styles), evaluation return, accuracy (the correctness reward), KL, completion length,
clip fraction, entropy, loss. Each run has its colour and its legend entry (the run folder's
name). Needs matplotlib (``pip install matplotlib``, or the ``plot`` extra).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Callable, Sequence

from ..errors import ConfigError, MissingPathError, UsageError

__all__ = ["read_metrics", "panels_for", "plot_runs", "plot_run_if_possible", "X_AXES"]

# reward/ keys that are the trainer's statistics or counters, not a reward function's mean
_TRAINER_REWARDS = {"reward/mean", "reward/std", "reward/group_std", "reward/zero_std_groups",
                    "reward/flat_steps_in_a_row"}
_SINGLE = [  # (title, key)
    ("evaluation return", "eval/return"),
    ("accuracy (correctness reward)", "reward/correctness_reward"),
    ("KL to the reference", "policy/kl"),
    ("completion length (tokens)", "policy/completion_length"),
    ("clip fraction", "policy/clip_fraction"),
    ("entropy", "policy/entropy"),
    ("policy loss", "loss/policy"),
]
X_AXES = {"step": "step", "env_steps": "perf/tokens_total"}
_STYLES = ["-", "--", ":", "-."]


def read_metrics(run: str | Path) -> tuple[str, list[dict]]:
    """``(label, rows)`` of a run folder or a metrics.jsonl file; a damaged last line is skipped."""
    path = Path(run)
    if path.is_dir():
        path = path / "metrics.jsonl"
    if not path.is_file():
        raise MissingPathError(f"{run}: no metrics.jsonl (give a run folder or the file itself)")
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:  # a run killed mid-write leaves at most one partial line
            continue
    label = path.parent.name if path.name == "metrics.jsonl" else path.stem
    return label, rows


def panels_for(all_rows: Sequence[list[dict]]) -> list[tuple[str, list[str]]]:
    """The panels to draw, ``(title, keys)``, in a fixed order, for the keys any run logged with
    a value other than 0 (a KL with beta = 0, a clip fraction with one update per batch: nothing
    to see)."""
    keys = {k for rows in all_rows for r in rows for k, v in r.items() if isinstance(v, (int, float)) and v != 0}
    panels = []
    if "reward/mean" in keys:
        per_fn = sorted(k for k in keys if k.startswith("reward/") and k not in _TRAINER_REWARDS)
        panels.append(("reward", ["reward/mean", *per_fn]))
    panels += [(title, [key]) for title, key in _SINGLE if key in keys]
    return panels


def _series(rows: list[dict], key: str, x: str, smooth: int) -> tuple[list[float], list[float]]:
    pts = [(r[x], r[key]) for r in rows if isinstance(r.get(key), (int, float)) and x in r and r[key] is not None
           and math.isfinite(r[key])]
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    if smooth > 1 and ys:  # trailing mean over the last `smooth` points
        ys = [sum(ys[max(0, i - smooth + 1): i + 1]) / len(ys[max(0, i - smooth + 1): i + 1]) for i in range(len(ys))]
    return xs, ys


def plot_runs(runs: Sequence[str | Path], out: str | Path, x: str = "step", smooth: int = 1) -> list[str]:
    """Write one PNG of every run's curves to ``out``; returns the panel titles, in order."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if x not in X_AXES:
        raise ConfigError(f"x must be one of {sorted(X_AXES)}, got {x!r}")
    loaded = [read_metrics(r) for r in runs]
    panels = panels_for([rows for _, rows in loaded])
    if not panels:
        raise UsageError(f"no plottable metrics in {', '.join(str(r) for r in runs)}")
    cols = min(3, len(panels))
    nrows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(5.2 * cols, 3.6 * nrows), squeeze=False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (title, keys) in zip(axes.flat, panels):
        for i, (label, rows) in enumerate(loaded):
            for j, key in enumerate(keys):
                xs, ys = _series(rows, key, X_AXES[x], smooth)
                if not xs:
                    continue
                name = label if len(keys) == 1 else f"{label}: {key.split('/', 1)[1]}"
                # One run: a colour per curve. Several: a colour per run, a line style per curve.
                colour = colours[(j if len(loaded) == 1 else i) % len(colours)]
                ax.plot(xs, ys, color=colour, ls=_STYLES[j % len(_STYLES)], lw=1.4, label=name)
        ax.set_title(title)
        ax.set_xlabel("env steps" if x == "env_steps" else "step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels):]:
        ax.remove()
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return [title for title, _ in panels]


def plot_run_if_possible(run: str | Path, out: str | Path, x: str = "step", smooth: int = 1,
                         warn: Callable[[str], None] | None = None) -> Path | None:
    """What the recipes call at the end: the run's curves, or a hint when matplotlib is missing.

    A finished run stays finished: when drawing fails (a broken plotting backend, ``MPLBACKEND``
    naming none, a failed ``savefig``), one ``warning: ...`` line goes to ``warn`` (default: stderr)
    and None is returned."""
    import importlib.util
    import sys

    if importlib.util.find_spec("matplotlib") is None:
        print("learning curves: pip install matplotlib, then grpo-seq plot", run)
        return None
    try:
        plot_runs([run], out, x=x, smooth=smooth)
    except Exception as e:  # noqa: BLE001 - the curves are a view of metrics.jsonl, which is saved
        why = " ".join(f"{type(e).__name__}: {e}".split())
        line = (f"warning: the learning curves were not drawn ({why}); the run itself is complete, and "
                f"grpo-seq plot {run} draws them once plotting works")
        if warn is None:
            print(line, file=sys.stderr, flush=True)
        else:
            warn(line)
        return None
    return Path(out)
