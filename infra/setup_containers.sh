#!/usr/bin/env bash
# The container fleet's engine and images (tests/integration/test_containers.py runs it; so can you).
# Docker Hub is not reachable here, so every image starts from Debian's packages:
#   mvs-base:bookworm     debootstrap --variant=minbase bookworm, imported (docker import); the file
#                         system is kept in .cache/containers for the next daemon
#   mvs:latest            infra/Dockerfile on that base (the file users build on debian:bookworm-slim),
#                         DEPENDENCIES=context: pip installs from a wheelhouse of the host's pip cache
#                         and the jars are the host's .cache/jars, so no registry is asked twice
#   mvs-kafka:4.1.1       infra/kafka/Dockerfile: the broker jars in .cache/jars/kafka (the embedded broker's)
#   mvs-versitygw:v1.8.0  infra/objectstore/Dockerfile: the binary infra/setup_objectstore.sh built
# Needs what infra/setup.sh made (.venv, .cache/jars). Installs Debian's docker.io, docker-compose and
# debootstrap when missing (root), and uses the project's own daemon (infra/dockerd.sh): if this script
# started it, it stops it on exit, unless given --keep-daemon (then it prints "dockerd: started" and
# the caller stops it with infra/dockerd.sh stop).
# Idempotent: the base is made once; the other images come from BuildKit's layer cache (seconds when
# nothing changed; a change to mvs's code rebuilds the last layer). Prints one line per step with its
# seconds.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
keep_daemon=false
[[ "${1:-}" == --keep-daemon ]] && keep_daemon=true
mirror="${MVS_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
base=mvs-base:bookworm
cache="$root/.cache"
timed() {  # timed LABEL COMMAND...: runs it, prints "LABEL: N s"
  local label="$1" start=$SECONDS
  shift
  "$@"
  echo "$label: $((SECONDS - start)) s"
}

