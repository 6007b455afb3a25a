"""Plumbing shared by the algorithm scripts: nothing here is part of any algorithm.

- data.py:           data sets (built-in arithmetic, GSM8K/MATH-format files, hub ids) and prompts
- grader.py:         the grading rules: final-answer extraction, hostile-input guard, equivalence (math-verify)
- reward.py:         the batched, hang-proof reward the trainer calls (a pool of worker processes)
- generation.py:     rollout engines (vLLM colocated, or Hugging Face generate), rollout seeds
- vllm_internals.py: the only code touching vLLM internals: in-memory weight reload, CPU KV-cache sizing
- model.py:          model resolution (the embedded SmolLM2 default, Gemma 3 base), loading; the HF model inside wrappers
- heads.py:          per-token log-probs and values (policy and critic heads), the shared-prompt forward
- update.py:         batches and their structure, mini-/micro-batches, gradient accumulation, the optimizer
- evaluation.py:     held-out evaluation with a running engine (training and eval.py)
- run.py:            Accelerate setup, collectives, seeding, flags, metrics, checkpoints and resume
Keep this file free of imports: every reward worker process imports it.
"""
