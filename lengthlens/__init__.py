"""lengthlens: does a lossy speculative-decoding rule's longer acceptance length survive longer completions?"""

__version__ = "0.1.0"
