"""attncli: encoder-decoder Transformer translation from the command line."""

__version__ = "0.5.0.dev0"  # 0.5, not released yet: the README's "Changed in 0.5" is this
