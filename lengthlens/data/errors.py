"""The errors of input lengthlens cannot use, in a module that imports nothing (the command line catches them
before it has imported the data stack)."""


class InputError(ValueError):
    """Input lengthlens cannot use: a file, a record, an option or an output folder; the message names which."""


class LoadError(InputError):
    """Input that cannot be analysed at all (wrong root, or invalid records with strict=True)."""
