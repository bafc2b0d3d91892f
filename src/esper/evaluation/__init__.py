"""Evaluation: judging controllers above the learners (off-policy evaluation, comparisons, statistics)."""
