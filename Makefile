# pubsublab: `sudo make demo` and `sudo make test` install whatever is missing first.
# The Vagrant VM keeps the venv off the shared folder via PUBSUBLAB_VENV.
VENV ?= $(if $(PUBSUBLAB_VENV),$(PUBSUBLAB_VENV),.venv)
BIN  := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: setup demo test lint check-papers bench check-provision clean-runs help

help:
	@echo "sudo make demo   install what is missing, run the demo experiment"
	@echo "sudo make test   install what is missing, run the whole test suite, check-provision"
	@echo "sudo make setup  only install (idempotent: apt packages, Open vSwitch, venv)"
	@echo "make lint        ruff over the code"
	@echo "make check-papers  the paper data files quote their papers right (needs the papers' texts: PUBSUBLAB_SEEDS)"
	@echo "sudo make check-provision   provisioning and a smoke test on a bare Debian 12 (debootstrap)"

setup:
	@PUBSUBLAB_VENV=$(VENV) ./scripts/provision.sh

demo: setup
	$(BIN)/pubsublab demo

test: setup
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -ra $(PYTEST_ARGS)
	./scripts/check-provision.sh

lint:
	$(BIN)/ruff check .

check-papers: setup
	$(BIN)/python -m pytest -ra tests/check_paper_quotes.py

bench: setup
	$(BIN)/pubsublab bench matching
	$(BIN)/pubsublab bench sim
	$(BIN)/pubsublab bench broker
	$(BIN)/pubsublab bench analysis

check-provision:
	./scripts/check-provision.sh

clean-runs:
	rm -rf runs
