"""The project's own error types: every message names the bad value, the valid choices and the fix."""


class HeteroFoldError(ValueError):
    """Base class for every error HeteroFold raises on bad input."""


class UnsupportedArchitectureError(HeteroFoldError):
    """A model whose KV-cache layout HeteroFold cannot map correctly."""


class PairMismatchError(HeteroFoldError):
    """A cache, model or adapter that does not belong to the declared (sender, receiver) pair."""


class AlignmentError(HeteroFoldError):
    """A context the two tokenizers cannot be aligned on (empty text, only special tokens, ...)."""


class IntegrityError(HeteroFoldError):
    """A file that is not what was recorded for it: truncated, altered, unreadable or of the wrong shape."""


class TrainingError(HeteroFoldError):
    """A training run that cannot go on (the loss diverged, memory ran out); the message names the flags to change."""


class UsageError(HeteroFoldError):
    """A command line that cannot work as given: a bad flag value, flags that contradict each other, an unknown name.
    ``hf-fold`` exits 2 for these (like click's own usage errors) and 1 for every other failure."""
