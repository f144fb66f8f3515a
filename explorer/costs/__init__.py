"""Cost counts and times of the operations of one transformer step, over numpy arrays."""
