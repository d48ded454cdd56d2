"""gpuwarden: watch every GPU, predict which ones are about to fail, move them to interruptible work."""

__version__ = "0.1.0"
