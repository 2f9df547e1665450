"""The error of input that cannot be analysed, in a module that imports nothing (the command line catches it
before it has imported the data stack)."""


class LoadError(ValueError):
    """Input that cannot be analysed at all (wrong root, or invalid records with strict=True)."""
