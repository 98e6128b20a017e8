#!/usr/bin/env bash
# The S3-compatible server the tests and the demo start (workers/embedded/objectstore.py): Versity's
# S3 gateway, built from the Go module proxy with `go install` into .cache/objectstore/bin (a few
# minutes on 2 cores, once). Idempotent. Modules and build output stay in Go's own caches
# (`go env GOMODCACHE GOCACHE`), as pip's and Maven's do: another clone builds in seconds.
# (Hadoop's S3A jars for s3:// warehouses come from infra/fetch_jars.sh, profile s3a.)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
version=v1.8.0
dest="$root/.cache/objectstore"
stamp="$dest/.versitygw-$version"
if [[ ! -x "$dest/bin/versitygw" || ! -f "$stamp" ]]; then
  command -v go >/dev/null || { echo "go not found: install Go to build versitygw" >&2; exit 1; }
  mkdir -p "$dest/bin"
  GOBIN="$dest/bin" go install "github.com/versity/versitygw/cmd/versitygw@$version"
  touch "$stamp"
fi
echo "versitygw ready in $dest/bin"
