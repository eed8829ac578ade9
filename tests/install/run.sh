#!/bin/bash
# run.sh - install the build tree into a temporary prefix and use it the way
# a user would (tests/install/CMakeLists.txt, label `install`):
#   1. cmake --install BUILD --prefix TMP; the expected files are there and no
#      installed pkg-config/CMake file names the source or build tree;
#   2. consumer.c built with `pkg-config --cflags --libs ringmaster` only
#      (shared; rpath from libdir) and `pkg-config --static` (libringmaster.a),
#      both run: two processes, rm_comm_init over loopback, all-reduce checked;
#   3. the same program from a CMake project with find_package(ringmaster
#      CONFIG) (ringmaster::ringmaster and ringmaster::ringmaster_static);
#   4. the installed binaries: --help of both, then a coordinator from TMP/bin
#      serving the embedded dashboard, and `ringmaster run -n 2` of the
#      installed C example built against the installed library (the local
#      launcher finds TMP/bin/ringmaster-worker next to the coordinator);
#   5. the installed Python package under Debian's /usr/bin/python3 with
#      PYTHONPATH=TMP/PYDIR and no RINGMASTER_LIBRARY: it loads
#      TMP/LIBDIR/libringmaster.so;
#   6. systemd-analyze verify of the installed unit, when systemd-analyze exists.
# Usage: run.sh BUILD_DIR SOURCE_DIR CMAKE CC
# (the layout, RM_LIBDIR ..., from BUILD_DIR/install/layout.env)
# Exit 0 on success, 1 with the failing step on stderr.
set -u
build=$1 src=$2 cmake=$3 cc=$4
[ -f "$build/install/layout.env" ] ||
  { echo "install test: FAIL: no $build/install/layout.env (cmake/install.cmake not included?)" >&2; exit 1; }
# shellcheck source=/dev/null
. "$build/install/layout.env"
libdir=$RM_LIBDIR pydir=$RM_PYTHONDIR unitdir=$RM_SYSTEMDDIR cmakedir=$RM_CMAKEDIR
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/rm-install.XXXXXX")
prefix=$tmp/prefix
srv_pid=
cleanup() {
  if [ -n "$srv_pid" ]; then kill "$srv_pid" 2>/dev/null; wait "$srv_pid" 2>/dev/null; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
step() { echo "== $*"; }
die() { echo "install test: FAIL: $*" >&2; exit 1; }
run() {
  "$@" > "$tmp/out" 2>&1
  local rc=$?
  [ "$rc" = 0 ] || { cat "$tmp/out" >&2; die "$* (exit $rc)"; }
}

step "cmake --install $build --prefix $prefix"
run "$cmake" --install "$build" --prefix "$prefix"
for f in bin/ringmaster bin/ringmaster-worker \
         "$libdir/libringmaster.so" "$libdir/libringmaster.so.0" "$libdir/libringmaster.a" \
         include/ringmaster/ringmaster.h "$libdir/pkgconfig/ringmaster.pc" \
         "$cmakedir/ringmasterConfig.cmake" "$cmakedir/ringmasterConfigVersion.cmake" \
         "$cmakedir/ringmasterTargets.cmake" \
         "$pydir/ringmaster/__init__.py" "$pydir/ringmaster/_lib.py" "$pydir/ringmaster/_installed.py" \
         $RM_DATADIR/ringmaster/web/index.html "$unitdir/ringmaster.service" \
         $RM_DOCDIR/examples/c/session_allreduce.c; do
  [ -e "$prefix/$f" ] || die "not installed: $f"
done
[ -L "$prefix/$libdir/libringmaster.so" ] || die "$libdir/libringmaster.so is not the SONAME link"
soname=$(readelf -d "$prefix/$libdir/libringmaster.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = libringmaster.so.0 ] || die "SONAME is '$soname'"
# Nothing installed may point back at the trees it came from.
if grep -rl -e "$src" -e "$build" "$prefix/$libdir/pkgconfig" "$prefix/$cmakedir" \
     "$prefix/$unitdir" > "$tmp/leaks"; then
  cat "$tmp/leaks" >&2
  die "installed files name the source or build tree"
fi
for b in bin/ringmaster bin/ringmaster-worker "$libdir/libringmaster.so"; do
  if readelf -d "$prefix/$b" | grep -E 'R(UN)?PATH' | grep -q -e "$src" -e "$build"; then
    die "$b keeps a build-tree RPATH"
  fi
done
{ grep -q "$prefix/$RM_BINDIR/ringmaster serve" "$prefix/$unitdir/ringmaster.service" &&
  grep -q "^Documentation=file:$prefix/$RM_DOCDIR/systemd.md" "$prefix/$unitdir/ringmaster.service"; } ||
  die "installed unit does not name $prefix/$RM_BINDIR/ringmaster and $prefix/$RM_DOCDIR"

export PKG_CONFIG_PATH=$prefix/$libdir/pkgconfig
unset PKG_CONFIG_LIBDIR CPATH C_INCLUDE_PATH LIBRARY_PATH LD_LIBRARY_PATH RINGMASTER_LIBRARY
cd "$tmp" || die "cd $tmp"

step "pkg-config: shared"
flags=$(pkg-config --cflags --libs ringmaster) || die "pkg-config --cflags --libs ringmaster"
echo "   $flags"
case " $flags " in *" -I$prefix/include "*) ;; *) die "pkg-config Cflags lack -I$prefix/include";; esac
pc_libdir=$(pkg-config --variable=libdir ringmaster)
[ "$pc_libdir" = "$prefix/$libdir" ] || die "pkg-config libdir is $pc_libdir"
# shellcheck disable=SC2086
run "$cc" -std=c11 -Wall -Wextra -Werror -o consumer_pc "$here/consumer/consumer.c" \
    $flags -Wl,-rpath,"$pc_libdir"
