"""The package version (a leaf module: checkpoints and fingerprints read it without importing twinfer)."""

__version__ = "0.1.0"
