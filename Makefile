# bgtask: build, test, install. `make`, `make check`, `make install DESTDIR=… PREFIX=/usr`, `make uninstall`.
PREFIX     ?= /usr/local
BINDIR     ?= $(PREFIX)/bin
LIBEXECDIR ?= $(PREFIX)/libexec
DATADIR    ?= $(PREFIX)/share
MANDIR     ?= $(DATADIR)/man
DOCDIR     ?= $(DATADIR)/doc/bgtask
# systemd --user reads units from $(PREFIX)/lib/systemd/user for /usr and /usr/local, and from
# ~/.local/share/systemd/user for a prefix in the home directory.
USERUNITDIR ?= $(if $(filter $(HOME)/%,$(PREFIX)),$(DATADIR)/systemd/user,$(PREFIX)/lib/systemd/user)
DBUSSERVICEDIR ?= $(DATADIR)/dbus-1/services
# The administrator's layer is read from /etc/bgtask/policy.d whatever the prefix (BGTASK_SYSTEM_POLICY_DIR aside):
# its README goes there for a system install, and nowhere for a prefix in the home directory (~/.local/etc is
# never read, and a README there would say it is).
POLICYREADME ?= $(if $(filter $(HOME)/%,$(PREFIX)),,/etc/bgtask/policy.d/README)
DESTDIR    ?=

SWIFT      ?= swift
# Linked by lld where the toolchain has it (Swift's toolchains ship it): relative relocations packed (DT_RELR,
# glibc ≥ 2.36: 2 MB of relocations that the loader read at every start become 36 KB) and no symbol table
# exported for dlsym, which nothing uses (0.8 MB of .dynsym/.dynstr, also read at start). docs/benchmarks.md.
# Looked up beside the swift that builds, not on PATH: `make` and `sudo make install` (whose PATH may differ)
# must agree on the flags, or the second would rebuild everything.
LLD        := $(firstword $(wildcard $(dir $(shell command -v $(SWIFT) 2>/dev/null))ld.lld) $(shell command -v ld.lld 2>/dev/null))
LINKFLAGS  ?= $(if $(LLD),-Xswiftc -use-ld=lld -Xlinker -z -Xlinker pack-relative-relocs -Xlinker --no-export-dynamic)
# No $ORIGIN run path: nothing is shipped beside the binaries, and each library they load was first looked for in
# $ORIGIN and its glibc-hwcaps directories (53 failed look-ups at every start of the CLI).
SWIFTFLAGS ?= -c release --static-swift-stdlib --disable-local-rpath $(LINKFLAGS)
# `bgtask` is a front in Embedded Swift (Sources/bgtask-front): no Swift runtime to link, statically or not.
FRONTFLAGS ?= -c release --disable-local-rpath $(LINKFLAGS)
BUILD      := .build/release
# The full CLI, installed as $(LIBEXECDIR)/bgtask/bgtask-cli, and the daemon; the front is bin/bgtask.
PRODUCTS   := bgtask-cli bgtaskd
GEN        := .build/install-gen

.PHONY: all swiftflags check check-vm install uninstall clean-gen man completions deb

all:
	for p in $(PRODUCTS); do $(SWIFT) build $(SWIFTFLAGS) --product $$p || exit 1; done
	$(SWIFT) build $(FRONTFLAGS) --product bgtask

# What the release build is built with (scripts/bench.sh builds the benchmark the same way).
swiftflags:
	@echo $(SWIFTFLAGS)

check:
	scripts/test.sh

# The .deb on a real kernel: a systemd-booted Debian 12 guest under qemu (scripts/vm.sh, scripts/check-vm.sh).
check-vm: deb
	scripts/check-vm.sh

# Man pages, one per command (bgtask-policy-check.1, git-style): NAME, SYNOPSIS and OPTIONS from the built
# binaries' own description of their arguments, the prose from docs/man/pages.md (scripts/man-pages.py);
# bgtask-policy.5 from docs/policy.md. The pages' date is SOURCE_DATE_EPOCH's when set (reproducible .debs).
MANDATE  := $(shell date -u -d @$${SOURCE_DATE_EPOCH:-$$(date +%s)} +%Y-%m-%d)

man: all
	rm -rf $(GEN)/man && mkdir -p $(GEN)/man
	MAN_LIBEXECDIR=$(LIBEXECDIR) MAN_DATADIR=$(DATADIR) MAN_DOCDIR=$(DOCDIR) MAN_USERUNITDIR=$(USERUNITDIR) \
	    MAN_DBUSSERVICEDIR=$(DBUSSERVICEDIR) python3 scripts/man-pages.py $(GEN)/man $(MANDATE) "$$($(BUILD)/bgtask --version)" $(BUILD)/bgtask $(BUILD)/bgtaskd
	python3 scripts/md2man.py docs/policy.md bgtask-policy 5 $(DOCDIR) > $(GEN)/man/bgtask-policy.5

