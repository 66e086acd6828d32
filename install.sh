#!/usr/bin/env bash
# Set up profiler on a fresh Debian 12 host, as root: system packages, a venv in .venv, `profiler` on PATH.
#   bash install.sh          what profiling needs (perf, tracefs, bcc where possible)
#   bash install.sh --dev    also the test workloads (stress-ng, sysbench, fio, mariadb, redis, db_bench, postgresql,
#                            etcd, nginx, memcached, wrk, sshd for the cluster tests' namespaces, podman, runc, docker.io
#                            for the container tests, Go if absent),
#                            headless chromium for report checks, and the test tools
# Output: one line per step; the tools' own output goes to install.log, shown only when a step fails.
set -euo pipefail
cd "$(dirname "$0")"
dev=0
[ "${1:-}" = "--dev" ] && dev=1

if [ "$(id -u)" -ne 0 ]; then
  echo "install.sh: run as root (sudo bash install.sh)" >&2
  exit 1
fi

log="$PWD/install.log"
: >"$log"
steps=5
n=0
step() { n=$((n + 1)); printf '[%d/%d] %s\n' "$n" "$steps" "$*"; printf '\n== %s\n' "$*" >>"$log"; }
note() { printf '      %s\n' "$*"; }
# run a command with its output in install.log; on failure show the end of it and stop
quiet() {
  if ! "$@" >>"$log" 2>&1; then
    echo "install.sh: failed: $*" >&2
    tail -n 20 "$log" | sed 's/^/  | /' >&2
    echo "install.sh: the whole log is in $log" >&2
    exit 1
  fi
}

export DEBIAN_FRONTEND=noninteractive
pkgs=(linux-perf linux-libc-dev python3-venv python3-pip procps util-linux coreutils gzip)
bcc_pkgs=(python3-bpfcc bpfcc-tools linux-headers-amd64)
dev_pkgs=(stress-ng sysbench fio mariadb-server mariadb-client redis-server redis-tools rocksdb-tools chromium bpftool
          postgresql postgresql-contrib etcd-server etcd-client nginx memcached libmemcached-tools wrk
          openssh-server openssh-client iproute2 git podman runc docker.io)
# the Go test workloads are built with the host's Go toolchain; Debian's when there is none
if [ $dev -eq 1 ] && ! command -v go >/dev/null && [ ! -x /usr/local/go/bin/go ]; then
  dev_pkgs+=(golang-go)
fi
[ $dev -eq 1 ] && pkgs+=("${dev_pkgs[@]}")
step "apt packages (${#pkgs[@]}): ${pkgs[*]}"
quiet apt-get update -qq
quiet apt-get install -y -qq --no-install-recommends "${pkgs[@]}"
# bcc is optional: the perf backend works without it.
if apt-get install -y -qq --no-install-recommends "${bcc_pkgs[@]}" >>"$log" 2>&1; then
  note "bcc: installed (the bcc backend can be used: --backend bcc|auto)"
else
  note "bcc: packages unavailable, the bcc backend will be off (the perf backend is used)"
fi

# Servers the test workloads need are started by the tests themselves, never as services.
if [ $dev -eq 1 ]; then
  for svc in mariadb redis-server postgresql etcd nginx memcached; do  # never ssh: the host may be reached by it
    systemctl disable --now "$svc" >>"$log" 2>&1 || service "$svc" stop >>"$log" 2>&1 || true
  done
fi

step "kernel tracing"
if grep -qs ' tracefs ' /proc/mounts; then
  note "tracefs: mounted"
else
  note "tracefs: not mounted; profiler mounts it itself when run as root (as perf does)"
fi
if [ -f scripts/bcc-headers.sh ]; then
  if bash scripts/bcc-headers.sh >>"$log" 2>&1; then
    note "kernel headers for bcc: ready"
  else
    note "kernel headers for bcc: not set up, the bcc backend will be off (details in $log)"
  fi
fi

step "python venv in .venv (system site-packages, so Debian's bcc module is importable)"
if [ ! -x .venv/bin/python ]; then
  quiet /usr/bin/python3 -m venv --system-site-packages .venv
fi
quiet .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip

what="profiler"
[ $dev -eq 1 ] && what="profiler with its test tools"
step "$what into .venv"
if [ $dev -eq 1 ]; then
  quiet .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev]'
else
  quiet .venv/bin/python -m pip install -q --disable-pip-version-check -e .
fi
ln -sf "$PWD/.venv/bin/profiler" /usr/local/bin/profiler

step "check"
note "$(/usr/local/bin/profiler --version) -> /usr/local/bin/profiler"
if /usr/local/bin/profiler doctor >>"$log" 2>&1; then
  note "profiler doctor: every check passed"
else
  note "profiler doctor: some checks failed; run 'profiler doctor' to see them and their fixes"
fi
note "next: profiler demo   (profiles a bundled workload for 15 s and writes its report)"
