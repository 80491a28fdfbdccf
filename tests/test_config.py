import pytest

from grpo_seq import LoopConfig


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("num_generations", 1, "LoopConfig.num_generations: a group needs at least 2 outputs"),
        ("epsilon", 0.0, "LoopConfig.epsilon: must be in"),
        ("beta", -0.1, "LoopConfig.beta: must be >= 0"),
        ("loss_type", "ppo", "LoopConfig.loss_type: must be one of"),
        ("advantage", "gae", "LoopConfig.advantage: must be one of"),
        ("mu", 0, "LoopConfig.mu: must be >= 1"),
        ("learning_rate", 0.0, "LoopConfig.learning_rate: must be > 0"),
        ("num_minibatches", 3, "LoopConfig.num_minibatches: must divide the 64 outputs"),
        ("epsilon", -0.2, "LoopConfig.epsilon: must be in"),
        ("adam_beta1", 1.0, r"LoopConfig.adam_beta1: must be in \[0, 1\)"),
        ("adam_beta2", -0.1, r"LoopConfig.adam_beta2: must be in \[0, 1\)"),
        ("save_steps", -1, "LoopConfig.save_steps: must be >= 0"),
        ("save_total_limit", -1, "LoopConfig.save_total_limit: must be >= 0"),
    ],
)
def test_bad_values_name_the_field(field, value, message):
    with pytest.raises(ValueError, match=message):
        LoopConfig(**{field: value})


def test_every_field_has_help_text():
    import dataclasses

    missing = [f.name for f in dataclasses.fields(LoopConfig) if not f.metadata.get("help")]
    assert missing == []
