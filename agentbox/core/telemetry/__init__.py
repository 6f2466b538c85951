"""OpenTelemetry traces of runs and turns: settings and ids, spans from the decision log,
the SDK side."""
