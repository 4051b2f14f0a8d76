"""tdrl.collectors."""