run ./consumer_pc
cat "$tmp/out"
grep -q "^consumer: lib $prefix/$libdir/libringmaster.so.0" "$tmp/out" ||
  die "consumer_pc did not use the installed libringmaster.so"
grep -q "^consumer: ok world 2" "$tmp/out" || die "consumer_pc: no all-reduce"

step "pkg-config: static"
sflags=$(pkg-config --static --cflags --libs ringmaster) || die "pkg-config --static"
# -l:libringmaster.a instead of -lringmaster: the .so beside it would win.
sflags=$(echo " $sflags " | sed 's/ -lringmaster / -l:libringmaster.a /')
echo "   $sflags"
# shellcheck disable=SC2086
run "$cc" -std=c11 -Wall -Wextra -Werror -o consumer_pcs "$here/consumer/consumer.c" $sflags
ldd ./consumer_pcs | grep -q libringmaster && die "consumer_pcs links libringmaster.so"
run ./consumer_pcs
grep -q "^consumer: ok world 2" "$tmp/out" || die "consumer_pcs: no all-reduce"

step "find_package(ringmaster CONFIG)"
run "$cmake" -S "$here/consumer" -B "$tmp/cm" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=Release
run "$cmake" --build "$tmp/cm"
grep -rq -e "$src/" "$tmp/cm/CMakeFiles/consumer_shared.dir/flags.make" \
  && die "find_package consumer compiles with source-tree include paths"
run "$tmp/cm/consumer_shared"
grep -q "^consumer: lib $prefix/$libdir/libringmaster.so.0" "$tmp/out" ||
  { cat "$tmp/out" >&2; die "consumer_shared did not use the installed libringmaster.so"; }
run "$tmp/cm/consumer_static"
ldd "$tmp/cm/consumer_static" | grep -q libringmaster && die "consumer_static links libringmaster.so"
grep -q "^consumer: ok world 2" "$tmp/out" || die "consumer_static: no all-reduce"

