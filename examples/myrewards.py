"""The reward module the README's and guides' command-line examples name (myrewards:brevity)."""


def brevity(completions, **kwargs):
    """1 for a completion of at most 20 words, less the longer it gets (TRL's signature)."""
    return [min(1.0, 20 / max(1, len(c[0]["content"].split()))) for c in completions]


def ends_with_period(completions, **kwargs):
    """1 when a completion ends with a full stop, else 0."""
    return [float(c[0]["content"].rstrip().endswith(".")) for c in completions]
