"""The embedded local Kafka cluster: jars, network layout, link proxy, node processes."""
