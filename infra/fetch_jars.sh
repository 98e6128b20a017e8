#!/usr/bin/env bash
# Fetches the Apache Kafka broker, the Delta Lake jars and Hadoop's S3A (s3:// warehouses) from Maven
# Central into .cache/jars.
# Idempotent: a folder that is already complete is left alone.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
jars="$root/.cache/jars"
for profile in kafka delta s3a; do
  stamp="$jars/$profile/.complete"
  if [[ -f "$stamp" && "$stamp" -nt "$root/infra/jars/pom.xml" ]]; then continue; fi
  rm -rf "$jars/$profile"
  mvn -q -B -f "$root/infra/jars/pom.xml" -P "$profile" dependency:copy-dependencies \
    -DoutputDirectory="$jars/$profile" -DincludeScope=runtime
  touch "$stamp"
done
echo "jars ready in $jars"
