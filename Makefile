# Every target that needs Python makes .venv first; a fresh clone needs only python3 and make.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed

.DEFAULT_GOAL := help
.PHONY: help install test browser demo bench bench-scale bench-mixed bench-stac bench-s3 bench-s3-write bench-update bench-deps bench-kernels bench-composite gpu-check fixtures fixtures-cloudy mutation-check lint clean

help:  ## list targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml pipeline/resample/_fused.c  # (pip builds the compiled kernels)
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	$(BIN)/python -m compileall -q pipeline  # bytecode for the editable package even where PYTHONDONTWRITEBYTECODE is set
	-$(BIN)/python -m compileall -qq $(VENV)/lib  # and for every installed module pip left without (~1 s when none)
	touch $(STAMP)

install: $(STAMP)  ## make .venv and install the project with dev tools

test: $(STAMP) browser  ## run the test suite, one file per core at a time (docs/development.md)
	$(BIN)/python -m pytest -q -n auto --dist loadfile --no-loadscope-reorder

browser:  # headless Chromium for the HTML report test (Debian's package; skipped where it cannot install)
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	  --no-install-recommends chromium >/dev/null 2>&1; } || echo "note: no Chromium here; the HTML screenshot test will skip"

demo: $(STAMP)  ## the case study at fixture scale: fixtures, run, breakdown, projection
	$(BIN)/pipeline demo

bench: bench-deps fixtures  ## case study: 1 vs 2 workers, against odc-stac and gdalwarp, the decode+encode floor, the bounds; plan scale
	$(BIN)/python bench/run_bench.py
	$(BIN)/python -W ignore bench/peers.py
	$(BIN)/python -W ignore bench/floor.py
	$(BIN)/python -W ignore bench/bounds.py
	$(BIN)/python bench/plan_scale.py

bench-scale: bench-deps fixtures  ## the bounds on 4x the case study's work (8 dates; writes a 389 MB fixture once); the sizing model checked
	@[ -d data_fixtures/casestudy-x4/2024-07-06 ] || $(BIN)/pipeline fixtures data_fixtures/casestudy-x4 --preset casestudy-x4
	BENCH_CONFIG=configs/casestudy-x4.yaml BENCH_REPEATS=$${BENCH_REPEATS:-3} $(BIN)/python -W ignore bench/bounds.py
	BENCH_REPEATS=$${BENCH_REPEATS:-3} $(BIN)/python -W ignore bench/projection.py

bench-mixed: bench-deps  ## odc-stac and gdalwarp on the mixed preset (3 UTM zones, 60 m bands, 3 dates; writes it once)
	@[ -d data_fixtures/mixed/2024-07-01 ] || $(BIN)/pipeline fixtures data_fixtures/mixed --preset mixed
	BENCH_CONFIG=configs/mixed.yaml $(BIN)/python -W ignore bench/peers.py
bench-stac: bench-deps  ## `pipeline plan` over 192,000 STAC items in stac-geoparquet vs odc-stac's lazy load (heavy: run alone)
	$(BIN)/python -W ignore bench/stac_scale.py

bench-s3: bench-deps fixtures  ## reading a bucket 0 and 25 ms away: the pipeline vs odc-stac, gdalwarp and the harness floor; 2,048 headers
	$(BIN)/python -W ignore bench/s3_latency.py
	$(BIN)/python -W ignore bench/headers_s3.py

bench-s3-write: bench-deps fixtures  ## writing a bucket: s3->s3, local->s3 (sharded or not), local->local and odc-stac on a loopback S3 server
	$(BIN)/python -W ignore bench/s3.py

bench-update: $(STAMP)  ## adding one date to cubes of 1, 10 and 40 dates (pipeline update, with and without inputs.index) vs a full run
	BENCH_REPEATS=$${BENCH_REPEATS:-3} $(BIN)/python -W ignore bench/update.py

bench-composite: bench-deps fixtures-cloudy  ## monthly clear-sky median composites on the cloudy preset: the pipeline vs odc-stac (wall, peak memory, values)
	BENCH_REPEATS=$${BENCH_REPEATS:-3} $(BIN)/python -W ignore bench/composite.py

bench-deps: $(STAMP)  # the peers (the bench extra; Debian's gdal-bin where it can install), fresh bytecode
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	@command -v gdalwarp >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && apt-get update -qq >/dev/null 2>&1 && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends gdal-bin >/dev/null 2>&1; }
	$(BIN)/python -m compileall -q pipeline
	-$(BIN)/python -m compileall -qq $(VENV)/lib

bench-kernels: $(STAMP)  ## array kernels vs GDAL's warper, Mpx/s per method, one core; the compiled kernels vs NumPy's; temporal reductions
	$(BIN)/python bench/kernels.py
	$(BIN)/python -W ignore bench/compiled.py
	$(BIN)/python bench/reduce.py

.PHONY: bench-geometry
bench-geometry: fixtures  ## case study with coordinate maps and taps kept vs made per window; reads by window vs union
	$(BIN)/python -W ignore bench/geometry.py

gpu-check:  ## on a GPU machine: kernel parity CPU vs GPU and timings (needs only numpy + cupy)
	$(PY) bench/gpu_check.py

fixtures: $(STAMP)  ## write the small and casestudy fixtures under data_fixtures/
	@[ -d data_fixtures/small/2024-06-11 ] || $(BIN)/pipeline fixtures data_fixtures/small --preset small
	@[ -d data_fixtures/casestudy/2024-06-11 ] || $(BIN)/pipeline fixtures data_fixtures/casestudy --preset casestudy

fixtures-cloudy: $(STAMP)  ## write the cloudy preset (512 COGs under moving clouds, SCL and QA bands, STAC items) once
	@[ -f data_fixtures/cloudy/items.json ] || $(BIN)/pipeline fixtures data_fixtures/cloudy --preset cloudy

mutation-check: $(STAMP)  ## break a kernel weight, a window offset, a fuse rule, a journal write in turn: a test must fail each
	bash tests/mutation_check.sh

lint: $(STAMP)  ## ruff and mypy
	$(BIN)/ruff check pipeline tests bench examples
	$(BIN)/ruff format --check pipeline tests bench examples
	$(BIN)/mypy

clean:  ## remove outputs and generated fixtures (keeps .venv)
	rm -rf out data_fixtures/small data_fixtures/casestudy data_fixtures/mixed data_fixtures/cloudy .pytest_cache .hypothesis
