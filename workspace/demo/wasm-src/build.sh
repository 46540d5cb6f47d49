#!/bin/sh
# Builds ../tools/demo-checksum.wasm from checksum.c, byte for byte the file shipped (Debian's clang 14,
# wasi-libc; apt-get install clang lld wasi-libc libclang-rt-14-dev-wasm32). No debug information and no
# symbol names, so neither the folder it is built in nor the machine leaves a trace in the module.
set -eu
here=$(dirname "$0")
out=${1:-"$here/../tools/demo-checksum.wasm"}
clang --target=wasm32-wasi -O2 -Wl,--strip-all -o "$out" "$here/checksum.c"
