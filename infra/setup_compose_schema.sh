#!/usr/bin/env bash
# The Compose Specification's JSON schema, for tests/unit/cli/test_compose.py: the schema docker compose
# itself validates with, from the compose-go module (Go module proxy), pinned, into .cache/.
# Idempotent; a machine without Go skips it (the test then says why it cannot run).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
version="v2.16.2"
target="$root/.cache/compose-spec/compose-spec-$version.json"
[[ -f "$target" ]] && exit 0
if ! command -v go >/dev/null; then
  echo "go not found: the compose schema test will be skipped" >&2
  exit 0
fi
modcache="$root/.cache/gomod"
dir="$(GOMODCACHE="$modcache" GOFLAGS=-mod=mod go mod download -json "github.com/compose-spec/compose-go/v2@$version" \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
mkdir -p "$(dirname "$target")"
cp "$dir/schema/compose-spec.json" "$target"
chmod -R u+w "$modcache" && rm -rf "$modcache"  # the module cache is read-only and 10x the schema
echo "compose schema in $target"
