"""attncli: encoder-decoder Transformer translation from the command line."""

__version__ = "0.2.0"
