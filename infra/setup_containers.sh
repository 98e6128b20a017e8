#!/usr/bin/env bash
# The container fleet's engine and images (tests/integration/test_containers.py runs it; so can you).
# Docker Hub is not reachable here, so every image starts from Debian's packages:
#   mvs-base:bookworm     debootstrap --variant=minbase bookworm, imported (docker import)
#   mvs:latest            infra/Dockerfile on that base: the file users build on debian:bookworm-slim
#   mvs-kafka:4.1.1       infra/kafka/Dockerfile: the broker jars in .cache/jars/kafka (the embedded broker's)
#   mvs-versitygw:v1.8.0  infra/objectstore/Dockerfile: the binary infra/setup_objectstore.sh built
# Installs Debian's docker.io, docker-compose and debootstrap when missing (root), and uses the project's
# own daemon (infra/dockerd.sh): if this script started it, it stops it on exit.
# Idempotent: the base is made once; the other images are rebuilt from Docker's layer cache (seconds
# when nothing changed). Prints one line per step with its seconds.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
mirror="${MVS_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
base=mvs-base:bookworm
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
  trap 'bash infra/dockerd.sh stop' EXIT
fi
# The Debian client (the daemon's own version), whatever else is on PATH.
docker=/usr/bin/docker
have() { "$docker" image inspect "$1" >/dev/null 2>&1; }

build_base() {
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
  local bundle=/etc/ssl/certs/ca-certificates.crt  # pip's and Python's, instead of their own copies
  tar -C "$dir" -c . | "$docker" import --change 'CMD ["bash"]' --change "ENV PIP_CERT=$bundle" \
    --change "ENV SSL_CERT_FILE=$bundle" --change "ENV REQUESTS_CA_BUNDLE=$bundle" - "$base" >/dev/null
  rm -rf "$dir"
}
have "$base" || timed "$base (debootstrap)" build_base

# RUN steps reach the package registries through the host's network: there is no bridge.
build() { "$docker" build -q --network host --build-arg "BASE=$base" "$@" >/dev/null; }
timed "mvs:latest" build -f infra/Dockerfile -t mvs:latest .

stage() {  # a build context in a temporary folder: what the image copies, nothing else
  local dir
  dir="$(mktemp -d)"
  cp -r "$@" "$dir/"
  echo "$dir"
}
bash infra/fetch_jars.sh >/dev/null
kafka_version="$(basename .cache/jars/kafka/kafka-clients-*.jar .jar)"
kafka_version="${kafka_version#kafka-clients-}"
kafka_image() {
  local dir
  dir="$(stage infra/kafka/bin infra/kafka/config)"
  cp -r .cache/jars/kafka "$dir/libs"
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
