# Developer shortcuts; CI runs .ci/run, which runs the README's test command.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: install test lint schema db-up db-down bench

$(PY):
	python3 -m venv $(VENV)

install: $(PY)
	$(PY) -m pip install -e '.[test,dev]'

test: install
	$(PY) -m pytest

lint:
	$(VENV)/bin/ruff check session_sql tests
	$(VENV)/bin/ruff format --check session_sql tests
	$(VENV)/bin/mypy

schema:
	$(VENV)/bin/session-sql schema --dialect sqlite > schema/sqlite.sql
	$(VENV)/bin/session-sql schema --dialect postgresql > schema/postgresql.sql

db-up:
	docker compose up -d --wait

db-down:
	docker compose down -v

bench:
	$(VENV)/bin/session-sql bench --quick