install_packages() {
  local missing=()
  command -v dockerd >/dev/null || missing+=(docker.io)
  command -v docker-compose >/dev/null || missing+=(docker-compose)
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  [[ ${#missing[@]} -eq 0 ]] && return 0
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}
timed "packages" install_packages

export DOCKER_HOST
DOCKER_HOST="$(bash infra/dockerd.sh host)"
if [[ "$(bash infra/dockerd.sh start)" == started ]]; then
  if $keep_daemon; then echo "dockerd: started"; else trap 'bash infra/dockerd.sh stop' EXIT; fi
fi
# The Debian client (the daemon's own version), whatever else is on PATH.
docker=/usr/bin/docker
have() { "$docker" image inspect "$1" >/dev/null 2>&1; }

make_base() {  # make_base TAR: the base's file system, from Debian's packages
  local dir
  dir="$(mktemp -d)"
  debootstrap --variant=minbase --include=ca-certificates bookworm "$dir" "$mirror" >/dev/null
  # This machine's own certificate authorities (a TLS-inspecting proxy's, say) are trusted inside too,
  # so that pip and Maven reach the registries from a build as they do from the host.
  cp /usr/local/share/ca-certificates/*.crt "$dir/usr/local/share/ca-certificates/" 2>/dev/null || true
  chroot "$dir" update-ca-certificates >/dev/null 2>&1
  # As in Docker Hub's debian:bookworm-slim: the release, its updates and security; no package lists kept.
  rm -f "$dir/etc/apt/sources.list"
  cat >"$dir/etc/apt/sources.list.d/debian.sources" <<SOURCES
Types: deb
URIs: $mirror
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: ${mirror%/debian}/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
  rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/*
  tar -C "$dir" -c -f "$1.part" . && mv "$1.part" "$1"
  rm -rf "$dir"
}
# The file system is kept in .cache/containers (named by this recipe and the mirror), so a daemon with
# fresh state imports it in seconds instead of running debootstrap again (minutes).
base_tar="$cache/containers/base-bookworm-$({ declare -f make_base; echo "$mirror"; } | sha256sum | cut -c1-12).tar"
build_base() {
  mkdir -p "$(dirname "$base_tar")"
  [[ -f "$base_tar" ]] || timed "base file system (debootstrap)" make_base "$base_tar"
  local bundle=/etc/ssl/certs/ca-certificates.crt  # pip's and Python's, instead of their own copies
  "$docker" import --change 'CMD ["bash"]' --change "ENV PIP_CERT=$bundle" --change "ENV SSL_CERT_FILE=$bundle" \
    --change "ENV REQUESTS_CA_BUNDLE=$bundle" "$base_tar" "$base" >/dev/null
}
have "$base" || timed "$base" build_base

# The jars infra/setup.sh fetched (fetched here only if it has not run).
[[ -f "$cache/jars/kafka/.complete" && -f "$cache/jars/s3a/.complete" ]] || bash infra/fetch_jars.sh >/dev/null

# Wheels of mvs's pinned dependencies, from the host's pip cache (the packages infra/setup.sh installed):
# made again only when the list changes.
wheelhouse() {
  local wheels="$cache/wheelhouse" wanted
  wanted="$(.venv/bin/python infra/requirements.py)"
  [[ -f "$wheels/requirements.txt" && "$(cat "$wheels/requirements.txt")" == "$wanted" ]] && return 0
  rm -rf "$wheels"
  mkdir -p "$wheels"
  .venv/bin/pip wheel -q --wheel-dir "$wheels" -r <(echo "$wanted")
  echo "$wanted" >"$wheels/requirements.txt"
}
timed "wheelhouse" wheelhouse

stage() {  # a build context in a temporary folder: what the image copies, nothing else
  local dir
  dir="$(mktemp -d)"
  cp -r "$@" "$dir/"
  echo "$dir"
}
link() {  # link FROM TO: hard links where the file system allows (no copy of hundreds of MB), else a copy
  mkdir -p "$(dirname "$2")"
  cp -al "$1" "$2" 2>/dev/null || cp -a "$1" "$2"
}
# RUN steps reach the package registries through the host's network: there is no bridge. BuildKit
# builds only the stages an image needs and shares the Java layer between the mvs and Kafka images.
# Each build's steps and their seconds go to .cache/containers/build.log (its tail on a failure).
build_log="$cache/containers/build.log"
mkdir -p "$cache/containers"
: >"$build_log"
build() {
  if ! DOCKER_BUILDKIT=1 "$docker" build --progress=plain --network host --build-arg "BASE=$base" "$@" \
    >>"$build_log" 2>&1; then
    tail -40 "$build_log" >&2
    return 1
  fi
}
mvs_image() {
  # Always the same folder: BuildKit then sends only the files that changed since the last build, not
  # the 1.2 GB of wheels and jars again.
  local dir="$cache/containers/mvs-context"
  rm -rf "$dir"
  mkdir -p "$dir"
  tar -c --exclude=__pycache__ pyproject.toml README.md workers schemas topics infra | tar -x -C "$dir"
  link "$cache/wheelhouse" "$dir/wheelhouse"
  link "$cache/jars" "$dir/.cache/jars"
  build --build-arg DEPENDENCIES=context -f infra/Dockerfile -t mvs:latest "$dir"
}
timed "mvs:latest" mvs_image

kafka_version="$(basename "$cache"/jars/kafka/kafka-clients-*.jar .jar)"
kafka_version="${kafka_version#kafka-clients-}"
kafka_image() {
  local dir
  dir="$(stage infra/kafka/bin infra/kafka/config)"
  link "$cache/jars/kafka" "$dir/libs"
  build -f infra/kafka/Dockerfile -t "mvs-kafka:$kafka_version" "$dir"
  rm -rf "$dir"
}
timed "mvs-kafka:$kafka_version" kafka_image

objectstore_image() {
  bash infra/setup_objectstore.sh >/dev/null
  local dir
  dir="$(stage .cache/objectstore/bin/versitygw)"
  build -f infra/objectstore/Dockerfile -t mvs-versitygw:v1.8.0 "$dir"
  rm -rf "$dir"
}
timed "mvs-versitygw:v1.8.0" objectstore_image
"$docker" image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E '^mvs' | sort -u
