"""Plumbing shared by the algorithm scripts: nothing here is part of any algorithm.

- data.py:       data sets (built-in arithmetic, GSM8K/MATH-format files, hub ids) and prompts
- reward.py:     final-answer extraction and math equivalence (math-verify), batched and hang-proof
- generation.py: rollout engines (vLLM colocated, or Hugging Face generate) with in-memory weight sync
- model.py:      model resolution (the embedded SmolLM2 default), loading, saving
- update.py:     per-token log-probs, token-budget micro-batches, the exact accumulated PPO step
- run.py:        Accelerate setup, seeding, logging, checkpoints and resume
"""
