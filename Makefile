# specula build.
#
#   make            release build  -> build/release/specula
#   make debug      -O0 -g, asserts on -> build/debug/specula
#   make asan       ASan+UBSan     -> build/asan/specula (+ test binaries)
#   make tests      the unit and model test binaries of BUILD (release by default)
#   make test       install test deps (scripts/setup-tests.sh), fetch the models, build release
#                   + asan and run the whole suite (tests/run.sh)
#   make fuzz       libFuzzer harness for the GGUF reader (clang)
#   make install    PREFIX=/usr/local DESTDIR=: the binary, libspecula.a and
#                   libspecula.so, include/specula.h and specula.pc
#
# One binary runs on any x86-64: no -march=native.  The SIMD kernels (AVX2,
# AVX-VNNI, AVX-512 VNNI) are compiled per function with target attributes
# and chosen at run time from CPUID (src/kernels/cpu.c).

CC       ?= cc
CSTD     := -std=c11 -D_GNU_SOURCE
WARN     := -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter
INC      := -Iinclude -Isrc
PCRE_LIBS := $(shell pkg-config --libs libpcre2-8 2>/dev/null || echo -lpcre2-8)
MHD_LIBS := $(shell pkg-config --libs libmicrohttpd 2>/dev/null || echo -lmicrohttpd)
LIBS     := $(PCRE_LIBS) $(MHD_LIBS) -ljansson -lpthread -lm
TEST_LIBS := -lcmocka

BUILD    ?= release
ifeq ($(BUILD),release)
  OPT := -O2 -g -DNDEBUG
else ifeq ($(BUILD),debug)
  OPT := -O0 -g
else ifeq ($(BUILD),asan)
  OPT := -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
else
  $(error unknown BUILD=$(BUILD) (release|debug|asan))
endif

O        := build/$(BUILD)
# -fPIC: the same objects make the static and the shared library
CFLAGS_ALL := $(CSTD) $(WARN) $(INC) $(OPT) -fPIC $(CFLAGS)
LDFLAGS_ALL := $(OPT) $(LDFLAGS)

