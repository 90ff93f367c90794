"""Tests of the OpenTelemetry span export against a real Arize Phoenix server."""
