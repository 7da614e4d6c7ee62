"""attncli's version, in one place: the package exports it, `attncli --version`, model cards and
exported packages print it, and pyproject.toml reads it (setuptools' `attr`). Here, not in the
package's `__init__`, so that the layers below the command line read it without importing the
top of the package they sit under."""

__version__ = "0.7.0.dev0"  # 0.7, not released yet: the README's "Changed in 0.7" is this
