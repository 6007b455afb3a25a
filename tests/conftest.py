"""Shared fixtures: a tiny offline causal LM + tokenizer, and one vLLM engine per session.

The tiny model is a 2-layer Qwen3 (hidden 64, head_dim 64: vLLM's CPU attention rejects head_dim 16)
with a byte-level BPE tokenizer trained here by `tokenizers` (re-building a Qwen2 tokenizer through
AutoTokenizer changes token ids). Everything is built from fixed seeds, offline, in fp32.
"""

import random
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `import common...` under plain `pytest` too

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # pad/bos, turn start, eos
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
EOS_ROW_SCALE = 1.3  # see build_tiny_model: EOS becomes a likely-but-not-dominant next token


def _math_corpus(n: int = 3000, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    words = ["What is", "Compute", "Solve for x:", "The answer is", "Therefore", "so", "We have",
             "Let", "be", "sum", "product", "of", "and", "equals", "\\boxed{", "}", "Step", "First,", "then"]
    lines = []
    for _ in range(n):
        a, b = rng.randint(0, 999), rng.randint(0, 99)
        op = rng.choice("+-*/=")
        lines.append(f"{rng.choice(words)} {a} {op} {b}? {rng.choice(words)} {rng.choice(words)} {a + b}.")
    return lines


def build_tiny_tokenizer(vocab_size: int = 512):
    """Byte-level BPE trained on a synthetic math corpus, wrapped as a PreTrainedTokenizerFast."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_math_corpus(), trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", chat_template=CHAT_TEMPLATE, padding_side="left")


def build_tiny_model(path: str, seed: int = 0, tie_word_embeddings: bool = False) -> str:
    """Save a random 2-layer Qwen3 + tokenizer to `path` (fp32 safetensors) and return `path`.

    tie_word_embeddings: LM head = input embeddings, as in SmolLM2 and the small Qwen models."""
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    tokenizer = build_tiny_tokenizer()
    config = Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=64, max_position_embeddings=2048,
        initializer_range=0.2,  # peaky next-token distributions: greedy argmax gaps >> fp32 noise
        tie_word_embeddings=tie_word_embeddings, torch_dtype="float32",
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config).float()
    with torch.no_grad():
        # A random model almost never emits EOS; scaling its lm_head row makes about half of the greedy
        # completions of 24 tokens end with EOS and the other half run to the limit: both cases get tested.
        model.lm_head.weight[tokenizer.eos_token_id] *= EOS_ROW_SCALE
    model.generation_config = GenerationConfig(bos_token_id=tokenizer.bos_token_id,
                                               eos_token_id=tokenizer.eos_token_id,
                                               pad_token_id=tokenizer.pad_token_id)
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory) -> str:
    """Directory with a tiny random Qwen3 causal LM + tokenizer + chat template (HF format, fp32)."""
    return build_tiny_model(str(tmp_path_factory.mktemp("tiny_model")))


@pytest.fixture(scope="session")
def vllm_engine(tiny_model_path):
    """ONE vLLM engine on the tiny model for the whole session (engine start is 30-60 s on CPU).

    Tests that change its weights must restore them (sync_weights with the original model) before returning.
    """
    from common.generation import VLLMEngine

    engine = VLLMEngine(tiny_model_path, seed=0, max_model_len=512, kv_cache_gib=1 / 16)
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def tiny_math_data(tiny_model_path, tmp_path_factory) -> str:
    """A JSONL of arithmetic questions whose gold answers the tiny random model sometimes produces.

    The random model's answers are noise, so against true golds its reward is ~always 0 and the
    advantages (hence the updates) vanish. Here the gold of each question is the most common answer
    among 8 of the model's own samples: rewards are then mixed within groups, and training moves
    the weights, which the resume and smoke tests need.
    """
    import collections
    import json

    from common.data import make_arithmetic, tokenize_prompts
    from common.generation import HFEngine, SamplingConfig
    from common.model import load_policy
    from common.grader import extract_answer

    _, lm, tokenizer = load_policy(tiny_model_path)
    rows = make_arithmetic(16, split="train", seed=0)
    prompt_ids = tokenize_prompts(tokenizer, [r["question"] for r in rows], "chat")
    samples = HFEngine(lm, tokenizer).generate(prompt_ids, 8, SamplingConfig(max_new_tokens=12, seed=0))
    path = tmp_path_factory.mktemp("tiny_math") / "train.jsonl"
    with open(path, "w") as f:
        for i, row in enumerate(rows):
            answers = [a for c in samples[i * 8 : (i + 1) * 8] if (a := extract_answer(c.text)) is not None]
            gold = collections.Counter(answers).most_common(1)[0][0] if answers else "0"
            f.write(json.dumps({"question": row["question"], "answer": gold}) + "\n")
    return str(path)
