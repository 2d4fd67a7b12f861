"""MQTT telemetry and run recording: broker, bus, schemas, metrics, recorder, HTML report."""
