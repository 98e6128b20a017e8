#!/usr/bin/env bash
# The project's own Docker daemon (Debian's docker.io), apart from any other on the machine: its own
# socket, state and containerd, no default bridge and no iptables rules, so containers run on the host
# network only and no packet leaves loopback.
#   infra/dockerd.sh start   prints "started" (this call started it) or "running" (it already was)
#   infra/dockerd.sh stop    stops the daemon this script started (its pid file), nothing else
# Clients use it with DOCKER_HOST=unix://$MVS_DOCKER_RUN/docker.sock (printed by `infra/dockerd.sh host`).
set -euo pipefail
run="${MVS_DOCKER_RUN:-/run/mvs-docker}"
data="${MVS_DOCKER_DATA:-/var/lib/mvs-docker}"
host="unix://$run/docker.sock"
pidfile="$run/dockerd.pid"
answers() { DOCKER_HOST="$host" docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }
case "${1:-}" in
  host) echo "$host" ;;
  start)
    if answers; then echo running; exit 0; fi
    command -v dockerd >/dev/null || { echo "dockerd not found: run infra/setup_containers.sh" >&2; exit 1; }
    mkdir -p "$run" "$data"
    nohup dockerd --host "$host" --data-root "$data" --exec-root "$run" --pidfile "$pidfile" \
      --bridge=none --iptables=false --ip6tables=false --ip-masq=false \
      >"$run/dockerd.log" 2>&1 </dev/null &
    for _ in $(seq 300); do
      if answers; then echo started; exit 0; fi
      kill -0 $! 2>/dev/null || break
      sleep 0.1
    done
    echo "dockerd did not answer on $host; see $run/dockerd.log" >&2
    tail -20 "$run/dockerd.log" >&2
    exit 1
    ;;
  stop)
    [[ -f "$pidfile" ]] || exit 0
    pid="$(cat "$pidfile")"
    kill -TERM "$pid" 2>/dev/null || exit 0
    # dockerd stops its containers and its containerd first; the pid file goes when it is done.
    for _ in $(seq 600); do kill -0 "$pid" 2>/dev/null || exit 0; sleep 0.1; done
    echo "dockerd $pid still running after 60 s" >&2
    exit 1
    ;;
  *) echo "usage: $0 start|stop|host" >&2; exit 2 ;;
esac
