#!/bin/bash
# apache/kafka's health-check command: the broker answers an ApiVersions request.
exec java -Xmx64m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -cp "/opt/kafka/libs/*" \
  org.apache.kafka.tools.BrokerApiVersionsCommand "$@"
