# presto: see README.md. `make` builds, `make check` tests, `make run` demos,
# `make bench` benchmarks, `make deps` installs Debian packages.

CC      ?= cc
BUILD   ?= build
PYTHON  ?= /usr/bin/python3
SANITIZE ?=

# Debian packages the build, the tests and the benchmarks need.
DEB_PKGS := gcc make pkg-config libevent-dev liburing-dev libzstd-dev \
            libturbojpeg0-dev libyaml-dev check python3-numpy python3-torch \
            python3-torchvision python3-pil valgrind

PKG_DAEMON := libevent liburing libzstd libturbojpeg yaml-0.1
PKG_CHECK  := check

CFLAGS  ?= -O2 -g
CFLAGS  += -std=gnu11 -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes \
           -Wno-missing-field-initializers -pthread -Icommon -Idaemon -Iclient \
           -DPRESTO_VERSION='"0.1.0"' -MMD -MP
LDFLAGS += -pthread

ifneq ($(SANITIZE),)
BUILD   := build/$(SANITIZE)
CFLAGS  += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -O1
LDFLAGS += -fsanitize=$(SANITIZE)
endif

pkg_cflags = $(shell pkg-config --cflags $(1) 2>/dev/null)
pkg_libs   = $(shell pkg-config --libs $(1) 2>/dev/null)

