# presto: see README.md. `make` builds, `make check` tests, `make run` demos,
# `make bench` benchmarks, `make fuzz` fuzzes, `make deps` installs Debian packages.

CC      ?= cc
BUILD   ?= build
PYTHON  ?= /usr/bin/python3
SANITIZE ?=

# Debian packages the build, the tests and the benchmarks need.
DEB_PKGS := gcc make pkg-config libevent-dev liburing-dev libzstd-dev \
            libturbojpeg0-dev libyaml-dev check python3-numpy python3-torch \
            python3-torchvision python3-pil python3-prometheus-client valgrind fuse3 \
            libfuse3-dev python3-pip python3-setuptools python3-wheel libmemcached-dev \
            memcached libspng-dev libwebp-dev libtiff-dev libcurl4-openssl-dev \
            nginx-light python3-botocore python3-boto3 \
            libjpeg62-turbo-dev

PKG_DAEMON := libevent liburing libzstd libturbojpeg libjpeg yaml-0.1 libmemcached \
              spng libwebp libwebpdemux libtiff-4 libcurl
# Audio (issue 18): decoders, FFT, the reference and the tools that make the test clips.
DEB_PKGS += libsndfile1-dev libmpg123-dev libfftw3-dev python3-torchaudio espeak-ng \
            flac lame vorbis-tools
PKG_AUDIO  := sndfile libmpg123 fftw3
PKG_DAEMON += $(PKG_AUDIO)
PKG_CHECK  := check

