# Bosun: the two commands a newcomer needs are `make demo` and `make test`.
SHELL := /bin/bash
CARGO ?= cargo
export CARGO_TERM_COLOR ?= never
# A test run builds every crate once: incremental caches would only double the target
# directory (about 17 GB of it), which is what a CI machine's disk runs out of. A developer's
# own `cargo` commands keep them.
export CARGO_INCREMENTAL ?= 0

.PHONY: all deps build test fmt-check clippy nextest nextest-postgres doc demo demo-host-loss man packages controller-image clean

all: build

deps:
	@scripts/install-deps

build:
	$(CARGO) build --workspace --locked --bins

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

# The suites run the workspace's real binaries (the agent, the hub, the helper, the update
# gate, bosunctl): build them all first, as a package without integration tests of its own
# would not have its binary built by the test build.
nextest:
	$(CARGO) build --workspace --locked --bins
	$(CARGO) nextest run --workspace --locked --profile ci
	cp target/nextest/ci/junit.xml target/nextest/ci/junit-workspace.xml

# The hub's HTTP suites once more with their state in PostgreSQL (decision 0023): one throwaway
# cluster, a database per test. The replica and failover suites start their own clusters in
# `nextest` already.
nextest-postgres:
	scripts/with-postgres $(CARGO) nextest run -p bosun-hubd --locked --profile ci \
	  -E 'kind(test) & !test(/^replicas::/) & !test(/^failover::/)'

doc:
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --workspace --no-deps --locked

test: deps fmt-check clippy nextest nextest-postgres doc

# `ARGS` goes to bosun-demo: `make demo ARGS=--keep-running` leaves the hub, the agent, the
# helper and the simulated node running until Ctrl-C.
demo: build
	@scripts/install-deps demo
	@$${CARGO_TARGET_DIR:-target}/debug/bosun-demo --out demo-out $(ARGS)

# A whole host lost and brought back on a new box with the customer's recovery code.
demo-host-loss: build
	@scripts/install-deps demo
	@$${CARGO_TARGET_DIR:-target}/debug/bosun-demo --scenario host-loss --out demo-out-host-loss $(ARGS)

# The man pages of a source build (the packages install their own): every program's command
# pages and the two daemons' configuration pages (agent.toml.5, hub.toml.5), written by the
# programs themselves under $(MANDIR)/man1 and man5, where `man` finds them
# (`make man MANDIR=/usr/local/share/man` as root for every user).
MANDIR ?= $(HOME)/.local/share/man
man_programs = bosunctl bosun-hubd bosun-agentd bosun-agentctl bosun-guest
man: build
	@install -d $(MANDIR)/man1 $(MANDIR)/man5
	@for p in $(man_programs); do \
	  tmp=$$(mktemp -d) && \
	  $${CARGO_TARGET_DIR:-target}/debug/$$p man --dir $$tmp >/dev/null && \
	  for page in $$tmp/*; do \
	    install -m 0644 $$page $(MANDIR)/man$${page##*.}/; \
	  done; \
	  rm -rf $$tmp; \
	done
	@echo "man pages in $(MANDIR): try man bosunctl"

# Every Debian package, built for production and lintian --pedantic clean (scripts/packages
# says what each holds). Not part of `make test`: the optimised builds take long.
packages:
	@CARGO=$(CARGO) scripts/packages

# The controller image a golden recipe signs, from the bosun-guest package `make packages`
# built (scripts/controller-image, decision 0088): `make controller-image
# TAG=bosun/controller:1.4`; APPS=FILE bakes in the apps to quiesce, WITH="/usr/bin/docker"
# the programs their commands run. Prints the digest to sign.
TAG ?= bosun/controller:latest
packages_dir = $(or $(CARGO_TARGET_DIR),target)/packages
guest_deb = $(firstword $(wildcard $(packages_dir)/bosun-guest_*.deb))
controller-image:
	@test -n "$(guest_deb)" || { echo "no bosun-guest package in $(packages_dir): make packages first" >&2; exit 1; }
	@scripts/controller-image --tag $(TAG) --deb $(guest_deb) \
	  --output $(packages_dir)/controller-image.tar \
	  $(if $(APPS),--apps $(APPS)) $(foreach p,$(WITH),--with $(p))

clean:
	$(CARGO) clean
	rm -rf demo-out demo-out-host-loss
