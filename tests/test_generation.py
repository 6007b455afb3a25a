"""Generation engines: vLLM and HF agree, weight sync, sampler log-probs, truncation, seeding.

All vLLM tests share the session's one engine (`vllm_engine`, conftest.py); a test that changes its
weights puts the original ones back.
"""

import contextlib
import logging

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from common.generation import Completion, HFEngine, SamplingConfig, make_engine, rollout_seed
from common.model import full_weights, hf_names
from common.vllm_internals import CPU_KV_CACHE_MAX_GIB, cpu_kv_cache_bytes
from conftest import build_tiny_model

VLLM_TIMEOUT = pytest.mark.timeout(300)  # the first vLLM test pays the engine start (30-60 s on 2 cores)


@pytest.fixture(scope="module")
def tokenizer(tiny_model_path):
    return AutoTokenizer.from_pretrained(tiny_model_path)


@pytest.fixture
def model(tiny_model_path):
    """A fresh copy of the tiny model per test, as the trainer would hold it (fp32, train mode)."""
    return AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).train()


@pytest.fixture(scope="module")
def prompts(tokenizer) -> list[list[int]]:
    """8 chat prompts of different lengths (so HF batches are left-padded)."""
    questions = [f"What is {a} + {b}?" for a, b in [(1, 2), (17, 5), (123, 456), (9, 99), (40, 2), (7, 777),
                                                    (31, 13), (2, 2024)]]
    questions[3] += " Think step by step, then put the answer in \\boxed{}."
    return [tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True)["input_ids"]
            for q in questions]


def recomputed_logprobs(model, prompt: list[int], completion: list[int], temperature: float) -> torch.Tensor:
    """What the trainer computes: log_softmax(logits / T) of each response token, one full forward pass."""
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1:-1].float()  # [T, V]: position t predicts token t+1
    return (logits / temperature).log_softmax(-1).gather(-1, torch.tensor(completion)[:, None]).squeeze(-1)


def nudge(model) -> None:
    """A seeded "training step": every parameter moves by 0.1 of its std, enough to change greedy paths."""
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * p.std() * torch.randn(p.shape, generator=generator))


def check_stops(completions: list[Completion], eos_id: int, max_new_tokens: int) -> None:
    for c in completions:
        if c.truncated:
            assert len(c.token_ids) == max_new_tokens and eos_id not in c.token_ids
        else:
            assert c.token_ids[-1] == eos_id and eos_id not in c.token_ids[:-1]
            assert len(c.token_ids) <= max_new_tokens


@pytest.mark.heavy
@VLLM_TIMEOUT
def test_greedy_backends_agree(vllm_engine, model, tokenizer, prompts):
    greedy = SamplingConfig(max_new_tokens=24, temperature=0)
    from_vllm = vllm_engine.generate(prompts, 1, greedy)
    from_hf = HFEngine(model, tokenizer).generate(prompts, 1, greedy)
    assert [c.token_ids for c in from_vllm] == [c.token_ids for c in from_hf]
    assert [c.text for c in from_vllm] == [c.text for c in from_hf]
    assert [c.truncated for c in from_vllm] == [c.truncated for c in from_hf]
    # The comparison is meaningful: long completions, and both ways of stopping occur.
    assert sum(len(c.token_ids) >= 16 for c in from_hf) >= 4
    assert any(c.truncated for c in from_hf) and not all(c.truncated for c in from_hf)
    check_stops(from_vllm, tokenizer.eos_token_id, 24)
    check_stops(from_hf, tokenizer.eos_token_id, 24)
    # HF batching (left padding across chunks) does not change greedy outputs; train mode is restored.
    assert [c.token_ids for c in HFEngine(model, tokenizer, batch_size=3).generate(prompts, 1, greedy)] == \
        [c.token_ids for c in from_hf]
    assert model.training


@pytest.mark.heavy
@VLLM_TIMEOUT
def test_sync_weights_follows_trainer(vllm_engine, model, tokenizer, prompts, tiny_model_path):
    greedy = SamplingConfig(max_new_tokens=24, temperature=0)
    before = [c.token_ids for c in vllm_engine.generate(prompts, 1, greedy)]
    nudge(model)
    try:
        # As the trainer passes it: the HF model inside a wrapper (here `.lm`, as common.update.LogprobModel),
        # compiled. vLLM must receive HF names: "_orig_mod.lm." is stripped.
        vllm_engine.sync_weights(torch.compile(torch.nn.ModuleDict({"lm": model})))
        after = [c.token_ids for c in vllm_engine.generate(prompts, 1, greedy)]
        expected = [c.token_ids for c in HFEngine(model, tokenizer).generate(prompts, 1, greedy)]
        # Same prompts as before the sync: equality also shows the prefix cache was reset (stale KV otherwise).
        assert after == expected
        assert after != before
    finally:
        vllm_engine.sync_weights(AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32))
    assert [c.token_ids for c in vllm_engine.generate(prompts, 1, greedy)] == before


