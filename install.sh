#!/usr/bin/env bash
# Set up profiler on a fresh Debian 12 host, as root: system packages, a venv in .venv, `profiler` on PATH.
#   bash install.sh          what profiling needs (perf, tracefs, bcc where possible)
#   bash install.sh --dev    also the test workloads (stress-ng, sysbench, fio, mariadb, redis, db_bench),
#                            headless chromium for report checks, and the test tools
set -euo pipefail
cd "$(dirname "$0")"
dev=0
[ "${1:-}" = "--dev" ] && dev=1

if [ "$(id -u)" -ne 0 ]; then
  echo "install.sh: run as root (sudo bash install.sh)" >&2
  exit 1
fi

say() { printf '== %s\n' "$*"; }

export DEBIAN_FRONTEND=noninteractive
pkgs=(linux-perf linux-libc-dev python3-venv python3-pip procps util-linux coreutils gzip)
bcc_pkgs=(python3-bpfcc bpfcc-tools linux-headers-amd64)
dev_pkgs=(stress-ng sysbench fio mariadb-server mariadb-client redis-server redis-tools rocksdb-tools chromium bpftool
          openssh-server openssh-client iproute2)  # the cluster tests' namespaced hosts run their own sshd
[ $dev -eq 1 ] && pkgs+=("${dev_pkgs[@]}")
say "apt packages: ${pkgs[*]}"
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
# bcc is optional: the perf backend works without it.
if ! apt-get install -y -qq --no-install-recommends "${bcc_pkgs[@]}" >/dev/null 2>&1; then
  say "bcc packages unavailable: the bcc backend will be off (perf backend is used)"
fi

# Servers the test workloads need are started by the tests themselves, never as services.
if [ $dev -eq 1 ]; then
  for svc in mariadb redis-server ssh; do
    systemctl disable --now "$svc" >/dev/null 2>&1 || service "$svc" stop >/dev/null 2>&1 || true
  done
fi

if ! grep -qs ' tracefs ' /proc/mounts; then
  say "mounting tracefs at /sys/kernel/tracing"
  mount -t tracefs nodev /sys/kernel/tracing || say "could not mount tracefs: block IO and syscall tracepoints will be skipped"
fi

if [ -x scripts/bcc-headers.sh ] || [ -f scripts/bcc-headers.sh ]; then
  bash scripts/bcc-headers.sh || say "kernel headers for bcc not set up: the bcc backend will be off"
fi

say "python venv in .venv (system site-packages, so Debian's bcc module is importable)"
if [ ! -x .venv/bin/python ]; then
  /usr/bin/python3 -m venv --system-site-packages .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
if [ $dev -eq 1 ]; then
  .venv/bin/python -m pip install -q -e '.[dev]'
else
  .venv/bin/python -m pip install -q -e .
fi
ln -sf "$PWD/.venv/bin/profiler" /usr/local/bin/profiler
say "installed: $(/usr/local/bin/profiler --version) -> /usr/local/bin/profiler"