CFLAGS  ?= -O2 -g
CFLAGS  += -std=gnu11 -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes \
           -Wno-missing-field-initializers -pthread -Icommon -Idaemon -Idaemon/steps -Iclient \
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
DAEMON_SRC := $(wildcard daemon/*.c daemon/steps/*.c)
AUDIO_SRC  := $(wildcard daemon/steps/audio*.c)
CLIENT_SRC := client/presto.c
UNIT_SRC   := $(wildcard tests/unit/test_*.c)
ITEST_SRC  := $(wildcard tests/integration/test_*.c)

COMMON_OBJ := $(COMMON_SRC:%.c=$(BUILD)/obj/%.o)
DAEMON_OBJ := $(DAEMON_SRC:%.c=$(BUILD)/obj/%.o)
DAEMON_LIB_OBJ := $(filter-out $(BUILD)/obj/daemon/main.o,$(DAEMON_OBJ))
CLIENT_PIC := $(CLIENT_SRC:%.c=$(BUILD)/pic/%.o) $(BUILD)/pic/common/proto.o \
              $(BUILD)/pic/common/trust.o
UNIT_BIN   := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
ITEST_BIN  := $(ITEST_SRC:tests/integration/%.c=$(BUILD)/tests/%)
# Script suites, run by tests/run-tests.sh through a small wrapper each.
SCRIPT_BIN := $(BUILD)/tests/test_python
# The audio functions as a shared object the Python fidelity suite drives.
AUDIO_HOOK := $(BUILD)/libaudiohook.so
# The FUSE fixture (see its rule), where libfuse3 is installed.
SLOWFS := $(if $(shell pkg-config --exists fuse3 2>/dev/null && echo y),$(BUILD)/slowfs)
# The image steps as a shared object the Python fidelity suite drives with
# ctypes (tests/tools/steps_hook.c: an operation with given decisions);
# outside $(BUILD)/tests, which holds only test programs.
STEPS_HOOK := $(BUILD)/testlib/libsteps_hook.so

VERSION := 0.1.0
SONAME  := libprestoclient.so.0
PREFIX  ?= /usr/local
SYSCONFDIR ?= /etc
DESTDIR ?=
PROGS   := $(BUILD)/prestod $(BUILD)/prestoctl $(BUILD)/libprestoclient.so \
           $(BUILD)/libprestoclient.a

.PHONY: all deps s3rver check check-valgrind run bench bench-cluster bench-sources clean tests install fuzz fuzz-build
all: $(PROGS)
tests: $(UNIT_BIN) $(ITEST_BIN) $(SCRIPT_BIN) $(SLOWFS) $(AUDIO_HOOK) $(STEPS_HOOK)

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

$(BUILD)/prestoctl: $(BUILD)/obj/client/prestoctl.o $(BUILD)/obj/client/profile_report.o \
                   $(BUILD)/libprestoclient.a
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

$(BUILD)/hook/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fPIC $(call pkg_cflags,$(PKG_AUDIO)) -c $< -o $@

$(AUDIO_HOOK): tests/tools/audiohook.c $(AUDIO_SRC:%.c=$(BUILD)/hook/%.o)
	$(CC) $(CFLAGS) -fPIC -shared -o $@ $^ $(LDFLAGS) $(call pkg_libs,$(PKG_AUDIO)) -lm

# slowfs, the FUSE file system that makes storage slow for the tests and `make bench`
# (tests/tools/slowfs.c): built where libfuse3's development files are (SLOWFS), never
# with a sanitizer (it is a fixture, not under test); tests that need it skip without it.
$(BUILD)/slowfs: tests/tools/slowfs.c
	@mkdir -p $(dir $@)
	$(CC) $(filter-out -fsanitize=%,$(CFLAGS)) $(call pkg_cflags,fuse3) -o $@ $< \
	    $(filter-out -fsanitize=%,$(LDFLAGS)) $(call pkg_libs,fuse3)

# The image steps as a shared object for the Python fidelity suite (see STEPS_HOOK).
STEPS_HOOK_SRC := tests/tools/steps_hook.c $(wildcard daemon/steps/*.c) daemon/hash.c daemon/img.c common/proto.c \
                  $(wildcard daemon/step*.c)
$(STEPS_HOOK): $(STEPS_HOOK_SRC) $(wildcard daemon/steps/*.h daemon/step*.h)
	@mkdir -p $(dir $@)
	$(CC) $(filter-out -MMD -MP,$(CFLAGS)) -fPIC -shared $(call pkg_cflags,$(PKG_DAEMON)) -o $@ \
	    $(STEPS_HOOK_SRC) $(LDFLAGS) $(call pkg_libs,$(PKG_DAEMON)) -lm

# Region-of-interest decoding against full decode on random crops (`make bench`).
$(BUILD)/roibench: tests/bench/roibench.c $(DAEMON_LIB_OBJ) $(COMMON_OBJ)
	$(CC) $(CFLAGS) -o $@ $^ $(LDFLAGS) $(call pkg_libs,$(PKG_DAEMON)) -lm

# The online image steps' cost per sample and output digests (`make bench`).
$(BUILD)/stepbench: tests/bench/stepbench.c $(DAEMON_LIB_OBJ) $(COMMON_OBJ)
	$(CC) $(CFLAGS) -o $@ $^ $(LDFLAGS) $(call pkg_libs,$(PKG_DAEMON)) -lm

# The raw random-read reader the disk cases of `make bench` compare with.
$(BUILD)/ioread: tests/bench/ioread.c $(BUILD)/obj/daemon/io.o $(BUILD)/obj/daemon/access.o \
                 $(BUILD)/obj/daemon/hash.o $(BUILD)/obj/daemon/stats.o $(BUILD)/obj/daemon/json.o $(BUILD)/obj/common/log.o
	$(CC) $(CFLAGS) $(call pkg_cflags,liburing) -o $@ $^ $(LDFLAGS) $(call pkg_libs,liburing)

# The disk cases' trainer: epochs pulled on one connection (`make bench`).
$(BUILD)/epochs: tests/bench/epochs.c $(BUILD)/libprestoclient.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDFLAGS)

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
	@$(MAKE) --no-print-directory s3rver

# The S3 test server (issue 16's one exception to "only Debian packages"):
# s3rver from the npm registry, into build/s3rver (whatever BUILD is). Where
# it cannot be had, the S3 tests skip (77) and say so.
S3RVER_DIR     := build/s3rver
S3RVER_VERSION := 3.7.1
s3rver:
	@if [ ! -x $(S3RVER_DIR)/node_modules/.bin/s3rver ]; then \
	    SUDO=; [ "$$(id -u)" -eq 0 ] || SUDO=sudo; \
	    command -v npm >/dev/null 2>&1 || { $$SUDO apt-get update -qq && \
	        DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends \
	        nodejs npm; } >/dev/null 2>&1; \
	    echo "installing s3rver $(S3RVER_VERSION) from npm into $(S3RVER_DIR)"; \
	    mkdir -p $(S3RVER_DIR) && \
	    npm install --prefix $(S3RVER_DIR) --no-audit --no-fund --no-save --loglevel=error \
	        s3rver@$(S3RVER_VERSION) >$(S3RVER_DIR)/install.log 2>&1 || \
	    echo "s3rver could not be installed (see $(S3RVER_DIR)/install.log): the S3 tests will skip"; \
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
	$(MAKE) --no-print-directory all $(BUILD)/ioread $(BUILD)/epochs $(BUILD)/roibench $(BUILD)/stepbench $(SLOWFS)
	BUILD=build PYTHON=$(PYTHON) tests/bench/bench.sh

# The cluster tier's cases alone (tests/bench/cases_cluster.sh), on their own data set.
bench-cluster: deps
	$(MAKE) --no-print-directory all
	BUILD=build PYTHON=$(PYTHON) tests/bench/cases_cluster.sh

# Only the sources cases (tar-local): tests/bench/bench_sources.sh.
bench-sources: deps
	$(MAKE) --no-print-directory all
	BUILD=build PYTHON=$(PYTHON) tests/bench/bench_sources.sh

# Staged installs: make install DESTDIR=/tmp/stage PREFIX=/usr
PYDIR ?= $(PREFIX)/lib/python3/dist-packages
install: all
	install -d $(DESTDIR)$(PREFIX)/sbin $(DESTDIR)$(PREFIX)/bin \
	    $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include \
	    $(DESTDIR)$(PYDIR)/presto $(DESTDIR)$(SYSCONFDIR)/presto \
	    $(DESTDIR)$(PREFIX)/lib/systemd/system $(DESTDIR)$(PREFIX)/lib/sysusers.d \
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
	printf '# written by make install: where libprestoclient is\nLIBDIR = "%s"\n' \
	    '$(PREFIX)/lib' > $(DESTDIR)$(PYDIR)/presto/_install.py
	chmod 0644 $(DESTDIR)$(PYDIR)/presto/_install.py
	install -m 0644 conf/prestod.yaml $(DESTDIR)$(SYSCONFDIR)/presto/prestod.yaml
	sed -e 's|/usr/local/sbin/prestod|$(PREFIX)/sbin/prestod|' systemd/prestod.service \
	    > $(DESTDIR)$(PREFIX)/lib/systemd/system/prestod.service
	install -m 0644 systemd/prestod.socket $(DESTDIR)$(PREFIX)/lib/systemd/system/
	install -m 0644 systemd/presto.sysusers.conf $(DESTDIR)$(PREFIX)/lib/sysusers.d/presto.conf
	install -m 0644 client/prestoctl.1 $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 0644 conf/presto.yaml.5 $(DESTDIR)$(PREFIX)/share/man/man5/
	install -m 0644 daemon/prestod.8 $(DESTDIR)$(PREFIX)/share/man/man8/
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" -eq 0 ] && command -v ldconfig >/dev/null; then \
	    ldconfig; fi

# libFuzzer targets (tests/fuzz/fuzz_*.c), built with clang into $(BUILD)/fuzz/.
# `make fuzz` runs each for FUZZ_SECONDS on a scratch copy of its seeds
# (tests/fuzz/corpus/TARGET and what tests/fuzz/mkcorpus.c generates): the
# repository's corpus is never modified. A crash or a failed check stops it
# with the input saved as $(BUILD)/fuzz/artifacts/TARGET-crash-*; each
# target's full output is in $(BUILD)/fuzz/TARGET.log. FUZZ_EXTRA adds
# compiler flags (rm -r $(BUILD)/fuzz first), e.g. -DFUZZ_TOLERATE_MULTILINE_ERRORS
# to fuzz the config parser past that known finding (tests/fuzz/fuzz_config.c).
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_EXTRA   ?=
FUZZ_DIR     := $(BUILD)/fuzz
FUZZ_FLAGS   := -g -O1 -fno-omit-frame-pointer -std=gnu11 -Wall -Wextra -Werror -Wshadow \
                -Wstrict-prototypes -Wno-missing-field-initializers -pthread \
                -Icommon -Idaemon -Idaemon/steps -Itests/fuzz -DPRESTO_VERSION='"$(VERSION)"' \
                $(call pkg_cflags,$(PKG_DAEMON)) $(FUZZ_EXTRA)
FUZZ_SAN     := -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
FUZZ_LIBS    := $(call pkg_libs,$(PKG_DAEMON)) -lm
FUZZ_STEPS   := $(wildcard daemon/steps/*.c) daemon/hash.c daemon/img.c daemon/stats.c \
                daemon/json.c common/log.c common/proto.c
FUZZ_STORE   := daemon/store.c daemon/cachedir.c common/trust.c
FUZZ_NAMES   := fuzz_frame fuzz_config fuzz_store fuzz_decode fuzz_decode_formats fuzz_sources
FUZZ_BIN     := $(FUZZ_NAMES:%=$(FUZZ_DIR)/%)

$(FUZZ_DIR)/fuzz_frame: tests/fuzz/fuzz_frame.c common/proto.c
$(FUZZ_DIR)/fuzz_config: tests/fuzz/fuzz_config.c daemon/config.c daemon/braces.c daemon/vec.c daemon/cluster.c \
                           $(FUZZ_STORE) \
                           $(FUZZ_STEPS)
$(FUZZ_DIR)/fuzz_store: tests/fuzz/fuzz_store.c $(FUZZ_STORE) $(FUZZ_STEPS)
$(FUZZ_DIR)/fuzz_decode: tests/fuzz/fuzz_decode.c $(FUZZ_STEPS)
$(FUZZ_DIR)/fuzz_decode_formats: tests/fuzz/fuzz_decode_formats.c $(wildcard daemon/steps/decode_*.c)
$(FUZZ_DIR)/fuzz_sources: tests/fuzz/fuzz_sources.c daemon/manifest.c daemon/labels.c daemon/tar.c \
                          daemon/wds.c daemon/fileext.c daemon/braces.c daemon/s3xml.c daemon/vec.c \
                          daemon/hash.c
$(FUZZ_BIN): tests/fuzz/fuzz.h $(wildcard common/*.h daemon/*.h daemon/steps/*.h)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) $(FUZZ_SAN) -o $@ $(filter %.c,$^) $(FUZZ_LIBS)

$(FUZZ_DIR)/mkcorpus: tests/fuzz/mkcorpus.c $(FUZZ_STORE) $(FUZZ_STEPS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ $(filter %.c,$^) $(FUZZ_LIBS)

fuzz-build: $(FUZZ_BIN) $(FUZZ_DIR)/mkcorpus

fuzz: fuzz-build
	@set -e; tmp=$$(mktemp -d "$${TMPDIR:-/tmp}/presto-fuzz.XXXXXX"); \
	trap 'rm -rf "$$tmp"' EXIT; \
	mkdir -p $(FUZZ_DIR)/artifacts; \
	for t in $(FUZZ_NAMES); do \
	    mkdir -p "$$tmp/$$t"; cp tests/fuzz/corpus/$$t/* "$$tmp/$$t/"; \
	done; \
	$(FUZZ_DIR)/mkcorpus "$$tmp"; \
	for t in $(FUZZ_NAMES); do \
	    echo "fuzz: $$t for $(FUZZ_SECONDS) s"; \
	    if ! $(FUZZ_DIR)/$$t -max_total_time=$(FUZZ_SECONDS) -timeout=10 \
	            -print_final_stats=1 -artifact_prefix=$(FUZZ_DIR)/artifacts/$$t- \
	            "$$tmp/$$t" >$(FUZZ_DIR)/$$t.log 2>&1; then \
	        tail -n 40 $(FUZZ_DIR)/$$t.log; \
	        echo "fuzz: $$t FAILED (log: $(FUZZ_DIR)/$$t.log)"; exit 1; \
	    fi; \
	    grep -E '^#[0-9]+[[:space:]]+DONE' $(FUZZ_DIR)/$$t.log | tail -n 1; \
	done

clean:
	rm -rf build

-include $(shell find $(BUILD)/obj $(BUILD)/pic $(BUILD)/hook $(BUILD)/tests -name '*.d' 2>/dev/null)