LIB_SRC  := $(sort $(wildcard src/base/*.c src/gguf/*.c src/kernels/*.c src/model/*.c \
              src/tokenizer/*.c src/sample/*.c src/speculative/*.c src/engine/*.c src/serve/*.c \
              src/train/*.c src/grammar/*.c src/cache/*.c src/jinja/*.c))
CLI_SRC  := $(sort $(wildcard src/cli/*.c))
UNIT_SRC := $(sort $(wildcard tests/unit/test_*.c))
MODEL_SRC := $(sort $(wildcard tests/model/test_*.c))

# assembly: embedded files (src/serve/page.S pulls in page.html with .incbin)
LIB_ASM  := $(sort $(wildcard src/serve/*.S))
LIB_OBJ  := $(LIB_SRC:%.c=$(O)/%.o) $(LIB_ASM:%.S=$(O)/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(O)/%.o)
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(O)/tests/%)
MODEL_BIN := $(MODEL_SRC:tests/model/%.c=$(O)/tests/%)

.PHONY: all release debug asan test tests fuzz clean install
all: $(O)/specula $(O)/libspecula.a $(O)/libspecula.so

release:
	$(MAKE) BUILD=release
debug:
	$(MAKE) BUILD=debug
asan:
	$(MAKE) BUILD=asan all tests

tests: $(UNIT_BIN) $(MODEL_BIN)

$(O)/libspecula.a: $(LIB_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

# The shared library exports the public API (include/specula.h) only.
SOVERSION := 1
$(O)/libspecula.so: $(LIB_OBJ) src/engine/specula.map
	$(CC) $(LDFLAGS_ALL) -shared -Wl,-soname,libspecula.so.$(SOVERSION) \
	    -Wl,--version-script=src/engine/specula.map -o $@.$(SOVERSION) $(LIB_OBJ) $(LIBS)
	ln -sf libspecula.so.$(SOVERSION) $@

$(O)/specula: $(CLI_OBJ) $(O)/libspecula.a
	$(CC) $(LDFLAGS_ALL) -o $@ $(CLI_OBJ) $(O)/libspecula.a $(LIBS)

$(O)/tests/%: tests/unit/%.c $(O)/libspecula.a tests/unit/test_util.h
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) -Itests/unit -o $@ $< $(O)/libspecula.a $(LIBS) $(TEST_LIBS)

# the public API's test sees include/ only: proof that specula.h is self-contained
$(O)/tests/test_public_api: tests/model/test_public_api.c $(O)/libspecula.a include/specula.h tests/unit/test_util.h
	@mkdir -p $(@D)
	$(CC) $(CSTD) $(WARN) -Iinclude $(OPT) $(CFLAGS) -Itests/unit -o $@ $< $(O)/libspecula.a $(LIBS) $(TEST_LIBS)

$(O)/tests/%: tests/model/%.c $(O)/libspecula.a tests/unit/test_util.h
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) -Itests/unit -o $@ $< $(O)/libspecula.a $(LIBS) $(TEST_LIBS)

$(O)/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) -MMD -MP -c -o $@ $<

$(O)/%.o: %.S
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) -c -o $@ $<
$(O)/src/serve/page.o: src/serve/page.html

# GFLOP/s of the training linear layer (bench/bench_train.c)
.PHONY: bench-train
bench-train: $(O)/bench_train
$(O)/bench_train: bench/bench_train.c $(O)/libspecula.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) -o $@ $< $(O)/libspecula.a $(LIBS)

# The suite: models fetched (idempotent), release build + model tests,
# sanitizer build + unit tests, fuzzer; ends with "N passed, N failed".
test:
	scripts/setup-tests.sh
	scripts/fetch-models.sh
	$(MAKE) -j2 BUILD=release all tests
	$(MAKE) -j2 BUILD=asan all tests
	tests/run.sh

# libFuzzer harness for the GGUF reader.
FUZZ_SRC := src/base/*.c src/gguf/*.c
fuzz: build/fuzz/fuzz_gguf
build/fuzz/fuzz_gguf: fuzz/fuzz_gguf.c $(wildcard src/base/*.c src/gguf/*.c src/base/*.h src/gguf/*.h)
	@mkdir -p $(@D)
	clang $(CSTD) $(INC) -O1 -g -fsanitize=fuzzer,address,undefined -o $@ fuzz/fuzz_gguf.c $(wildcard src/base/*.c src/gguf/*.c) -lpthread -lm

# Installs the release build.  PREFIX is where it will live (written into
# specula.pc); DESTDIR stages it elsewhere (packaging).
PREFIX ?= /usr/local
DESTDIR ?=
VERSION := 0.$(shell sed -n 's/^#define SPECULA_API_VERSION \([0-9]*\).*/\1/p' include/specula.h)
install:
	$(MAKE) BUILD=release all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include
	install -m 755 build/release/specula $(DESTDIR)$(PREFIX)/bin/specula
	install -m 644 build/release/libspecula.a $(DESTDIR)$(PREFIX)/lib/libspecula.a
	install -m 755 build/release/libspecula.so.$(SOVERSION) $(DESTDIR)$(PREFIX)/lib/libspecula.so.$(SOVERSION)
	ln -sf libspecula.so.$(SOVERSION) $(DESTDIR)$(PREFIX)/lib/libspecula.so
	install -m 644 include/specula.h $(DESTDIR)$(PREFIX)/include/specula.h
	install -d $(DESTDIR)$(PREFIX)/share/specula/drafters
	for f in drafters/*.gguf; do [ -f "$$f" ] && install -m 644 "$$f" $(DESTDIR)$(PREFIX)/share/specula/drafters/; done; true
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' \
	    -e 's|@LIBS_PRIVATE@|$(LIBS)|g' specula.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/specula.pc

clean:
	rm -rf build

-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d)