completions: all
	mkdir -p $(GEN)/completions
	python3 scripts/completions.py $(BUILD)/bgtask $(GEN)/completions

install: all man completions
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBEXECDIR)/bgtask
	for p in bgtask bgtaskd; do install -m 0755 $(BUILD)/$$p $(DESTDIR)$(BINDIR)/$$p && strip $(DESTDIR)$(BINDIR)/$$p; done
	install -m 0755 $(BUILD)/bgtask-cli $(DESTDIR)$(LIBEXECDIR)/bgtask/bgtask-cli && strip $(DESTDIR)$(LIBEXECDIR)/bgtask/bgtask-cli
	install -d $(DESTDIR)$(DATADIR)/bgtask/policies
	install -m 0644 Policies/*.toml $(DESTDIR)$(DATADIR)/bgtask/policies/
	install -d $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man5
	install -m 0644 $(GEN)/man/*.1 $(DESTDIR)$(MANDIR)/man1/
	install -m 0644 $(GEN)/man/bgtask-policy.5 $(DESTDIR)$(MANDIR)/man5/
	install -d $(DESTDIR)$(DOCDIR)
	install -m 0644 docs/policy.md docs/probes.md docs/porting.md docs/protocol.md docs/architecture.md $(DESTDIR)$(DOCDIR)/
	install -D -m 0644 $(GEN)/completions/bgtask.bash $(DESTDIR)$(DATADIR)/bash-completion/completions/bgtask
	install -D -m 0644 $(GEN)/completions/_bgtask $(DESTDIR)$(DATADIR)/zsh/site-functions/_bgtask
	install -D -m 0644 $(GEN)/completions/bgtask.fish $(DESTDIR)$(DATADIR)/fish/vendor_completions.d/bgtask.fish
	install -d $(DESTDIR)$(USERUNITDIR) $(DESTDIR)$(DBUSSERVICEDIR) $(DESTDIR)$(DATADIR)/dbus-1/interfaces
	sed 's|@BINDIR@|$(BINDIR)|g' data/bgtaskd.service.in > $(DESTDIR)$(USERUNITDIR)/bgtaskd.service
	sed 's|@BINDIR@|$(BINDIR)|g' data/io.github.bgtask.Scheduler1.service.in > $(DESTDIR)$(DBUSSERVICEDIR)/io.github.bgtask.Scheduler1.service
	install -m 0644 data/io.github.bgtask.Scheduler1.xml $(DESTDIR)$(DATADIR)/dbus-1/interfaces/
	$(if $(POLICYREADME),install -D -m 0644 data/policy.d-README $(DESTDIR)$(POLICYREADME))

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/bgtask $(DESTDIR)$(BINDIR)/bgtaskd
	rm -rf $(DESTDIR)$(LIBEXECDIR)/bgtask
	rm -rf $(DESTDIR)$(DATADIR)/bgtask
	rm -f $(DESTDIR)$(MANDIR)/man1/bgtask.1 $(DESTDIR)$(MANDIR)/man1/bgtask-*.1 $(DESTDIR)$(MANDIR)/man1/bgtaskd.1 $(DESTDIR)$(MANDIR)/man5/bgtask-policy.5
	rm -f $(DESTDIR)$(DATADIR)/bash-completion/completions/bgtask $(DESTDIR)$(DATADIR)/zsh/site-functions/_bgtask $(DESTDIR)$(DATADIR)/fish/vendor_completions.d/bgtask.fish
	rm -f $(DESTDIR)$(USERUNITDIR)/bgtaskd.service $(DESTDIR)$(DBUSSERVICEDIR)/io.github.bgtask.Scheduler1.service $(DESTDIR)$(DATADIR)/dbus-1/interfaces/io.github.bgtask.Scheduler1.xml
	$(if $(POLICYREADME),rm -f $(DESTDIR)$(POLICYREADME))
	rm -rf $(DESTDIR)$(DOCDIR)

# A Debian package with Debian's own tooling (debian/, debhelper), into dist/.
deb:
	dpkg-buildpackage -b -us -uc
	mkdir -p dist && mv ../bgtask_$$(dpkg-parsechangelog -S Version)_*.deb ../bgtask_$$(dpkg-parsechangelog -S Version)_*.buildinfo \
	    ../bgtask_$$(dpkg-parsechangelog -S Version)_*.changes dist/
