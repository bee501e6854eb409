"""The project's own pre-registered study: protocols (stages, seed-aware intervals), intervals and power."""
