"""What a run leaves on disk."""

from esper.storage.checkpoint import CheckpointFormatError, atomic_save, load_checkpoint
from esper.storage.rundir import RunDirectory, RunDirectoryError

__all__ = ["CheckpointFormatError", "RunDirectory", "RunDirectoryError", "atomic_save", "load_checkpoint"]