# PPO's first-epoch ratio is exp(logp_trainer - logp_sampler); if the sampler's log-probs stand in for
# old_logprobs, any mismatch is a spurious ratio error |exp(diff) - 1| that clipping (eps 0.2) would
# act on. Both sides run fp32 on CPU, so the mismatch is float rounding of a different op order (fused
# attention kernels, batched vs single rows): ~1e-6 per logit. 1e-4 is far above that and far below
# anything that matters for clipping (0.2) or approx_kl; a temperature-convention bug (1/T vs 1 on a
# T=0.7 distribution) shows up as differences of order 1, so the test also asserts those are large.
RATIO_TOL = 1e-4


@pytest.mark.heavy
@VLLM_TIMEOUT
@pytest.mark.parametrize("backend", ["vllm", "hf"])
def test_sampler_logprobs_match_trainer(backend, request, model, tokenizer, prompts):
    engine = request.getfixturevalue("vllm_engine") if backend == "vllm" else HFEngine(model, tokenizer)
    temperature = 0.7
    completions = engine.generate(prompts[:4], 2, SamplingConfig(max_new_tokens=16, temperature=temperature,
                                                                 seed=3, logprobs=True))
    worst, worst_untempered = 0.0, 0.0
    for i, c in enumerate(completions):
        assert c.logprobs is not None and len(c.logprobs) == len(c.token_ids) > 0
        sampler = torch.tensor(c.logprobs)
        trainer = recomputed_logprobs(model, prompts[i // 2], c.token_ids, temperature)
        worst = max(worst, (trainer - sampler).exp().sub(1).abs().max().item())
        untempered = recomputed_logprobs(model, prompts[i // 2], c.token_ids, 1.0)
        worst_untempered = max(worst_untempered, (untempered - sampler).exp().sub(1).abs().max().item())
    assert worst < RATIO_TOL, f"{backend}: max |ratio - 1| = {worst:.2e}"
    assert worst_untempered > 0.05  # the comparison can tell the temperature convention apart


@pytest.mark.heavy
@VLLM_TIMEOUT
@pytest.mark.parametrize("backend", ["vllm", "hf"])
def test_truncated_flags_and_top_k(backend, request, model, tokenizer, prompts):
    engine = request.getfixturevalue("vllm_engine") if backend == "vllm" else HFEngine(model, tokenizer)
    completions = engine.generate(prompts, 4, SamplingConfig(max_new_tokens=12, temperature=1.0, seed=0))
    assert len(completions) == 32
    check_stops(completions, tokenizer.eos_token_id, 12)
    assert 0 < sum(c.truncated for c in completions) < 32
    # top_k: every sampled token is among the k most likely under the model.
    for i, c in enumerate(engine.generate(prompts[:2], 2, SamplingConfig(max_new_tokens=12, top_k=3, seed=0))):
        with torch.no_grad():
            logits = model(torch.tensor([prompts[i // 2] + c.token_ids])).logits[0, len(prompts[i // 2]) - 1:-1]
        assert all(t in top for t, top in zip(c.token_ids, logits.topk(3, dim=-1).indices.tolist()))


@pytest.mark.heavy
@VLLM_TIMEOUT
@pytest.mark.parametrize("backend", ["vllm", "hf"])
def test_stop_ids_end_a_sample_as_eos_does(backend, request, model, tokenizer, prompts):
    # a quarter of the vocabulary stops a sample: most end within 12 tokens, on their first such token
    stops = set(range(0, len(tokenizer), 4)) - {tokenizer.eos_token_id}
    if backend == "vllm":
        engine = request.getfixturevalue("vllm_engine")  # one engine per session: its stop set widened for this test
        saved, engine.eos_ids = engine.eos_ids, sorted(set(engine.eos_ids) | stops)
    else:
        engine = HFEngine(model, tokenizer, stop_ids=sorted(stops))
    try:
        completions = engine.generate(prompts, 4, SamplingConfig(max_new_tokens=12, temperature=1.0, seed=0))
    finally:
        if backend == "vllm":
            engine.eos_ids = saved
    ends = stops | {tokenizer.eos_token_id}
    for c in completions:
        assert not ends & set(c.token_ids[:-1])  # nothing after the first stop
        assert c.truncated == (c.token_ids[-1] not in ends) and len(c.token_ids) <= 12
        assert not c.truncated or len(c.token_ids) == 12
    assert sum(c.token_ids[-1] in stops for c in completions) > len(completions) // 2


@pytest.mark.heavy
@VLLM_TIMEOUT
@pytest.mark.parametrize("backend", ["vllm", "hf"])
def test_seeded_sampling(backend, request, model, tokenizer, prompts):
    engine = request.getfixturevalue("vllm_engine") if backend == "vllm" else HFEngine(model, tokenizer)

    def sample(seed: int) -> list[list[int]]:
        return [c.token_ids for c in engine.generate(prompts[:3], 4, SamplingConfig(max_new_tokens=12, seed=seed))]

    first = sample(0)
    assert sample(0) == first
    assert sample(1) != first
    for group in range(3):  # the n samples of one prompt differ from each other
        assert len({tuple(t) for t in first[4 * group:4 * group + 4]}) > 1


def test_hf_names_strip_wrapper_prefixes_and_what_lies_outside_the_hf_model(model):
    wrapper = torch.nn.ModuleDict({"lm": model, "value_head": torch.nn.Linear(64, 1)})
    named = [("module._orig_mod.lm.model.layers.0.mlp.up_proj.weight", 1),
             ("_fsdp_wrapped_module.lm.model.layers.1._fsdp_wrapped_module.self_attn.q_proj.weight", 2),
             ("lm.lm_head.weight", 3), ("value_head.weight", 4)]
    assert list(hf_names(wrapper, named)) == [("model.layers.0.mlp.up_proj.weight", 1),
                                              ("model.layers.1.self_attn.q_proj.weight", 2), ("lm_head.weight", 3)]


def test_full_weights_finds_the_hf_model_in_a_wrapper(model):
    critic = torch.nn.ModuleDict({"lm": model, "value_head": torch.nn.Linear(64, 1)})  # e.g. policy + value head
    with full_weights(torch.compile(critic)) as weights:
        names = [name for name, _ in weights]
    assert names == [name for name, _ in model.named_parameters()]  # HF names, no value head


def test_rollout_seeds_differ_for_every_step_and_process():
    seeds = {rollout_seed(7, step, rank, 4) for step in range(100) for rank in range(4)}
    assert len(seeds) == 400 and rollout_seed(7, 3, 1, 4) == 7 * 1_000_003 + 13


def test_make_engine_backends(model, tokenizer, monkeypatch):
    kw = dict(model_path="unused", model=model, tokenizer=tokenizer, seed=0, max_model_len=64,
              gpu_memory_utilization=0.3, enable_sleep_mode=False)
    assert isinstance(make_engine("hf", **kw), HFEngine)
    with pytest.raises(ValueError):
        make_engine("sglang", **kw)
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "vllm" else real_find_spec(name, *a))
    with pytest.raises(ImportError, match="vllm"):
        make_engine("vllm", **kw)
    assert isinstance(make_engine("auto", **kw), HFEngine)


@pytest.mark.heavy
@VLLM_TIMEOUT
def test_sync_weights_tied_lm_head(tmp_path_factory, prompts):
    """A model whose LM head IS its input embedding (SmolLM2, Qwen2.5-0.5B, Qwen3-0.6B): vLLM's reload gets
    no lm_head tensor and, on CPU, keeps a kernel prepacked from the OLD embeddings unless
    _refresh_tied_lm_head re-ties it. Greedy tokens after a sync must equal HF's on the new weights."""
    from common.generation import VLLMEngine

    path = build_tiny_model(str(tmp_path_factory.mktemp("tiny_tied")), tie_word_embeddings=True)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(path)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    engine = VLLMEngine(path, seed=0, max_model_len=512, kv_cache_gib=1 / 16)  # a second engine, own model
    try:
        greedy = SamplingConfig(max_new_tokens=24, temperature=0)

        def from_hf():
            return [c.token_ids for c in HFEngine(model, tokenizer).generate(prompts, 1, greedy)]

        before = [c.token_ids for c in engine.generate(prompts, 1, greedy)]
        assert before == from_hf()
        nudge(model)  # moves the shared embedding / LM head too
        engine.sync_weights(torch.nn.ModuleDict({"lm": model}))
        after = [c.token_ids for c in engine.generate(prompts, 1, greedy)]
        assert after == from_hf()
        assert after != before
    finally:
        engine.close()


def test_cpu_kv_cache_bytes_sized_for_the_work():
    from transformers import Qwen3Config

    config = Qwen3Config(hidden_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                         num_hidden_layers=3, max_position_embeddings=1000)
    per_token = 2 * 3 * 2 * 64 * 4  # K and V, 3 layers, 2 KV heads of 64, fp32: 3072 bytes
    # 10 sequences of 200 tokens: each holds two 128-token blocks; one spare block
    assert cpu_kv_cache_bytes(config, "float32", 200, 10) == (10 * 256 + 128) * per_token
    assert cpu_kv_cache_bytes(config, "bfloat16", 200, 10) == (10 * 256 + 128) * per_token // 2
    # no max_model_len: the model's context (1000 -> 1024 tokens)
    assert cpu_kv_cache_bytes(config, "float32", None, 1) == (1024 + 128) * per_token
    # capped for many sequences ...
    cap_tokens = CPU_KV_CACHE_MAX_GIB * 2**30 // per_token
    assert cpu_kv_cache_bytes(config, "float32", 200, 10**6) == int((cap_tokens + 128) * per_token)
    # ... but never below one full-length sequence, which vLLM needs to start
    assert cpu_kv_cache_bytes(config, "float32", 10**7, 1) == (-(-10**7 // 128) * 128 + 128) * per_token


@contextlib.contextmanager
def kept_messages(logger: str):
    """The messages of `logger` that its filters let through, as a list filled while the block runs."""
    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    log, handler = logging.getLogger(logger), Keep()
    log.addHandler(handler)
    try:
        yield log, seen
    finally:
        log.removeHandler(handler)


def test_known_harmless_engine_messages_are_dropped_and_others_kept(monkeypatch):
    from common import vllm_internals

    with kept_messages("vllm.engine.arg_utils") as (log, seen):
        vllm_internals.quiet_startup()
        monkeypatch.delenv("RL_MATH_VERBOSE", raising=False)
        log.warning("This model does not officially support disabling chunked prefill. Disabling this manually may ...")
        log.warning("max_model_len is larger than the model's context")  # a real warning: kept
        monkeypatch.setenv("RL_MATH_VERBOSE", "1")
        log.warning("This model does not officially support disabling chunked prefill (verbose)")
    assert seen == ["max_model_len is larger than the model's context",
                    "This model does not officially support disabling chunked prefill (verbose)"]


def test_the_ssm_cache_note_of_a_bf16_cpu_is_dropped(monkeypatch):
    """vLLM 0.32 on a CPU with avx512_bf16 warns, for any model, that it reset the SSM-state dtype (no model here
    has SSM layers); the message as vllm/platforms/cpu.py formats it is dropped, another of that logger is kept."""
    from common import vllm_internals

    monkeypatch.delenv("RL_MATH_VERBOSE", raising=False)
    with kept_messages("vllm.platforms.cpu") as (log, seen):
        vllm_internals.quiet_startup()
        log.warning("Reset SSM cache type to float32 for accelerated GDN mamba backend '%s'.", "none")
        log.warning("CPU backend prefers block_size is multiples of 32, otherwise the performance is not optimized.")
    assert seen == ["CPU backend prefers block_size is multiples of 32, otherwise the performance is not optimized."]


def test_the_shared_tensor_note_of_a_save_is_dropped_and_others_kept(monkeypatch):
    from common.run import _quiet_shared_tensors

    monkeypatch.delenv("RL_MATH_VERBOSE", raising=False)
    # accelerate's save_state logs through a "[RANK 0] " adapter
    with kept_messages("accelerate.utils.other") as (log, seen):
        with _quiet_shared_tensors():
            log.warning("[RANK 0] Removed shared tensor {'lm.lm_head.weight'} while saving. This should be OK, ...")
            log.warning("[RANK 0] something else")
        log.warning("[RANK 0] Removed shared tensor outside a checkpoint save")  # the filter is gone after the save
    assert seen == ["[RANK 0] something else", "[RANK 0] Removed shared tensor outside a checkpoint save"]
