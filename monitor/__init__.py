"""Vigil's runtime: configuration, record format, canary producers, the local cluster, the CLI."""
