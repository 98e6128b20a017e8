#!/usr/bin/env bash
# Fetches the schema registry (Apicurio Registry 3.0.9, run by workers/embedded/registry.py) and the
# registry-aware Avro deserializer for Kafka's console consumer (bin/mvs-console-consumer) from
# Maven Central into .cache/registry/{app,serde}. Idempotent: a complete folder is left alone.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
pom="$root/infra/registry/pom.xml"
dest="$root/.cache/registry"
app_version=3.0.9

if [[ ! -f "$dest/app/.complete" ]]; then
  rm -rf "$dest/app"
  # dependency:copy, not a pom: the app's parent pom is not on Maven Central, only its archive.
  mvn -q -B dependency:copy -Dartifact="io.apicurio:apicurio-registry-app:$app_version:tar.gz:all" \
    -DoutputDirectory="$dest/app"
  tar -xzf "$dest/app/apicurio-registry-app-$app_version-all.tar.gz" -C "$dest/app"
  rm "$dest/app/apicurio-registry-app-$app_version-all.tar.gz"
  touch "$dest/app/.complete"
fi

if [[ ! -f "$dest/serde/.complete" || "$pom" -nt "$dest/serde/.complete" ]]; then
  rm -rf "$dest/serde"
  mvn -q -B -f "$pom" dependency:copy-dependencies -DoutputDirectory="$dest/serde" -DincludeScope=runtime
  touch "$dest/serde/.complete"
fi
echo "registry ready in $dest"