COMMON_SRC := $(wildcard common/*.c)
DAEMON_SRC := $(wildcard daemon/*.c)
CLIENT_SRC := client/presto.c
UNIT_SRC   := $(wildcard tests/unit/test_*.c)
ITEST_SRC  := $(wildcard tests/integration/test_*.c)

COMMON_OBJ := $(COMMON_SRC:%.c=$(BUILD)/obj/%.o)
DAEMON_OBJ := $(DAEMON_SRC:%.c=$(BUILD)/obj/%.o)
DAEMON_LIB_OBJ := $(filter-out $(BUILD)/obj/daemon/main.o,$(DAEMON_OBJ))
CLIENT_PIC := $(CLIENT_SRC:%.c=$(BUILD)/pic/%.o) $(BUILD)/pic/common/proto.o
UNIT_BIN   := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
ITEST_BIN  := $(ITEST_SRC:tests/integration/%.c=$(BUILD)/tests/%)
# Script suites, run by tests/run-tests.sh through a small wrapper each.
SCRIPT_BIN := $(BUILD)/tests/test_python

VERSION := 0.1.0
SONAME  := libprestoclient.so.0
PREFIX  ?= /usr/local
SYSCONFDIR ?= /etc
DESTDIR ?=
PROGS   := $(BUILD)/prestod $(BUILD)/prestoctl $(BUILD)/libprestoclient.so \
           $(BUILD)/libprestoclient.a

.PHONY: all deps check check-valgrind run bench clean tests install
all: $(PROGS)
tests: $(UNIT_BIN) $(ITEST_BIN) $(SCRIPT_BIN)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(call pkg_cflags,$(PKG_DAEMON)) -c $< -o $@

$(BUILD)/pic/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fPIC -fvisibility=hidden -DPRESTO_BUILDING_LIB -c $< -o $@

$(BUILD)/prestod: $(DAEMON_OBJ) $(COMMON_OBJ)
	$(CC) $(LDFLAGS) -o $@ $^ $(call pkg_libs,$(PKG_DAEMON)) -lm

$(BUILD)/libprestoclient.so: $(CLIENT_PIC)
	$(CC) $(LDFLAGS) -shared -Wl,-soname,$(SONAME) -o $@ $^
	ln -sf libprestoclient.so $(BUILD)/$(SONAME)

$(BUILD)/libprestoclient.a: $(CLIENT_PIC)
	rm -f $@
	ar rcs $@ $^

$(BUILD)/prestoctl: $(BUILD)/obj/client/prestoctl.o $(BUILD)/libprestoclient.a
	$(CC) $(LDFLAGS) -o $@ $^ -lm

$(BUILD)/tests/test_%: tests/unit/test_%.c $(DAEMON_LIB_OBJ) $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(call pkg_cflags,$(PKG_DAEMON) $(PKG_CHECK)) -o $@ $^ \
	    $(LDFLAGS) $(call pkg_libs,$(PKG_DAEMON) $(PKG_CHECK)) -lm

$(BUILD)/tests/test_%: tests/integration/test_%.c tests/integration/harness.c $(BUILD)/libprestoclient.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests/integration $(call pkg_cflags,$(PKG_CHECK)) -o $@ $^ \
	    $(LDFLAGS) $(call pkg_libs,$(PKG_CHECK)) -lm

$(BUILD)/tests/test_python: tests/python/run.sh
	@mkdir -p $(dir $@)
	printf '#!/bin/sh\nexec "$${PRESTO_SRC:?}/tests/python/run.sh" "$$@"\n' > $@
	chmod +x $@

# Installs the Debian packages that are missing (root, or sudo when present).
deps:
	@missing=$$(for p in $(DEB_PKGS); do \
	    dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; \
	done); \
	if [ -n "$$missing" ]; then \
	    echo "installing Debian packages:" $$missing; \
	    SUDO=; [ "$$(id -u)" -eq 0 ] || SUDO=sudo; \
	    $$SUDO apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing; \
	fi

check: deps
	$(MAKE) --no-print-directory all tests SANITIZE=$(SANITIZE)
	BUILD=$(BUILD) PYTHON=$(PYTHON) tests/run-tests.sh

# The integration tests with prestod under valgrind (errors and definite leaks fail).
check-valgrind: deps
	$(MAKE) --no-print-directory all tests
	PRESTO_VALGRIND=1 PRESTO_TESTS="$(notdir $(ITEST_BIN))" BUILD=$(BUILD) PYTHON=$(PYTHON) \
	    tests/run-tests.sh

run: deps
	$(MAKE) --no-print-directory all SANITIZE=$(SANITIZE)
	BUILD=$(BUILD) PYTHON=$(PYTHON) tests/tools/demo.sh

bench: deps
	$(MAKE) --no-print-directory all
	BUILD=build PYTHON=$(PYTHON) tests/bench/bench.sh

# Staged installs: make install DESTDIR=/tmp/stage PREFIX=/usr
PYDIR ?= $(PREFIX)/lib/python3/dist-packages
install: all
	install -d $(DESTDIR)$(PREFIX)/sbin $(DESTDIR)$(PREFIX)/bin \
	    $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include \
	    $(DESTDIR)$(PYDIR)/presto $(DESTDIR)$(SYSCONFDIR)/presto \
	    $(DESTDIR)$(PREFIX)/lib/systemd/system \
	    $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/man/man5 \
	    $(DESTDIR)$(PREFIX)/share/man/man8
	install -m 0755 $(BUILD)/prestod $(DESTDIR)$(PREFIX)/sbin/prestod
	install -m 0755 $(BUILD)/prestoctl $(DESTDIR)$(PREFIX)/bin/prestoctl
	install -m 0644 $(BUILD)/libprestoclient.so $(DESTDIR)$(PREFIX)/lib/$(SONAME).$(VERSION:0.%=%)
	ln -sf $(SONAME).$(VERSION:0.%=%) $(DESTDIR)$(PREFIX)/lib/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(PREFIX)/lib/libprestoclient.so
	install -m 0644 $(BUILD)/libprestoclient.a $(DESTDIR)$(PREFIX)/lib/libprestoclient.a
	install -m 0644 client/presto.h $(DESTDIR)$(PREFIX)/include/presto.h
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' client/presto.pc.in \
	    > $(DESTDIR)$(PREFIX)/lib/pkgconfig/presto.pc
	install -m 0644 client/python/presto/*.py $(DESTDIR)$(PYDIR)/presto/
	install -m 0644 conf/prestod.yaml $(DESTDIR)$(SYSCONFDIR)/presto/prestod.yaml
	sed -e 's|/usr/local/sbin/prestod|$(PREFIX)/sbin/prestod|' systemd/prestod.service \
	    > $(DESTDIR)$(PREFIX)/lib/systemd/system/prestod.service
	install -m 0644 systemd/prestod.socket $(DESTDIR)$(PREFIX)/lib/systemd/system/
	install -m 0644 client/prestoctl.1 $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 0644 conf/presto.yaml.5 $(DESTDIR)$(PREFIX)/share/man/man5/
	install -m 0644 daemon/prestod.8 $(DESTDIR)$(PREFIX)/share/man/man8/

clean:
	rm -rf build

-include $(shell find $(BUILD)/obj $(BUILD)/pic -name '*.d' 2>/dev/null)
