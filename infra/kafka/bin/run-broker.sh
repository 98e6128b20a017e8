#!/bin/bash
# server.properties from the KAFKA_* variables (apache/kafka's convention: drop KAFKA_, lower case,
# "___" → "-", "__" → "_", "_" → "."), storage formatted once (CLUSTER_ID), then the broker in the
# foreground: SIGTERM (docker stop) is its controlled shutdown.
set -euo pipefail
config=/opt/kafka/config/server.properties
: > "$config"
# JVM settings, not server properties.
not_properties=" KAFKA_HEAP_OPTS KAFKA_OPTS KAFKA_VERSION "
while IFS='=' read -r name value; do
  [[ "$name" == KAFKA_* && "$not_properties" != *" $name "* ]] || continue
  key="${name#KAFKA_}"
  key="${key,,}"
  key="${key//___/-}"
  key="${key//__/@}"
  key="${key//_/.}"
  key="${key//@/_}"
  printf '%s=%s\n' "$key" "$value" >> "$config"
done < <(env)
grep -q '^log.dirs=' "$config" || echo "log.dirs=/var/lib/kafka/data" >> "$config"
java=(java ${KAFKA_HEAP_OPTS:--Xmx512m} -XX:+UseG1GC ${KAFKA_OPTS:-}
      -Dlog4j2.configurationFile=/opt/kafka/config/log4j2.xml -cp "/opt/kafka/libs/*")
# Static voters (KAFKA_CONTROLLER_QUORUM_VOTERS), as the embedded broker runs.
"${java[@]}" kafka.tools.StorageTool format --ignore-formatted -t "${CLUSTER_ID:-5L6g3nShT-eMCtK--X86sw}" -c "$config"
exec "${java[@]}" kafka.Kafka "$config"
