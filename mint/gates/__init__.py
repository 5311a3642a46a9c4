"""Evaluation contracts, evaluations, the evaluator runner, gates, promotion and history."""
