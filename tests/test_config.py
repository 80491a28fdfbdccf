import pytest

from grpo_seq import GRPOConfig


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("num_generations", 1, "GRPOConfig.num_generations: a group needs at least 2 outputs"),
        ("epsilon", 0.0, "GRPOConfig.epsilon: must be in"),
        ("beta", -0.1, "GRPOConfig.beta: must be >= 0"),
        ("loss_type", "ppo", "GRPOConfig.loss_type: must be one of"),
        ("advantage", "gae", "GRPOConfig.advantage: must be one of"),
        ("mu", 0, "GRPOConfig.mu: must be >= 1"),
        ("learning_rate", 0.0, "GRPOConfig.learning_rate: must be > 0"),
        ("num_minibatches", 3, "GRPOConfig.num_minibatches: must divide the 64 outputs"),
        ("epsilon", -0.2, "GRPOConfig.epsilon: must be in"),
        ("adam_beta1", 1.0, r"GRPOConfig.adam_beta1: must be in \[0, 1\)"),
        ("adam_beta2", -0.1, r"GRPOConfig.adam_beta2: must be in \[0, 1\)"),
        ("save_steps", -1, "GRPOConfig.save_steps: must be >= 0"),
        ("save_total_limit", -1, "GRPOConfig.save_total_limit: must be >= 0"),
    ],
)
def test_bad_values_name_the_field(field, value, message):
    with pytest.raises(ValueError, match=message):
        GRPOConfig(**{field: value})


def test_every_field_has_help_text():
    import dataclasses

    missing = [f.name for f in dataclasses.fields(GRPOConfig) if not f.metadata.get("help")]
    assert missing == []
