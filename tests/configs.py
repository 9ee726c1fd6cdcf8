"""Small rollout configs that several test modules write to disk."""

SMALL_ALIBI = """\
sequence_length: 16
num_layers: 3
mask_config: {mask_type: causal, window_size: null}
attention_config: {num_heads: 2, alibi_slopes: [[0.5, 0.125]], head_weights: null, softmax_temperature: 1.0}
content_config: {diagonal_scores: [[1.0]], base_scores: [[0.0]]}
lambda_schedule_config: {schedule_type: power_decay, lambda_0: 0.8, beta: 1.0}
"""
"""3 layers of 2 ALiBi heads, 16 tokens, causal, content diagonal 1, power-decay lambda."""
