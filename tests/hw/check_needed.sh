#!/bin/sh
# check_needed.sh FILE... - fail if any FILE needs the CUDA driver
# (libcuda.so*) or the shared CUDA runtime (libcudart.so*), directly or
# through a dependency (ldd). libringmaster links the static runtime, which
# loads the driver with dlopen() only when a CUDA call is made.
status=0
for f in "$@"; do
  deps=$(ldd "$f" 2>&1) || { echo "FAIL: ldd $f: $deps"; status=1; continue; }
  bad=$(printf '%s\n' "$deps" | grep -E 'libcuda\.so|libcudart\.so|not found')
  if [ -n "$bad" ]; then
    echo "FAIL: $f depends on:"; printf '%s\n' "$bad"; status=1
  else
    echo "ok: $f needs no CUDA driver/runtime library"
  fi
done
exit $status
