"""What the loop reads and writes: models, prompt data, checkpoints, run folders, metrics files,
trackers, plots, recordings, and the disk and memory checks around them."""
