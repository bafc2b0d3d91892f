"""What a run leaves on disk: its run directory, the typed rows of its line logs and the rule that cuts them back on
resume, its checkpoint files, and which esper made it.

Everything here is written so that an interrupted run corrupts nothing it already wrote (atomic files, append-only
logs flushed per line) and a resumed one leaves what an uninterrupted run would have. Above execution: a policy
checkpoint records the plugins that were loaded, so that loading it elsewhere can name the ones it needs.
"""

from esper.storage.checkpoint import CheckpointFormatError, atomic_save, load_checkpoint
from esper.storage.rundir import RunDirectory, RunDirectoryError

__all__ = ["CheckpointFormatError", "RunDirectory", "RunDirectoryError", "atomic_save", "load_checkpoint"]
