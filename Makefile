# The two quick-start commands: `make serve` and `make test`. Both prepare .venv first.
VENV := .venv
STAMP := $(VENV)/.bootstrapped

.PHONY: serve test bench install clean

$(STAMP): setup.cfg pyproject.toml scripts/bootstrap $(wildcard tests/js/package.json)
	scripts/bootstrap
	touch $@

install: $(STAMP)

serve: $(STAMP)
	$(VENV)/bin/amqp-stream serve $(ARGS)

test: $(STAMP)
	$(VENV)/bin/python -m pytest $(ARGS)

bench: $(STAMP)
	$(VENV)/bin/python -m bench $(ARGS)

clean:
	rm -rf $(VENV) .tox build *.egg-info
