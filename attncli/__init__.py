"""attncli: encoder-decoder Transformer translation from the command line."""

__version__ = "0.4.0"