step "installed binaries"
run "$prefix/bin/ringmaster" --help
grep -q "usage: ringmaster" "$tmp/out" || die "ringmaster --help"
run "$prefix/bin/ringmaster-worker" --help
grep -q "usage: ringmaster-worker" "$tmp/out" || die "ringmaster-worker --help"

step "coordinator from $prefix/bin, ringmaster run of the installed example"
# shellcheck disable=SC2086
run "$cc" -std=c11 -O2 -o session_allreduce \
    "$prefix/$RM_DOCDIR/examples/c/session_allreduce.c" $flags -lm -Wl,-rpath,"$pc_libdir"
echo "install-test-token" > token
mkdir -p state
env -u RINGMASTER_WORKER_BIN RINGMASTER_LOG_LEVEL=warn "$prefix/bin/ringmaster" serve \
    --db state/rm.db --grpc 127.0.0.1:0 --http 127.0.0.1:0 --api-token-file token \
    --log-dir state/logs > serve.log 2>&1 &
srv_pid=$!
http=
for _ in $(seq 100); do
  http=$(sed -n 's/^ringmaster: http listening on //p' serve.log)
  [ -n "$http" ] && break
  kill -0 "$srv_pid" 2>/dev/null || break
  sleep 0.1
done
[ -n "$http" ] || { cat serve.log >&2; die "installed coordinator did not start"; }
if command -v curl > /dev/null; then
  curl -fsS "http://$http/static/index.html" > index.html || die "GET /static/index.html"
  cmp -s index.html "$prefix/$RM_DATADIR/ringmaster/web/index.html" ||
    die "the served dashboard differs from $RM_DATADIR/ringmaster/web/index.html"
fi
timeout 120 "$prefix/bin/ringmaster" run -n 2 --server "http://$http" --token-file token \
    -- "$tmp/session_allreduce" --steps 10 --step-ms 1 > run.out 2>&1 ||
  { cat run.out serve.log >&2; die "ringmaster run -n 2 with the installed binaries"; }
grep -q "session_allreduce" run.out || { cat run.out >&2; die "no output from the workers"; }
kill -TERM "$srv_pid"
wait "$srv_pid"
rc=$?
srv_pid=
[ "$rc" = 0 ] || { cat serve.log >&2; die "coordinator exited $rc on SIGTERM"; }

step "Python package with /usr/bin/python3"
if [ -x /usr/bin/python3 ]; then
  env -u RINGMASTER_LIBRARY PYTHONPATH="$prefix/$pydir" PYTHONDONTWRITEBYTECODE=1 \
    /usr/bin/python3 -c '
import sys, ringmaster, ringmaster._lib as L
want_pkg, want_lib = sys.argv[1], sys.argv[2]
assert ringmaster.__file__.startswith(want_pkg), ringmaster.__file__
assert L.path == want_lib, L.path
import ringmaster._installed as I
assert I.LIBRARY == want_lib, I.LIBRARY
assert L.rm_status_name(4) == b"RM_ERR_PEER_LOST", L.rm_status_name(4)
print("   python: ringmaster from", ringmaster.__file__, "library", L.path)
' "$prefix/$pydir/ringmaster/" "$prefix/$libdir/libringmaster.so" > "$tmp/out" 2>&1 ||
    { cat "$tmp/out" >&2; die "the installed Python package"; }
  cat "$tmp/out"
else
  echo "   (no /usr/bin/python3: skipped)"
fi

step "systemd unit"
if command -v systemd-analyze > /dev/null; then
  # verify resolves ExecStart= against the installed binary.
  SYSTEMD_LOG_LEVEL=warning systemd-analyze verify "$prefix/$unitdir/ringmaster.service" \
    > "$tmp/out" 2>&1 || { cat "$tmp/out" >&2; die "systemd-analyze verify ringmaster.service"; }
  [ -s "$tmp/out" ] && { cat "$tmp/out" >&2; die "systemd-analyze verify warned"; }
  echo "   systemd-analyze verify: clean"
else
  echo "   (no systemd-analyze: skipped)"
fi
echo "install test: ok"
