# The two quick-start commands: `make serve` and `make test`. Both prepare .venv first.
VENV := .venv
STAMP := $(VENV)/.bootstrapped

.PHONY: serve test lint bench install clean

$(STAMP): setup.cfg pyproject.toml scripts/bootstrap $(wildcard tests/js/package*.json tests/stream/js/package*.json)
	scripts/bootstrap
	touch $@

install: $(STAMP)

serve: $(STAMP)
	$(VENV)/bin/amqp-stream serve $(ARGS)

# the suite in TEST_WORKERS processes (pytest-xdist), whole files to a process: module fixtures
# stay in one process and each process starts its session broker, Spark and ZooKeeper once
TEST_WORKERS ?= 2
test: $(STAMP)
	$(VENV)/bin/python -m pytest -n $(TEST_WORKERS) --dist loadfile $(ARGS)

# the gates CI runs before the tests: types on every package (settings in setup.cfg), ruff on the tree
lint: $(STAMP)
	$(VENV)/bin/python -m mypy -p bloom -p storage -p sqlfilter -p amqp_stream
	$(VENV)/bin/ruff check .

# the benches compare with Debian's RabbitMQ 3.10 in the same run (bench/peer.py) when it is there
bench: $(STAMP)
	scripts/apt-install rabbitmq-server || echo "bench: no rabbitmq-server: no RabbitMQ figures" >&2
	$(VENV)/bin/python -m bench $(ARGS)

clean:
	rm -rf $(VENV) .tox build *.egg-info
