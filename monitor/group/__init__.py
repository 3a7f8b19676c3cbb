"""The consumer-group canary: member processes, their observation log, its audit."""
