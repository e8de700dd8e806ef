#!/usr/bin/env bash
# `make install` and the installed library: an example program (examples/
# generate.c) built with nothing but `pkg-config --cflags --libs specula`
# against the installed copy, shared and static, generates the same text
# as `specula run`, with and without speculation.  TAP output.
cd "$(dirname "$0")/../.."
. tests/cli/tap.bash                  # n, ok, not_ok, check, $tmp
model="${XDG_CACHE_HOME:-$HOME/.cache}/specula/models/SmolLM2-135M-Instruct.Q4_1.gguf"

prefix="$tmp/prefix"
make -s install PREFIX="$prefix" > "$tmp/install.log" 2>&1
check "make install PREFIX=... succeeds" test $? -eq 0
for f in bin/specula lib/libspecula.a lib/libspecula.so lib/libspecula.so.1 include/specula.h \
         lib/pkgconfig/specula.pc; do
    check "installs $f" test -e "$prefix/$f"
done
make -s install PREFIX=/usr DESTDIR="$tmp/stage" > "$tmp/stage.log" 2>&1
check "DESTDIR stages under DESTDIR with the final prefix in specula.pc" \
    bash -c "test -x '$tmp/stage/usr/bin/specula' && grep -qx 'prefix=/usr' '$tmp/stage/usr/lib/pkgconfig/specula.pc'"

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
cflags=$(pkg-config --cflags specula) && libs=$(pkg-config --libs specula) && slibs=$(pkg-config --static --libs specula)
check "pkg-config knows specula" test -n "$libs"
# the public header alone, in C11 and C++ (extern "C")
cc -std=c11 -Wall -Wextra -Werror $cflags examples/generate.c $libs -o "$tmp/gen" 2> "$tmp/cc.log"
check "example builds against the shared library with pkg-config only" test -x "$tmp/gen"
cc -std=c11 -Wall -Wextra -Werror -static-libgcc $cflags examples/generate.c \
    "$prefix/lib/libspecula.a" $(pkg-config --static --libs-only-l specula | sed 's/-lspecula//') -o "$tmp/gen_static" 2>> "$tmp/cc.log"
check "example builds against the static library (pkg-config --static)" test -x "$tmp/gen_static"
echo '#include <specula.h>
int main(void) { return specula_api_version() == SPECULA_API_VERSION ? 0 : 1; }' > "$tmp/v.cpp"
if command -v g++ > /dev/null; then
    g++ -Wall -Werror $cflags "$tmp/v.cpp" $libs -o "$tmp/v" 2>> "$tmp/cc.log" && LD_LIBRARY_PATH="$prefix/lib" "$tmp/v"
    check "the header compiles as C++ and links (extern \"C\")" test $? -eq 0
fi
check "the shared library exports only specula_* symbols" \
    bash -c "! nm -D --defined-only '$prefix/lib/libspecula.so' | awk '{print \$3}' | grep -v '^specula_' | grep -q ."
[ -s "$tmp/cc.log" ] && sed 's/^/# /' "$tmp/cc.log"

prompt="one two three four five six seven eight one two three four five six seven eight one two three"
LD_LIBRARY_PATH="$prefix/lib" "$tmp/gen" "$model" "$prompt" none 24 > "$tmp/plain" 2> "$tmp/plain.err"
check "the example generates text" bash -c "[ \$(wc -c < '$tmp/plain') -gt 10 ]"
LD_LIBRARY_PATH="$prefix/lib" "$tmp/gen" "$model" "$prompt" ngram 24 > "$tmp/ngram" 2> "$tmp/ngram.err"
check "the example with ngram gives plain's text" cmp -s "$tmp/plain" "$tmp/ngram"
check "and took drafts" bash -c "grep -Eq 'accepted [1-9]' '$tmp/ngram.err'"
"$tmp/gen_static" "$model" "$prompt" suffix 24 > "$tmp/suffix" 2> /dev/null
check "the static example with suffix gives plain's text" cmp -s "$tmp/plain" "$tmp/suffix"
"$prefix/bin/specula" run -m "$model" -p "$prompt" -n 24 --temp 0 -q > "$tmp/run" 2>/dev/null
check "it equals the installed specula run" bash -c "head -n 1 '$tmp/run' | cmp -s - <(head -n 1 '$tmp/plain')"
LD_LIBRARY_PATH="$prefix/lib" "$tmp/gen" /nonexistent.gguf hi > /dev/null 2> "$tmp/e"; rc=$?
check "a missing model is an error message, exit 1" bash -c "[ $rc -eq 1 ] && grep -q nonexistent '$tmp/e'"
LD_LIBRARY_PATH="$prefix/lib" "$tmp/gen" "$model" hi telepathy > /dev/null 2> "$tmp/e"; rc=$?
check "an unknown method is an error message, exit 1" bash -c "[ $rc -eq 1 ] && grep -q telepathy '$tmp/e'"
echo "1..$n"
